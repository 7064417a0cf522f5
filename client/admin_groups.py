"""The consumer-group half of :class:`~pocketmq.client.admin.AdminClient`: offset reset
plans, group deletion, members, and answers from the brokers that are alive.

A reset is planned before it is applied, as Kafka's ``kafka-consumer-groups
--reset-offsets`` does: :meth:`GroupAdmin.plan_reset` reads every queue's
range and the group's offset and computes the target of each queue (earliest,
latest, a time, an absolute offset or a shift, for every queue or one);
:meth:`GroupAdmin.apply_reset` stores exactly the planned offsets
(``RESET_TO_OFFSETS``), which also tells the group's online consumers. A group
no broker knows is refused unless asked for (a typo must not create one).

Questions asked of several brokers (:meth:`GroupAdmin.each_alive`) answer with
what the live ones said and a :class:`BrokerFailure` per broker that did not,
instead of failing as a whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pocketmq.client.admin_model import (
    BrokerFailure,
    ConsumerConnection,
    GroupDeleted,
    OffsetMove,
    QueueReset,
    ResetPlan,
    ResetResult,
)
from pocketmq.client.errors import ClientError, NotFoundError
from pocketmq.client.model import MessageQueue
from pocketmq.client.remoting import BrokerClient
from pocketmq.v1 import broker_pb2 as bpb

__all__ = ["GroupAdmin", "ResetTarget"]

T = TypeVar("T")
_CONSUME_TYPES = {bpb.CONSUME_PASSIVELY: "push", bpb.CONSUME_ACTIVELY: "pull"}
_MESSAGE_MODELS = {bpb.CLUSTERING: "clustering", bpb.BROADCASTING: "broadcasting"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetTarget:
    """Where a reset moves each queue: exactly one of the fields is set.

    ``to``: "earliest", "latest" or a timestamp in ms; ``to_offset``: an absolute
    queue offset; ``shift_by``: added to the group's current offset (negative
    goes back). Every target is clamped into the queue's [min, max]."""

    to: str | int | None = None
    to_offset: int | None = None
    shift_by: int | None = None

    def __post_init__(self) -> None:
        given = [v for v in (self.to, self.to_offset, self.shift_by) if v is not None]
        if len(given) != 1:
            raise ValueError("give one reset target: --to, --to-offset or --shift-by")
        if isinstance(self.to, str) and self.to not in ("earliest", "latest"):
            raise ValueError(
                f"reset target {self.to!r}: give 'earliest', 'latest' or a timestamp in ms"
            )
        if isinstance(self.to, int) and self.to < 0:
            raise ValueError(f"timestamp {self.to} is negative; give ms since the epoch")
        if self.to_offset is not None and self.to_offset < 0:
            raise ValueError(f"--to-offset {self.to_offset}: offsets are >= 0")


