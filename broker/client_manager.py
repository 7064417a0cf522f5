"""ClientManager: the producers and consumers talking to this broker.

It owns RocketMQ's ``ProducerManager``, ``ConsumerManager`` and
``ClientHousekeepingService`` in one place:

* Heartbeats (every 30 s from each client) register a client id in its
  producer groups and consumer groups, with each consumer's subscriptions.
  A registration carries the client's fingerprint of it; a client whose
  subscriptions did not change sends only the fingerprint, which
  :meth:`ClientManager.heartbeat` checks against what it holds (answering the
  groups it does not know, so the client sends those whole), so that a
  consumer of thousands of topics costs a few bytes a heartbeat.
* A client silent for ``client_channel_expire_seconds`` (120 s) is dropped
  from every group by :meth:`ClientManager.run_once`, which the housekeeping
  task calls every ``client_scan_interval_seconds`` (tests call it with a
  ManualClock).
* Each client may hold one server-to-client channel (a gRPC stream). When it
  closes, the client leaves every group at once (:meth:`ClientManager.close_channel`).
  When a
  consumer group's members or subscribed topics change, every remaining
  member is told ``NotifyConsumerIdsChangedCommand`` so it rebalances at once instead
  of at its next 20 s round. The channel carries :data:`ServerCommand` values,
  among them ``CheckTransactionStateCommand``, which :meth:`ClientManager.send_to_producer`
  hands to one live producer of a group, taking the group's producers in turn,
  and ``ResetConsumerClientOffsetCommand``, which :meth:`ClientManager.send_to_consumers`
  hands to every online member of a group after an admin moved its offsets.

With the ACL on, each client id belongs to the access key that first
registered it (heartbeat or channel; the *owner* argument). Another key
cannot heartbeat, unregister or open a channel under that id
(:class:`ClientOwnershipError`) until the client is gone (expired, or its
channel closed). ``owner=None`` means the ACL is off or the caller is a trusted
host: it neither binds nor is refused. :attr:`ClientManager.command_filter`
decides which owners may receive a command (a transaction check goes only to
producers whose key may publish to the half's topic).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field

from pocketmq.broker.errors import NoPermissionError
from pocketmq.common.aio import cancel_and_wait
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.model import MessageModel

__all__ = [
    "ChannelOpenedCommand",
    "CheckTransactionStateCommand",
    "ClientChannel",
    "ClientManager",
    "ClientOwnershipError",
    "ConsumeFromWhere",
    "ConsumeType",
    "ConsumerRegistration",
    "MessageModel",
    "NotifyConsumerIdsChangedCommand",
    "ResetConsumerClientOffsetCommand",
    "ServerCommand",
]

log = logging.getLogger(__name__)


class ConsumeType(enum.Enum):
    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"  # pull
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"  # push


class ConsumeFromWhere(enum.Enum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerRegistration:
    """What one heartbeat says about one consumer group the client belongs to."""

    group: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscriptions: dict[str, str] = field(default_factory=dict)  # topic -> tag expression
    fingerprint: str = ""  # the client's digest of the fields above; "" from old clients


# -- commands pushed to clients -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ChannelOpenedCommand:
    broker_name: str


@dataclass(frozen=True, slots=True)
class NotifyConsumerIdsChangedCommand:
    consumer_group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckTransactionStateCommand:
    """Ask a producer how the local transaction of a half message ended."""

    producer_group: str
    record: bytes  # the half message as stored
    commit_log_offset: int
    offset_msg_id: str
    msg_id: str  # its UNIQ_KEY
    check_times: int  # 1 on the first check


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetConsumerClientOffsetCommand:
    """Tell a consumer that an admin moved its group's offsets of *topic* on this broker."""

    consumer_group: str
    topic: str
    broker_name: str
    offsets: dict[int, int]  # queue id -> next offset to consume


ServerCommand = (
    ChannelOpenedCommand
    | NotifyConsumerIdsChangedCommand
    | CheckTransactionStateCommand
    | ResetConsumerClientOffsetCommand
)


class ClientOwnershipError(NoPermissionError):
    """A client id registered by one access key, used by another."""

    def __init__(self, client_id: str, owner: str) -> None:
        super().__init__(
            f"client id {client_id!r} is registered by another access key; access "
            f"key {owner!r} may only act for the client ids it registered (give "
            "each client its own id)",
            reason="CLIENT_ID_OWNED",
        )


class ClientChannel:
    """One client's stream of commands; iterate :meth:`commands` until it closes.

    The queue is bounded: a client that does not read its stream loses
    notifications rather than growing the broker's memory (it still rebalances
    on its own every 20 s).
    """

    MAX_PENDING = 1024

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._queue: asyncio.Queue[ServerCommand | None] = asyncio.Queue(self.MAX_PENDING + 1)
        self._closed = False

    def send(self, command: ServerCommand) -> bool:
        if self._closed:
            return False
        if self._queue.qsize() >= self.MAX_PENDING:
            log.warning(
                "client %s has %d unread commands; dropping %s",
                self.client_id,
                self.MAX_PENDING,
                command,
            )
            return False
        self._queue.put_nowait(command)
        return True

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put_nowait(None)

    @property
    def closed(self) -> bool:
        return self._closed

    async def commands(self) -> AsyncIterator[ServerCommand]:
        while True:
            command = await self._queue.get()
            if command is None:
                return
            yield command


