"""The values users hand to the SDK and get back from it.

Nothing here knows protobuf or gRPC. ``Message`` is what a producer sends,
``MessageExt`` what a consumer receives, ``MessageQueue`` names one queue of
one topic on one broker, ``SendResult`` is one send's outcome, ``SendResults`` a
``send_batch``'s, one per message.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, overload

from pocketmq.common.model import MessageModel, MessageQueue, SendStatus

__all__ = [
    "ClientState",
    "ConsumeFrom",
    "ConsumeResult",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "SendResult",
    "SendResults",
    "SendStatus",
    "dlq_topic",
    "retry_topic",
]

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

# Property names the SDK reads or writes (RocketMQ's MessageConst).
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"  # RocketMQ 5's names, read by the broker
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
#: an idempotent producer's producer id, epoch and sequence (client/idempotence.py)
PROPERTY_IDEMPOTENCE = "PMQ_IDEM"
SYSTEM_PROPERTIES = frozenset(
    {
        PROPERTY_TAGS,
        PROPERTY_KEYS,
        PROPERTY_UNIQ_KEY,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_TIMER_DELAY_MS,
        PROPERTY_IDEMPOTENCE,
    }
)


class ClientState(enum.StrEnum):
    """Where a producer or consumer is in its life: ``created`` -> ``start()`` ->
    ``running`` -> ``shutdown()`` -> ``shut down`` (once each; a client is not
    restarted). A string enum: ``client.state == "running"`` holds too."""

    CREATED = "created"
    STARTING = "starting"  # consumers, while start() joins the group
    RUNNING = "running"
    SHUTTING_DOWN = "shutting down"
    SHUT_DOWN = "shut down"


def retry_topic(group: str) -> str:
    """``%RETRY%{group}``: where a group's failed messages come back."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%{group}``: where messages go after too many attempts."""
    return DLQ_GROUP_TOPIC_PREFIX + group


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """A message to send.

    ``keys`` are indexed by the broker (QueryMessage finds them); ``tags`` is
    the one tag consumers filter on; ``properties`` are user properties;
    ``delay_level`` (1..18) asks for RocketMQ's scheduled delivery;
    ``deliver_at_ms`` (ms since the epoch) or ``delay_ms`` for any delivery time
    (the broker accepts up to 3 days ahead by default). Give at most one of the three.
    """

    topic: str
    body: bytes
    tags: str = ""
    keys: Sequence[str] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    delay_level: int = 0
    flag: int = 0
    deliver_at_ms: int = 0
    delay_ms: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.keys, str):  # a lone key is a common slip; keep it one key
            object.__setattr__(self, "keys", (self.keys,))


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageExt:
    """A stored message as a consumer receives it.

    ``msg_id`` is the producer's unique id (``UNIQ_KEY``), ``offset_msg_id``
    the broker's (store host + commit-log offset). ``topic`` is the topic the
    producer sent to, also for a message redelivered from the group's retry
    topic; ``broker_name``/``queue_id``/``queue_offset`` say where it was read.
    """

    topic: str
    body: bytes
    tags: str
    keys: list[str]
    properties: dict[str, str]
    msg_id: str
    offset_msg_id: str
    broker_name: str
    queue_id: int
    queue_offset: int
    store_timestamp_ms: int
    born_timestamp_ms: int
    reconsume_times: int
    phys_offset: int = 0
    flag: int = 0
    sysflag: int = 0
    store_size_bytes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SendResult:
    status: SendStatus
    msg_id: str  # UNIQ_KEY, made by this client
    offset_msg_id: str  # store host + port + commit-log offset, made by the broker
    queue: MessageQueue
    queue_offset: int


