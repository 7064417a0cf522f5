"""The client half of idempotence: a queue's lane of open tickets, and decoders that keep
the producer's stamp (PMQ_IDEM) to the broker."""

from __future__ import annotations

import asyncio

import pytest

from pocketmq.client import message_codec as codec
from pocketmq.client.errors import OutOfOrderSequenceError
from pocketmq.client.idempotence import ProducerSession, ProducerSessionManager, stamp
from pocketmq.client.idempotent_send import out_of_order_subject
from pocketmq.client.model import Message, MessageQueue
from pocketmq.common.message import encode_record, pack_host

HOST = pack_host(("127.0.0.1", 1))


def test_tickets_number_a_queue_in_order_and_stamp_their_records() -> None:
    session = ProducerSession("broker-a", 7, 2, [("orders", 0, 9)])
    one = session.open("orders", 0)
    batch = session.open("orders", 0, 3)
    other = session.open("orders", 1)
    assert (one.first, batch.first, other.first) == (10, 11, 0)
    assert one.stamp("K") == stamp("K", 7, 2, 10)
    assert batch.stamps(["a", "b", "c"]) == [stamp(k, 7, 2, 11 + i) for i, k in enumerate("abc")]
    with pytest.raises(ValueError, match="3 records"):
        batch.stamps(["a"])
    assert batch.earlier() == [one] and other.earlier() == []
    assert batch.behind(1) and not batch.behind(2) and not one.behind(1) and one.behind(0)


def test_a_withdrawn_ticket_hands_its_numbers_back_only_when_nothing_follows() -> None:
    session = ProducerSession("broker-a", 7, 0)
    first = session.open("orders", 0, 2)
    assert first.withdraw() is True
    again = session.open("orders", 0)
    session.open("orders", 0)
    assert again.first == 0
    assert again.withdraw() is False  # a later ticket holds number 1: a gap
    assert again.closed


async def test_a_ticket_waits_until_the_earlier_tickets_of_its_queue_are_closed() -> None:
    session = ProducerSession("broker-a", 7, 0)
    tickets = [session.open("orders", 0) for _ in range(3)]
    unrelated = session.open("orders", 1)
    waiting = asyncio.create_task(tickets[2].wait_earlier())
    await asyncio.sleep(0)
    tickets[1].close()  # closed out of order
    await asyncio.sleep(0)
    assert not waiting.done()
    tickets[0].close()
    await asyncio.wait_for(waiting, 5)
    await asyncio.wait_for(unrelated.wait_earlier(), 5)  # other queues never hold it back


async def test_at_most_n_of_a_queues_tickets_are_admitted_in_flight() -> None:
    session = ProducerSession("broker-a", 7, 0)
    tickets = [session.open("orders", 0) for _ in range(7)]
    admitted: list[int] = []

    async def send(i: int) -> None:
        await tickets[i].admitted(5)
        admitted.append(i)

    tasks = [asyncio.create_task(send(i)) for i in range(7)]
    for _ in range(3):
        await asyncio.sleep(0)
    assert admitted == [0, 1, 2, 3, 4]
    tickets[0].close()
    await asyncio.wait_for(tasks[5], 5)
    assert admitted == [0, 1, 2, 3, 4, 5]
    tickets[1].close()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert admitted == list(range(7))


def test_a_bare_sequence_is_an_open_entry_of_its_lane_until_closed() -> None:
    session = ProducerSession("broker-a", 7, 0)
    lane = session.lane("orders", 0)
    one = lane.take_one()
    batch = session.open("orders", 0, 2)
    two = lane.take_one()
    later = session.open("orders", 0)
    assert (one, batch.first, two, later.first) == (0, 1, 3, 4)
    assert list(lane.open) == [0, batch, 3, later]
    assert batch.earlier() == [0] and later.earlier() == [0, batch, 3]
    assert later.behind(3) and not later.behind(4) and batch.behind(1)
    lane.close_one(one)
    assert later.earlier() == [batch, 3]
    assert lane.withdraw_one(lane.take_one()) is True  # the last number: handed back
    assert lane.withdraw_one(two) is False and lane.next_seq == 5  # a gap
    assert list(lane.open) == [batch, later]


async def test_a_bare_sequence_made_a_ticket_keeps_its_place_and_its_waiters() -> None:
    session = ProducerSession("broker-a", 7, 0)
    lane = session.lane("orders", 0)
    seq = lane.take_one()
    after = lane.take_one()
    waiting = session.open("orders", 0)
    waited = asyncio.create_task(waiting.wait_earlier())
    await asyncio.sleep(0)
    ticket = lane.ticket_of(seq)
    assert list(lane.open) == [ticket, after, waiting] and ticket.first == seq
    assert ticket.count == 1 and waiting.earlier() == [ticket, after]
    lane.close_one(after)
    await asyncio.sleep(0)
    assert not waited.done()
    ticket.close()
    await asyncio.wait_for(waited, 5)