class GroupAdmin:
    """Mixed into AdminClient, which provides ``broker``, ``cluster_info``,
    ``_route_masters`` and ``timeout_s``."""

    timeout_s: float
    broker: Callable[[str], BrokerClient]
    cluster_info: Callable[[], Awaitable[Any]]
    _route_masters: Callable[[str], Awaitable[dict[str, str]]]

    async def each_alive(
        self,
        masters: dict[str, str],
        call: Callable[[str, BrokerClient], Awaitable[T]],
    ) -> tuple[dict[str, T], list[BrokerFailure]]:
        """``call(name, client)`` on every broker at once: the answers by broker name,
        and one failure per broker that did not answer (unreachable or refused)."""
        names = sorted(masters)

        async def one(name: str) -> T | BrokerFailure:
            try:
                return await call(name, self.broker(masters[name]))
            except ClientError as exc:
                return BrokerFailure(broker_name=name, addr=masters[name], error=str(exc))

        results = await asyncio.gather(*(one(n) for n in names))
        answers = {
            n: r for n, r in zip(names, results, strict=True) if not isinstance(r, BrokerFailure)
        }
        return answers, [r for r in results if isinstance(r, BrokerFailure)]

    # -- groups ----------------------------------------------------------------------
    async def group_known(self, group: str, masters: dict[str, str]) -> bool:
        """Whether a broker of *masters* has offsets or online members of *group*."""
        answers, _ = await self.each_alive(
            masters, lambda name, b: b.consumer_groups(broker_name=name, timeout_s=self.timeout_s)
        )
        return any(g.group == group for groups in answers.values() for g in groups)

    async def delete_group(self, group: str) -> tuple[list[GroupDeleted], list[BrokerFailure]]:
        """Forget *group* on every master (its offsets and retry topic); refused by a
        broker where members are online. NotFoundError when no broker knew it."""
        masters = (await self.cluster_info()).masters()

        async def one(name: str, broker: BrokerClient) -> GroupDeleted | None:
            try:
                resp = await broker._call(
                    "DeleteConsumerGroup",
                    bpb.DeleteConsumerGroupRequest(consumer_group=group),
                    self.timeout_s,
                )
            except NotFoundError:
                return None
            return GroupDeleted(
                broker_name=name,
                offset_topics=list(resp.offset_topics),
                retry_topic_deleted=resp.retry_topic_deleted,
            )

        answers, failures = await self.each_alive(masters, one)
        deleted = [d for d in answers.values() if d is not None]
        if not deleted and not failures:
            raise NotFoundError(
                f"no broker knows consumer group {group!r} (brokers "
                f"{', '.join(sorted(masters)) or 'none'})"
            )
        return deleted, failures

    async def consumer_connections(
        self,
        group: str,
    ) -> tuple[list[ConsumerConnection], list[BrokerFailure]]:
        """The online members of *group* on every master (``consumerConnection``)."""
        masters = (await self.cluster_info()).masters()

        async def one(name: str, broker: BrokerClient) -> list[ConsumerConnection]:
            resp = await broker._call(
                "GetConsumerConnections",
                bpb.GetConsumerConnectionsRequest(consumer_group=group),
                self.timeout_s,
            )
            return [
                ConsumerConnection(
                    broker_name=name,
                    client_id=c.client_id,
                    consume_type=_CONSUME_TYPES.get(c.consume_type, ""),
                    message_model=_MESSAGE_MODELS.get(c.message_model, ""),
                    subscriptions=list(c.subscriptions),
                    silent_ms=c.silent_ms,
                )
                for c in resp.connections
            ]

        answers, failures = await self.each_alive(masters, one)
        rows = [c for name in sorted(answers) for c in answers[name]]
        return rows, failures

    # -- reset ---------------------------------------------------------------------------
    async def plan_reset(
        self,
        group: str,
        topic: str,
        target: ResetTarget,
        *,
        queue_id: int | None = None,
        broker_name: str | None = None,
    ) -> ResetPlan:
        """Where each queue of *topic* (or the one *queue_id*) would move; reads only."""
        masters = await self._route_masters(topic)
        if broker_name is not None:
            if broker_name not in masters:
                raise NotFoundError(
                    f"broker {broker_name!r} does not serve {topic!r}; it is "
                    f"on {', '.join(sorted(masters))}"
                )
            masters = {broker_name: masters[broker_name]}

        async def one(name: str, broker: BrokerClient) -> list[OffsetMove]:
            queues = await broker.topic_status(topic, broker_name=name, timeout_s=self.timeout_s)
            moves = []
            for q in queues:
                if queue_id is not None and q.queue_id != queue_id:
                    continue
                mq = MessageQueue(topic, name, q.queue_id)
                stored = await broker.query_consumer_offset(group, mq, timeout_s=self.timeout_s)
                current = -1 if stored is None else stored
                wanted = await self._target(broker, mq, target, current, q.min_offset, q.max_offset)
                moves.append(
                    OffsetMove(
                        broker_name=name,
                        queue_id=q.queue_id,
                        current_offset=current,
                        new_offset=min(max(wanted, q.min_offset), q.max_offset),
                        min_offset=q.min_offset,
                        max_offset=q.max_offset,
                    )
                )
            return moves

        rows = await asyncio.gather(*(one(n, self.broker(masters[n])) for n in sorted(masters)))
        moves = [m for per_broker in rows for m in per_broker]
        if queue_id is not None and not moves:
            raise NotFoundError(f"topic {topic!r} has no queue {queue_id}")
        return ResetPlan(
            group=group,
            topic=topic,
            moves=moves,
            group_known=await self.group_known(group, masters),
        )

    async def _target(
        self,
        broker: BrokerClient,
        mq: MessageQueue,
        target: ResetTarget,
        current: int,
        low: int,
        high: int,
    ) -> int:
        if target.to_offset is not None:
            return target.to_offset
        if target.shift_by is not None:
            return (current if current >= 0 else low) + target.shift_by
        if target.to == "earliest":
            return low
        if target.to == "latest":
            return high
        assert isinstance(target.to, int)
        return await broker.offset_by_timestamp(mq, target.to, timeout_s=self.timeout_s)

    async def apply_reset(self, plan: ResetPlan) -> ResetResult:
        """Store the planned offsets (``RESET_TO_OFFSETS``); online consumers are told."""
        masters = await self._route_masters(plan.topic)
        by_broker: dict[str, dict[int, int]] = {}
        for move in plan.moves:
            by_broker.setdefault(move.broker_name, {})[move.queue_id] = move.new_offset

        async def one(name: str) -> tuple[list[QueueReset], list[str]]:
            resp = await self.broker(masters[name])._call(
                "ResetConsumerOffset",
                bpb.ResetConsumerOffsetRequest(
                    consumer_group=plan.group,
                    topic=plan.topic,
                    position=bpb.RESET_TO_OFFSETS,
                    offsets=by_broker[name],
                ),
                self.timeout_s,
            )
            return (
                [
                    QueueReset(
                        broker_name=name,
                        queue_id=q.queue_id,
                        previous_offset=q.previous_offset,
                        offset=q.offset,
                    )
                    for q in resp.queues
                ],
                list(resp.notified_client_ids),
            )

        rows = await asyncio.gather(*(one(n) for n in sorted(by_broker)))
        return ResetResult(
            topic=plan.topic,
            group=plan.group,
            queues=[q for moved, _ in rows for q in moved],
            notified_client_ids=sorted({c for _, told in rows for c in told}),
        )
