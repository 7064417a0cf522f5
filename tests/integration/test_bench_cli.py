"""``pocketmq bench produce|consume|e2e`` as a real process against an in-process cluster.

The cluster (a nameserver and two brokers, port 0) runs on the test's event
loop; the bench runs as ``python -m pocketmq`` and its JSON summary (the last
line of stdout) is held to what the brokers stored.
"""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from clusterkit import create_topic

from pocketmq.cli.bench_cmd import LatencyHistogram
from pocketmq.client import Message, Producer

TIMEOUT_S = 120


async def bench(cluster, *args: str) -> tuple[int, list[str], dict]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pocketmq",
        "--log-level",
        "WARNING",
        "bench",
        *args,
        "--namesrv",
        cluster.addr,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    lines = out.decode().splitlines()
    assert lines, err.decode()
    return process.returncode, lines, json.loads(lines[-1])


def stored(cluster, topic: str) -> int:
    return sum(
        broker.store.max_offset(topic, queue_id)
        for broker in cluster.brokers
        for queue_id in broker.store.queue_ids(topic)
    )


async def test_bench_produce_sends_exactly_count_and_every_send_is_acknowledged(
    cluster, eventually
):
    await create_topic(cluster, "bench-p", eventually)
    code, _lines, summary = await bench(
        cluster,
        "produce",
        "--topic",
        "bench-p",
        "--count",
        "3000",
        "--concurrency",
        "8",
        "--size",
        "64",
    )
    produce = summary["produce"]
    assert code == 0, summary
    assert summary["mode"] == "produce"
    assert produce["sent"] == produce["acknowledged"] == 3000
    assert produce["failed"] == 0 and not produce["errors"]
    assert produce["bytes"] == 3000 * 64
    assert stored(cluster, "bench-p") == 3000
    assert sum(b.stats.topics["bench-p"].put_messages for b in cluster.brokers) == 3000
    rt = produce["rt_ms"]
    assert 0 < rt["p50"] <= rt["p99"] <= rt["max"]
    assert produce["tps"] == pytest.approx(3000 / produce["elapsed_s"], rel=0.01)


async def test_bench_produce_in_batches_writes_the_summary_file(cluster, eventually, tmp_path):
    await create_topic(cluster, "bench-b", eventually)
    out = tmp_path / "summary.json"
    code, _lines, summary = await bench(
        cluster,
        "produce",
        "--topic",
        "bench-b",
        "--count",
        "1005",
        "--batch",
        "10",
        "--concurrency",
        "4",
        "--json-out",
        str(out),
    )
    assert code == 0, summary
    assert json.loads(out.read_text()) == summary
    assert summary["produce"]["acknowledged"] == 1005  # the last batch carries 5
    assert stored(cluster, "bench-b") == 1005


async def test_bench_consume_reads_what_is_there(cluster, eventually):
    await create_topic(cluster, "bench-c", eventually)
    async with Producer(group="bench-fill", namesrv=cluster.addr) as producer:
        for _ in range(8):
            await producer.send_batch([Message(topic="bench-c", body=b"c" * 50)] * 50)
    code, _lines, summary = await bench(
        cluster,
        "consume",
        "--topic",
        "bench-c",
        "--group",
        "bench-cg",
        "--count",
        "400",
        "--idle-timeout",
        "10",
    )
    assert code == 0, summary
    assert summary["consume"]["consumed"] == 400
    assert summary["consume"]["bytes"] == 400 * 50
    assert "produce" not in summary


async def test_bench_e2e_consumes_everything_it_sent_with_live_lines(cluster):
    # an unknown topic: the bench creates it on both brokers before sending
    code, lines, summary = await bench(
        cluster,
        "e2e",
        "--topic",
        "bench-e2e",
        "--duration",
        "1.5",
        "--interval",
        "0.4",
        "--concurrency",
        "4",
    )
    produce, consume = summary["produce"], summary["consume"]
    assert code == 0, summary
    assert produce["acknowledged"] > 0 and produce["failed"] == 0
    assert consume["consumed"] >= produce["sent"] == produce["acknowledged"]
    assert stored(cluster, "bench-e2e") == produce["acknowledged"]
    assert all(b.topics.get("bench-e2e") is not None for b in cluster.brokers)
    assert "created topic bench-e2e on 2 broker(s)" in lines
    live = [line for line in lines if line.startswith(("produce  ", "consume  "))]
    assert len(live) >= 4, lines
    assert all("msgs/s" in line and "RT avg" in line for line in live)
    assert consume["rt_ms"]["avg"] >= 0


async def test_bench_refuses_bad_arguments(cluster):
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pocketmq",
        "bench",
        "produce",
        "--size",
        "0",
        stderr=asyncio.subprocess.PIPE,
    )
    _out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    assert process.returncode == 2
    assert b"--size must be positive, got 0" in err


def test_latency_histogram_percentiles_within_the_bucket_width():
    histogram = LatencyHistogram()
    for us in range(1, 10_001):  # 1 us .. 10 ms, uniformly
        histogram.record(us / 1_000_000)
    assert histogram.count == 10_000
    assert histogram.percentile_s(50) == pytest.approx(0.005, rel=1 / 32)
    assert histogram.percentile_s(99) == pytest.approx(0.0099, rel=1 / 32)
    assert histogram.percentile_s(100) == histogram.max_s == 0.01
    assert histogram.mean_s() == pytest.approx(0.0050005)
    other = LatencyHistogram()
    other.record(1.0)
    histogram.merge(other)
    assert histogram.max_s == 1.0 and histogram.count == 10_001
