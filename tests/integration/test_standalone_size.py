"""``pocketmq standalone`` takes a laptop's disk, not 1.5 GB (issue 18, item 15).

The quick start as a user runs it: a standalone, 200 tiny messages through
``pocketmq produce``, a graceful stop; then the blocks the data directory holds.
A ``--config`` file sets the sizes back, and a directory made with other sizes keeps
them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from processkit import free_port
from waitkit import eventually_sync

from pocketmq.cli.broker_cmd import STANDALONE_STORE_DEFAULTS, _standalone_broker_config

POCKETMQ = str(Path(sys.executable).with_name("pocketmq"))  # .venv/bin/pocketmq
MiB = 1024 * 1024
START_TIMEOUT_S = 90.0


def disk_bytes(root: Path) -> int:
    """Bytes of disk the files under *root* hold (allocated blocks, not apparent sizes)."""
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())


def test_the_quick_start_store_stays_small_after_200_messages(tmp_path):
    data = tmp_path / "pocketmq-data"
    namesrv_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("POCKETMQ_")}
    log = tmp_path / "standalone.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                POCKETMQ,
                "standalone",
                "--data-dir",
                str(data),
                "--namesrv-port",
                str(namesrv_port),
                "--broker-port",
                str(free_port()),
                "--grpc-v2-port",
                "-1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:

        def started() -> bool:
            assert proc.poll() is None, log.read_text()
            return "standalone: nameserver on" in log.read_text(errors="replace")

        eventually_sync(started, timeout_s=START_TIMEOUT_S, interval_s=0.1, what="the start")
        produced = subprocess.run(
            [
                "bash",
                "-c",
                f"seq 200 | '{POCKETMQ}' produce orders --namesrv 127.0.0.1:{namesrv_port}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert produced.returncode == 0, produced.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, log.read_text()
    assert "TLS off, ACL off" in log.read_text()  # the start-up line says how it admits
    used = disk_bytes(data)
    print(f"standalone store after 200 messages: {used / MiB:.1f} MiB on disk")
    assert used < 100 * MiB, f"{used / MiB:.0f} MiB for 200 tiny messages"
    geometry = json.loads((data / "storeGeometry.json").read_text())
    assert geometry["commitlog_file_size"] == STANDALONE_STORE_DEFAULTS["commitlog_file_size_bytes"]


def _args(tmp_path: Path, config: Path | None) -> argparse.Namespace:
    return argparse.Namespace(
        host="127.0.0.1",
        broker_port=0,
        data_dir=str(tmp_path / "data"),
        flush="async",
        grpc_v2_port=None,
        metrics_port=None,
        config=str(config) if config else None,
        controller=False,
    )


def test_a_config_file_sets_the_segment_size_back(tmp_path):
    big = tmp_path / "big.toml"
    big.write_text("commitlog_file_size_bytes = 1073741824\n")
    config = _standalone_broker_config(_args(tmp_path, big), namesrv_addrs="")
    assert config.commitlog_file_size_bytes == 1024 * MiB
    assert config.index_slots == STANDALONE_STORE_DEFAULTS["index_slots"]


def test_a_data_directory_keeps_the_sizes_it_was_made_with(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "storeGeometry.json").write_text(
        json.dumps(
            {
                "commitlog_file_size": 1024 * MiB,
                "consume_queue_units_per_file": 300_000,
                "index_slots": 5_000_000,
                "index_entries": 20_000_000,
            }
        )
    )
    config = _standalone_broker_config(_args(tmp_path, None), namesrv_addrs="")
    assert (config.commitlog_file_size_bytes, config.index_slots, config.index_entries) == (
        1024 * MiB,
        5_000_000,
        20_000_000,
    )
