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
:mod:`.admin_model`, each naming its broker. Message look-ups answer
:class:`~pocketmq.client.model.MessageExt`:

* an offset message id (store address + commit-log offset) is read straight
  from the broker it names (``ViewMessage``);
* a unique id (``UNIQ_KEY``, made by the producer) and a key are found through
  the index of every broker serving the topic (``QueryMessage``), which is why
  a unique id needs its topic. Each broker name is asked at its master, or, when
  the route lists none or it does not answer, at its replicas (lowest id first):
  they hold the same index.

Manual failover: :meth:`AdminClient.promote` makes a replica the master of its
broker name (``PromoteToMaster``), after comparing it with the other live
members (:meth:`AdminClient.replica_positions`): it refuses, unless forced,
when one of them holds a log that goes further, since promoting would drop
what only that one holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from types import SimpleNamespace
from typing import Literal, TypeVar

from pocketmq.client.admin_groups import GroupAdmin, ResetTarget
from pocketmq.client.admin_model import (
    BrokerFailure,
    ClusterInfo,
    ConsumerGroup,
    PromoteResult,
    QueueProgress,
    QueueReset,
    QueueStatus,
    ReplicaPosition,
    ResetResult,
    TopicBatchOutcome,
    TopicConfig,
)
from pocketmq.client.config import parse_namesrv, transport
from pocketmq.client.controller_admin import ControllerView
from pocketmq.client.errors import ClientError, ClientStateError, NotFoundError, UnavailableError
from pocketmq.client.message_codec import decode_messages
from pocketmq.client.model import MessageExt, MessageQueue
from pocketmq.client.remoting import BrokerClient, NameserverClient, PullStatus, Remoting
from pocketmq.client.route import QueueData, TopicRoute
from pocketmq.common.msgid import decode_offset_msg_id
from pocketmq.v1 import broker_pb2 as bpb

__all__ = [
    "MASTER_ROLES",
    "TOOLS_CONSUMER_GROUP",
    "AdminClient",
    "PromotionRefusedError",
    "ResetTarget",
]

log = logging.getLogger(__name__)

TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"  # RocketMQ's group for reads by admin tools
DEFAULT_QUERY_MAX = 32
DEFAULT_TOPIC_BATCH = 5_000  # topics per CreateTopics/DeleteTopics call (~250 KB)

MASTER_ROLES = ("SYNC_MASTER", "ASYNC_MASTER")

T = TypeVar("T")


class PromotionRefusedError(ClientError):
    """:meth:`AdminClient.promote` found a live member of the broker name whose log goes
    further than the target's; ``target`` and ``ahead`` say how far each goes."""

    def __init__(
        self, message: str, *, target: ReplicaPosition, ahead: list[ReplicaPosition]
    ) -> None:
        super().__init__(message)
        self.target = target
        self.ahead = ahead


