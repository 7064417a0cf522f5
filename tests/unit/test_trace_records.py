"""Trace records (common/trace.py): JSON lines packed into bounded messages, and the
consume-side rules (client/trace.py) that need no server."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.client.config import ConsumerConfig
from pocketmq.client.model import ConsumeResult, MessageExt
from pocketmq.client.trace import TraceDispatcher, dead_letter_rule, trace_listener
from pocketmq.client.trace_view import message_life
from pocketmq.common.trace import (
    TraceRecord,
    TraceType,
    decode_trace_body,
    pack_trace_lines,
    pack_trace_messages,
)

ids = st.text(alphabet="0123456789ABCDEF", min_size=1, max_size=32)
records = st.builds(
    TraceRecord,
    type=st.sampled_from([TraceType.PUB, TraceType.SUB_AFTER, TraceType.STORE]),
    ts=st.integers(0, 2**45),
    msg_id=ids,
    offset_msg_id=ids | st.just(""),
    topic=st.text(min_size=1, max_size=20),
    keys=st.lists(st.text(max_size=10), max_size=3),
    cost_ms=st.floats(0, 1e6, allow_nan=False),
    status=st.text(max_size=40),
    retry_times=st.integers(0, 16),
)


@given(st.lists(records, max_size=60), st.integers(200, 5000), st.integers(40, 400))
def test_packed_records_come_back_in_order_within_the_bounds(batch, max_body, max_keys):
    packed = list(pack_trace_messages(batch, max_body_bytes=max_body, max_keys_chars=max_keys))
    decoded = [r for body, _keys in packed for r in decode_trace_body(body)]
    assert decoded == batch
    for body, keys in packed:
        lines = decode_trace_body(body)
        assert len(body) <= max_body or len(lines) == 1  # one record may exceed alone
        assert sum(len(k) + 1 for k in keys) <= max_keys or len(lines) == 1
        assert len(keys) == len(set(keys))
        # every id and key of each record is in KEYS, so the index finds it
        assert all(set(r.index_keys()) <= set(keys) for r in lines)


def test_empty_fields_are_left_out_and_unknown_ones_ignored():
    record = TraceRecord(type=TraceType.PUB, ts=5, msg_id="A1", status="SEND_OK")
    assert record.to_json() == {"type": "Pub", "ts": 5, "msg_id": "A1", "status": "SEND_OK"}
    newer = json.dumps({"type": "Pub", "ts": 5, "msg_id": "A1", "zone": "eu-1"}).encode()
    assert decode_trace_body(newer + b"\nnot json\n[1]\n") == [
        TraceRecord(type=TraceType.PUB, ts=5, msg_id="A1")
    ]


def test_keys_with_spaces_stay_in_the_record_but_not_in_the_index_keys():
    record = TraceRecord(type=TraceType.PUB, ts=1, msg_id="ID", keys=["a b", "c"])
    assert record.index_keys() == ["ID", "c"]


def test_dead_letter_rule_follows_the_push_consumers_max_reconsume_times():
    concurrent = dead_letter_rule(ConsumerConfig(max_reconsume_times=2))
    assert [concurrent(_msg(times)) for times in (0, 1, 2)] == [False, False, True]
    default = dead_letter_rule(ConsumerConfig())
    assert not default(_msg(15)) and default(_msg(16))  # -1 = 16 redeliveries
    orderly = dead_letter_rule(ConsumerConfig(orderly=True, max_reconsume_times=3))
    assert not orderly(_msg(2)) and orderly(_msg(3))
    assert not dead_letter_rule(ConsumerConfig(orderly=True))(_msg(1000))
    assert not dead_letter_rule(ConsumerConfig(message_model="broadcasting"))(_msg(99))


def _msg(reconsume_times: int, msg_id: str = "M1") -> MessageExt:
    return MessageExt(
        topic="t",
        body=b"x",
        tags="",
        keys=[],
        properties={},
        msg_id=msg_id,
        offset_msg_id="O" + msg_id,
        broker_name="b",
        queue_id=0,
        queue_offset=3,
        store_timestamp_ms=1,
        born_timestamp_ms=1,
        reconsume_times=reconsume_times,
    )


def _dispatcher(capacity: int = 100) -> TraceDispatcher:
    config = ConsumerConfig(enable_trace=True, trace_queue_capacity=capacity)
    return TraceDispatcher(group="cg", client_id="c1", config=config, namesrv=["h:1"])


def _drain(d: TraceDispatcher) -> list[TraceRecord]:
    """The records of what *d* holds, through the same packing as a real write."""
    lines = []
    while d.queued:
        builder, args = d._queue.popleft()
        lines.extend(builder(*args))
    return [r for body, _keys in pack_trace_lines(lines) for r in decode_trace_body(body)]


def test_a_traced_listener_records_before_and_after_with_status_and_dlq():
    async def run() -> list[TraceRecord]:
        d = _dispatcher()
        answers = iter([ConsumeResult.CONSUME_SUCCESS, ConsumeResult.RECONSUME_LATER])
        traced = trace_listener(lambda batch: next(answers), d, lambda m: m.reconsume_times >= 1)
        traced([_msg(0, "A")])
        traced([_msg(1, "B")])

        async def boom(batch):
            raise RuntimeError("listener bug")

        traced_async = trace_listener(boom, d, lambda m: False)
        with pytest.raises(RuntimeError, match="listener bug"):
            await traced_async([_msg(0, "C")])
        return _drain(d)

    out = asyncio.run(run())
    after = [(r.msg_id, r.status) for r in out if r.type == TraceType.SUB_AFTER]
    assert after == [("A", "success"), ("B", "dlq"), ("C", "failed")]
    befores = [r for r in out if r.type == TraceType.SUB_BEFORE]
    assert [(r.msg_id, r.retry_times, r.queue_offset) for r in befores] == [
        ("A", 0, 3),
        ("B", 1, 3),
        ("C", 0, 3),
    ]
    assert all(r.group == "cg" and r.client_id == "c1" and r.request_id for r in out)


def test_a_full_queue_drops_entries_and_counts_them():
    d = _dispatcher(capacity=2)
    for _ in range(5):
        d.polled([_msg(0)])
    assert (d.queued, d.dropped) == (2, 3)


def test_message_life_pairs_each_attempt_and_names_the_dead_letter_queue():
    d = _dispatcher()
    asyncio.run(
        _call(
            trace_listener(
                lambda b: ConsumeResult.RECONSUME_LATER, d, lambda m: m.reconsume_times >= 1
            ),
            [_msg(0)],
            [_msg(1)],
        )
    )
    life = message_life("M1", _drain(d))
    assert [(a["attempt"], a["status"]) for a in life["consumed"]] == [
        (0, "retry_later"),
        (1, "dlq"),
    ]
    assert [x["dlq_topic"] for x in life["dead_lettered"]] == ["%DLQ%cg"]


async def _call(listener, *batches):
    for batch in batches:
        listener(batch)


@given(
    st.text(min_size=1, max_size=30),
    st.text(max_size=10),
    st.lists(st.text(max_size=8), max_size=3),
    st.floats(0, 1e5, allow_nan=False),
    st.booleans(),
)
def test_the_fast_pub_line_decodes_to_the_record_json_dumps_would_write(
    topic, tags, keys, cost_ms, failed
):
    from pocketmq.client.model import Message, MessageQueue, SendResult, SendStatus
    from pocketmq.client.trace_send import _published
    from pocketmq.common.trace import encode_trace_line

    d = _dispatcher()
    msg = Message(topic=topic, body=b"abc", tags=tags, keys=keys)
    result = SendResult(
        status=SendStatus.SEND_OK,
        msg_id="C0A80001" + "0" * 24,
        offset_msg_id="7F00000100002A0B000000000000ABCD",
        queue=MessageQueue(topic, "broker-\u00e9", 3),
        queue_offset=42,
    )
    [(line, line_keys)] = _published(
        d,
        (msg,),
        None if failed else (result,),
        1700,
        cost_ms,
        RuntimeError('no "route"\n') if failed else None,
    )
    expected = TraceRecord(
        type=TraceType.PUB,
        ts=1700,
        topic=topic,
        tags=tags,
        keys=list(keys),
        group="cg",
        client_id="c1",
        client_host=d.client_host,
        born_time=1700,
        cost_ms=float(f"{cost_ms:.3f}"),
        body_bytes=3,
        msg_type="Normal",
    )
    if failed:
        expected.status = 'FAILED: RuntimeError: no "route"\n'
    else:
        expected.msg_id, expected.offset_msg_id = result.msg_id, result.offset_msg_id
        expected.broker, expected.queue_id, expected.queue_offset = "broker-\u00e9", 3, 42
        expected.store_host, expected.status = "127.0.0.1:10763", "SEND_OK"
    assert TraceRecord.from_json(json.loads(line)) == expected
    assert line_keys == encode_trace_line(expected)[1]


def test_messages_of_the_trace_topic_itself_are_never_traced():
    from pocketmq.client.model import Message
    from pocketmq.client.trace_send import _published

    d = _dispatcher()
    assert _published(d, (Message(topic=d.topic, body=b"x"),), None, 1, 0.1, None) == []
    trace_listener(lambda batch: ConsumeResult.CONSUME_SUCCESS, d, lambda m: False)(
        [dataclasses.replace(_msg(0), topic=d.topic), _msg(0, "kept")]
    )
    assert {r.msg_id for r in _drain(d)} == {"kept"}
