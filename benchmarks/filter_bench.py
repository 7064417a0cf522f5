"""SQL92 property filters (issue 20): the cost of pulls that filter at the broker.

    .venv/bin/python benchmarks/filter_bench.py [--messages 200000] [--queues 4]
                                                [--rounds 3] [--body 256]

Against one ``pocketmq standalone`` (a separate process, gRPC on 127.0.0.1), a
backlog of ``--messages`` records, each with the properties ``pct`` (0..99, the
record's number mod 100) and ``region``, is read from offset 0 to the end of
every queue by PullMessage calls (one in flight per queue, 32 messages a pull),
three ways:

* unfiltered (tag ``*``: the fast path, no record decoded at the broker),
* ``pct < 50`` (SQL92; half the records match),
* ``pct < 1`` (SQL92; one record in a hundred matches).

Printed for each: records scanned per second (the backlog crossed) and records
delivered per second, the best of ``--rounds`` rounds (noise only slows), and
the broker process's CPU seconds per million records scanned.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import grpc
from benchkit import machine, process_cpu_s, standalone

from pocketmq.common.message import encode_record, pack_host
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2

TOPIC = "FilterBench"
HOST = pack_host(("127.0.0.1", 40000))
CASES = [
    ("unfiltered", "*", ""),
    ("pct < 50 (50 %)", "pct < 50", "SQL92"),
    ("pct < 1 (1 %)", "pct < 1", "SQL92"),
]


async def fill(stub, messages: int, queues: int, body: bytes) -> None:
    await stub.CreateTopic(
        pb.CreateTopicRequest(
            topic_config=common_pb2.TopicConfig(
                topic_name=TOPIC, read_queue_nums=queues, write_queue_nums=queues, perm=6
            )
        )
    )
    now = int(time.time() * 1000)
    batch: list[bytes] = []
    for i in range(messages):
        batch.append(
            encode_record(
                topic=TOPIC,
                body=body,
                queue_id=i % queues,
                born_timestamp_ms=now,
                born_host=HOST,
                store_host=pack_host(("127.0.0.1", 0)),
                properties={
                    "pct": str(i % 100),
                    "region": ("eu", "us")[i % 2],
                    "UNIQ_KEY": f"K{i:012d}",
                },
            )
        )
        if len(batch) == 512 or i == messages - 1:
            await stub.SendBatch(pb.SendBatchRequest(records=b"".join(batch)))
            batch.clear()


async def read_queue(stub, queue_id: int, end: int, expression: str, expression_type: str) -> int:
    offset = delivered = 0
    while offset < end:
        reply = await stub.PullMessage(
            pb.PullMessageRequest(
                consumer_group="bench",
                topic=TOPIC,
                queue_id=queue_id,
                queue_offset=offset,
                subscription=expression,
                expression_type=expression_type,
                suspend_timeout_ms=0,
            )
        )
        delivered += reply.message_count
        if reply.next_begin_offset <= offset:
            raise RuntimeError(f"queue {queue_id} stuck at {offset}: {reply.status}")
        offset = reply.next_begin_offset
    return delivered


async def measure(
    stub, pid: int, queues: int, per_queue: list[int], expression: str, expression_type: str
) -> tuple[float, int, float]:
    cpu = process_cpu_s(pid)
    started = time.perf_counter()
    delivered = sum(
        await asyncio.gather(
            *(read_queue(stub, q, per_queue[q], expression, expression_type) for q in range(queues))
        )
    )
    return time.perf_counter() - started, delivered, process_cpu_s(pid) - cpu


async def run(args: argparse.Namespace) -> None:
    body = b"x" * args.body
    with standalone("pocketmq-filter-bench-") as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.broker_port}") as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            print(
                f"filling {args.messages:,} records of {args.body} B over {args.queues} queues ...",
                flush=True,
            )
            await fill(stub, args.messages, args.queues, body)
            per_queue = [len(range(q, args.messages, args.queues)) for q in range(args.queues)]
            best: dict[str, tuple[float, int, float]] = {}
            for _round in range(args.rounds):
                for name, expression, kind in CASES:
                    took, delivered, cpu = await measure(
                        stub, server.pid, args.queues, per_queue, expression, kind
                    )
                    if name not in best or took < best[name][0]:
                        best[name] = (took, delivered, cpu)
    print(f"\n{machine()}")
    print(f"{args.messages:,} records, {args.queues} queues, 32 per pull, best of {args.rounds}\n")
    print(
        f"{'subscription':<18}{'scanned/s':>12}{'delivered/s':>14}{'delivered':>11}"
        f"{'broker CPU s/M scanned':>25}"
    )
    for name, _expression, _kind in CASES:
        took, delivered, cpu = best[name]
        print(
            f"{name:<18}{args.messages / took:>12,.0f}{delivered / took:>14,.0f}"
            f"{delivered:>11,}{cpu / args.messages * 1e6:>25.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--body", type=int, default=256, help="body bytes")
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
