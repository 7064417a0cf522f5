"""Messages sent with a delivery time through the SDK arrive not before it (issue 5)."""

from __future__ import annotations

import time

import pytest

from pocketmq.client import InvalidMessageError, Message, MessageExt, Producer, PullConsumer


async def test_deliver_at_and_delay_ms_arrive_not_before_their_time(
    nameserver, start_broker, eventually
):
    await start_broker(namesrv_addrs=nameserver.address)
    received: dict[str, tuple[MessageExt, float]] = {}
    async with Producer(group="timed-producer", namesrv=nameserver.address) as producer:
        await producer.send(Message(topic="Timed", body=b"warm-up"))
        now_ms = time.time() * 1000
        at = await producer.send(
            Message(topic="Timed", body=b"at", deliver_at_ms=int(now_ms) + 1500)
        )
        after = await producer.send(Message(topic="Timed", body=b"after", delay_ms=1000))
        due = {at.msg_id: now_ms + 1500, after.msg_id: now_ms + 1000}
    consumer = PullConsumer(
        group="timed-consumer", namesrv=nameserver.address, consume_from="first"
    )
    consumer.subscribe("Timed", "*")
    async with consumer:

        async def both_arrived() -> bool:
            for msg in await consumer.poll(timeout_s=0.2):
                received.setdefault(msg.msg_id, (msg, time.time() * 1000))
            return all(msg_id in received for msg_id in due)

        await eventually(both_arrived, timeout_s=10, what="both timed messages")
    for msg_id, due_ms in due.items():
        _msg, arrived_ms = received[msg_id]
        assert arrived_ms >= due_ms - 5, f"{msg_id} arrived {due_ms - arrived_ms:.0f} ms early"
        assert arrived_ms <= due_ms + 1500, f"{msg_id} arrived {arrived_ms - due_ms:.0f} ms late"


def test_a_message_asks_for_at_most_one_kind_of_delay():
    from pocketmq.client.message_codec import check_message

    with pytest.raises(InvalidMessageError, match="at most one"):
        check_message(Message(topic="T", body=b"x", delay_level=2, delay_ms=10))
    with pytest.raises(InvalidMessageError, match=">= 0"):
        check_message(Message(topic="T", body=b"x", deliver_at_ms=-1))
