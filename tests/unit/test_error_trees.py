"""Every error PocketMQ raises on purpose derives from PocketMQError, under its package's
root, and is drawn in the tree of an ``errors`` module's docstring."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from pocketmq.common.errors import PocketMQError

# Each has an errors module whose docstring draws its tree.
PACKAGES = ("broker", "cli", "client", "common", "controller", "dashboard", "nameserver")
PACKAGES += ("security", "spark")


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        mod = importlib.import_module(f"pocketmq.{package}")
        names.append(mod.__name__)
        for info in pkgutil.walk_packages(mod.__path__, prefix=f"{mod.__name__}."):
            if not info.name.rsplit(".", 1)[-1].startswith("_"):
                names.append(info.name)
    return names


def _public_errors() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        try:
            module = importlib.import_module(name)
        except ImportError:  # an optional extra (pyspark, etcd) that is not installed
            continue
        for attr, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == name
                and not attr.startswith("_")
            ):
                found[f"{name}.{attr}"] = obj
    return found


def test_every_public_error_derives_from_pocketmq_error():
    errors = _public_errors()
    assert len(errors) > 40  # the walk found the packages
    outside = sorted(n for n, cls in errors.items() if not issubclass(cls, PocketMQError))
    assert outside == []


def test_every_public_error_is_drawn_in_an_error_tree():
    drawn = "".join(
        importlib.import_module(f"pocketmq.{package}.errors").__doc__ or "" for package in PACKAGES
    )
    missing = sorted(n for n in _public_errors() if n.rsplit(".", 1)[-1] not in drawn)
    assert missing == []


def test_no_two_packages_define_an_error_of_the_same_name():
    by_name: dict[str, list[str]] = {}
    for qualified in _public_errors():
        by_name.setdefault(qualified.rsplit(".", 1)[-1], []).append(qualified)
    clashes = {
        name: where for name, where in by_name.items() if len({w.split(".")[1] for w in where}) > 1
    }
    # The client's errors mirror the broker's refusals under the names users catch; the
    # broker's are named after their reason codes instead, so none clash.
    assert clashes == {}
