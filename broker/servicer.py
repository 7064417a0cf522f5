"""BrokerServicer: the ``pocketmq.v1.Broker`` gRPC service as thin adapters.

The only broker modules that see the broker's protobuf are this one and the RPC
families it is made of, one module each::

    v1_messages.MessageRpcs   send, producer ids, end transaction, pull, query, send-back
    v1_consume.ConsumeRpcs    consumer / queue offsets, queue locks, heartbeats, client stream
    v1_admin.AdminRpcs        topics, progress, runtime info and config, groups, promotion
    v1_rpc                    the RPC wrapper, request checks, protobuf conversions

Each RPC turns its request into plain values, calls one service method and turns
the result into a reply. A refusal (:class:`~pocketmq.broker.errors.BrokerError`)
becomes the gRPC status from :mod:`.grpc_status`, with its message as the details
and its reason as trailing metadata; anything else is logged with its traceback
and answered ``INTERNAL`` so that a bug fails one request, not the server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grpc

from pocketmq.broker.idempotence import IdempotenceProcessor
from pocketmq.broker.services import BrokerServices
from pocketmq.broker.v1_admin import AdminRpcs
from pocketmq.broker.v1_consume import ConsumeRpcs
from pocketmq.broker.v1_messages import MessageRpcs
from pocketmq.broker.v1_rpc import Promote
from pocketmq.broker.v1_rpc import _abort as _abort  # tests import it from here
from pocketmq.broker.v1_rpc import not_master_detail as not_master_detail
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


def add_to_server(servicer: BrokerServicer, server: grpc.aio.Server) -> None:
    broker_pb2_grpc.add_BrokerServicer_to_server(servicer, server)
