"""The import contract of the whole tree: each layer imports only the layers below it.

The contract is the table :data:`MAY_IMPORT`, lowest layer first: what each layer may
import from ``pocketmq`` besides itself. ``X.*`` is package X and any module in it; a
bare ``X`` is X's public API, the names its ``__init__`` exports and documents, never a
module inside it (the Spark connector uses only the client's and the store's public
APIs). :data:`FOLDERS` says which folders make each layer; a file belongs to the layer
whose folder holds it most closely (``broker/store/x.py`` is the store, not the broker).

Besides the table: the store never touches grpc, protobuf or an event loop; common
never grpc or protobuf; Spark never grpc or protobuf (it goes through the client's
calls); inside the broker only the gRPC adapters see protobuf (:data:`PROTOBUF_EDGE`);
no module imports a private name (``_x``) from another layer. The broker reaches the
nameserver and the controller over gRPC only, never by importing them. Imports inside
functions count as much as those at the top. A failure names the file, the line, the
import and the rule it breaks.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# fmt: off
MAY_IMPORT: dict[str, tuple[str, ...]] = {  # layer -> pocketmq.<these>, lowest layer first
    "common":     (),
    "store":      ("common.*",),
    "security":   ("common.*",),
    "broker":     ("common.*", "broker.store.*", "security.*", "v1.*", "rmqv2.*"),
    "controller": ("common.*", "v1.*", "etcd.*"),
    "nameserver": ("common.*", "security.*", "controller.*", "v1.*"),
    "client":     ("common.*", "v1.*"),
    "dashboard":  ("common.*", "client.*"),
    "spark":      ("common.*", "client", "broker.store"),
    "cli":        ("*",),
}  # v1, rmqv2, etcd: the generated protobuf code of proto/pocketmq/ (the wire)
FOLDERS: dict[str, tuple[str, tuple[str, ...]]] = {  # layer -> (its package, its folders)
    "common":     ("common",       ("common",)),
    "store":      ("broker.store", ("broker/store",)),
    "security":   ("security",     ("security",)),
    "broker":     ("broker",       ("broker",)),  # with ha/ and grpc_v2/
    "controller": ("controller",   ("controller",)),
    "nameserver": ("nameserver",   ("nameserver",)),
    "client":     ("client",       ("client",)),
    "dashboard":  ("dashboard",    ("dashboard",)),
    "spark":      ("spark",        ("spark", "pyspark_pocketmq.py")),
    "cli":        ("cli",          ("cli", "pocketmq")),
}
# fmt: on
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
WIRE = ("pocketmq.v1.*", "pocketmq.rmqv2.*", "pocketmq.etcd.*", "google.protobuf.*")
# The broker's modules that may see protobuf: the gRPC adapters (file name patterns,
# relative to broker/; ha/ and grpc_v2/ are the replication and RocketMQ 5 adapters).
PROTOBUF_EDGE = ("servicer*.py", "v1_*.py", "namesrv_client.py", "ha/*.py", "grpc_v2/*.py")


def _matches(name: str, rule: str) -> bool:
    """Whether module *name* is what *rule* names (``a.b.*``: a.b and its modules)."""
    if rule == "*":
        return True
    if rule.endswith(".*"):
        base = rule[:-2]
        return name == base or name.startswith(base + ".")
    return name == rule


def _allowed(layer: str) -> tuple[str, ...]:
    return tuple("pocketmq." + rule for rule in MAY_IMPORT[layer])


def layer_of(path: Path, root: Path = ROOT) -> str:
    """The layer a file belongs to: the one whose folder holds it most closely."""
    rel = path.relative_to(root).as_posix()
    best, depth = "", -1
    for layer, (_package, folders) in FOLDERS.items():
        for folder in folders:
            if (rel == folder or rel.startswith(folder + "/")) and folder.count("/") > depth:
                best, depth = layer, folder.count("/")
    return best


def modules_of(layer: str, root: Path = ROOT) -> list[Path]:
    files: list[Path] = []
    for folder in FOLDERS[layer][1]:
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
    allowed = _allowed(layer)
    own = "pocketmq." + FOLDERS[layer][0]
    problems = []
    for path in modules_of(layer, root):
        rel = path.relative_to(root).as_posix()
        for line, module, names in imports_of(path):
            where = f"{rel}:{line} imports {module}"
            inside = _matches(module, own + ".*")
            if module.startswith("pocketmq.") and not inside:
                if not any(_matches(module, rule) for rule in allowed):
                    rules = ", ".join(allowed) or "nothing of pocketmq"
                    problems.append(f"{where}: the {layer} layer may import only {rules}")
                private = [n for n in names if n.startswith("_") and n != "__version__"]
                if private:
                    problems.append(f"{where}: {', '.join(private)} is private to its layer")
            for banned in FORBIDDEN.get(layer, ()):
                if _matches(module, banned + ".*"):
                    problems.append(f"{where}: the {layer} layer never imports {banned}")
    return problems


def test_every_layer_has_its_row_and_its_folders():
    assert list(MAY_IMPORT) == list(FOLDERS)


@pytest.mark.parametrize("layer", list(MAY_IMPORT))
def test_layer_imports_only_what_the_contract_allows(layer):
    assert modules_of(layer), f"no modules in layer {layer}: {FOLDERS[layer][1]}"
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
    assert not unlayered, f"Python outside the import contract (add it to FOLDERS): {unlayered}"


def test_inside_the_broker_only_the_grpc_adapters_see_protobuf():
    offenders = []
    for path in modules_of("broker"):
        rel = path.relative_to(ROOT / "broker").as_posix()
        if any(fnmatch.fnmatch(rel, pattern) for pattern in PROTOBUF_EDGE):
            continue
        for line, module, _names in imports_of(path):
            if any(_matches(module, rule) for rule in WIRE):
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
                if module not in PUBLIC_APIS:
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
    """A broken rule is reported with the file, the line, the import and the rule."""
    (tmp_path / "broker" / "store").mkdir(parents=True)
    (tmp_path / "broker" / "store" / "leaky.py").write_text(
        "import json\n\nimport grpc\nfrom pocketmq.v1 import broker_pb2\n"
    )
    (tmp_path / "spark").mkdir()
    (tmp_path / "spark" / "pull.py").write_text(
        "from pocketmq.client import PullReply\nfrom pocketmq.client.producer import _back_off\n"
    )
    assert violations("store", tmp_path) == [
        "broker/store/leaky.py:3 imports grpc: the store layer never imports grpc",
        "broker/store/leaky.py:4 imports pocketmq.v1: the store layer may import only "
        "pocketmq.common.*",
    ]
    assert violations("spark", tmp_path) == [
        "spark/pull.py:2 imports pocketmq.client.producer: the spark layer may import only "
        "pocketmq.common.*, pocketmq.client, pocketmq.broker.store",
        "spark/pull.py:2 imports pocketmq.client.producer: _back_off is private to its layer",
    ]
