"""Protobuf stays at the broker's edge: only the servicer and the nameserver client see it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BROKER = ROOT / "broker"
# module -> the generated protobuf modules it may import
PROTOBUF_EDGE = {
    "servicer.py": {"pocketmq.v1"},
    # the servicer's RPC families and their shared conversions (servicer.py's docstring)
    "v1_rpc.py": {"pocketmq.v1"},
    "v1_messages.py": {"pocketmq.v1"},
    "v1_consume.py": {"pocketmq.v1"},
    "v1_admin.py": {"pocketmq.v1"},
    "namesrv_client.py": {"pocketmq.v1"},
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_only_the_edge_modules_import_protobuf():
    offenders = []
    for path in sorted(BROKER.glob("*.py")):
        for name in _imports(path):
            touches_pb = name.startswith(("pocketmq.v1", "google.protobuf"))
            if touches_pb and name not in PROTOBUF_EDGE.get(path.name, set()):
                offenders.append(f"broker/{path.name} imports {name}")
    assert not offenders, "\n".join(offenders)


def test_broker_services_never_import_the_nameserver_or_client_packages():
    offenders = [
        f"broker/{p.name} imports {n}"
        for p in sorted(BROKER.glob("*.py"))
        for n in _imports(p)
        if n.startswith(("pocketmq.nameserver", "pocketmq.client", "pocketmq.cli"))
    ]
    assert not offenders, "\n".join(offenders)
