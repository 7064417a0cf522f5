"""The import contract: layers import downwards only.

The store (broker/store) sees only common; the broker, nameserver, client and the
rest see what CONTRACT lists; the client never imports the broker or the nameserver.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# folder -> import prefixes it may use from pocketmq (besides its own)
CONTRACT = {
    "common": ("pocketmq.common",),
    "broker/store": ("pocketmq.common", "pocketmq.broker.store"),
    "broker": (
        "pocketmq.common",
        "pocketmq.broker",
        "pocketmq.v1",
        "pocketmq.nameserver",
        "pocketmq.rmqv2",
        "pocketmq.security",
    ),
    "security": ("pocketmq.common", "pocketmq.security"),
    "client": ("pocketmq.common", "pocketmq.client", "pocketmq.v1"),
    "nameserver": (
        "pocketmq.common",
        "pocketmq.nameserver",
        "pocketmq.v1",
        "pocketmq.security",
        "pocketmq.controller",
    ),
    "controller": ("pocketmq.common", "pocketmq.controller", "pocketmq.v1", "pocketmq.etcd"),
    "dashboard": ("pocketmq.common", "pocketmq.client", "pocketmq.dashboard"),
}
FORBIDDEN_THIRD_PARTY = {
    "broker/store": ("grpc", "google.protobuf", "asyncio", "uvloop"),
    "common": ("grpc", "google.protobuf"),
}


def imports_of(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("folder", sorted(CONTRACT))
def test_layer_imports_only_what_its_contract_allows(folder):
    allowed = CONTRACT[folder]
    forbidden = FORBIDDEN_THIRD_PARTY.get(folder, ())
    files = [p for p in (ROOT / folder).rglob("*.py") if "_pb2" not in p.name]
    assert files, f"no modules under {folder}"
    problems = []
    for path in files:
        for name in imports_of(path):
            if name.startswith("pocketmq.") and not name.startswith(allowed):
                problems.append(f"{path.relative_to(ROOT)} imports {name}")
            if name.split(".")[0] in {f.split(".")[0] for f in forbidden} and any(
                name == f or name.startswith(f + ".") for f in forbidden
            ):
                problems.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not problems, "\n".join(problems)
