"""Regenerate the Python code for the wire contracts in ``proto/pocketmq/{v1,rmqv2}``.

The one command, from the repository root::

    .venv/bin/python scripts/gen_proto.py            # rewrite the generated files
    .venv/bin/python scripts/gen_proto.py --check    # exit 1 and list stale files

For every ``.proto`` of the packages in :data:`PACKAGE_DIRS` (our own API,
``pocketmq/v1``, RocketMQ 5's ``apache.rocketmq.v2`` kept in
``pocketmq/rmqv2``, and etcd's v3 API kept in ``pocketmq/etcd`` by
``scripts/vendor_etcd_proto.py``) it runs ``grpc_tools.protoc -I proto`` and writes
``*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py`` next to the ``.proto``.
With ``-I proto`` the imports come out as ``from pocketmq.v1 import
common_pb2`` (``from pocketmq.rmqv2 import definition_pb2``), which resolve
because pyproject maps each folder to its package.

The generated files are committed and never edited by hand;
``tests/unit/test_proto_generated.py`` runs ``--check`` so a stale file fails
the test run. ``--check`` generates into a temporary directory and compares
byte for byte; a generated file whose ``.proto`` is gone counts as stale too.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "proto"
PACKAGE_DIRS = (Path("pocketmq") / "v1", Path("pocketmq") / "rmqv2", Path("pocketmq") / "etcd")
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def _package_files(root: Path, select: Callable[[Path], bool]) -> list[Path]:
    """Files of every package folder under *root* that *select* takes, relative, sorted."""
    return sorted(
        p.relative_to(root)
        for package in PACKAGE_DIRS
        if (root / package).is_dir()
        for p in (root / package).iterdir()
        if select(p)
    )


def _is_generated(path: Path) -> bool:
    return path.name.endswith(GENERATED_SUFFIXES)


def proto_files(proto_root: Path = PROTO_ROOT) -> list[Path]:
    """The ``.proto`` files of the packages, relative to *proto_root*, sorted."""
    return _package_files(proto_root, lambda p: p.suffix == ".proto")


def generate(out_root: Path, proto_root: Path = PROTO_ROOT) -> list[Path]:
    """Run protoc over every ``.proto`` into *out_root*; returns the files written.

    Paths returned are relative to *out_root* (``pocketmq/v1/x_pb2.py``).
    Raises ``RuntimeError`` with protoc's exit code when protoc fails (its own
    diagnostics have already gone to stderr).
    """
    # Imported here so `--help` works without grpcio-tools installed.
    import grpc_tools
    from grpc_tools import protoc

    sources = proto_files(proto_root)
    if not sources:
        raise RuntimeError(
            f"no .proto files under {proto_root} in {', '.join(str(d) for d in PACKAGE_DIRS)}"
        )
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    out_root.mkdir(parents=True, exist_ok=True)
    argv = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *(str(s) for s in sources),
    ]
    code = protoc.main(argv)
    if code != 0:
        raise RuntimeError(f"protoc exited with code {code} for {[str(s) for s in sources]}")
    return _package_files(out_root, _is_generated)


def committed_generated(proto_root: Path = PROTO_ROOT) -> list[Path]:
    """Generated files currently in the tree, relative to *proto_root*."""
    return _package_files(proto_root, _is_generated)


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def stale_files(proto_root: Path = PROTO_ROOT) -> list[str]:
    """Files that differ from a fresh generation, with the reason for each."""
    with tempfile.TemporaryDirectory(prefix="pocketmq-proto-") as tmp:
        fresh_root = Path(tmp)
        fresh = generate(fresh_root, proto_root)
        problems = []
        for rel in fresh:
            target = proto_root / rel
            if not target.exists():
                problems.append(f"{_display(target)}: missing")
            elif target.read_bytes() != (fresh_root / rel).read_bytes():
                problems.append(f"{_display(target)}: out of date")
        for rel in sorted(set(committed_generated(proto_root)) - set(fresh)):
            problems.append(f"{_display(proto_root / rel)}: no .proto generates it any more")
        return problems


def write_in_place(proto_root: Path = PROTO_ROOT) -> list[Path]:
    """Regenerate into the tree; removes generated files whose ``.proto`` is gone."""
    with tempfile.TemporaryDirectory(prefix="pocketmq-proto-") as tmp:
        fresh_root = Path(tmp)
        fresh = generate(fresh_root, proto_root)
        for rel in sorted(set(committed_generated(proto_root)) - set(fresh)):
            (proto_root / rel).unlink()
        for rel in fresh:
            shutil.copyfile(fresh_root / rel, proto_root / rel)
        return [proto_root / rel for rel in fresh]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 listing generated files that are stale",
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            problems = stale_files()
            if problems:
                print(
                    "generated protobuf code is stale; run `python scripts/gen_proto.py`:",
                    file=sys.stderr,
                )
                for line in problems:
                    print(f"  {line}", file=sys.stderr)
                return 1
            print("generated protobuf code is up to date")
            return 0
        written = write_in_place()
    except RuntimeError as exc:
        print(f"gen_proto: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {_display(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
