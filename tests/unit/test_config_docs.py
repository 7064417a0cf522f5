"""docs/configuration.md is generated from the config dataclasses and kept current.

The generator (scripts/gen_config_docs.py) runs in-process. Besides staleness
these tests hold the inputs to account: every config dataclass in a
``config.py`` of the package is documented, every key has help text, the
RocketMQ table names only real keys, and each example file loads.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

from pocketmq.common.configfile import load_config

ROOT = Path(__file__).resolve().parents[2]


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "gen_config_docs", ROOT / "scripts" / "gen_config_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


gen = _load_generator()
COMPONENTS = {c.title: c for c in gen.COMPONENTS}


def _config_dataclasses() -> list[type]:
    """Public ``*Config`` dataclasses defined in any ``<package>/config.py`` of the project."""
    with open(ROOT / "pyproject.toml", "rb") as fh:
        package_dirs = tomllib.load(fh)["tool"]["setuptools"]["package-dir"]
    found = []
    for package, folder in sorted(package_dirs.items()):
        if not (ROOT / folder / "config.py").is_file():
            continue
        module = importlib.import_module(f"{package}.config")
        found += [
            obj
            for name, obj in vars(module).items()
            if isinstance(obj, type)
            and dataclasses.is_dataclass(obj)
            and obj.__module__ == module.__name__
            and name.endswith("Config")
            and not name.startswith("_")
        ]
    return found


def test_the_configuration_reference_is_current():
    assert gen.check() is None


def test_check_reports_a_stale_reference(tmp_path, monkeypatch):
    stale = tmp_path / "configuration.md"
    stale.write_text(gen.render().replace("| `port` |", "| `listen_port` |", 1))
    monkeypatch.setattr(gen, "OUT", stale)
    assert "stale" in gen.check()
    assert gen.main([]) == 0 and gen.check() is None  # rewriting makes it current


def test_every_config_dataclass_has_a_section():
    found = _config_dataclasses()
    assert len(found) >= 6  # broker, store, nameserver, producer and two consumers at least
    documented = {c.cls for c in gen.COMPONENTS}
    missing = [cls.__qualname__ for cls in found if cls not in documented]
    assert not missing, f"add a Component to scripts/gen_config_docs.py for: {missing}"


@pytest.mark.parametrize("title", COMPONENTS)
def test_every_key_has_help_text(title):
    cls = COMPONENTS[title].cls
    silent = [f.name for f in dataclasses.fields(cls) if not gen.help_text(f)]
    assert not silent, (
        f"{cls.__name__}: give these keys metadata=_help(...) in their config module: {silent}"
    )


@pytest.mark.parametrize("title", COMPONENTS)
def test_every_documented_key_is_in_the_reference(title):
    comp = COMPONENTS[title]
    section = gen.render().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    for f in dataclasses.fields(comp.cls):
        assert (f"| `{f.name}` |" in section) == (f.name not in comp.skip), f.name


def test_store_keys_the_broker_sets_have_the_broker_keys_names():
    # One name per setting: the store's ConfigError then names the key a person sets.
    renamed = {s: b for s, b in gen.broker_store_keys().items() if b not in ("derived", s)}
    assert renamed == {}


def test_rocketmq_names_belong_to_real_keys():
    for cls, names in gen.ROCKETMQ_NAMES.items():
        keys = {f.name for f in dataclasses.fields(cls)}
        assert set(names) <= keys, f"{cls.__name__}: no such key {sorted(set(names) - keys)}"


def test_store_keys_the_broker_sets_are_documented_once_under_the_broker():
    surfaced = gen.broker_store_keys()
    assert surfaced["commitlog_file_size_bytes"] == "commitlog_file_size_bytes"
    assert surfaced["max_pull_messages"] == "max_pull_messages"
    assert surfaced["store_host"] == "derived"
    assert "disk_max_used_space_ratio" not in surfaced  # not a broker key: in the store section


def test_broker_flags_come_from_the_real_parser_with_aliases():
    flags = gen.command_flags("broker", COMPONENTS["Broker"].cls)
    assert flags["namesrv_addrs"] == ["--namesrv-addrs", "--namesrv"]
    assert flags["long_polling_enable"] == ["--long-polling-enable", "--no-long-polling-enable"]


@pytest.mark.parametrize(
    ("value", "key", "text"),
    [
        (1 << 30, "commitlog_file_size_bytes", "1 GiB (1073741824)"),
        (10_000, "compress_over_bytes", "10,000 bytes"),
        (500, "flush_interval_commitlog_ms", "500 ms"),
        (259_200_000, "timer_max_delay_ms", "259,200,000 ms (3 d)"),
        (120.0, "broker_expire_seconds", "120 s (2 min)"),
        (72, "file_reserved_hours", "72 h (3 d)"),
        (10911, "port", "10911"),
        (None, "grpc_v2_port", "unset"),
        ("async", "flush_disk_type", '`"async"`'),
        (0.75, "disk_max_used_space_ratio", "0.75"),
    ],
)
def test_defaults_are_rendered_readably(value, key, text):
    field = dataclasses.field(default=value)
    field.name = key
    assert gen.default_text(field) == text


@pytest.mark.parametrize("title", [t for t, c in COMPONENTS.items() if c.example])
def test_each_example_file_builds_its_config(title, tmp_path):
    comp = COMPONENTS[title]
    section = gen.render().split(f"\n## {title}\n", 1)[1]
    block = section.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "example.toml"
    path.write_text(block)
    if comp.command:  # a server reads the file itself
        config = load_config(comp.cls, toml_path=str(path), section=comp.example_table)
    else:  # an SDK client takes the table as keywords
        config = comp.cls(**tomllib.loads(block)[comp.example_table])
    for key, value in comp.example.items():
        assert getattr(config, key) == value
