"""kill -9 of one of two push consumers of a group: the survivor takes its queues over.

The victim is a process of its own (``tests/support/consumer_proc.py``) that
prints every message it consumed. Just before the kill it is frozen (SIGSTOP),
so that the offsets the broker holds for its queues are its last commits. The
kill closes its sockets; the broker drops it when its command stream ends (at
the latest ``client_channel_expire_seconds`` without a heartbeat) and tells
the survivor, which rebalances and pulls the victim's queues from those
committed offsets. Every acknowledged message is consumed at least once;
a message is consumed twice only if the victim had consumed it without
committing yet: at or past the committed offset of its queue.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import grpc
import pytest
from faultkit import SendLoad, create_topic, routed_brokers, wait_for

from pocketmq.client import ConsumeResult, Producer, PushConsumer
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

pytestmark = pytest.mark.timeout(120)

SUPPORT = Path(__file__).resolve().parents[1] / "support"
TOPIC, GROUP, QUEUES = "TopicConsumerKill", "kill-group", 8
FAST = dict(
    commit_interval_s=1, rebalance_interval_s=1, route_refresh_interval_s=1, heartbeat_interval_s=1
)


class Victim:
    """The consumer process and what it printed."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.consumed: list[tuple[int, int, str]] = []  # queue id, queue offset, msg id
        self.assigned: set[int] = set()
        self.ready = asyncio.Event()
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            word, _, rest = raw.decode().strip().partition(" ")
            if word == "MSG":
                queue_id, offset, msg_id = rest.split()
                self.consumed.append((int(queue_id), int(offset), msg_id))
            elif word == "ASSIGNED":
                self.assigned = {int(q) for q in rest.split(",") if q}
            elif word == "READY":
                self.ready.set()


async def committed_offsets(broker_addr: str, queues: set[int]) -> dict[int, int]:
    async with grpc.aio.insecure_channel(broker_addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        out = {}
        for queue_id in queues:
            reply = await stub.QueryConsumerOffset(
                pb.QueryConsumerOffsetRequest(consumer_group=GROUP, topic=TOPIC, queue_id=queue_id)
            )
            out[queue_id] = reply.offset if reply.HasField("offset") else 0
    return out


async def test_a_killed_consumer_s_queues_rebalance_to_the_survivor(kit, fault_report):
    namesrv = await kit.nameserver()
    broker = await kit.broker(
        namesrv=namesrv.addr, client_channel_expire_seconds=3, client_scan_interval_seconds=0.5
    )
    await create_topic(broker.addr, TOPIC, QUEUES)
    await wait_for(lambda: routed_brokers(namesrv.addr, TOPIC), timeout_s=20, what="the route")

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SUPPORT / "consumer_proc.py"),
        namesrv.addr,
        GROUP,
        TOPIC,
        stdout=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    victim = Victim(proc)
    survived: list[tuple[int, int, str, float]] = []
    survivor = PushConsumer(group=GROUP, namesrv=namesrv.addr, consume_from="first", **FAST)
    survivor.subscribe(TOPIC, "*")

    @survivor.listener
    async def handle(messages):
        now = time.monotonic()
        survived.extend((m.queue_id, m.queue_offset, m.msg_id, now) for m in messages)
        return ConsumeResult.CONSUME_SUCCESS

    try:
        await asyncio.wait_for(victim.ready.wait(), 30)
        await survivor.start()

        def survivor_queues() -> set[int]:
            return {q.queue_id for q in survivor.assigned_queues() if q.topic == TOPIC}

        def split_evenly() -> bool:
            mine = survivor_queues()
            return (
                len(mine) == QUEUES // 2
                and mine | victim.assigned == set(range(QUEUES))
                and not mine & victim.assigned
            )

        await wait_for(split_evenly, timeout_s=20, what="the queues split between the two")
        victim_queues = set(victim.assigned)
        async with Producer(group="kill-producer", namesrv=namesrv.addr) as producer:
            load = SendLoad(producer, TOPIC, tasks=2, pause_s=0.005)
            async with load:
                await wait_for(
                    lambda: len(victim.consumed) >= 200 and len(survived) >= 200,
                    timeout_s=30,
                    what="both consumers consuming",
                )
                victim.proc.send_signal(signal.SIGSTOP)
                committed = await committed_offsets(broker.addr, victim_queues)
                victim.proc.send_signal(signal.SIGKILL)
                killed_at = time.monotonic()
                await victim.proc.wait()
                await victim.reader
                await wait_for(
                    lambda: len(survivor_queues()) == QUEUES,
                    timeout_s=20,
                    what="the survivor holding every queue",
                )
                taken_over = len(survived)
                await wait_for(
                    lambda: len(survived) >= taken_over + 200,
                    timeout_s=20,
                    what="the survivor consuming on",
                )
            acked = {a.msg_id for a in load.acks}
            await wait_for(
                lambda: acked <= {m for *_r, m, _t in survived} | {m for *_r, m in victim.consumed},
                timeout_s=30,
                what="every acknowledged message consumed",
            )
    finally:
        if victim.proc.returncode is None:
            victim.proc.kill()
            await victim.proc.wait()
        await survivor.shutdown()

    by_victim = {m: (q, o) for q, o, m in victim.consumed}
    again = [(q, o, m) for q, o, m, _t in survived if m in by_victim]
    first_taken = min(
        (t for q, _o, _m, t in survived if q in victim_queues and t > killed_at),
        default=float("nan"),
    )
    window = sum(
        max(o for q2, o, _m in victim.consumed if q2 == q) + 1 - committed[q]
        for q in victim_queues
        if any(q2 == q for q2, _o, _m in victim.consumed)
    )
    consumed = {m for *_r, m, _t in survived} | set(by_victim)
    fault_report.add(
        "consumer kill -9 (rebalance)",
        acknowledged=len(acked),
        lost=len(acked - consumed),
        promised=f"0 ({len(again)} redelivered)",
        recover_s=first_taken - killed_at,
    )
    print(
        f"\nvictim consumed {len(victim.consumed)}, committed {committed}; survivor took over "
        f"{first_taken - killed_at:.2f} s after the kill; {len(again)} redelivered "
        f"(uncommitted window {window})"
    )
    assert all(q in victim_queues and o >= committed[q] for q, o, _m in again), (
        "a message the victim had committed was delivered again"
    )
    assert len(again) <= window
