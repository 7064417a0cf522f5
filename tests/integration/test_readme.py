"""README.md runs as pasted (issue 18, item 12): every code block, in order, on a real cluster.

The blocks run against one ``pocketmq standalone`` started here (as a user would with
``./dev.sh start``), in a scratch directory that stands for the repository root:

* ``bash`` blocks run in ``bash -e -o pipefail`` with ``.venv/bin`` first on PATH;
* ``python`` blocks run as scripts of the venv's interpreter;
* ``toml`` blocks must parse;
* ``text`` blocks are output shown to the reader and are not run.

The blocks share what a reader's shell keeps: the working directory and
``POCKETMQ_NAMESRV``, which the first block exports (as the reader's shell keeps it
for the commands after it). The standalone listens on free ports, so
``127.0.0.1:9876`` (nameserver),
``127.0.0.1:10911`` (broker) and ``127.0.0.1:8081`` (RocketMQ 5 port) in a block are
replaced by its addresses; nothing else is changed. A block that is not meant to run
(a server that runs until Ctrl-C, docker, a synopsis with placeholders) says so on
the line before it::

    <!-- readme-test: skip (why) -->

A failure names the block's first line in README.md.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from processkit import free_port
from waitkit import eventually_sync

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent
RUNNABLE = ("bash", "python", "toml")
SHOWN = ("text",)
SKIP = re.compile(r"^<!--\s*readme-test:\s*skip\s*\((?P<reason>[^)]+)\)\s*-->\s*$")
BLOCK_TIMEOUT_S = 300.0  # a Spark block starts a JVM
START_TIMEOUT_S = 90.0

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    skip: str | None  # the reason, when marked


def readme_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start, lang, body = i, lines[i][3:].strip(), []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            marker = SKIP.match(lines[start - 1]) if start else None
            blocks.append(
                Block(
                    start + 1,
                    lang,
                    "\n".join(body) + "\n",
                    marker.group("reason") if marker else None,
                )
            )
        i += 1
    return blocks


BLOCKS = readme_blocks(README.read_text())


def test_every_block_says_what_it_is_and_every_skip_why():
    for block in BLOCKS:
        assert block.lang in RUNNABLE + SHOWN, (
            f"README.md line {block.line}: a block of {block.lang or 'no language'}; give it "
            f"one of {RUNNABLE + SHOWN}"
        )
        if block.skip is not None:
            assert block.lang in RUNNABLE, f"README.md line {block.line}: a skipped text block"
            assert block.skip.strip(), f"README.md line {block.line}: a skip without a reason"


@dataclass
class Standalone:
    workdir: Path
    namesrv: str
    broker: str
    v2: str
    env: dict[str, str]

    def localize(self, text: str) -> str:
        return (
            text.replace("127.0.0.1:9876", self.namesrv)
            .replace("127.0.0.1:10911", self.broker)
            .replace("127.0.0.1:8081", self.v2)
        )


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("readme")
    ports = {
        "--namesrv-port": free_port(),
        "--broker-port": free_port(),
        "--grpc-v2-port": free_port(),
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("POCKETMQ_")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYSPARK_PYTHON", None)  # the README's own advice must be enough
    log = workdir / "standalone.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(VENV_BIN / "pocketmq"),
                "standalone",
                "--data-dir",
                "./pocketmq-data",
                *[str(a) for pair in ports.items() for a in pair],
            ],
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def up() -> bool:  # the log says so; a process that exited fails at once
        if proc.poll() is not None:
            pytest.fail(f"the standalone did not start:\n{log.read_text(errors='replace')}")
        return "standalone: nameserver on" in log.read_text(errors="replace")

    try:
        eventually_sync(up, timeout_s=START_TIMEOUT_S, interval_s=0.1, what="the start")
    except AssertionError:
        proc.kill()
        pytest.fail(f"the standalone did not start:\n{log.read_text(errors='replace')}")
    try:
        namesrv = f"127.0.0.1:{ports['--namesrv-port']}"
        yield Standalone(
            workdir,
            namesrv,
            f"127.0.0.1:{ports['--broker-port']}",
            f"127.0.0.1:{ports['--grpc-v2-port']}",
            {**env, "POCKETMQ_NAMESRV": namesrv},
        )
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _needs_spark(block: Block) -> bool:
    return "pocketmq.spark" in block.text or "pipeline archive" in block.text


def _run(block: Block, cluster: Standalone) -> subprocess.CompletedProcess[str]:
    text = cluster.localize(block.text)
    if block.lang == "bash":
        argv = ["bash", "-e", "-o", "pipefail", "-c", text]
    else:
        script = cluster.workdir / f"readme_line_{block.line}.py"
        script.write_text(text)
        argv = [sys.executable, str(script)]
    return subprocess.run(
        argv,
        cwd=cluster.workdir,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b.lang in RUNNABLE], ids=lambda b: f"line{b.line}-{b.lang}"
)
def test_readme_block_runs_as_pasted(block, standalone):
    if block.skip is not None:
        pytest.skip(f"README.md line {block.line}: {block.skip}")
    if _needs_spark(block) and shutil.which("java") is None:
        pytest.skip(
            f"README.md line {block.line}: Spark needs Java, a prerequisite the "
            "README names; none on PATH"
        )
    if block.lang == "toml":
        try:
            tomllib.loads(block.text)
        except tomllib.TOMLDecodeError as exc:
            pytest.fail(f"README.md line {block.line}: the TOML block does not parse: {exc}")
        return
    try:
        result = _run(block, standalone)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"README.md line {block.line}: the {block.lang} block did not finish in "
            f"{BLOCK_TIMEOUT_S:.0f} s\n{exc.stdout or ''}\n{exc.stderr or ''}"
        )
    assert result.returncode == 0, (
        f"README.md line {block.line}: the {block.lang} block failed (exit "
        f"{result.returncode})\n--- stdout\n{result.stdout[-4000:]}\n--- stderr\n"
        f"{result.stderr[-4000:]}"
    )
