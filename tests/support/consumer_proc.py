"""A push consumer in a process of its own, for fault tests that kill it.

    python consumer_proc.py NAMESRV GROUP TOPIC

Consumes TOPIC in group GROUP from the first offset, committing every second,
and prints ``MSG <queue id> <queue offset> <msg id>`` for each message it
consumed (stdout flushed each time), so the parent knows exactly what this
process consumed when it sends SIGKILL; ``ASSIGNED <queue ids>`` whenever its
queues change (polled every 50 ms). Prints ``READY`` once started. Runs until
it is killed.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # aclmode, run as a script

import aclmode

from pocketmq.client import ConsumeResult, PushConsumer


async def main(namesrv: str, group: str, topic: str) -> None:
    aclmode.install(setattr)  # POCKETMQ_TEST_ACL=1: sign as the test user
    consumer = PushConsumer(
        group=group,
        namesrv=namesrv,
        consume_from="first",
        commit_interval_s=1,
        rebalance_interval_s=1,
        route_refresh_interval_s=1,
        heartbeat_interval_s=1,
    )
    consumer.subscribe(topic, "*")

    @consumer.listener
    async def handle(messages):
        sys.stdout.write(
            "".join(f"MSG {m.queue_id} {m.queue_offset} {m.msg_id}\n" for m in messages)
        )
        sys.stdout.flush()
        return ConsumeResult.CONSUME_SUCCESS

    await consumer.start()
    print("READY", flush=True)
    assigned: list[int] = []
    while True:
        now = sorted(q.queue_id for q in consumer.assigned_queues() if q.topic == topic)
        if now != assigned:
            assigned = now
            print("ASSIGNED", ",".join(map(str, now)), flush=True)
        await asyncio.sleep(0.05)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
