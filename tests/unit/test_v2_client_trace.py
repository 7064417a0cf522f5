"""The broker's traces of RocketMQ 5 clients (broker/grpc_v2/client_trace.py) on a real
store: SubBefore/SubAfter paired per delivery, the cost of a settled delivery, the
bounded memory of delivery times, bounded records of refused sends, and the trace
topic never traced."""

from __future__ import annotations

import dataclasses

from storekit import open_store, record, small_config

from pocketmq.broker.grpc_v2.client_trace import (
    MAX_FIELD_CHARS,
    MAX_KEYS,
    Settling,
    TracedClient,
    V2ClientTrace,
)
from pocketmq.broker.grpc_v2.pop_model import Delivery
from pocketmq.broker.store.results import GetStatus
from pocketmq.broker.trace import BrokerTraceService
from pocketmq.common.clock import ManualClock
from pocketmq.common.message import StoredMessage, decode_record
from pocketmq.common.trace import DEFAULT_TRACE_TOPIC, TraceRecord, TraceType, decode_trace_body
from pocketmq.rmqv2 import definition_pb2 as d

CLIENT = TracedClient("host@1@0@abc", "10.0.0.7")


def message(offset: int, topic: str = "orders") -> StoredMessage:
    stored = decode_record(record(topic, b"m%d" % offset, tags="A", uniq=f"ID{offset:04d}"))
    return dataclasses.replace(stored, queue_offset=offset, phys_offset=100 * offset)


def delivered(msg: StoredMessage) -> Delivery:
    return Delivery(message=msg, receipt_handle="h", attempt=1, invisible_ms=1000)


def written(store) -> list[TraceRecord]:  # type: ignore[no-untyped-def]
    result = store.get_messages(DEFAULT_TRACE_TOPIC, 0, 0, max_count=100)
    assert result.status is GetStatus.FOUND
    return [r for raw in result.records for r in decode_trace_body(decode_record(raw).body)]


def test_deliveries_pair_with_their_settling_and_old_delivery_times_are_forgotten(tmp_path):
    store = open_store(small_config(tmp_path))
    clock = ManualClock()
    try:
        trace = BrokerTraceService(
            store,
            topic=DEFAULT_TRACE_TOPIC,
            broker_name="broker-a",
            store_host=("127.0.0.1", 10911),
            clock=clock,
        )
        v2 = V2ClientTrace(trace, clock=clock, max_remembered=2)
        msgs = [message(n) for n in range(3)]
        v2.received([delivered(m) for m in msgs], "g", CLIENT)
        v2.received([delivered(message(9, DEFAULT_TRACE_TOPIC))], "g", CLIENT)  # not traced
        clock.advance(0.25)
        v2.settled(Settling("g", msgs[0], 1), "success", CLIENT)  # its time was forgotten
        v2.settled(Settling("g", msgs[2], 1), "retry_later", CLIENT)
        v2.settled(None, "success", CLIENT)  # an unknown handle: nothing
        trace.run_once()
        records = written(store)
    finally:
        store.shutdown()

    befores = [r for r in records if r.type == TraceType.SUB_BEFORE]
    afters = {r.msg_id: r for r in records if r.type == TraceType.SUB_AFTER}
    assert [r.msg_id for r in befores] == ["ID0000", "ID0001", "ID0002"]
    assert set(afters) == {"ID0000", "ID0002"}
    assert (afters["ID0000"].cost_ms, afters["ID0000"].status) == (0.0, "success")
    assert (afters["ID0002"].cost_ms, afters["ID0002"].status) == (250.0, "retry_later")
    assert afters["ID0002"].request_id == befores[2].request_id != befores[0].request_id
    assert all(r.source == "proxy" and r.client_host == "10.0.0.7" for r in records)
    assert all(r.group == "g" and r.tags == "A" and r.retry_times == 0 for r in records)
    assert befores[1].offset_msg_id == trace.offset_msg_id(100)


def test_a_refused_send_is_traced_bounded_and_a_refused_topic_name_not_at_all(tmp_path):
    store = open_store(small_config(tmp_path))
    try:
        trace = BrokerTraceService(
            store, topic=DEFAULT_TRACE_TOPIC, broker_name="broker-a", store_host=("127.0.0.1", 1)
        )
        v2 = V2ClientTrace(trace)
        huge = "t" * 10_000
        sp = d.SystemProperties(message_id="ID1", tag=huge, keys=[huge] * 100)
        refused = d.Message(topic=d.Resource(name="orders"), body=b"x", system_properties=sp)
        v2.sent(refused, CLIENT, started=0.0, outcome=None, failure="ILLEGAL_MESSAGE_TAG: " + huge)
        for bad in ("bad topic!", "x" * 1000, DEFAULT_TRACE_TOPIC):
            unnamed = d.Message(topic=d.Resource(name=bad), body=b"x", system_properties=sp)
            v2.sent(unnamed, CLIENT, started=0.0, outcome=None, failure="ILLEGAL_TOPIC")
        trace.run_once()
        [pub] = written(store)
    finally:
        store.shutdown()
    assert (pub.type, pub.topic, pub.msg_id, pub.source) == (
        TraceType.PUB,
        "orders",
        "ID1",
        "proxy",
    )
    assert pub.status.startswith("FAILED: ILLEGAL_MESSAGE_TAG: ") and len(pub.status) == 500
    assert len(pub.tags) == MAX_FIELD_CHARS and len(pub.keys) == MAX_KEYS
    assert all(len(k) == MAX_FIELD_CHARS for k in pub.keys)
