"""What the README's commands create stays out of git and out of the image (issue 18, item 19).

Every path a README command writes (``--data-dir ./D``, ``--controller-data-dir ./D``,
``--to ./D``, ``--json-out F.json``, in its code blocks or its prose) is asked of git
itself (``git check-ignore``) and matched against ``.dockerignore``'s patterns, as the
Docker build context does for a top-level name.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WRITES = re.compile(
    r"--(?:data-dir|controller-data-dir|to) (\./[\w.$/-]+)"
    r"|--json-out ([\w-]+\.\w+)"
)


def written_paths() -> set[str]:
    """Top-level names the README's commands write, with ``$i`` of a loop as 1."""
    found = set()
    for match in WRITES.finditer((ROOT / "README.md").read_text()):
        path = (match.group(1) or match.group(2)).replace("$i", "1")
        found.add(path.removeprefix("./").split("/")[0])
    return found


def test_the_readme_writes_somewhere():
    assert {"pocketmq-data", "pocketmq-cluster", "archive"} <= written_paths()


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout"
)
def test_git_ignores_every_path_the_readme_commands_write():
    for name in sorted(written_paths()):
        probe = f"{name}/x" if "." not in name else name
        ignored = subprocess.run(
            ["git", "check-ignore", "--no-index", "-q", probe], cwd=ROOT, timeout=30
        )
        assert ignored.returncode == 0, f"git does not ignore ./{name}, which the README writes"


def test_the_docker_build_context_leaves_out_every_path_the_readme_commands_write():
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for name in sorted(written_paths()):
        assert any(fnmatch.fnmatch(name, p) for p in patterns), (
            f".dockerignore does not leave out ./{name}, which the README writes"
        )