class SendResults(Sequence[SendResult]):
    """The outcome of one ``send_batch``: a :class:`SendResult` per message, in order.

    A read-only sequence, made from the broker's answer when read (a batch's results
    are often not looked at one by one): ``results[i]``, ``len``, iteration, slices
    (a list), and ``==`` with any sequence of the same results; it pickles as a list.
    :attr:`status` is the status every result of the batch shares (one flush covers the
    request).
    """

    __slots__ = ("_ids", "_phys", "_prefix", "_queue_offsets", "queue", "status")

    def __init__(
        self,
        status: SendStatus,
        queue: MessageQueue,
        msg_ids: Sequence[str],
        offset_msg_id_prefix: str,
        queue_offsets: Sequence[int],
        phys_offsets: Sequence[int],
    ) -> None:
        if not len(msg_ids) == len(queue_offsets) == len(phys_offsets):
            raise ValueError(
                f"{len(msg_ids)} ids, {len(queue_offsets)} queue offsets and "
                f"{len(phys_offsets)} commit-log offsets: one each per message"
            )
        self.status = status
        self.queue = queue  # every message's
        self._ids = msg_ids
        self._prefix = offset_msg_id_prefix  # + 16 hex digits of the commit-log offset
        self._queue_offsets = queue_offsets
        self._phys = phys_offsets

    def __len__(self) -> int:
        return len(self._ids)

    def _make(self, i: int) -> SendResult:
        return _new_send_result(
            self.status,
            self._ids[i],
            f"{self._prefix}{self._phys[i]:016X}",
            self.queue,
            self._queue_offsets[i],
        )

    @overload
    def __getitem__(self, index: int) -> SendResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[SendResult]: ...
    def __getitem__(self, index: int | slice) -> SendResult | list[SendResult]:
        if isinstance(index, slice):
            return [self._make(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"result {index} of a batch of {n}")
        return self._make(index)

    def __iter__(self) -> Iterator[SendResult]:
        make = self._make
        return (make(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # equal to a list, which is unhashable

    def __repr__(self) -> str:
        return f"SendResults({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (and copied) as the list of its results: the columns may be views
        # of the broker's answer, which do not pickle
        return (list, (list(self),))


def _positional_builder(cls: type, names: tuple[str, ...]) -> Callable[..., Any]:
    """A fast positional constructor for a frozen, slotted dataclass (SDK-internal).

    A frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, about three times the cost of writing the slots
    directly; the SDK builds one :class:`SendResult` per message sent and one
    :class:`MessageExt` per message received, so its hot paths use this. The
    object is the same as the dataclass constructor makes (equal, hashable,
    frozen afterwards); every field must be given, in *names* order.
    """
    slots = cls.__dict__
    setters = [slots[name].__set__ for name in names]
    assert {f.name for f in fields(cls)} == set(names), f"{cls.__name__}: {names}"
    namespace: dict[str, Any] = {
        "_new": object.__new__,
        "_cls": cls,
        **{f"_set_{n}": fn for n, fn in zip(names, setters, strict=True)},
    }
    args = ", ".join(names)
    body = "".join(f"    _set_{n}(obj, {n})\n" for n in names)
    exec(f"def build({args}):\n    obj = _new(_cls)\n{body}    return obj\n", namespace)
    return namespace["build"]


_new_send_result = _positional_builder(
    SendResult, ("status", "msg_id", "offset_msg_id", "queue", "queue_offset")
)
_new_message_ext = _positional_builder(
    MessageExt,
    (
        "topic",
        "body",
        "tags",
        "keys",
        "properties",
        "msg_id",
        "offset_msg_id",
        "broker_name",
        "queue_id",
        "queue_offset",
        "store_timestamp_ms",
        "born_timestamp_ms",
        "reconsume_times",
        "phys_offset",
        "flag",
        "sysflag",
        "store_size_bytes",
    ),
)


class ConsumeResult(enum.Enum):
    """What a listener returns.

    Concurrent listeners: ``CONSUME_SUCCESS`` or ``RECONSUME_LATER`` (the
    message goes to the group's retry topic). Orderly listeners: ``SUCCESS``
    (same as ``CONSUME_SUCCESS``) or ``SUSPEND_CURRENT_QUEUE_A_MOMENT`` (the
    same messages are offered again after a pause, the queue waits).
    """

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class ConsumeFrom(enum.StrEnum):
    """Where a group with no stored offset starts (RocketMQ's ConsumeFromWhere)."""

    LAST = "last"
    FIRST = "first"
    TIMESTAMP = "timestamp"
