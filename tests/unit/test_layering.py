"""The import contract of the whole tree: each layer imports only the layers below it.

Lowest first. ``X.*`` is package X and any of its modules; a bare ``X`` is X's public
API, the names its ``__init__`` exports, never a module inside it::

    layer       folder                       may import from pocketmq (besides itself)
    ----------  ---------------------------  ---------------------------------------------
    common      common/                      -
    store       broker/store/                common.*
    security    security/                    common.*
    broker      broker/ (ha/, grpc_v2/)      common.*, broker.store.*, security.*, v1.*, rmqv2.*
    controller  controller/                  common.*, v1.*, etcd.*
    nameserver  nameserver/                  common.*, security.*, controller.*, v1.*
    client      client/                      common.*, v1.*
    dashboard   dashboard/                   common.*, client.*
    spark       spark/, pyspark_pocketmq.py  common.*, client, broker.store
    cli         cli/, pocketmq/              any layer

    v1, rmqv2, etcd: the generated protobuf code (proto/pocketmq/*), the wire

Besides that table: the store never touches grpc, protobuf or an event loop; common
never grpc or protobuf; Spark never grpc or protobuf (it uses the client's calls);
inside the broker only the gRPC adapters see protobuf (:data:`PROTOBUF_EDGE`); and no
module imports a private name (``_x``) from another layer. The broker talks to the
nameserver and the controller over gRPC only, never by importing them. Imports inside
functions count as much as those at the top.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# layer -> (the folders or files it is made of, what it may import from pocketmq)
WIRE = ("pocketmq.v1.*", "pocketmq.rmqv2.*", "pocketmq.etcd.*")  # generated protobuf
LAYERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "common": (("common",), ()),
    "store": (("broker/store",), ("pocketmq.common.*",)),
    "security": (("security",), ("pocketmq.common.*",)),
    "broker": (
        ("broker",),
        (
            "pocketmq.common.*",
            "pocketmq.broker.store.*",
            "pocketmq.security.*",
            "pocketmq.v1.*",
            "pocketmq.rmqv2.*",
        ),
    ),
    "controller": (("controller",), ("pocketmq.common.*", "pocketmq.v1.*", "pocketmq.etcd.*")),
    "nameserver": (
        ("nameserver",),
        ("pocketmq.common.*", "pocketmq.security.*", "pocketmq.controller.*", "pocketmq.v1.*"),
    ),
    "client": (("client",), ("pocketmq.common.*", "pocketmq.v1.*")),
    "dashboard": (("dashboard",), ("pocketmq.common.*", "pocketmq.client.*")),
    "spark": (
        ("spark", "pyspark_pocketmq.py"),
        ("pocketmq.common.*", "pocketmq.client", "pocketmq.broker.store"),
    ),
    "cli": (("cli", "pocketmq"), ("pocketmq.*",)),
}
# the package each layer is, for "besides itself"
OWN = {
    "common": "pocketmq.common",
    "store": "pocketmq.broker.store",
    "security": "pocketmq.security",
    "broker": "pocketmq.broker",
    "controller": "pocketmq.controller",
    "nameserver": "pocketmq.nameserver",
    "client": "pocketmq.client",
    "dashboard": "pocketmq.dashboard",
    "spark": "pocketmq.spark",
    "cli": "pocketmq.cli",
}
# layer -> third-party packages it must never import
FORBIDDEN = {
    "common": ("grpc", "google.protobuf"),
    "store": ("grpc", "google.protobuf", "asyncio", "uvloop"),
    "spark": ("grpc", "google.protobuf"),
}
# Packages whose public API (their __init__'s exports) other layers may use bare, and
# the layers held to "public means exported and documented" (cli and the dashboard
# join once Producer, the consumers and SendResult have class docstrings)
PUBLIC_APIS = ("pocketmq.client", "pocketmq.broker.store")
PUBLIC_API_USERS = ("spark",)
# The broker's modules that may see protobuf: the gRPC adapters (file name patterns,
# relative to broker/; ha/ and grpc_v2/ are the replication and RocketMQ 5 adapters).
PROTOBUF_EDGE = ("servicer*.py", "namesrv_client.py", "ha/*.py", "grpc_v2/*.py")


def _matches(name: str, rule: str) -> bool:
    if rule.endswith(".*"):
        base = rule[:-2]
        return name == base or name.startswith(base + ".")
    return name == rule


def layer_of(path: Path, root: Path = ROOT) -> str:
    """The layer a file belongs to: the one whose folder holds it most closely."""
    rel = path.relative_to(root).as_posix()
    best, depth = "", -1
    for layer, (folders, _allowed) in LAYERS.items():
        for folder in folders:
            if (rel == folder or rel.startswith(folder + "/")) and folder.count("/") > depth:
                best, depth = layer, folder.count("/")
    return best


def modules_of(layer: str, root: Path = ROOT) -> list[Path]:
    files: list[Path] = []
    for folder in LAYERS[layer][0]:
        target = root / folder
        found = [target] if target.is_file() else sorted(target.rglob("*.py"))
        files += [p for p in found if "_pb2" not in p.name and layer_of(p, root) == layer]
    return files


def imports_of(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names taken from it) of every absolute import in *path*."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: use absolute imports (pocketmq.…)"
            assert node.module is not None
            found.append((node.lineno, node.module, [a.name for a in node.names]))
    return found


def violations(layer: str, root: Path = ROOT) -> list[str]:
    """Every import of *layer* that breaks the contract, as ``file:line imports x: why``."""
    _folders, allowed = LAYERS[layer]
    own = OWN[layer]
    problems = []
    for path in modules_of(layer, root):
        rel = path.relative_to(root).as_posix()
        for line, module, names in imports_of(path):
            where = f"{rel}:{line} imports {module}"
            inside = _matches(module, own + ".*")
            if module.startswith("pocketmq.") and not inside:
                if not any(_matches(module, rule) for rule in allowed):
                    problems.append(f"{where}: layer {layer} may import only {allowed}")
                private = [n for n in names if n.startswith("_") and n != "__version__"]
                if private:
                    problems.append(f"{where}: private name(s) {private} of another layer")
            for banned in FORBIDDEN.get(layer, ()):
                if _matches(module, banned + ".*"):
                    problems.append(f"{where}: layer {layer} never imports {banned}")
    return problems


@pytest.mark.parametrize("layer", list(LAYERS))
def test_layer_imports_only_what_the_contract_allows(layer):
    assert modules_of(layer), f"no modules in layer {layer}: {LAYERS[layer][0]}"
    problems = violations(layer)
    assert not problems, "import contract broken:\n" + "\n".join(problems)


def test_every_library_module_belongs_to_a_layer():
    not_library = {"tests", "benchmarks", "scripts", "proto", "config", "docs"}
    tops = [
        p
        for p in ROOT.iterdir()
        if not p.name.startswith(".")
        and p.name not in not_library
        and (p.suffix == ".py" if p.is_file() else any(p.rglob("*.py")))
    ]
    unlayered = sorted(p.name for p in tops if not layer_of(p))
    assert not unlayered, f"Python outside the import contract (add it to LAYERS): {unlayered}"


def test_inside_the_broker_only_the_grpc_adapters_see_protobuf():
    offenders = []
    for path in modules_of("broker"):
        rel = path.relative_to(ROOT / "broker").as_posix()
        if any(fnmatch.fnmatch(rel, pattern) for pattern in PROTOBUF_EDGE):
            continue
        for line, module, _names in imports_of(path):
            if _matches(module, "google.protobuf.*") or any(_matches(module, w) for w in WIRE):
                offenders.append(f"broker/{rel}:{line} imports {module}")
    assert not offenders, "protobuf outside the broker's gRPC adapters:\n" + "\n".join(offenders)


def _documented(obj: object) -> bool:
    doc = getattr(obj, "__doc__", None) or ""
    name = getattr(obj, "__name__", "")
    return bool(doc.strip()) and not doc.startswith(f"{name}(")  # not a dataclass's default


def test_what_a_layer_takes_from_a_public_api_is_exported_and_documented():
    """Public = exported from the package's ``__init__`` (``__all__``) with a docstring."""
    problems = []
    for layer in PUBLIC_API_USERS:
        for path in modules_of(layer):
            for line, module, names in imports_of(path):
                if module not in PUBLIC_APIS or _matches(module, OWN[layer] + ".*"):
                    continue
                package = importlib.import_module(module)
                for name in names:
                    where = f"{path.relative_to(ROOT)}:{line} takes {module}.{name}"
                    obj = getattr(package, name, None)
                    if name not in package.__all__:
                        problems.append(f"{where}: not in {module}.__all__")
                    elif (inspect.isclass(obj) or inspect.isroutine(obj)) and not _documented(obj):
                        problems.append(f"{where}: it has no docstring")
    assert not problems, "\n".join(problems)


def test_every_member_of_the_message_store_protocol_is_documented():
    from pocketmq.broker.store import MessageStore

    members = {
        name: member.fget if isinstance(member, property) else member
        for name, member in vars(MessageStore).items()
        if not name.startswith("_")
    }
    assert "flush_durations" in members and "run_cleanup_once" in members
    undocumented = sorted(n for n, m in members.items() if callable(m) and not _documented(m))
    assert not undocumented, f"MessageStore members without a docstring: {undocumented}"


def test_the_contract_names_the_offending_import(tmp_path):
    """A store module importing the network layer is reported with its file and line."""
    fake = tmp_path / "broker" / "store"
    fake.mkdir(parents=True)
    (fake / "leaky.py").write_text("import json\n\nfrom pocketmq.v1 import broker_pb2\n")
    assert violations("store", tmp_path) == [
        "broker/store/leaky.py:3 imports pocketmq.v1: layer store may import only "
        "('pocketmq.common.*',)"
    ]
