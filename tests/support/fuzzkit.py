"""Raw-bytes calls to a nameserver and a broker process, for the fuzz tests (tests/fuzz).

The fuzz tests speak to the servers below the generated stubs: every request
is bytes the test made (``Servers.call``), so that they can send what no stub
would serialize. ``methods()`` lists every RPC of both services from the
protobuf descriptors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aclmode
import grpc
from processkit import ServerProcess

from pocketmq.common.message import encode_record, pack_host
from pocketmq.v1 import broker_pb2, nameserver_pb2

TOPIC, QUEUES = "FuzzTopic", 4
# A server may answer a bad request with any of these; never UNKNOWN or INTERNAL (a bug).
REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}


@dataclass(frozen=True)
class Method:
    server: str  # "broker" or "nameserver"
    path: str  # "/pocketmq.v1.Broker/SendMessage"
    name: str
    input: Any  # the request's message descriptor
    streaming: bool

    def __str__(self) -> str:
        return f"{self.server}.{self.name}"


def methods() -> list[Method]:
    out = []
    for server, module, service in (
        ("broker", broker_pb2, "Broker"),
        ("nameserver", nameserver_pb2, "NameServer"),
    ):
        desc = module.DESCRIPTOR.services_by_name[service]
        out += [
            Method(server, f"/{desc.full_name}/{m.name}", m.name, m.input_type, m.server_streaming)
            for m in desc.methods
        ]
    return out


class Servers:
    def __init__(self, broker: ServerProcess, namesrv: ServerProcess) -> None:
        self.processes = {"broker": broker, "nameserver": namesrv}
        self.channels = {name: grpc.insecure_channel(p.addr) for name, p in self.processes.items()}
        if aclmode.enabled():  # the fuzz input signed as an admin: it must pass the ACL
            signer = aclmode.RawBytesSigner(aclmode.ADMIN, {m.path: m.input for m in methods()})
            self.channels = {
                name: grpc.intercept_channel(channel, signer)
                for name, channel in self.channels.items()
            }

    def call(self, method: Method, payload: bytes) -> tuple[grpc.StatusCode, str]:
        """Send *payload* as the request of *method*; (status, details). Streams: first reply."""
        channel = self.channels[method.server]
        try:
            if method.streaming:
                replies = channel.unary_stream(method.path)(payload, timeout=5)
                try:
                    next(iter(replies), None)
                finally:
                    replies.cancel()
            else:
                channel.unary_unary(method.path)(payload, timeout=10)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.CANCELLED and method.streaming:
                return grpc.StatusCode.OK, ""  # we cancelled it after the first reply
            return exc.code(), exc.details() or ""
        return grpc.StatusCode.OK, ""

    def broker_stat(self, key: str) -> str:
        reply = broker_pb2.GetBrokerRuntimeInfoResponse.FromString(
            self.channels["broker"].unary_unary("/pocketmq.v1.Broker/GetBrokerRuntimeInfo")(
                broker_pb2.GetBrokerRuntimeInfoRequest().SerializeToString(), timeout=10
            )
        )
        return reply.table[key]

    def puts(self) -> int:
        return int(self.broker_stat("put_messages_total"))

    def stored(self) -> dict[str, int]:
        """Topic -> messages stored, for every topic of the broker that has any."""
        channel = self.channels["broker"]
        configs = broker_pb2.GetAllTopicConfigResponse.FromString(
            channel.unary_unary("/pocketmq.v1.Broker/GetAllTopicConfig")(b"", timeout=10)
        ).topic_configs
        status = channel.unary_unary("/pocketmq.v1.Broker/GetTopicStatus")
        out = {}
        for config in configs:
            reply = broker_pb2.GetTopicStatusResponse.FromString(
                status(
                    broker_pb2.GetTopicStatusRequest(topic=config.topic_name).SerializeToString(),
                    timeout=10,
                )
            )
            total = sum(q.max_offset for q in reply.queues)
            if total:
                out[config.topic_name] = total
        return out

    def max_offsets(self) -> list[int]:
        call = self.channels["broker"].unary_unary("/pocketmq.v1.Broker/GetMaxOffset")
        return [
            broker_pb2.GetQueueOffsetResponse.FromString(
                call(
                    broker_pb2.GetQueueOffsetRequest(topic=TOPIC, queue_id=q).SerializeToString(),
                    timeout=10,
                )
            ).offset
            for q in range(QUEUES)
        ]

    def send_reference(self, body: bytes = b"reference") -> None:
        record = encode_record(
            topic=TOPIC, body=body, queue_id=0, store_host=pack_host(("127.0.0.1", 0))
        )
        self.channels["broker"].unary_unary("/pocketmq.v1.Broker/SendMessage")(
            broker_pb2.SendMessageRequest(record=record).SerializeToString(), timeout=10
        )

    def assert_up(self) -> None:
        """Both processes alive and answering a valid request."""
        for name, process in self.processes.items():
            assert process.running, f"the {name} process died; log:\n{process.log_text()[-3000:]}"
            log = process.log_text()
            assert "Traceback" not in log, (
                f"the {name} logged a traceback:\n" + log[log.index("Traceback") - 300 :][:3000]
            )
        topics = Method(
            "nameserver", "/pocketmq.v1.NameServer/GetAllTopicList", "GetAllTopicList", None, False
        )
        assert self.call(topics, b"") == (grpc.StatusCode.OK, "")
        assert self.max_offsets()[0] >= 1  # the broker reads its reference message

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()
