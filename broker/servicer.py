"""BrokerServicer: the ``pocketmq.v1.Broker`` gRPC service as thin adapters.

The only broker modules that see the broker's protobuf are this one and the RPC
families it is made of, one module each::

    v1_messages.MessageRpcs   send, producer ids, end transaction, pull, query, send-back
    v1_consume.ConsumeRpcs    consumer / queue offsets, queue locks, heartbeats, client stream
    v1_admin.AdminRpcs        topics, progress, runtime info and config, groups, promotion
    v1_rpc                    the RPC wrapper, request checks, protobuf conversions
    v1_send_stream            SendStream: SendBatch requests over one bidirectional stream

Each RPC turns its request into plain values, calls one service method and turns
the result into a reply. A refusal (:class:`~pocketmq.broker.errors.BrokerError`)
becomes the gRPC status from :mod:`.grpc_status`, with its message as the details
and its reason as trailing metadata; anything else is logged with its traceback
and answered ``INTERNAL`` so that a bug fails one request, not the server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc

from pocketmq.broker.flow_control import FlowControlInterceptor
from pocketmq.broker.idempotence import IdempotenceProcessor
from pocketmq.broker.services import BrokerServices
from pocketmq.broker.v1_admin import AdminRpcs
from pocketmq.broker.v1_consume import ConsumeRpcs
from pocketmq.broker.v1_messages import MessageRpcs
from pocketmq.broker.v1_rpc import Promote
from pocketmq.broker.v1_rpc import _abort as _abort  # tests import it from here
from pocketmq.broker.v1_rpc import not_master_detail as not_master_detail
from pocketmq.broker.v1_send_stream import SendStreamLimits, SendStreamService
from pocketmq.security import grpc_guard
from pocketmq.v1 import broker_pb2_grpc

__all__ = ["BrokerServicer", "MalformedRequestInterceptor", "add_to_server"]

# Requests whose bytes are not this service's messages: INVALID_ARGUMENT, not UNKNOWN.
MalformedRequestInterceptor = grpc_guard.MalformedRequestInterceptor


class BrokerServicer(MessageRpcs, ConsumeRpcs, AdminRpcs, broker_pb2_grpc.BrokerServicer):
    """``pocketmq.v1.Broker``: every RPC of the three families over one broker's services."""

    def __init__(
        self,
        services: BrokerServices,
        *,
        default_topic_queue_nums: int,
        figures: Sequence[Callable[[], dict[str, str]]] = (),
        max_auto_retry_topics: int = 10_000,
        promote: Promote | None = None,
        update_config: Callable[[dict[str, str]], dict[str, str]] | None = None,
        send_stream_limits: SendStreamLimits | None = None,
        flow_control: FlowControlInterceptor | None = None,
    ) -> None:
        self._idempotence: IdempotenceProcessor | None = services.idempotence
        self._update_config = update_config  # UpdateBrokerConfig (broker/runtime_config.py)
        self._promote = promote  # the broker's HaController.promote (manual failover)
        self._send = services.send
        self._transactions = services.transactions
        self._send_back = services.send_back
        self._locks = services.locks
        self._pull = services.pull
        self._offsets = services.offsets
        self._clients = services.clients
        self._admin = services.admin
        self._default_queue_nums = default_topic_queue_nums
        self._figures = figures  # more GetBrokerRuntimeInfo rows (flow control, ...)
        self._max_auto_retry_topics = max_auto_retry_topics
        self.send_streams = SendStreamService(
            services.send, send_stream_limits or SendStreamLimits(), flow_control=flow_control
        )
        self._figures = (*figures, self.send_streams.figures)

    async def SendStream(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        """SendBatch requests over one stream, answered by id (broker/v1_send_stream.py)."""
        await self.send_streams.serve(context)


class _RawSendStream:
    """The server as ``add_BrokerServicer_to_server`` sees it: it registers the
    generated handlers, SendStream's with its envelopes left as bytes (read by hand
    in broker/v1_send_stream.py) and its answers serialized already."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # registered by add_registered_method_handlers, from the same table

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        stream = handlers["SendStream"]
        handlers = {
            **handlers,
            "SendStream": grpc.stream_stream_rpc_method_handler(
                stream.stream_stream, request_deserializer=None, response_serializer=None
            ),
        }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, handlers),)
        )
        self._server.add_registered_method_handlers(service, handlers)


def add_to_server(servicer: BrokerServicer, server: grpc.aio.Server) -> None:
    broker_pb2_grpc.add_BrokerServicer_to_server(servicer, _RawSendStream(server))
