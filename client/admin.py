"""AdminClient: what an operator asks a cluster (RocketMQ's ``DefaultMQAdminExt``).

::

    async with AdminClient(namesrv="127.0.0.1:9876") as admin:
        info = await admin.cluster_info()
        for addr in info.masters().values():
            await admin.create_topic(addr, TopicConfig(topic="orders", read_queue_nums=4,
                                                       write_queue_nums=4))
        lag = sum(q.lag for q in await admin.consume_progress("billing"))
        await admin.reset_offset("billing", "orders", to="earliest")

The nameserver answers the cluster questions (live brokers, topic list,
routes); everything else goes to the brokers themselves, to the master of
every broker that serves the topic, and comes back as the rows of
:mod:`.admin_model`, each naming its broker.

The client is one class in four modules by role: this one (cluster, topics,
consume progress, broker settings), :mod:`.admin_groups` (offset reset plans,
group members and deletion), :mod:`.admin_messages` (message look-ups by key,
unique id, offset message id or queue offset) and :mod:`.admin_replicas`
(manual failover: ``promote`` after comparing the replicas).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from types import SimpleNamespace
from typing import Literal, TypeVar

from pocketmq.client.admin_groups import GroupAdmin, ResetTarget
from pocketmq.client.admin_messages import TOOLS_CONSUMER_GROUP, MessageAdmin
from pocketmq.client.admin_model import (
    BrokerFailure,
    ClusterInfo,
    ConsumerGroup,
    QueueProgress,
    QueueReset,
    QueueStatus,
    ResetResult,
    TopicBatchOutcome,
    TopicConfig,
)
from pocketmq.client.admin_replicas import MASTER_ROLES, PromotionRefusedError, ReplicaAdmin
from pocketmq.client.config import parse_namesrv, transport
from pocketmq.client.controller_admin import ControllerView
from pocketmq.client.errors import ClientStateError, NotFoundError
from pocketmq.client.remoting import BrokerClient, NameserverClient, Remoting
from pocketmq.client.route import QueueData, TopicRoute
from pocketmq.v1 import broker_pb2 as bpb

__all__ = [
    "MASTER_ROLES",
    "TOOLS_CONSUMER_GROUP",
    "AdminClient",
    "PromotionRefusedError",
    "ResetTarget",
]

log = logging.getLogger(__name__)

DEFAULT_TOPIC_BATCH = 5_000  # topics per CreateTopics/DeleteTopics call (~250 KB)

T = TypeVar("T")


class AdminClient(GroupAdmin, MessageAdmin, ReplicaAdmin):
    """Admin calls to one cluster (RocketMQ's DefaultMQAdminExt), asyncio.

    Construct it with the nameservers (and ACL keys or TLS files when the cluster
    needs them); ``start()`` first, or ``async with``::

        async with AdminClient(namesrv="127.0.0.1:9876", timeout_s=5) as admin:
            info = await admin.cluster_info()

    Main methods: :meth:`cluster_info`, :meth:`topic_list`, :meth:`topic_route`,
    :meth:`create_topic` / :meth:`update_topic` / :meth:`delete_topic` (and their
    batch forms), :meth:`topic_status`, :meth:`consumer_groups`,
    :meth:`consume_progress`, :meth:`reset_offset`, :meth:`broker_config` /
    :meth:`update_broker_config`, :meth:`broker_runtime_info`; message look-ups
    (:class:`~.admin_messages.MessageAdmin`: :meth:`query_message`,
    :meth:`view_message`, :meth:`messages_by_id`, :meth:`message_at`); group
    offsets, members and deletion (:class:`~.admin_groups.GroupAdmin`); manual
    failover (:class:`~.admin_replicas.ReplicaAdmin`: :meth:`promote`);
    :meth:`broker` for a broker's typed calls.
    """

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        timeout_s: float = 5.0,
        access_key: str = "",
        secret_key: str = "",
        tls_ca_file: str = "",
        tls_cert_file: str = "",
        tls_key_file: str = "",
    ) -> None:
        self.namesrv = parse_namesrv(namesrv)
        self._transport = transport(
            SimpleNamespace(
                access_key=access_key,
                secret_key=secret_key,
                tls_ca_file=tls_ca_file,
                tls_cert_file=tls_cert_file,
                tls_key_file=tls_key_file,
            )
        )
        self.timeout_s = timeout_s
        self._remoting: Remoting | None = None
        self._namesrv_client: NameserverClient | None = None

    async def start(self) -> None:
        if self._remoting is not None:
            raise ClientStateError("the admin client is already started")
        self._remoting = Remoting(self._transport)
        self._namesrv_client = self._remoting.nameserver(self.namesrv, timeout_s=self.timeout_s)

    async def shutdown(self) -> None:
        remoting, self._remoting, self._namesrv_client = self._remoting, None, None
        if remoting is not None:
            await remoting.close()

    async def __aenter__(self) -> AdminClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def broker(self, addr: str) -> BrokerClient:
        """Typed calls to the broker at *addr*."""
        if self._remoting is None:
            raise ClientStateError("the admin client is not started; call start() first")
        return self._remoting.broker(addr)

    async def elect_master(
        self, broker_name: str, *, broker_id: int = 0, controllers: Sequence[str] | None = None
    ) -> ControllerView:
        """Force an election for *broker_name* (controller mode; ``broker elect``):
        *broker_id* 0 lets the controller pick the best in-sync replica.
        *controllers* default to the nameservers (the controller runs in them)."""
        from pocketmq.client.controller_admin import elect_master

        return await elect_master(
            self._started(),
            broker_name,
            broker_id=broker_id,
            controllers=list(controllers or self.namesrv),
            timeout_s=self.timeout_s,
        )

    async def controller_view(
        self, broker_name: str, *, controllers: Sequence[str] | None = None
    ) -> ControllerView:
        """The controller's master, epoch and in-sync set of *broker_name*."""
        from pocketmq.client.controller_admin import replica_info

        return await replica_info(
            self._started(),
            broker_name,
            controllers=list(controllers or self.namesrv),
            timeout_s=self.timeout_s,
        )

    def _started(self) -> Remoting:
        if self._remoting is None:
            raise ClientStateError("the admin client is not started; call start() first")
        return self._remoting

    @property
    def _namesrv(self) -> NameserverClient:
        if self._namesrv_client is None:
            raise ClientStateError("the admin client is not started; call start() first")
        return self._namesrv_client

    # -- cluster (nameserver) --------------------------------------------------------------
    async def cluster_info(self) -> ClusterInfo:
        """Live brokers by cluster (``clusterList``)."""
        return await self._namesrv.cluster_info()

    async def topic_list(self) -> list[str]:
        return await self._namesrv.topic_list()

    async def topic_routes(self, *, page_size: int = 0) -> list[tuple[str, list[QueueData]]]:
        """Every routable topic with its queue data per broker, sorted, one nameserver
        call per page (10,000 topics by default), never one per topic."""
        rows: list[tuple[str, list[QueueData]]] = []
        after = ""
        while True:
            page, after = await self._namesrv.topic_routes_page(after, page_size)
            rows.extend(page)
            if not after:
                return rows

    async def topic_route(self, topic: str) -> TopicRoute:
        """Raises RouteNotFoundError when no live broker serves *topic*."""
        return await self._namesrv.get_route(topic)

    async def _route_masters(self, topic: str) -> dict[str, str]:
        """Broker name -> master address, of every broker serving *topic*."""
        route = await self.topic_route(topic)
        return {
            qd.broker_name: addr
            for qd in route.queue_datas
            if (addr := route.master_addr(qd.broker_name))
        }

    async def _each(
        self, masters: dict[str, str], call: Callable[[str, BrokerClient], Awaitable[T]]
    ) -> list[T]:
        """``call(broker_name, client)`` on every broker at once, in broker-name order."""
        names = sorted(masters)
        return list(await asyncio.gather(*(call(n, self.broker(masters[n])) for n in names)))

    # -- topics (one broker each) ----------------------------------------------------------
    async def topic_configs(self, addr: str) -> dict[str, TopicConfig]:
        return await self.broker(addr).topic_configs(timeout_s=self.timeout_s)

    async def create_topic(self, addr: str, config: TopicConfig) -> None:
        """Create the topic on one broker; InvalidRequestError if it exists there."""
        await self.broker(addr).create_topic(config, timeout_s=self.timeout_s)

    async def update_topic(self, addr: str, config: TopicConfig) -> None:
        await self.broker(addr).update_topic(config, timeout_s=self.timeout_s)

    async def delete_topic(self, addr: str, topic: str) -> None:
        await self.broker(addr).delete_topic(topic, timeout_s=self.timeout_s)

    async def create_topics(
        self,
        addr: str,
        configs: Sequence[TopicConfig],
        *,
        update_existing: bool = False,
        batch_size: int = DEFAULT_TOPIC_BATCH,
    ) -> TopicBatchOutcome:
        """Create (or with *update_existing*, also update) many topics on one broker,
        *batch_size* per call; each call is all or none. A refused call raises, naming
        the entry; the batches before it stay done."""
        created = updated = unchanged = 0
        for start in range(0, len(configs), batch_size):
            c, u, n = await self.broker(addr).create_topics(
                configs[start : start + batch_size],
                update_existing=update_existing,
                timeout_s=max(self.timeout_s, 30),
            )
            created, updated, unchanged = created + c, updated + u, unchanged + n
        return TopicBatchOutcome(created=created, updated=updated, unchanged=unchanged, deleted=0)

    async def delete_topics(
        self,
        addr: str,
        topics: Sequence[str],
        *,
        ignore_missing: bool = False,
        batch_size: int = DEFAULT_TOPIC_BATCH,
    ) -> TopicBatchOutcome:
        """Delete many topics on one broker, *batch_size* per call, each call all or none."""
        deleted = 0
        for start in range(0, len(topics), batch_size):
            deleted += await self.broker(addr).delete_topics(
                topics[start : start + batch_size],
                ignore_missing=ignore_missing,
                timeout_s=max(self.timeout_s, 30),
            )
        return TopicBatchOutcome(created=0, updated=0, unchanged=0, deleted=deleted)

    async def topic_status(
        self,
        topic: str,
        *,
        failures: list[BrokerFailure] | None = None,
    ) -> list[QueueStatus]:
        """Min/max offset and last store time of every queue (``topicStatus``). With a
        *failures* list, brokers that do not answer are added to it instead of failing
        the call."""
        masters = await self._route_masters(topic)

        def ask(name: str, b: BrokerClient) -> Awaitable[list[QueueStatus]]:
            return b.topic_status(topic, broker_name=name, timeout_s=self.timeout_s)

        if failures is None:
            rows = await self._each(masters, ask)
        else:
            answers, failed = await self.each_alive(masters, ask)
            failures.extend(failed)
            rows = [answers[n] for n in sorted(answers)]
        return [q for per_broker in rows for q in per_broker]

    # -- consumer groups -------------------------------------------------------------------
    async def consumer_groups(self) -> list[ConsumerGroup]:
        """Groups any master knows (online or with offsets), merged, sorted by name."""
        rows = await self._each(
            (await self.cluster_info()).masters(),
            lambda name, b: b.consumer_groups(broker_name=name, timeout_s=self.timeout_s),
        )
        merged: dict[str, ConsumerGroup] = {}
        for group in (g for per_broker in rows for g in per_broker):
            seen = merged.get(group.group)
            merged[group.group] = (
                group
                if seen is None
                else ConsumerGroup(
                    group=group.group,
                    client_ids=sorted(set(seen.client_ids) | set(group.client_ids)),
                    consume_type=seen.consume_type or group.consume_type,
                    message_model=seen.message_model or group.message_model,
                    subscribed_topics=sorted({*seen.subscribed_topics, *group.subscribed_topics}),
                    offset_topics=sorted({*seen.offset_topics, *group.offset_topics}),
                    brokers=[*seen.brokers, *group.brokers],
                )
            )
        return [merged[g] for g in sorted(merged)]

    async def consume_progress(
        self,
        group: str,
        topic: str | None = None,
        *,
        failures: list[BrokerFailure] | None = None,
    ) -> list[QueueProgress]:
        """Broker offset, consumer offset and lag per queue (``consumerProgress``).

        Without *topic*, every topic the group has offsets for or subscribes to.
        NotFoundError when no broker knows the group (for that topic). With a
        *failures* list, brokers that do not answer are added to it instead of
        failing the call.
        """
        masters = (
            await self._route_masters(topic) if topic else (await self.cluster_info()).masters()
        )

        async def one(name: str, broker: BrokerClient) -> list[QueueProgress]:
            try:
                return await broker.consume_progress(
                    group, topic or "", broker_name=name, timeout_s=self.timeout_s
                )
            except NotFoundError:
                return []  # this broker does not know the group

        if failures is None:
            per_brokers = await self._each(masters, one)
        else:
            answers, failed = await self.each_alive(masters, one)
            failures.extend(failed)
            per_brokers = [answers[n] for n in sorted(answers)]
        rows = [q for per_broker in per_brokers for q in per_broker]
        if not rows and not failures:
            scope = f"topic {topic!r}" if topic else "any topic"
            raise NotFoundError(
                f"consumer group {group!r} has no offsets and no online "
                f"consumers for {scope} on brokers {', '.join(sorted(masters))}"
            )
        return sorted(rows, key=lambda q: (q.topic, q.broker_name, q.queue_id))

    async def reset_offset(
        self, group: str, topic: str, *, to: Literal["earliest", "latest"] | int
    ) -> ResetResult:
        """Move *group* on every queue of *topic* (``resetOffsetByTime``).

        *to* is ``"earliest"``, ``"latest"`` or a timestamp in ms since the
        epoch (the first message stored at or after it). Each broker stores the
        new offsets and tells the group's online consumers, which continue there.
        """
        if isinstance(to, str) and to not in ("earliest", "latest"):
            raise ValueError(f"reset target {to!r}: give 'earliest', 'latest' or a timestamp in ms")
        timestamp_ms = to if isinstance(to, int) else None
        if timestamp_ms is not None and timestamp_ms < 0:
            raise ValueError(f"timestamp {timestamp_ms} is negative; give ms since the epoch")
        rows = await self._each(
            await self._route_masters(topic),
            lambda name, b: b.reset_consumer_offset(
                group,
                topic,
                timestamp_ms=timestamp_ms,
                latest=to == "latest",
                broker_name=name,
                timeout_s=self.timeout_s,
            ),
        )
        queues: list[QueueReset] = [q for moved, _ in rows for q in moved]
        notified = sorted({c for _, told in rows for c in told})
        return ResetResult(topic=topic, group=group, queues=queues, notified_client_ids=notified)

    # -- brokers ---------------------------------------------------------------------------
    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        """The broker's runtime figures (``brokerStatus``)."""
        return await self.broker(addr).runtime_info(timeout_s=self.timeout_s)

    async def broker_config(self, addr: str) -> dict[str, str]:
        """The broker's configuration (``getBrokerConfig``); unset keys are left out."""
        return await self.broker(addr).broker_config(timeout_s=self.timeout_s)

    async def update_broker_config(
        self,
        addr: str,
        updates: dict[str, str],
    ) -> dict[str, str]:
        """Change settings of the running broker at *addr* (``updateBrokerConfig``; an
        admin request under the ACL); returns their previous values. Keys that need a
        restart are refused (InvalidRequestError names the keys that may change)."""
        resp = await self.broker(addr)._call(
            "UpdateBrokerConfig", bpb.UpdateBrokerConfigRequest(updates=updates), self.timeout_s
        )
        return dict(resp.previous)

    async def resolve_broker(self, broker: str) -> tuple[str, str]:
        """(broker name, address) of *broker*, given as host:port or as a broker name
        (its master, else its lowest id). NotFoundError naming the live brokers."""
        info = await self.cluster_info()
        members = sorted(
            (b for b in info.brokers if broker in (b.addr, b.broker_name)),
            key=lambda b: (b.addr != broker, b.broker_id),
        )
        if members:
            return members[0].broker_name, members[0].addr
        if ":" in broker:  # an address the nameserver does not list: ask it anyway
            return broker, broker
        live = sorted({b.broker_name for b in info.brokers})
        raise NotFoundError(
            f"no live broker is named {broker!r}; live brokers: {', '.join(live) or 'none'}"
        )
