"""``./dev.sh start`` installs what running needs, ``./dev.sh test`` everything (issue 18, item 19).

dev.sh runs as a user types it, in a copy of the repository's entry files whose
``.venv/bin/python`` and ``.venv/bin/pocketmq`` only write down how they were called.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORDER = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$(dirname "$0")/calls.log"
"""

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in ("dev.sh", "pyproject.toml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("python", "pocketmq"):
        (bin_dir / tool).write_text(RECORDER)
        (bin_dir / tool).chmod(0o755)
    return tmp_path


def dev_sh(checkout: Path, *args: str) -> list[str]:
    result = subprocess.run(
        ["./dev.sh", *args], cwd=checkout, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return (checkout / ".venv" / "bin" / "calls.log").read_text().splitlines()


def installs(calls: list[str]) -> list[str]:
    return [
        c.removeprefix("python -m pip install -e ")
        for c in calls
        if c.startswith("python -m pip install -e ")
    ]


def test_start_installs_pocketmq_without_the_test_and_spark_extras(checkout):
    calls = dev_sh(checkout, "start", "--flush", "sync")
    assert installs(calls) == ["."]
    assert calls[-1] == ("pocketmq standalone --data-dir ./pocketmq-data --demo --flush sync")


def test_test_installs_the_extras_and_start_then_installs_nothing_more(checkout):
    calls = dev_sh(checkout, "test", "tests/unit")
    assert installs(calls) == [".[dev,spark]"]
    assert calls[-1] == "python -m pytest -q tests/unit"
    (checkout / ".venv" / "bin" / "calls.log").unlink()
    assert installs(dev_sh(checkout, "start")) == []  # a superset is installed already


def test_start_after_start_reinstalls_nothing(checkout):
    dev_sh(checkout, "start")
    (checkout / ".venv" / "bin" / "calls.log").unlink()
    assert installs(dev_sh(checkout, "start")) == []
