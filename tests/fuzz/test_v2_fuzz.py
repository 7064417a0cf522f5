"""RocketMQ 5's MessagingService (the broker's v2 port) fed hostile requests.

Like ``test_rpc_fuzz.py`` for the v1 services, for every v2 RPC (read from the
service descriptor): arbitrary bytes, wire fields of any type, and the
method's own message with random values of the right types; and a
``Telemetry`` stream fed random commands. Every call must get an answer: a
gRPC refusal (never UNKNOWN or INTERNAL), or OK with a v2 ``Status`` whose code
is set and is not INTERNAL_SERVER_ERROR (a bug). After each test the broker
process is alive, has logged no traceback, and a normal send and receive
works. Bounded: a few examples per method (``POCKETMQ_FUZZ_SCALE`` multiplies).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aclmode
import grpc
import pytest
from fuzzkit import REFUSALS
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor as F
from google.protobuf.duration_pb2 import Duration
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from processkit import ProcessKit, ServerProcess, free_port

from pocketmq.broker.grpc_v2.auth import sign
from pocketmq.rmqv2 import definition_pb2 as d
from pocketmq.rmqv2 import service_pb2 as s
from pocketmq.rmqv2 import service_pb2_grpc

TOPIC, GROUP = "FuzzV2Topic", "FuzzV2Group"
SCALE = int(os.environ.get("POCKETMQ_FUZZ_SCALE", "1"))
HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
FUZZ = settings(max_examples=8 * SCALE, deadline=None, database=None, suppress_health_check=HEALTH)
SERVICE = s.DESCRIPTOR.services_by_name["MessagingService"]
UNARY = [m for m in SERVICE.methods if not m.client_streaming]
META = (("x-mq-client-id", "fuzz-host@1@0@1"),)


def meta() -> tuple[tuple[str, str], ...]:
    """The calls' headers: signed as the ACL mode's admin when that mode is on, so that
    the fuzzed bytes reach the handlers behind the signature check."""
    if not aclmode.enabled():
        return META
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return (
        *META,
        ("x-mq-date-time", date),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential={aclmode.ADMIN.access_key}, "
            f"SignedHeaders=x-mq-date-time, "
            f"Signature={sign(aclmode.ADMIN.secret_key, date)}",
        ),
    )


Code = grpc.StatusCode


@dataclass
class V2Broker:
    process: ServerProcess
    address: str
    channel: grpc.Channel

    def call(self, method: Any, payload: bytes) -> tuple[Code, bytes | None]:
        """*payload* as *method*'s request: (gRPC code, the first reply's bytes)."""
        path = f"/{SERVICE.full_name}/{method.name}"
        try:
            if method.server_streaming:
                replies = self.channel.unary_stream(path)(payload, metadata=meta(), timeout=5)
                try:
                    return Code.OK, next(iter(replies), None)
                finally:
                    replies.cancel()
            return Code.OK, self.channel.unary_unary(path)(payload, metadata=meta(), timeout=10)
        except grpc.RpcError as exc:
            return exc.code(), None

    def assert_healthy(self) -> None:
        assert self.process.running, f"the broker died; log:\n{self.process.log_text()[-3000:]}"
        log = self.process.log_text()
        assert "Traceback" not in log, (
            "the broker logged a traceback:\n" + log[log.index("Traceback") - 300 :][:3000]
        )
        stub = service_pb2_grpc.MessagingServiceStub(self.channel)
        body = f"health {time.monotonic_ns()}".encode()
        sent = stub.SendMessage(
            s.SendMessageRequest(
                messages=[
                    d.Message(
                        topic=d.Resource(name=TOPIC),
                        body=body,
                        system_properties=d.SystemProperties(
                            message_id=f"H{time.monotonic_ns()}", body_encoding=d.IDENTITY
                        ),
                    )
                ]
            ),
            metadata=meta(),
            timeout=10,
        )
        assert sent.status.code == d.OK, sent.status
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:  # a long poll: the broker answers on arrival
            request = s.ReceiveMessageRequest(
                group=d.Resource(name=GROUP),
                batch_size=32,
                message_queue=d.MessageQueue(topic=d.Resource(name=TOPIC), id=-1),
                filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
                invisible_duration=Duration(seconds=60),
                long_polling_timeout=Duration(seconds=2),
            )
            for frame in stub.ReceiveMessage(request, metadata=meta(), timeout=10):
                if frame.HasField("message") and frame.message.body == body:
                    return
        raise AssertionError("the message sent after the fuzzing was not received")


@pytest.fixture(scope="module")
def v2(tmp_path_factory) -> Iterator[V2Broker]:
    loop = asyncio.new_event_loop()
    kit = ProcessKit(tmp_path_factory.mktemp("fuzz-v2"))
    try:
        namesrv = loop.run_until_complete(kit.nameserver())
        port = free_port()
        broker = loop.run_until_complete(
            kit.broker(
                namesrv=namesrv.addr,
                grpc_v2_port=port,
                max_message_size_bytes=65536,
                message_delay_level="1s 1s 1s",
            )
        )
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=20)
            yield V2Broker(broker, f"127.0.0.1:{port}", channel)
    finally:
        loop.run_until_complete(kit.close())
        loop.close()


@pytest.fixture
def healthy(v2) -> Iterator[V2Broker]:
    yield v2
    v2.assert_healthy()


def check(method: Any, answer: tuple[Code, bytes | None]) -> None:
    code, raw = answer
    assert code is Code.OK or code in REFUSALS, (method.name, code)
    if raw is None:
        return
    reply = message_factory.GetMessageClass(method.output_type).FromString(raw)
    # every reply (a stream's first frame) carries the outcome
    assert reply.HasField("status"), (method.name, reply)
    assert reply.status.code not in (d.CODE_UNSPECIFIED, d.INTERNAL_SERVER_ERROR), (
        method.name,
        reply.status,
    )


# -- random values of the right types -------------------------------------------------------
INTS = {
    F.TYPE_INT32: 31,
    F.TYPE_SINT32: 31,
    F.TYPE_SFIXED32: 31,
    F.TYPE_INT64: 63,
    F.TYPE_SINT64: 63,
    F.TYPE_SFIXED64: 63,
    F.TYPE_ENUM: 31,
}
UINTS = {F.TYPE_UINT32: 32, F.TYPE_FIXED32: 32, F.TYPE_UINT64: 64, F.TYPE_FIXED64: 64}
NAMES = st.one_of(
    st.sampled_from(
        [
            TOPIC,
            GROUP,
            "",
            " ",
            "%DLQ%x",
            "x" * 300,
            "SCHEDULE_TOPIC_XXXX",
            "RMQ_SYS_TRANS_HALF_TOPIC",
            "0 0 1 broker-a",
            "a\x00b",
        ]
    ),
    st.text(max_size=30),
)
# a long poll or a long invisible time would only make the test wait or hide the health
# check's message
CAPPED = {"long_polling_timeout", "invisible_duration"}


def value(field: Any, depth: int) -> st.SearchStrategy[Any]:
    if field.type == F.TYPE_MESSAGE:
        if field.message_type.GetOptions().map_entry:
            return st.just({})
        if field.name in CAPPED:
            return st.builds(Duration, seconds=st.integers(-5, 1), nanos=st.integers(0, 10))
        single: st.SearchStrategy[Any] = typed(field.message_type, depth + 1)
    elif field.type == F.TYPE_ENUM:  # mostly defined values, some not
        defined = [v.number for v in field.enum_type.values]
        single = st.one_of(st.sampled_from(defined), st.integers(-(2**31), 2**31 - 1))
    elif field.type in INTS:
        bits = INTS[field.type]
        single = st.one_of(
            st.sampled_from([0, 1, -1, 2**bits - 1, -(2**bits)]),
            st.integers(-(2**bits), 2**bits - 1),
        )
    elif field.type in UINTS:
        single = st.integers(0, 2 ** UINTS[field.type] - 1)
    elif field.type == F.TYPE_STRING:
        single = NAMES
    elif field.type == F.TYPE_BYTES:
        single = st.binary(max_size=200)
    elif field.type == F.TYPE_BOOL:
        single = st.booleans()
    else:
        single = st.floats(allow_nan=True)
    return st.lists(single, max_size=3) if field.is_repeated else single


def typed(desc: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    cls = message_factory.GetMessageClass(desc)
    if depth > 3:
        return st.just(cls())
    fields = {f.name: value(f, depth) for f in desc.fields}
    if desc.name in ("ReceiveMessageRequest", "PullMessageRequest"):
        fields["long_polling_timeout"] = st.just(Duration(seconds=0))
    return st.fixed_dictionaries({}, optional=fields).map(lambda kw: cls(**kw))


def _wire_field(number: int, wire_type: int, body: bytes) -> bytes:
    return bytes([number << 3 | wire_type]) + body


WIRE = st.lists(
    st.builds(_wire_field, st.integers(1, 15), st.integers(0, 7), st.binary(max_size=12)),
    max_size=6,
).map(b"".join)


# -- the tests ------------------------------------------------------------------------------
@pytest.mark.parametrize("method", UNARY, ids=[m.name for m in UNARY])
@FUZZ
@given(payload=st.binary(max_size=200))
def test_arbitrary_bytes_get_a_status(healthy, method, payload):
    check(method, healthy.call(method, payload))


@pytest.mark.parametrize("method", UNARY, ids=[m.name for m in UNARY])
@FUZZ
@given(payload=WIRE)
def test_wire_fields_of_any_type_get_a_status(healthy, method, payload):
    check(method, healthy.call(method, payload))


@pytest.mark.parametrize("method", UNARY, ids=[m.name for m in UNARY])
@settings(max_examples=15 * SCALE, deadline=None, database=None, suppress_health_check=HEALTH)
@given(data=st.data())
def test_random_well_typed_requests_get_a_status(healthy, method, data):
    request = data.draw(typed(method.input_type), label="request")
    check(method, healthy.call(method, request.SerializeToString()))


@settings(max_examples=10 * SCALE, deadline=None, database=None, suppress_health_check=HEALTH)
@given(commands=st.lists(typed(s.TelemetryCommand.DESCRIPTOR), min_size=1, max_size=6))
def test_a_telemetry_stream_of_random_commands_gets_statuses(healthy, commands):
    stub = service_pb2_grpc.MessagingServiceStub(healthy.channel)
    replies = stub.Telemetry(iter(commands), metadata=meta(), timeout=10)
    try:
        answered = list(replies)  # the broker ends the stream when the client does
    except grpc.RpcError as exc:
        assert exc.code() in REFUSALS, exc
        return
    for reply in answered:
        assert reply.HasField("status"), reply
        assert reply.status.code not in (d.CODE_UNSPECIFIED, d.INTERNAL_SERVER_ERROR), reply
    settings_sent = sum(c.HasField("settings") for c in commands)
    assert len(answered) == settings_sent, (answered, commands)
