"""The committed protobuf code matches what scripts/gen_proto.py generates."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _load_gen_proto() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_proto", REPO_ROOT / "scripts" / "gen_proto.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen_proto() -> ModuleType:
    return _load_gen_proto()


def test_generated_protobuf_code_is_up_to_date(gen_proto: ModuleType) -> None:
    stale = gen_proto.stale_files()
    assert not stale, (
        "generated protobuf code is stale; run `.venv/bin/python scripts/gen_proto.py`:\n  "
        + "\n  ".join(stale)
    )


def test_check_reports_edited_missing_and_orphaned_files(
    gen_proto: ModuleType, tmp_path: Path
) -> None:
    # A private copy of the nameserver's protos, so the test does not depend on
    # the state of the other .proto files.
    proto_root = tmp_path / "proto"
    package = proto_root / "pocketmq" / "v1"
    package.mkdir(parents=True)
    source = REPO_ROOT / "proto" / "pocketmq" / "v1"
    for stem in ("common", "nameserver"):
        for suffix in (".proto", *gen_proto.GENERATED_SUFFIXES):
            shutil.copyfile(source / f"{stem}{suffix}", package / f"{stem}{suffix}")
    (package / "common_pb2.py").write_text("# edited by hand\n")
    (package / "nameserver_pb2.pyi").unlink()
    (package / "gone_pb2.py").write_text("# its .proto was deleted\n")

    stale = gen_proto.stale_files(proto_root)

    assert any("common_pb2.py: out of date" in line for line in stale)
    assert any("nameserver_pb2.pyi: missing" in line for line in stale)
    assert any("gone_pb2.py: no .proto generates it" in line for line in stale)
    assert len(stale) == 3


def test_every_proto_has_its_three_generated_modules(gen_proto: ModuleType) -> None:
    for package_dir in gen_proto.PACKAGE_DIRS:  # pocketmq/v1 and pocketmq/rmqv2
        package = REPO_ROOT / "proto" / package_dir
        protos = sorted(package.glob("*.proto"))
        assert protos, f"no .proto in {package}"
        for proto in protos:
            for suffix in gen_proto.GENERATED_SUFFIXES:
                assert (package / f"{proto.stem}{suffix}").exists(), f"{proto.stem}{suffix}"
