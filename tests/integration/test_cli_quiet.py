"""The ``pocketmq`` command is quiet by default, as a user types it (issue 18, items 14, 16).

Client commands print warnings and errors only (``-v`` for INFO); gRPC's own C-core
lines do not precede PocketMQ's error; a CLI producer leaves the broker when it exits;
a restart sums its consume queues up in one line; output piped into ``head`` ends
without a traceback; ``store verify`` says when a broker holds the directory.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
from pathlib import Path

from clikit import POCKETMQ, pocketmq_sync
from storekit import open_store, record, small_config

from pocketmq.broker.store.verify import _load_queues, data_extent, open_commitlog_read_only
from pocketmq.broker.topic_config import BrokerTopicConfig


async def _cluster(nameserver, start_broker, eventually):
    broker = await start_broker(namesrv_addrs=nameserver.address)
    broker.topics.create(
        BrokerTopicConfig(topic_name="quiet", read_queue_nums=2, write_queue_nums=2)
    )
    await eventually(
        lambda: nameserver.route_table.get_route("quiet") is not None,
        what="the broker registered topic quiet",
    )
    return broker


async def test_a_client_command_logs_nothing_by_default_and_info_with_v(
    nameserver, start_broker, eventually
):
    await _cluster(nameserver, start_broker, eventually)
    quiet = await asyncio.to_thread(
        pocketmq_sync, "send", "quiet", "hello", "--namesrv", nameserver.address
    )
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == "", quiet.stderr
    verbose = await asyncio.to_thread(
        pocketmq_sync, "-v", "send", "quiet", "hello", "--namesrv", nameserver.address
    )
    assert verbose.returncode == 0, verbose.stderr
    assert " INFO " in verbose.stderr and " DEBUG " not in verbose.stderr


async def test_a_cli_producer_leaves_the_broker_when_it_exits(nameserver, start_broker, eventually):
    broker = await _cluster(nameserver, start_broker, eventually)
    known_before = set(broker.clients._last_seen_s)
    sent = await asyncio.to_thread(
        pocketmq_sync,
        "send",
        "quiet",
        "bye",
        "--group",
        "cli-leaves",
        "--namesrv",
        nameserver.address,
    )
    assert sent.returncode == 0, sent.stderr
    assert broker.clients.producer_ids("cli-leaves") == []
    # Nothing is left for the expiry to drop, and log as "silent for 120 s", later.
    assert set(broker.clients._last_seen_s) == known_before
    assert broker.clients.run_once() == []


def test_a_taken_port_gets_pocketmq_error_without_raw_grpc_lines():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = pocketmq_sync("nameserver", "--host", "127.0.0.1", "--port", str(port))
    assert result.returncode == 1
    assert result.stderr.startswith("pocketmq nameserver:"), result.stderr
    assert "add_port.cc" not in result.stderr


def test_a_broker_restart_sums_up_its_consume_queues_in_one_line(tmp_path, caplog):
    store = open_store(small_config(tmp_path))
    for queue_id in range(12):
        store.put_batch(record(queue_id=queue_id))
    store.shutdown()
    with caplog.at_level(logging.INFO, logger="pocketmq.broker.store"):
        open_store(small_config(tmp_path)).shutdown()
    infos = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert not [m for m in infos if m.startswith("recovered consume queue ")]
    assert "recovered 12 consume queues: 12 units" in "\n".join(infos)


def _store_with_records(path: Path, n: int) -> None:
    store = open_store(small_config(path))
    for i in range(n):
        store.put_batch(record(body=b"x" * 64, queue_id=i % 4, keys=f"k{i}", uniq=f"U{i}"))
    store.shutdown()


def test_store_dump_piped_into_head_ends_without_a_traceback(tmp_path):
    _store_with_records(tmp_path, 3000)  # ~300 KB of lines: more than a pipe holds
    result = subprocess.run(
        ["bash", "-c", f"'{POCKETMQ}' store dump '{tmp_path}' | head -n 2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert len(result.stdout.splitlines()) == 2
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr


async def test_store_verify_says_when_a_broker_holds_the_directory(start_broker, tmp_path):
    broker = await start_broker()
    running = await asyncio.to_thread(pocketmq_sync, "store", "verify", broker.config.data_dir)
    assert "a broker is running on" in running.stderr, running.stderr
    await broker.stop(0)
    stopped = await asyncio.to_thread(pocketmq_sync, "store", "verify", broker.config.data_dir)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "a broker is running" not in stopped.stderr


def test_verify_progress_is_measured_against_the_data_the_log_holds(tmp_path):
    _store_with_records(tmp_path, 50)
    commitlog = open_commitlog_read_only(str(tmp_path))
    queues = _load_queues(str(tmp_path / "consumequeue"))
    try:
        extent = data_extent(commitlog, queues)
        segment_bytes = commitlog.queue.files[-1].file_size
        log_end = max(r.phys_offset + r.size for r in commitlog.scan(0, check_crc=False))
    finally:
        for q in queues.values():
            q.close()
        commitlog.queue.close()
    assert extent == log_end < segment_bytes
