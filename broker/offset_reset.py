"""Offset reset (``resetOffsetByTime``): where a reset moves each queue, and the
fences that keep a consumer's stale commits from undoing it.

:meth:`~pocketmq.broker.admin_processor.AdminProcessor.reset_offset` stores the
group's new offsets of a topic and pushes ``ResetConsumerClientOffsetCommand`` to the
group's online consumers. Until the consumer of a queue pulls from the new
offset, the queue is *fenced* (RocketMQ 5's ``assignResetOffset``): commits of
the old position (``UpdateConsumerOffset``, a pull's ``commit_offset``) are
dropped, and a pull elsewhere is told to move (``OFFSET_ILLEGAL``, next begin
offset = the reset). A fence lapses after :data:`RESET_FENCE_S`, so a consumer
that left does not block the queue's commits for good.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pocketmq.broker.consumer_offsets import ConsumerOffsetManager
from pocketmq.broker.errors import IllegalArgumentError
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.topic_model import BrokerTopicConfig
from pocketmq.common.clock import Clock

__all__ = [
    "RESET_FENCE_S",
    "OffsetReset",
    "ResetFences",
    "ResetPosition",
    "reset_moves",
    "reset_queue_ids",
]

RESET_FENCE_S = 120.0  # a reset's fence lapses after this (the client expiry)


class ResetPosition(enum.Enum):
    EARLIEST = "EARLIEST"
    LATEST = "LATEST"
    TIMESTAMP = "TIMESTAMP"
    OFFSETS = "OFFSETS"  # given offsets per queue, each clamped into its queue


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetReset:
    """One queue moved by :meth:`AdminProcessor.reset_offset`."""

    queue_id: int
    previous_offset: int  # -1 when the group had none
    offset: int


def reset_queue_ids(
    config: BrokerTopicConfig,
    position: ResetPosition,
    timestamp_ms: int,
    offsets: dict[int, int] | None,
) -> list[int]:
    """The queues a reset of the topic of *config* moves; refuses a bad request."""
    topic = config.topic_name
    if position is ResetPosition.TIMESTAMP and timestamp_ms < 0:
        raise IllegalArgumentError(
            f"timestamp_ms is {timestamp_ms}; give milliseconds since the epoch"
        )
    queue_ids: list[int] = list(range(config.read_queue_nums))
    if position is ResetPosition.OFFSETS:
        bad = sorted(q for q in (offsets or {}) if not 0 <= q < config.read_queue_nums)
        if not offsets or bad:
            raise IllegalArgumentError(
                f"RESET_TO_OFFSETS needs offsets of queues 0..{config.read_queue_nums - 1}"
                f" of {topic!r}" + (f"; it has no queue {bad[0]}" if bad else "")
            )
        queue_ids = sorted(offsets)
    return queue_ids


def reset_moves(
    store: MessageStore,
    consumer_offsets: ConsumerOffsetManager,
    group: str,
    topic: str,
    queue_ids: list[int],
    position: ResetPosition,
    timestamp_ms: int = 0,
    offsets: dict[int, int] | None = None,
) -> list[OffsetReset]:
    """Where *position* moves *group* on each of *queue_ids* (nothing stored yet)."""
    moves = []
    for queue_id in queue_ids:
        if position is ResetPosition.OFFSETS:
            offset = min(
                max((offsets or {})[queue_id], store.min_offset(topic, queue_id)),
                store.max_offset(topic, queue_id),
            )
        elif position is ResetPosition.EARLIEST:
            offset = store.min_offset(topic, queue_id)
        elif position is ResetPosition.LATEST:
            offset = store.max_offset(topic, queue_id)
        else:
            offset = store.offset_by_timestamp(topic, queue_id, timestamp_ms)
        previous = consumer_offsets.query(group, topic, queue_id)
        moves.append(
            OffsetReset(
                queue_id=queue_id,
                offset=offset,
                previous_offset=-1 if previous is None else previous,
            )
        )
    return moves


class ResetFences:
    """The queues a reset moved whose consumers have not pulled from there yet."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        # (group, topic, queue id) -> (reset offset, monotonic deadline of the fence)
        self._fences: dict[tuple[str, str, int], tuple[int, float]] = {}

    def fence(self, group: str, topic: str, moves: list[OffsetReset]) -> None:
        """Fence *moves* (none when the group has no online consumer); drops lapsed ones."""
        now = self._clock.monotonic()
        self._fences = {key: f for key, f in self._fences.items() if f[1] >= now}  # lapsed
        deadline = now + RESET_FENCE_S
        for move in moves:
            self._fences[(group, topic, move.queue_id)] = (move.offset, deadline)

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        """The offset a reset moved this queue to while its consumer has not pulled
        from there yet (its commits are then stale), else None."""
        fence = self._fences.get((group, topic, queue_id))
        if fence is None:
            return None
        if fence[1] < self._clock.monotonic():
            del self._fences[(group, topic, queue_id)]
            return None
        return fence[0]

    def lift(self, group: str, topic: str, queue_id: int) -> None:
        """The queue's consumer pulled from the reset offset: its commits count again."""
        self._fences.pop((group, topic, queue_id), None)
