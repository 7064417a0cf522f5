"""What the v2 MessagingServicer's handlers share: the wrapper that authenticates
the caller and turns refusals into a reply's ``Status``, name checks, the
protobuf shapes of routes and queues, invisible-time bounds, and the limits of
receives (:mod:`.servicer` holds the handlers).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import grpc

from pocketmq.broker.errors import BrokerError
from pocketmq.broker.grpc_v2.auth import Caller
from pocketmq.broker.grpc_v2.convert import (
    V2Error,
    accepted_types,
    duration_ms,
    status,
    status_of,
)
from pocketmq.broker.grpc_v2.route import BrokerRoute
from pocketmq.broker.transaction_ops import Resolution
from pocketmq.common.validation import check_group, check_topic
from pocketmq.rmqv2 import definition_pb2 as d

__all__ = [
    "CLIENT_ID_HEADER",
    "DEADLINE_MARGIN_S",
    "DEFAULT_INVISIBLE_MS",
    "DEFAULT_POLL_MS",
    "MAX_INVISIBLE_MS",
    "MAX_POLL_MS",
    "MIN_INVISIBLE_MS",
]

log = logging.getLogger(__name__)


class _Servicer(Protocol):
    def _caller(self, context: grpc.aio.ServicerContext, method: str) -> Caller: ...


CLIENT_ID_HEADER = "x-mq-client-id"
DEFAULT_INVISIBLE_MS = 60_000  # the proxy's defaultInvisibleTimeMills
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # the proxy's maxInvisibleTimeMills
DEFAULT_POLL_MS = 20_000
MAX_POLL_MS = 30_000  # grpcClientConsumerMaxLongPollingTimeoutMillis
DEADLINE_MARGIN_S = 1.0  # answer this long before the client gives up

Resp = TypeVar("Resp")

_RESOLUTIONS = {d.COMMIT: Resolution.COMMIT, d.ROLLBACK: Resolution.ROLLBACK}
_PERMISSIONS = {
    (True, True): d.READ_WRITE,
    (True, False): d.READ,
    (False, True): d.WRITE,
    (False, False): d.NONE,
}


def _unary(
    response: Callable[..., Resp],
    rpc: str = "",
) -> Callable[..., Callable[..., Awaitable[Resp]]]:
    """Authenticate the caller of *rpc* (default: the method's name) and pass it on;
    answer a refusal or a bug with ``response(status=...)`` instead of raising."""

    def decorate(method: Callable[..., Awaitable[Resp]]) -> Callable[..., Awaitable[Resp]]:
        name = rpc or method.__name__

        @functools.wraps(method)
        async def wrapper(self: _Servicer, request: Any, context: grpc.aio.ServicerContext) -> Resp:
            try:
                return await method(self, request, context, self._caller(context, name))
            except (V2Error, BrokerError) as exc:
                return response(status=status_of(exc))
            except Exception as exc:
                log.exception("v2 %s failed on an unexpected error", name)
                return response(status=status_of(exc))

        return wrapper

    return decorate


def _check(topic: str | None = None, group: str | None = None) -> None:
    if topic is not None and (problem := check_topic(topic)):
        raise V2Error(d.ILLEGAL_TOPIC, problem)
    if group is not None and (problem := check_group(group)):
        raise V2Error(d.ILLEGAL_CONSUMER_GROUP, problem)


def _endpoints(host: str, port: int) -> d.Endpoints:
    try:
        scheme = d.IPv6 if ipaddress.ip_address(host).version == 6 else d.IPv4
    except ValueError:
        scheme = d.DOMAIN_NAME
    return d.Endpoints(scheme=scheme, addresses=[d.Address(host=host, port=port)])


def _queue(topic: str, queue_id: int, permission: int, route: BrokerRoute) -> d.MessageQueue:
    return d.MessageQueue(
        topic=d.Resource(name=topic),
        id=queue_id,
        permission=permission,
        broker=d.Broker(name=route.broker_name, id=0, endpoints=_endpoints(route.host, route.port)),
        accept_message_types=accepted_types(route.order),
    )


def _invisible_ms(duration: Any, *, floor_ms: int) -> int:
    ms = duration_ms(duration)
    if not floor_ms <= ms <= MAX_INVISIBLE_MS:
        raise V2Error(
            d.ILLEGAL_INVISIBLE_TIME,
            f"invisible duration is {ms} ms; give {floor_ms} .. {MAX_INVISIBLE_MS} ms",
        )
    return ms


def _overall(statuses: list[d.Status]) -> d.Status:
    codes = {st.code for st in statuses}
    if len(codes) == 1:
        return statuses[0]
    return status(
        d.MULTIPLE_RESULTS,
        "; ".join(f"{st.code}: {st.message}" for st in statuses if st.code != d.OK),
    )


def _not_served(rpc: str) -> V2Error:
    return V2Error(
        d.NOT_IMPLEMENTED,
        f"PocketMQ does not serve {rpc}; RocketMQ 5 clients "
        "consume with ReceiveMessage (SimpleConsumer, "
        "PushConsumer)",
    )
