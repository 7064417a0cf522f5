"""The client's exception tree::

    PocketMQError                      (pocketmq.common.errors)
     └── ClientError                   retriable = False unless noted
          ├── ClientStateError         the client is not started, or already shut down
          ├── InvalidMessageError      refused before sending: topic, body size, batch rules
          ├── RouteNotFoundError       no nameserver knows a live broker for the topic  (retriable)
          ├── SendTimeoutError         the attempts ran out of their time budget       (retriable)
          ├── PromotionRefusedError    AdminClient.promote: another live replica's log goes
          │                            further than the target's (client/admin.py)
          └── RemoteError              a nameserver or broker answered a call with an error;
               │                       carries ``addr``, ``code`` (gRPC status name) and
               │                       ``reason`` (the broker's RocketMQ-style code name)
               ├── UnavailableError    UNAVAILABLE, DEADLINE_EXCEEDED: unreachable      (retriable)
               ├── BusyError           RESOURCE_EXHAUSTED: a full queue or disk          (retriable)
               ├── NotFoundError       NOT_FOUND: the server does not have that topic    (retriable)
               ├── PermissionDeniedError  PERMISSION_DENIED: a topic without the needed perm
               ├── InvalidRequestError INVALID_ARGUMENT, ALREADY_EXISTS: the request is wrong
               │    ├── ProducerFencedError  PRODUCER_FENCED: a newer instance of this
               │    │                   idempotent producer's identity took over
               │    └── OutOfOrderSequenceError  OUT_OF_ORDER_SEQUENCE: an earlier record of
               │                        the queue is not stored yet                    (retriable)
               ├── NotMasterError      FAILED_PRECONDITION / NOT_MASTER: a write reached a
               │                       replica or a demoted master; names the master it
               │                       knows and its epoch (the producer redirects)     (retriable)
               ├── UnsupportedError    UNIMPLEMENTED: the server lacks that RPC
               └── ServerError         INTERNAL and anything else                        (retriable)

``retriable`` says whether the same request may succeed if tried again,
possibly on another broker; the producer's retry loop reads nothing else.
Every message names the server and what to change, with the numbers involved.
"""

from __future__ import annotations

from pocketmq.common.errors import PocketMQError

__all__ = [
    "BusyError",
    "ClientError",
    "ClientStateError",
    "InvalidMessageError",
    "InvalidRequestError",
    "NotFoundError",
    "NotMasterError",
    "OutOfOrderSequenceError",
    "PermissionDeniedError",
    "ProducerFencedError",
    "RemoteError",
    "RouteNotFoundError",
    "SendTimeoutError",
    "ServerError",
    "UnavailableError",
    "UnsupportedError",
]


class ClientError(PocketMQError):
    """Base of every error the client SDK raises."""

    retriable = False


class ClientStateError(ClientError):
    """The client is not started, or was already shut down."""


class InvalidMessageError(ClientError):
    """A message the broker would refuse; checked before anything is sent."""


class RouteNotFoundError(ClientError):
    """No nameserver knows a live broker serving the topic."""

    retriable = True

    def __init__(self, topic: str, detail: str) -> None:
        super().__init__(f"no route for topic {topic!r}: {detail}")
        self.topic = topic


class SendTimeoutError(ClientError):
    """Every attempt of a send failed or the time budget ran out."""

    retriable = True


class RemoteError(ClientError):
    """A server answered with a gRPC error status."""

    def __init__(self, message: str, *, addr: str = "", code: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.addr = addr
        self.code = code
        self.reason = reason


class UnavailableError(RemoteError):
    """UNAVAILABLE, DEADLINE_EXCEEDED: the server is unreachable, or refuses for now."""

    retriable = True

    @property
    def unreachable(self) -> bool:
        """The server did not answer (connection refused or reset, no reply in time).

        A broker that answers UNAVAILABLE on purpose (a replica refusing a write, a
        store gone read-only) names its reason; that broker is alive.
        """
        return not self.reason


class BusyError(RemoteError):
    """RESOURCE_EXHAUSTED: a broker at one of its limits (a full queue, a full disk)."""

    retriable = True

    @property
    def flow_control(self) -> bool:
        """SYSTEM_BUSY: a healthy broker at one of its limits; back off, keep using it.

        Other RESOURCE_EXHAUSTED answers (DISK_FULL) mean the broker cannot
        store now: avoid it and try another.
        """
        return self.reason == "SYSTEM_BUSY"


class NotFoundError(RemoteError):
    """NOT_FOUND: the server does not have that topic (the route may be stale)."""

    # RocketMQ retries TOPIC_NOT_EXIST on another broker: the route may be stale.
    retriable = True


class PermissionDeniedError(RemoteError):
    """PERMISSION_DENIED: the topic lacks the needed permission, or the ACL refuses."""


class InvalidRequestError(RemoteError):
    """INVALID_ARGUMENT, ALREADY_EXISTS: the request is wrong; ``reason`` says how."""


class ProducerFencedError(InvalidRequestError):
    """PRODUCER_FENCED: the broker knows a newer epoch of this producer id; this
    instance may not write any more (another one with the same identity started)."""


class OutOfOrderSequenceError(InvalidRequestError):
    """OUT_OF_ORDER_SEQUENCE: an earlier record of the queue has not reached the broker;
    once it has (it is in flight, or retried), this one is taken."""

    retriable = True


class NotMasterError(RemoteError):
    """The broker is not the master of *broker_name* any more (or never was): the
    master it knows is *master_addr* in *master_epoch* ("" / 0: none known)."""

    retriable = True

    def __init__(
        self,
        message: str,
        *,
        addr: str = "",
        code: str = "",
        reason: str = "NOT_MASTER",
        broker_name: str = "",
        master_addr: str = "",
        master_epoch: int = 0,
    ) -> None:
        super().__init__(message, addr=addr, code=code, reason=reason)
        self.broker_name = broker_name
        self.master_addr = master_addr
        self.master_epoch = master_epoch


class UnsupportedError(RemoteError):
    """UNIMPLEMENTED: the server lacks that RPC."""


class ServerError(RemoteError):
    """INTERNAL and anything else: the server failed."""

    retriable = True