class ClientManager:
    """Producer and consumer groups of live clients. Event-loop thread only."""

    def __init__(
        self,
        *,
        broker_name: str,
        expire_seconds: float = 120.0,
        scan_interval_seconds: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        self._broker_name = broker_name
        self._expire_s = expire_seconds
        self._scan_interval_s = scan_interval_seconds
        self._clock = clock or SystemClock()
        self._producers: dict[str, dict[str, float]] = {}  # group -> client -> last seen
        self._consumers: dict[str, dict[str, ConsumerRegistration]] = {}  # group -> client
        self._last_seen_s: dict[str, float] = {}  # client -> last heartbeat
        self._channels: dict[str, ClientChannel] = {}
        self._producer_turn: dict[str, int] = {}  # group -> next producer
        self._owners: dict[str, str] = {}  # client -> access key
        # (owner or None, command) -> may this owner's client receive it; None = everyone
        self.command_filter: Callable[[str | None, ServerCommand], bool] | None = None
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="ClientHousekeepingService"
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._scan_interval_s)
            self.run_once()

    # -- ownership ----------------------------------------------------------------------
    def check_owner(self, client_id: str, owner: str | None) -> None:
        """ClientOwnershipError when *client_id* belongs to another access key."""
        if owner is None:
            return
        bound = self._owners.get(client_id)
        if bound is not None and bound != owner:
            raise ClientOwnershipError(client_id, owner)

    def _bind(self, client_id: str, owner: str | None) -> None:
        self.check_owner(client_id, owner)
        if owner is not None:
            self._owners.setdefault(client_id, owner)

    def owner(self, client_id: str) -> str | None:
        """The access key that registered *client_id*; None without ACL or when unknown."""
        return self._owners.get(client_id)

    def heartbeat(
        self,
        client_id: str,
        *,
        producer_groups: Iterable[str] = (),
        consumers: Iterable[ConsumerRegistration] = (),
        unchanged: Iterable[tuple[str, str]] = (),
        owner: str | None = None,
    ) -> list[str]:
        """Register the client; *unchanged* are ``(group, fingerprint)`` sent without
        their data. Returns those groups whose fingerprint is not held here (the
        client then sends them whole); the client stays registered in the rest."""
        self._bind(client_id, owner)
        now = self._clock.monotonic()
        self._last_seen_s[client_id] = now
        for group in producer_groups:
            self._producers.setdefault(group, {})[client_id] = now
        unknown = []
        for group, fingerprint in unchanged:
            held = self._consumers.get(group, {}).get(client_id)
            if held is None or not fingerprint or held.fingerprint != fingerprint:
                unknown.append(group)
        for registration in consumers:
            members = self._consumers.setdefault(registration.group, {})
            old = members.get(client_id)
            if old == registration:
                continue
            topics_before = self._subscribed_topics(members)
            members[client_id] = registration
            if old is None:
                log.info("consumer %s joined group %s", client_id, registration.group)
                self._notify_group(registration.group)
            elif self._subscribed_topics(members) != topics_before:
                log.info(
                    "group %s now subscribes to %s",
                    registration.group,
                    sorted(self._subscribed_topics(members)),
                )
                self._notify_group(registration.group)
        return unknown

    def unregister(
        self,
        client_id: str,
        *,
        producer_group: str = "",
        consumer_group: str = "",
        owner: str | None = None,
    ) -> None:
        self.check_owner(client_id, owner)
        if producer_group:
            self._remove_producer(producer_group, client_id)
        if consumer_group:
            self._remove_consumer(consumer_group, client_id, why="unregistered")
        if not (
            any(client_id in m for m in self._producers.values())
            or any(client_id in m for m in self._consumers.values())
        ):
            # Left every group: nothing for the expiry to drop (and log) 120 s later.
            self._last_seen_s.pop(client_id, None)

    def run_once(self) -> list[str]:
        """Drop clients silent for longer than the expiry; returns their ids."""
        deadline = self._clock.monotonic() - self._expire_s
        expired = [cid for cid, seen in self._last_seen_s.items() if seen < deadline]
        for client_id in expired:
            self._drop_client(client_id)
        return expired

    def silent_seconds(self, client_id: str) -> float:
        """Seconds since *client_id*'s last heartbeat (0 for an unknown client)."""
        seen = self._last_seen_s.get(client_id)
        return 0.0 if seen is None else max(0.0, self._clock.monotonic() - seen)

    def _drop_client(self, client_id: str) -> None:
        silent_s = self._clock.monotonic() - self._last_seen_s[client_id]
        log.info(
            "client %s silent for %.0f s (limit %.0f s); dropping it",
            client_id,
            silent_s,
            self._expire_s,
        )
        self._forget(client_id, why="expired")

    def _forget(self, client_id: str, *, why: str) -> None:
        """Remove *client_id* from every group (telling the rest) and close its channel."""
        self._last_seen_s.pop(client_id, None)
        self._owners.pop(client_id, None)
        for group in [g for g, m in self._producers.items() if client_id in m]:
            self._remove_producer(group, client_id)
        for group in [g for g, m in self._consumers.items() if client_id in m]:
            self._remove_consumer(group, client_id, why=why)
        channel = self._channels.pop(client_id, None)
        if channel is not None:
            channel.close()

    def _remove_producer(self, group: str, client_id: str) -> None:
        members = self._producers.get(group)
        if members is not None and members.pop(client_id, None) is not None and not members:
            del self._producers[group]

    def _remove_consumer(self, group: str, client_id: str, *, why: str) -> None:
        members = self._consumers.get(group)
        if members is None or members.pop(client_id, None) is None:
            return
        log.info("consumer %s left group %s (%s)", client_id, group, why)
        if not members:
            del self._consumers[group]
        else:
            self._notify_group(group)

    # -- queries ------------------------------------------------------------------------
    def consumer_ids(self, group: str) -> list[str]:
        return sorted(self._consumers.get(group, {}))

    def producer_ids(self, group: str) -> list[str]:
        return sorted(self._producers.get(group, {}))

    def consumer_registration(self, group: str, client_id: str) -> ConsumerRegistration | None:
        return self._consumers.get(group, {}).get(client_id)

    def subscribed_topics(self, group: str) -> set[str]:
        return self._subscribed_topics(self._consumers.get(group, {}))

    @staticmethod
    def _subscribed_topics(members: dict[str, ConsumerRegistration]) -> set[str]:
        return {topic for reg in members.values() for topic in reg.subscriptions}

    def consumer_groups(self) -> dict[str, dict[str, ConsumerRegistration]]:
        """Every group with an online consumer: group -> client id -> registration."""
        return {group: dict(members) for group, members in self._consumers.items()}

    def counts(self) -> tuple[int, int]:
        """(producer groups, consumer groups) with at least one live client."""
        return len(self._producers), len(self._consumers)

    # -- channels -----------------------------------------------------------------------
    def open_channel(self, client_id: str, *, owner: str | None = None) -> ClientChannel:
        """A new command stream for *client_id*, replacing any older one of the same owner."""
        self._bind(client_id, owner)
        old = self._channels.pop(client_id, None)
        if old is not None:
            old.close()
        channel = ClientChannel(client_id)
        channel.send(ChannelOpenedCommand(self._broker_name))
        self._channels[client_id] = channel
        return channel

    def close_channel(self, channel: ClientChannel, *, client_gone: bool = True) -> None:
        """The stream ended: the client is gone (RocketMQ's ``doChannelCloseEvent``).

        A client's live stream ending means its process died, stopped or lost the
        broker, so it leaves every group now and the others rebalance at once,
        not after ``client_channel_expire_seconds``. A client that is still
        alive reopens its stream and heartbeats again. A stream that was already
        replaced by a newer one of the same client changes nothing.

        *client_gone* False only closes the channel: RocketMQ 5 clients
        (``grpc_v2``) end their sessions with ``NotifyClientTermination`` or by
        falling silent, and may reopen a telemetry stream at any time.
        """
        channel.close()
        if self._channels.get(channel.client_id) is not channel:
            return
        if client_gone:
            self._forget(channel.client_id, why="its channel closed")
        else:
            del self._channels[channel.client_id]

    def channel(self, client_id: str) -> ClientChannel | None:
        return self._channels.get(client_id)

    def send_to_producer(self, group: str, command: ServerCommand) -> str | None:
        """Hand *command* to one live producer of *group* with an open channel.

        The group's producers take turns; returns the client id, or None when no
        producer of the group is connected (or every channel is full, or no producer's
        owner passes :attr:`command_filter`).
        """
        allowed = self.command_filter
        live = [
            client_id
            for client_id in sorted(self._producers.get(group, {}))
            if (ch := self._channels.get(client_id)) is not None
            and not ch.closed
            and (allowed is None or allowed(self._owners.get(client_id), command))
        ]
        turn = self._producer_turn.get(group, 0)
        for i in range(len(live)):
            client_id = live[(turn + i) % len(live)]
            if self._channels[client_id].send(command):
                self._producer_turn[group] = (turn + i + 1) % len(live)
                return client_id
        return None

    def send_to_consumers(self, group: str, command: ServerCommand) -> list[str]:
        """Hand *command* to every online consumer of *group*; returns those reached."""
        return [
            client_id
            for client_id in sorted(self._consumers.get(group, {}))
            if (ch := self._channels.get(client_id)) is not None and ch.send(command)
        ]

    def _notify_group(self, group: str) -> None:
        for client_id in self._consumers.get(group, {}):
            channel = self._channels.get(client_id)
            if channel is not None:
                channel.send(NotifyConsumerIdsChangedCommand(group))
