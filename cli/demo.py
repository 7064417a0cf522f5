"""The demo `pocketmq standalone --demo` runs once the servers are up.

It is what a newcomer sees after `./dev.sh start`: a producer sends a few
tagged, keyed messages through the nameserver's route, a push consumer in its
own group receives them, and the commands to try next are printed. It uses
only the public client API, as a user's program would.
"""

from __future__ import annotations

import asyncio
import time

from pocketmq.client import ConsumeResult, Message, MessageExt, Producer, PushConsumer

__all__ = ["run_demo"]

TOPIC = "demo-orders"
COUNT = 10


async def run_demo(
    namesrv: str, *, broker_address: str, data_dir: str, timeout_s: float = 30.0
) -> bool:
    """Send and receive COUNT messages; print what happened. True on success."""
    print(
        f"\nPocketMQ standalone is up: nameserver {namesrv}, broker {broker_address}, "
        f"data in {data_dir}"
    )
    received: dict[str, MessageExt] = {}
    done = asyncio.Event()
    consumer = PushConsumer(
        group=f"demo-consumer-{int(time.time())}", namesrv=namesrv, consume_from="first"
    )
    consumer.subscribe(TOPIC, "paid || refunded")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            received.setdefault(msg.msg_id, msg)
        if len(received) >= COUNT:
            done.set()
        return ConsumeResult.CONSUME_SUCCESS

    started = time.perf_counter()
    sent_ids = await _send_orders(namesrv, started)
    ok = await _consume_until(consumer, done, timeout_s)
    mine = [received[i] for i in sent_ids if i in received]
    _print_received(mine, started)
    _print_next_steps(data_dir)
    return ok and len(mine) == COUNT


async def _send_orders(namesrv: str, started: float) -> list[str]:
    """Send COUNT tagged, keyed orders to TOPIC; print how long it took. Their msg ids."""
    sent_ids = []
    async with Producer(group="demo-producer", namesrv=namesrv) as producer:
        for i in range(COUNT):
            result = await producer.send(
                Message(
                    topic=TOPIC,
                    body=f"order {i}: 3 items, 42.00 EUR".encode(),
                    tags="paid" if i % 2 == 0 else "refunded",
                    keys=[f"order-{i}"],
                )
            )
            sent_ids.append(result.msg_id)
        print(
            f"demo: sent {COUNT} messages to {TOPIC!r} "
            f"({time.perf_counter() - started:.3f} s), e.g. msg_id {sent_ids[0]}"
        )
    return sent_ids


async def _consume_until(consumer: PushConsumer, done: asyncio.Event, timeout_s: float) -> bool:
    """Run *consumer* until *done* is set (True) or *timeout_s* passes (False)."""
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), timeout_s)
        ok = True
    except TimeoutError:
        ok = False
    finally:
        await consumer.shutdown()
    return ok


def _print_received(mine: list[MessageExt], started: float) -> None:
    print(
        f"demo: received {len(mine)}/{COUNT} of them through a push consumer "
        f"({time.perf_counter() - started:.3f} s in all)"
    )
    for msg in mine[:3]:
        print(
            f"      {msg.topic}:{msg.queue_id}@{msg.queue_offset} tags={msg.tags} "
            f"keys={list(msg.keys)} body={msg.body.decode()!r}"
        )


def _print_next_steps(data_dir: str) -> None:
    print(
        "\nTry, in another terminal:\n"
        f"  .venv/bin/pocketmq send {TOPIC} 'hello' --tag paid --key order-99\n"
        f"  .venv/bin/pocketmq consume {TOPIC} --group try-it --from first -n 5\n"
        f"  .venv/bin/pocketmq store verify {data_dir}   (after Ctrl-C)\n"
        "Ctrl-C stops the servers gracefully.\n",
        flush=True,
    )
