"""The nameserver's errors; the servicer maps each to one gRPC status code::

PocketMQError                        (pocketmq.common.errors)
 └── NameServerError
      ├── MalformedRequestError      INVALID_ARGUMENT     a request field is malformed
      ├── TopicNotFoundError         NOT_FOUND            no live broker serves the topic
      ├── RegistrationConflictError  FAILED_PRECONDITION  contradicts a live registration
      └── ServerBindError            (startup)            the listen address cannot be bound
"""

from __future__ import annotations

from pocketmq.common.errors import PocketMQError

__all__ = [
    "MalformedRequestError",
    "NameServerError",
    "RegistrationConflictError",
    "ServerBindError",
    "TopicNotFoundError",
]


class NameServerError(PocketMQError):
    """Base of the errors the nameserver raises on purpose."""


class MalformedRequestError(NameServerError):
    """Request field *field* is malformed; the message says how to fix it."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class TopicNotFoundError(NameServerError):
    """No live broker serves *topic*."""

    def __init__(self, topic: str) -> None:
        super().__init__(
            f"no route for topic {topic!r}: no live broker has registered it with this "
            f"nameserver (create it on a broker, or check the broker registers here)"
        )
        self.topic = topic


class RegistrationConflictError(NameServerError):
    """A broker's registration contradicts another live broker's."""


class ServerBindError(NameServerError):
    """The gRPC server could not bind its listen address."""
