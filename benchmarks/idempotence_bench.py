"""Idempotent producers (issue 22): their cost on the send path, and the recovery time
of the broker's de-duplication state.

    .venv/bin/python benchmarks/idempotence_bench.py [--seconds 5] [--rounds 3]
                                                     [--log-mib 256 (0: skip)]
                                                     [--calls both|send|send_batch]
                                                     [--calibrate]

1. Throughput, side by side in one run against one ``pocketmq standalone``: 256
   tasks calling ``send`` (one message each call), then 256 tasks calling
   ``send_batch`` (32 messages a call), each by an idempotent producer and by one
   with ``idempotent=False``, alternating A/B then B/A for ``--rounds`` rounds of
   ``--seconds`` each (the best round of each is kept, as noise only slows), with
   the CPU time one message cost the client and the broker process (the least of
   the rounds; steadier than the rates on a shared machine; then the medians, and
   what idempotence adds to their sum), each round's overhead of its two runs back to
   back (and their median: a load that comes and goes meets both runs of a round, where
   the best of each may come from different moments), and how many
   OUT_OF_ORDER_SEQUENCE answers the idempotent producer met.
   ``--calibrate`` makes both producers plain: the "overhead" it prints is what the
   machine's noise alone shows between two equal producers.
2. Recovery: a child process appends ``--log-mib`` MiB of stamped 1 KiB records
   (1,000 producer ids x 8 queues, batches of 64) to a store and dies (``os._exit``,
   abort file left); the parent times ``start()`` (the crash recovery that rebuilds
   the producer state) with snapshots every 64 MiB (the default) and with none, and
   a log of unstamped records as the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchkit import machine, standalone

from pocketmq.broker.store import StoreConfig
from pocketmq.broker.store.message_store import DefaultMessageStore
from pocketmq.client import AdminClient, ClientError, Message, Producer, TopicConfig
from pocketmq.client.idempotence import stamp
from pocketmq.client.message_codec import encode_message

TOPIC = "IdemBench"
TASKS = 256
BATCH = 32
BODY = b"x" * 256
HOST = b"\x7f\0\0\1\0\0\0\0"
MiB = 1024 * 1024


# -- throughput -------------------------------------------------------------------------------
FAILURES: dict[str, int] = {}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process *pid* so far (Linux /proc), 0 elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Round:
    """Messages per second, and the CPU µs one message cost the client and the broker:
    on a shared, loaded machine the CPU per message varies far less than the rate."""

    def __init__(self, rate: float, client_us: float, broker_us: float) -> None:
        self.rate, self.client_us, self.broker_us = rate, client_us, broker_us


async def run_for(producer: Producer, seconds: float, batch: bool, broker_pid: int = 0) -> Round:
    """TASKS tasks, each sending in a loop for *seconds* (a send that raises is counted
    in FAILURES under its error, and not as sent)."""
    client_cpu, broker_cpu = time.process_time(), cpu_seconds(broker_pid)
    stop_at = time.monotonic() + seconds
    counts = [0] * TASKS

    async def task(i: int) -> None:
        while time.monotonic() < stop_at:
            try:
                if batch:
                    await producer.send_batch([Message(topic=TOPIC, body=BODY)] * BATCH)
                    counts[i] += BATCH
                else:
                    await producer.send(Message(topic=TOPIC, body=BODY))
                    counts[i] += 1
            except ClientError as exc:
                key = f"{producer.group}: {type(exc).__name__}: {str(exc)[:160]}"
                FAILURES[key] = FAILURES.get(key, 0) + 1

    started = time.monotonic()
    await asyncio.gather(*(task(i) for i in range(TASKS)))
    sent = max(sum(counts), 1)
    return Round(
        sent / (time.monotonic() - started),
        (time.process_time() - client_cpu) / sent * 1e6,
        (cpu_seconds(broker_pid) - broker_cpu) / sent * 1e6,
    )


async def throughput(
    namesrv: str,
    broker: str,
    seconds: float,
    rounds: int,
    broker_pid: int,
    in_flight: int,
    shapes: tuple[bool, ...] = (False, True),
    calibrate: bool = False,
) -> None:
    async with AdminClient(namesrv=namesrv) as admin:
        await admin.create_topic(
            broker, TopicConfig(topic=TOPIC, read_queue_nums=8, write_queue_nums=8)
        )
    print(
        f"\nthroughput: {TASKS} tasks, {len(BODY)} B bodies, best of {rounds} rounds of "
        f"{seconds:g} s, idempotent and not alternating"
        + (" (CALIBRATION: both producers plain, what the noise alone shows)" if calibrate else "")
    )
    print(
        f"{'call':<24}{'idempotent msg/s':>18}{'plain msg/s':>14}{'overhead':>10}"
        f"{'client CPU µs/msg':>22}{'broker CPU µs/msg':>22}"
    )
    # send_timeout_ms 10 s: 256 tasks queue behind one broker; the default 3 s gives
    # up on calls that are only waiting, which is not what is measured here.
    async with (
        Producer(
            group="bench-idem",
            namesrv=namesrv,
            idempotent=not calibrate,
            send_timeout_ms=10_000,
            max_in_flight_requests_per_queue=in_flight,
        ) as idem,
        Producer(
            group="bench-plain", namesrv=namesrv, idempotent=False, send_timeout_ms=10_000
        ) as plain,
    ):
        for batch in shapes:
            await run_for(idem, 1.0, batch)  # warm-up: routes, sessions, channels
            await run_for(plain, 1.0, batch)
            best = {True: 0.0, False: 0.0}
            client = {True: float("inf"), False: float("inf")}
            broker_us = {True: float("inf"), False: float("inf")}
            before = _idempotence_counts(idem)
            cpu: dict[bool, list[Round]] = {True: [], False: []}
            for i in range(rounds):
                pair = ((True, idem), (False, plain))
                for flag, producer in pair if i % 2 == 0 else pair[::-1]:
                    got = await run_for(producer, seconds, batch, broker_pid)
                    cpu[flag].append(got)
                    best[flag] = max(best[flag], got.rate)
                    client[flag] = min(client[flag], got.client_us)
                    broker_us[flag] = min(broker_us[flag], got.broker_us)
            name = f"send_batch ({BATCH}/call)" if batch else "send"
            overhead = (best[False] - best[True]) / best[False] * 100
            print(
                f"{name:<24}{best[True]:>18,.0f}{best[False]:>14,.0f}{overhead:>9.1f}%"
                f"{f'{client[True]:.1f} vs {client[False]:.1f}':>22}"
                f"{f'{broker_us[True]:.1f} vs {broker_us[False]:.1f}':>22}"
            )
            median = {
                flag: (
                    statistics.median(r.client_us for r in rs),
                    statistics.median(r.broker_us for r in rs),
                )
                for flag, rs in cpu.items()
            }
            (idem_client, idem_broker), (plain_client, plain_broker) = median[True], median[False]
            print(
                f"  CPU µs/msg, medians: client {idem_client:.2f} vs {plain_client:.2f}, broker "
                f"{idem_broker:.2f} vs {plain_broker:.2f}; idempotence adds "
                f"{((idem_client + idem_broker) / (plain_client + plain_broker) - 1) * 100:+.1f}%"
            )
            print(f"  paired rounds (the two runs of a round, back to back): {_paired(cpu)}")
            opened, out_of_order, renumbered = (
                after - was for after, was in zip(_idempotence_counts(idem), before, strict=True)
            )
            print(
                f"  idempotent: {opened} session(s) opened, {out_of_order} out-of-order "
                f"answer(s) met (each waits for the earlier request), {renumbered} "
                "renumbered after a gap"
            )
    for what, count in sorted(FAILURES.items()):
        print(f"  failed {count}x  {what}")


def _paired(rounds: dict[bool, list[Round]]) -> str:
    """The overhead of each round's idempotent run over its plain one (back to back, so a
    load that comes and goes on a shared machine mostly meets both), and their median."""
    rates = [
        (plain.rate - idem.rate) / plain.rate * 100
        for idem, plain in zip(rounds[True], rounds[False], strict=True)
    ]
    cpu = [
        ((idem.client_us + idem.broker_us) / (plain.client_us + plain.broker_us) - 1) * 100
        for idem, plain in zip(rounds[True], rounds[False], strict=True)
    ]
    return (
        f"msg/s {', '.join(f'{r:+.1f}%' for r in rates)} fewer (median "
        f"{statistics.median(rates):+.1f}%); CPU µs/msg {', '.join(f'{c:+.1f}%' for c in cpu)} "
        f"more (median {statistics.median(cpu):+.1f}%)"
    )


def _idempotence_counts(producer: Producer) -> tuple[int, int, int]:
    sessions = producer._sessions
    if sessions is None:
        return 0, 0, 0
    return sessions.opened, sessions.out_of_order, sessions.renumbered


# -- recovery ---------------------------------------------------------------------------------
def store_config(data_dir: str, snapshot_interval: int) -> StoreConfig:
    return StoreConfig(
        data_dir=data_dir,
        commitlog_file_size_bytes=256 * MiB,
        producer_snapshot_interval_bytes=snapshot_interval,
    )


def fill(data_dir: str, log_mib: int, stamped: bool, snapshot_interval: int) -> None:
    """Child process: append *log_mib* MiB and die without a shutdown."""
    store = DefaultMessageStore(store_config(data_dir, snapshot_interval))
    store.start()
    producers, queues = 1000, 8
    seqs = [[0] * queues for _ in range(producers)]
    body = b"y" * 1024
    n = 0
    while store.commitlog.max_offset < log_mib * MiB:
        pid, queue_id = n % producers, (n // producers) % queues
        first = seqs[pid][queue_id]
        records = b"".join(
            encode_message(
                Message(topic="orders", body=body),
                queue_id=queue_id,
                uniq_key=stamp(f"K{pid}-{first + i}", (1 << 40) + pid, 0, first + i)
                if stamped
                else f"K{pid}-{first + i}",
                born_host=HOST,
                born_timestamp_ms=int(time.time() * 1000),
            )
            for i in range(64)
        )
        seqs[pid][queue_id] += 64
        store.put_batch(records)
        n += 1
    os._exit(0)  # as kill -9: mapped pages stay in the page cache, no checkpoint


def recover(data_dir: str, snapshot_interval: int) -> tuple[float, int, int]:
    store = DefaultMessageStore(store_config(data_dir, snapshot_interval))
    started = time.perf_counter()
    report = store.start()
    seconds = time.perf_counter() - started
    ids = len(store.producers)
    scanned = report.max_phys_offset - report.scanned_from
    store.shutdown()
    return seconds, ids, scanned


def recovery(log_mib: int) -> None:
    print(
        f"\nrecovery after a crash (os._exit, abort file left), {log_mib} MiB of 1 KiB "
        "records, 1,000 producer ids x 8 queues"
    )
    print(f"{'log':<34}{'start() s':>11}{'ids':>7}{'bytes rescanned':>18}")
    cases = (
        ("stamped, snapshots every 64 MiB", True, 64 * MiB),
        ("stamped, no snapshot", True, 1 << 50),
        ("unstamped (baseline)", False, 64 * MiB),
    )
    for name, stamped, interval in cases:
        data_dir = tempfile.mkdtemp(prefix="idem-bench-")
        try:
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--fill",
                    data_dir,
                    "--log-mib",
                    str(log_mib),
                    "--interval",
                    str(interval),
                ]
                + (["--stamped"] if stamped else []),
                check=True,
            )
            seconds, ids, scanned = recover(data_dir, interval)
            print(f"{name:<34}{seconds:>11.2f}{ids:>7}{scanned:>18,}")
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--log-mib", type=int, default=256)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument(
        "--calls",
        choices=("both", "send", "send_batch"),
        default="both",
        help="which call shapes the throughput part measures",
    )
    parser.add_argument(
        "--max-in-flight-requests-per-queue",
        type=int,
        default=5,
        help="the idempotent producer's (send_batch)",
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="both producers plain (idempotent=False): the overhead this prints is the noise",
    )
    parser.add_argument("--fill", help=argparse.SUPPRESS)
    parser.add_argument("--interval", type=int, default=64 * MiB, help=argparse.SUPPRESS)
    parser.add_argument("--stamped", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fill:
        fill(args.fill, args.log_mib, args.stamped, args.interval)
        return
    print(f"idempotence_bench on {machine()}")
    if not args.skip_throughput:
        with standalone("idem-bench-") as server:
            asyncio.run(
                throughput(
                    server.namesrv,
                    f"127.0.0.1:{server.broker_port}",
                    args.seconds,
                    args.rounds,
                    server.pid,
                    args.max_in_flight_requests_per_queue,
                    {"both": (False, True), "send": (False,), "send_batch": (True,)}[args.calls],
                    args.calibrate,
                )
            )
    if args.log_mib > 0:
        recovery(args.log_mib)


if __name__ == "__main__":
    main()