async def test_tickets_wait_for_and_are_admitted_past_bare_sequences() -> None:
    session = ProducerSession("broker-a", 7, 0)
    lane = session.lane("orders", 0)
    seqs = [lane.take_one() for _ in range(3)]
    ticket = session.open("orders", 0)
    admitted = asyncio.create_task(ticket.admitted(2))
    waited = asyncio.create_task(ticket.wait_earlier())
    await asyncio.sleep(0)
    assert not admitted.done() and not waited.done()
    lane.close_one(seqs[1])  # out of order: still two earlier entries open
    await asyncio.sleep(0)
    assert not admitted.done()
    lane.close_one(seqs[0])
    await asyncio.wait_for(admitted, 5)
    assert not waited.done()
    lane.close_one(seqs[2])
    await asyncio.wait_for(waited, 5)


def test_the_lane_of_a_queue_is_looked_up_once_and_forgotten_when_its_session_retires() -> None:
    sessions = ProducerSessionManager(init=_no_init)
    mq = MessageQueue("orders", "broker-a", 2)
    assert sessions.lane_of(mq) is None  # no session yet
    session = sessions._sessions["broker-a"] = ProducerSession("broker-a", 7, 0)
    lane = sessions.lane_of(mq)
    assert lane is session.lane("orders", 2) and sessions.lanes == {mq: lane}
    sessions.retire(session)
    assert sessions.lanes == {} and sessions.lane_of(mq) is None


async def _no_init(addr: str, identity: str, topics: list[str]) -> tuple[int, int, list]:
    raise AssertionError("not called")


def test_an_out_of_order_refusal_names_the_record_it_is_about() -> None:
    exc = OutOfOrderSequenceError(
        "producer id 4611686018427387905 sent sequence 12 to orders-v2:3, but the next one "
        "there is 10: 2 earlier record(s) are missing (sent out of order, or lost); retry "
        "them first",
        addr="b",
    )
    assert out_of_order_subject(exc) == (4611686018427387905, "orders-v2", 3, 12)
    assert out_of_order_subject(OutOfOrderSequenceError("gap", addr="b")) is None


def stamped_records() -> bytes:
    idem = codec.encode_message(
        Message(topic="orders", body=b"a", tags="t", properties={"color": "red"}),
        queue_id=1,
        uniq_key=stamp("U1", 99, 3, 41),
        born_host=HOST,
        born_timestamp_ms=1,
    )
    plain = codec.encode_message(
        Message(topic="orders", body=b"b"),
        queue_id=1,
        uniq_key="U2",
        born_host=HOST,
        born_timestamp_ms=1,
    )
    epoch = encode_record(
        topic="orders",
        body=b"c",
        queue_id=1,
        properties={"UNIQ_KEY": "U3", "PMQ_IDEM": "99.4.-1", "k": "v"},
    )
    return idem + plain + epoch


@pytest.mark.parametrize(
    "decode",
    [codec.py_decode_messages, codec.decode_messages],
    ids=["python", codec.IMPLEMENTATION],
)
def test_decoded_messages_never_show_the_idempotence_stamp(decode) -> None:
    msgs = decode(stamped_records(), "broker-a")
    assert [m.properties for m in msgs] == [
        {"color": "red", "TAGS": "t", "UNIQ_KEY": "U1"},
        {"UNIQ_KEY": "U2"},
        {"UNIQ_KEY": "U3", "k": "v"},
    ]
    assert [m.msg_id for m in msgs] == ["U1", "U2", "U3"]


def test_the_rocketmq5_endpoint_never_shows_the_stamp_nor_takes_it_from_a_client() -> None:
    from pocketmq.broker.grpc_v2.convert import SYSTEM_PROPERTIES, message_pb, user_properties
    from pocketmq.common.message import decode_record

    stored = decode_record(
        encode_record(
            topic="orders",
            body=b"a",
            queue_id=1,
            properties={"UNIQ_KEY": "U1", "color": "red", "PMQ_IDEM": "7.0.3"},
        )
    )
    assert dict(message_pb(stored).user_properties) == {"color": "red"}
    assert user_properties({"PMQ_IDEM": "7.0.3", "k": "v"}) == {"k": "v"}
    assert "PMQ_IDEM" in SYSTEM_PROPERTIES  # a v2 user property of that name is refused
