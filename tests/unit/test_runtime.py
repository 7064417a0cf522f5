"""tune_malloc: set once per process on glibc, and left alone when the user chose."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")

PROBE = "from pocketmq.common.runtime import tune_malloc; print(tune_malloc(), tune_malloc())"


def probe(**env: str) -> str:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k != "GLIBC_TUNABLES" and not k.startswith(("MALLOC_", "POCKETMQ_MALLOC"))
    }
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**clean, **env},
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()


def test_the_thresholds_are_set_once_on_glibc():
    assert probe() == "True True"


@pytest.mark.parametrize(
    "env",
    [
        {"POCKETMQ_MALLOC_TUNING": "0"},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"},
        {"MALLOC_ARENA_MAX_": "2"},
    ],
)
def test_an_opt_out_or_the_users_own_tunables_are_respected(env):
    assert probe(**env) == "False False"


def test_startup_objects_are_frozen_out_of_collection():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import gc; from pocketmq.common.runtime import "
            "freeze_startup_objects as f; n = f(); "
            "print(n > 1000, gc.get_freeze_count() == n); gc.unfreeze()",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert out.split() == ["True", "True"]