class AdminClient(GroupAdmin):
    """Async admin calls to one cluster; ``start()`` first, or ``async with``.

    Group offsets, members and deletion are in :class:`~.admin_groups.GroupAdmin`."""

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

    # -- messages --------------------------------------------------------------------------
    async def query_message(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = DEFAULT_QUERY_MAX,
        begin_timestamp_ms: int = 0,
        end_timestamp_ms: int = 0,
    ) -> list[MessageExt]:
        """Messages of *topic* with *key* among their KEYS (``queryMsgByKey``), newest first."""
        found = await self._query_index(topic, key, max_num, begin_timestamp_ms, end_timestamp_ms)
        return [m for m in found if key in m.keys]

    async def query_by_unique_key(self, topic: str, msg_id: str) -> list[MessageExt]:
        """Messages of *topic* whose unique id (UNIQ_KEY) is *msg_id*
        (``queryMsgByUniqueKey``); more than one when a send was retried."""
        found = await self._query_index(topic, msg_id, DEFAULT_QUERY_MAX, 0, 0)
        return [m for m in found if m.msg_id == msg_id]

    async def _query_index(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> list[MessageExt]:
        route = await self.topic_route(topic)

        async def one(name: str) -> list[MessageExt]:
            members = route.broker_addrs.get(name, {})
            last: UnavailableError | None = None
            for broker_id in sorted(members):  # the master (id 0) first
                try:
                    records = await self.broker(members[broker_id]).query_message(
                        topic,
                        key,
                        max_num=max_num,
                        begin_timestamp_ms=begin_ms,
                        end_timestamp_ms=end_ms,
                        timeout_s=self.timeout_s,
                    )
                except UnavailableError as exc:
                    if not exc.unreachable:
                        raise
                    last = exc
                    continue
                return decode_messages(records, name)
            if last is not None:
                raise last
            return []

        names = sorted(
            {qd.broker_name for qd in route.queue_datas if route.broker_addrs.get(qd.broker_name)}
        )
        rows = await asyncio.gather(*(one(n) for n in names))
        found = [m for per_broker in rows for m in per_broker]
        return sorted(found, key=lambda m: m.store_timestamp_ms, reverse=True)[:max_num]

    async def offset_msg_id_broker(self, msg_id: str) -> tuple[str, str] | None:
        """(broker name, address) of the live broker an offset message id names, or None
        when *msg_id* is not one (it may be a unique id)."""
        try:
            decoded = decode_offset_msg_id(msg_id)
        except ValueError:
            return None
        host = f"[{decoded.host}]" if ":" in decoded.host else decoded.host
        addr = f"{host}:{decoded.port}"
        name = (await self.cluster_info()).name_of(addr)
        return None if name is None else (name, addr)

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message an offset message id names, read from its broker (``viewMessage``)."""
        located = await self.offset_msg_id_broker(offset_msg_id)
        if located is None:
            raise NotFoundError(
                f"{offset_msg_id!r} does not name a live broker of this "
                "cluster; it is not an offset message id here"
            )
        name, addr = located
        record = await self.broker(addr).view_message(offset_msg_id, timeout_s=self.timeout_s)
        return decode_messages(record, name)[0]

    async def messages_by_id(self, msg_id: str, topic: str | None = None) -> list[MessageExt]:
        """``queryMsgById``: *msg_id* as an offset message id of a live broker, else as a
        unique id searched in *topic*'s index; ValueError when that needs a topic."""
        if await self.offset_msg_id_broker(msg_id) is not None:
            return [await self.view_message(msg_id)]
        if not topic:
            raise ValueError(
                f"{msg_id!r} is not the offset message id of a live broker, so it "
                "is taken as a unique id (UNIQ_KEY); unique ids are found through "
                "the index of the topic's brokers: give the topic"
            )
        found = await self.query_by_unique_key(topic, msg_id)
        if not found:
            raise NotFoundError(
                f"no message of topic {topic!r} has unique id {msg_id!r} (nor "
                "is it an offset message id of a live broker)"
            )
        return found

    async def message_at(self, queue: MessageQueue, offset: int) -> MessageExt:
        """The message at *offset* of *queue* (``queryMsgByOffset``); NotFoundError
        naming the queue's range when there is none."""
        masters = await self._route_masters(queue.topic)
        addr = masters.get(queue.broker_name)
        if addr is None:
            raise NotFoundError(
                f"broker {queue.broker_name!r} does not serve topic "
                f"{queue.topic!r}; it is on {', '.join(sorted(masters))}"
            )
        reply = await self.broker(addr).pull(
            group=TOOLS_CONSUMER_GROUP,
            queue=queue,
            offset=offset,
            max_messages=1,
            subscription="*",
            suspend_ms=0,
            timeout_s=self.timeout_s,
        )
        found = (
            decode_messages(reply.records, queue.broker_name)
            if reply.status is PullStatus.FOUND
            else []
        )
        if not found or found[0].queue_offset != offset:
            raise NotFoundError(
                f"no message at offset {offset} of {queue}; the queue holds "
                f"offsets {reply.min_offset}..{reply.max_offset - 1}"
            )
        return found[0]

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

    # -- replication (manual failover) -----------------------------------------------------
    async def replica_positions(
        self,
        addr: str,
    ) -> tuple[ReplicaPosition, list[ReplicaPosition], str]:
        """The broker at *addr*, the other members of its broker name, and why those could
        not be listed ("" when they could).

        The target's runtime info must answer (its errors propagate); the members come
        from the nameserver's cluster info, and each one that does not answer is kept
        with its error, so that a caller can say what was not compared.
        """
        target = _position(addr, await self.broker_runtime_info(addr), fallback_id=-1)
        try:
            info = await self.cluster_info()
        except ClientError as exc:
            return target, [], str(exc)
        members = [
            b for b in info.brokers if b.broker_name == target.broker_name and b.addr != addr
        ]

        async def one(addr: str, broker_id: int) -> ReplicaPosition:
            try:
                table = await self.broker_runtime_info(addr)
            except ClientError as exc:
                return ReplicaPosition(
                    broker_name=target.broker_name,
                    broker_id=broker_id,
                    addr=addr,
                    role="",
                    master_epoch=-1,
                    max_offset=-1,
                    error=str(exc),
                )
            return _position(addr, table, fallback_id=broker_id)

        return target, list(await asyncio.gather(*(one(b.addr, b.broker_id) for b in members))), ""

    async def promote(
        self, addr: str, *, epoch: int = 0, role: str = "", force: bool = False
    ) -> PromoteResult:
        """Make the replica at *addr* the master of its broker name (``PromoteToMaster``).

        *epoch*: the new master epoch, 0 = one above every epoch the broker has seen;
        *role*: SYNC_MASTER or ASYNC_MASTER, "" = the broker's choice (its configured
        master role, else ASYNC_MASTER). Raises :class:`PromotionRefusedError` when a
        live, unfenced member of the broker name is further ahead (a higher epoch, then
        a larger commit-log max offset), unless *force*; the broker itself refuses a
        master and an epoch that does not grow (RemoteError, FAILED_PRECONDITION).
        """
        if epoch < 0:
            raise ValueError(f"epoch is {epoch}; give 0 (one above every epoch seen) or more")
        if role and role not in MASTER_ROLES:
            raise ValueError(
                f"role {role!r} is not a master role; give SYNC_MASTER or ASYNC_MASTER"
            )
        target, members, namesrv_error = await self.replica_positions(addr)
        ahead = [m for m in members if m.reachable and not m.fenced and m.ahead_of(target)]
        if ahead and not force:
            raise PromotionRefusedError(
                f"not promoting {target.describe()}: "
                + "; ".join(f"{m.describe()} is {_how_far_ahead(m, target)}" for m in ahead)
                + ". Promoting it would drop what only the member(s) ahead hold; promote the "
                "one furthest ahead",
                target=target,
                ahead=ahead,
            )
        # BrokerClient has no promote() of its own (yet): its generic call maps errors
        # as for every other RPC.
        resp = await self.broker(addr)._call(
            "PromoteToMaster", bpb.PromoteToMasterRequest(epoch=epoch, role=role), self.timeout_s
        )
        if ahead:
            log.warning(
                "promoted %s although %s", target.describe(), "; ".join(m.describe() for m in ahead)
            )
        return PromoteResult(
            broker_name=target.broker_name,
            addr=addr,
            epoch=resp.epoch,
            start_offset=resp.start_offset,
            role=resp.role,
            previous=target,
            members=members,
            forced=bool(ahead),
            namesrv_error=namesrv_error,
        )


def _position(addr: str, table: dict[str, str], *, fallback_id: int) -> ReplicaPosition:
    def number(key: str, default: int) -> int:
        try:
            return int(table.get(key, ""))
        except ValueError:
            return default

    return ReplicaPosition(
        broker_name=table.get("broker_name", ""),
        broker_id=number("broker_id", fallback_id),
        addr=addr,
        role=table.get("broker_role", ""),
        master_epoch=number("master_epoch", 0),
        max_offset=number("commitlog_max_offset", 0),
        fenced=bool(table.get("fenced")),
    )


def _how_far_ahead(member: ReplicaPosition, target: ReplicaPosition) -> str:
    if member.master_epoch > target.master_epoch:
        return f"ahead by epoch ({member.master_epoch} > {target.master_epoch})"
    return f"{member.max_offset - target.max_offset} bytes ahead in epoch {member.master_epoch}"
