"""Copy etcd's v3 API ``.proto`` files into ``proto/pocketmq/etcd``, stripped to compile alone.

etcd publishes its gRPC API as ``api/etcdserverpb/rpc.proto``,
``api/mvccpb/kv.proto`` and ``api/authpb/auth.proto``. They import
annotations PocketMQ does not need and cannot compile without more files
(``google/api/annotations.proto`` for the HTTP gateway, the OpenAPI options,
gogoproto, and etcd's own ``versionpb`` field options). This script keeps
every message, enum and service as etcd wrote them and drops only:

- the imports of those annotation files;
- ``option (...) = ...;`` statements with a custom (parenthesised) name,
  one line or a ``{ ... }`` block over several;
- ``[(...) = ...]`` field and enum-value options with custom names.

The proto *packages* stay ``etcdserverpb``, ``mvccpb`` and ``authpb``, so the
gRPC method paths are etcd's (``/etcdserverpb.KV/Range``); only the file paths
move, so that generated Python imports ``pocketmq.etcd``::

    .venv/bin/python scripts/vendor_etcd_proto.py ETCD_CHECKOUT   # a clone of etcd-io/etcd
    .venv/bin/python scripts/gen_proto.py                        # then generate as usual
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT = REPO_ROOT / "proto" / "pocketmq" / "etcd"
SOURCES = {
    "api/etcdserverpb/rpc.proto": "rpc.proto",
    "api/mvccpb/kv.proto": "kv.proto",
    "api/authpb/auth.proto": "auth.proto",
}
DROPPED_IMPORTS = ("gogoproto/", "google/api/", "protoc-gen-openapiv2/", "versionpb/")
_FIELD_OPTIONS = re.compile(r"\s*\[\s*\([^\]]*\]")


def strip(text: str) -> str:
    """*text* of one etcd ``.proto`` without the custom options and their imports."""
    out: list[str] = []
    depth = 0  # > 0 while inside a dropped `option (...) = {` block
    for line in text.splitlines():
        stripped = line.strip()
        if depth:
            depth += stripped.count("{") - stripped.count("}")
            continue
        if stripped.startswith("import ") and any(d in stripped for d in DROPPED_IMPORTS):
            continue
        if stripped.startswith("option ("):
            depth = stripped.count("{") - stripped.count("}")
            continue
        line = _FIELD_OPTIONS.sub("", line)
        line = line.replace('import "etcd/api/mvccpb/kv.proto"', 'import "pocketmq/etcd/kv.proto"')
        line = line.replace(
            'import "etcd/api/authpb/auth.proto"', 'import "pocketmq/etcd/auth.proto"'
        )
        out.append(line)
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    checkout = Path(argv[0])
    OUT.mkdir(parents=True, exist_ok=True)
    for src, name in SOURCES.items():
        text = (checkout / src).read_text(encoding="utf-8")
        header = (
            f"// Vendored from etcd-io/etcd {src} by scripts/vendor_etcd_proto.py:\n"
            "// custom options (gogoproto, google.api.http, openapiv2, versionpb) removed.\n"
        )
        (OUT / name).write_text(header + strip(text), encoding="utf-8")
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
