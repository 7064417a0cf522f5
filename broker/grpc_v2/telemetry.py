"""TelemetryService: RocketMQ 5 clients' settings, liveness and transaction checks.

Every official 5.x client opens one ``Telemetry`` stream per broker and
writes its :class:`Settings` on it (at start, ~1 s later, then every 5
minutes). The broker answers each with ``status OK`` and the settings the
client must use, RocketMQ proxy's way:

=================  =======================================================
client             the reply adds
=================  =======================================================
producer           ``publishing.max_body_size`` (max_message_size_bytes; a
                   client told 0 refuses every send),
                   ``validate_message_type``, an exponential send backoff
consumer           ``subscription.fifo`` (any subscribed topic is FIFO),
                   ``receive_batch_size``, ``long_polling_timeout`` and a
                   customized backoff from the broker's delay levels 3.. (10 s,
                   30 s, 1 m ...), with ``max_attempts``
every client       ``metric.on = false``
=================  =======================================================

A producer is a producer of every topic it publishes to (the proxy's rule:
the v2 API has no producer groups, so the topic stands in for one; a
transactional half message's ``PGROUP`` is its topic). It is registered in
the :class:`~pocketmq.broker.client_manager.ClientManager` under those groups
on each settings and ``Heartbeat``, and its stream carries the
``CheckTransactionStateCommand`` commands of the broker's check service as
``recover_orphaned_transaction_command``; the client answers with
``EndTransaction``. Writes to a stream go through a bounded queue: a client
that stops reading loses commands, never the broker's memory.

Who may declare what (the caller's :class:`~.auth.Caller`): a publishing
topic needs what sending to it needs (PUB, and no system topic); a
subscription's group and topics need SUB. Denied topics and subscriptions are
dropped and the reply's status (OK, which is all the official clients read)
says which; a denied group refuses the settings (``FORBIDDEN``). A check
reaches a stream only when its caller may end that half's transaction (PUB on
its real topic). A client id belongs to the access key that first used it
(:meth:`TelemetryService.bind`): no other key may heartbeat, terminate or open
a stream with it.

Settings sent again. A client opens its stream once its first route query is
answered, and some clients (the Node.js client 1.0.8) only start listening
for the answer after their *last* start-up route query: an answer that came
in between is dropped and the client waits for its 5-minute sync. So a
settings answer that went out before one of the client's route queries was
answered is sent again on the same stream; timeline of a client with topics
A and B::

    client   QueryRoute A ─ opens stream, Settings ─ QueryRoute B ─ waits ─────────
    broker        answer A ─ settings answer (lost) ─ answer B ─┬─ again (kept)
                                                                 └ 0.2 s

and, once, on the client's first ``Heartbeat`` on this broker when its answer
is not known to have come after the client's last route query here (a client
that queried routes elsewhere, or one too slow for the 0.2 s). A stream
answered after the client's last route query, the ordinary case, sees nothing
more; the settings sent again are the same answer, which every client takes
at any time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from pocketmq.broker.client_manager import CheckTransactionStateCommand, ClientManager
from pocketmq.broker.delay_levels import DelayLevels
from pocketmq.broker.errors import BrokerError, NoPermissionError
from pocketmq.broker.grpc_v2.auth import Caller
from pocketmq.broker.grpc_v2.convert import duration_pb, message_pb, status, status_of
from pocketmq.broker.send_back import FIRST_RETRY_DELAY_LEVEL
from pocketmq.broker.topic_config import TopicConfigManager
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import decode_record
from pocketmq.rmqv2 import definition_pb2 as d
from pocketmq.rmqv2 import service_pb2 as s

__all__ = ["ClientSession", "TelemetryService"]

log = logging.getLogger(__name__)

MAX_PENDING_COMMANDS = 256  # per stream
RECEIVE_BATCH_SIZE = 32  # the proxy's grpcClientConsumerMaxBatchSize
LONG_POLLING_TIMEOUT_MS = 20_000  # the proxy's default for push consumers
SEND_MAX_ATTEMPTS = 3  # producer retries, as the clients' default
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
SETTINGS_AGAIN_AFTER_ROUTE_S = 0.2  # after a route answer: the client has taken it in
ROUTE_ANSWERS_KEPT = 10_000  # clients whose last route answer time is remembered
ROUTE_ANSWER_ID_CHARS = 255  # longer client ids are not remembered (the v1 port's limit)
_CONSUMERS = (d.PUSH_CONSUMER, d.SIMPLE_CONSUMER, d.PULL_CONSUMER)


@dataclass(slots=True)
class ClientSession:
    client_id: str
    client_type: int = d.CLIENT_TYPE_UNSPECIFIED
    topics: tuple[str, ...] = ()  # a producer's topics: its producer groups
    group: str = ""  # a consumer's group
    owner: str | None = None  # the access key that first used the client id


@dataclass(slots=True, eq=False)
class _Stream:
    """One open Telemetry stream and the settings answer it may send again."""

    out: asyncio.Queue[s.TelemetryCommand | None]
    put: Callable[[s.TelemetryCommand], None]
    answer: s.TelemetryCommand | None = None  # the last settings answer, to send again
    answered_at: float = float("-inf")  # loop time of that answer
    sent_at: float = float("-inf")  # loop time it (or its copy) last went out
    heartbeat_seen: bool = False  # a heartbeat came since the stream opened

    def send_settings(self, now: float) -> None:
        assert self.answer is not None
        self.sent_at = now
        self.put(self.answer)


class TelemetryService:
    """Settings and sessions of RocketMQ 5 clients. Event-loop thread only."""

    def __init__(
        self,
        clients: ClientManager,
        topics: TopicConfigManager,
        *,
        delay_levels: DelayLevels,
        max_body_bytes: int,
        max_delivery_attempts: int,
    ) -> None:
        self._clients = clients
        self._topics = topics
        self._max_body = max_body_bytes
        self._max_attempts = max_delivery_attempts
        self._backoff = [
            delay_levels.delay_ms(level)
            for level in range(FIRST_RETRY_DELAY_LEVEL, delay_levels.max_level + 1)
        ] or [1000]
        self.sessions: dict[str, ClientSession] = {}
        self._streams: dict[str, list[_Stream]] = {}  # by client id
        self._route_answers: OrderedDict[str, float] = OrderedDict()  # client id -> loop time
        self._again: dict[str, asyncio.TimerHandle] = {}  # settings to send again

    # -- settings -----------------------------------------------------------------------
    def on_settings(
        self, client_id: str, settings: d.Settings, caller: Caller | None = None
    ) -> s.TelemetryCommand:
        caller = caller or Caller("", "Telemetry")
        try:
            settings, dropped = _permitted(settings, caller)
        except BrokerError as exc:
            return s.TelemetryCommand(status=status_of(exc))
        session = self.sessions.setdefault(
            client_id, ClientSession(client_id, owner=caller.access_key)
        )
        if settings.HasField("client_type"):
            session.client_type = settings.client_type
        if settings.HasField("publishing"):
            session.topics = tuple(t.name for t in settings.publishing.topics)
        if settings.HasField("subscription") and settings.subscription.HasField("group"):
            session.group = settings.subscription.group.name
        self._register(session)
        message = ("; ".join(dropped) + "; the rest of the settings apply") if dropped else "OK"
        return s.TelemetryCommand(status=status(d.OK, message), settings=self._reply(settings))

    def _reply(self, settings: d.Settings) -> d.Settings:
        reply = d.Settings()
        reply.CopyFrom(settings)
        reply.metric.CopyFrom(d.Metric(on=False))
        if settings.client_type in _CONSUMERS or settings.HasField("subscription"):
            sub = reply.subscription
            sub.fifo = any(self._is_fifo(e.topic.name) for e in sub.subscriptions)
            sub.receive_batch_size = RECEIVE_BATCH_SIZE
            if not sub.HasField("long_polling_timeout"):
                sub.long_polling_timeout.CopyFrom(duration_pb(LONG_POLLING_TIMEOUT_MS))
            reply.backoff_policy.CopyFrom(
                d.RetryPolicy(
                    max_attempts=self._max_attempts,
                    customized_backoff=d.CustomizedBackoff(
                        next=[duration_pb(ms) for ms in self._backoff]
                    ),
                )
            )
        else:
            reply.publishing.max_body_size = self._max_body
            reply.publishing.validate_message_type = True
            reply.backoff_policy.CopyFrom(
                d.RetryPolicy(
                    max_attempts=SEND_MAX_ATTEMPTS,
                    exponential_backoff=d.ExponentialBackoff(
                        initial=duration_pb(10), max=duration_pb(1000), multiplier=2.0
                    ),
                )
            )
        return reply

    def _is_fifo(self, topic: str) -> bool:
        config = self._topics.get(topic)
        return config is not None and config.order

    # -- liveness -----------------------------------------------------------------------
    def bind(self, client_id: str, access_key: str) -> None:
        """*client_id* is *access_key*'s from now on; NoPermissionError if another's."""
        self.check_owner(client_id, access_key)
        session = self.sessions.setdefault(client_id, ClientSession(client_id))
        session.owner = access_key

    def check_owner(self, client_id: str, access_key: str) -> None:
        """NoPermissionError when *client_id* belongs to another access key."""
        session = self.sessions.get(client_id)
        if session is not None and session.owner not in (None, access_key):
            raise NoPermissionError(
                f"client id {client_id[:80]!r} is in use by another access key; every client "
                "instance has an id of its own (x-mq-client-id)"
            )

    def heartbeat(self, client_id: str, client_type: int, group: str) -> None:
        session = self.sessions.setdefault(client_id, ClientSession(client_id))
        session.client_type = client_type or session.client_type
        session.group = group or session.group
        self._register(session)
        self._settings_again_on_heartbeat(client_id)

    def note_publisher(self, client_id: str, topic: str, access_key: str = "") -> None:
        """A producer sent a half message to *topic*: it answers checks of that topic.

        Its settings name only the topics it was created with; one it sent to
        since would otherwise wait for the next settings (5 minutes).
        """
        session = self.sessions.setdefault(
            client_id, ClientSession(client_id, d.PRODUCER, owner=access_key)
        )
        if topic not in session.topics:
            session.topics += (topic,)
        self._register(session)

    def _register(self, session: ClientSession) -> None:
        if session.client_type == d.PRODUCER and session.topics:
            self._clients.heartbeat(session.client_id, producer_groups=session.topics)

    def terminate(self, client_id: str) -> None:
        session = self.sessions.pop(client_id, None)
        if session is None:
            return
        for topic in session.topics:
            self._clients.unregister(client_id, producer_group=topic)
        channel = self._clients.channel(client_id)
        if channel is not None:
            self._clients.close_channel(channel, client_gone=False)

    # -- settings sent again (the module docstring's timeline) ---------------------------
    def route_answered(self, client_id: str, access_key: str = "") -> None:
        """The broker answered a QueryRoute of *client_id*: a settings answer its
        streams sent before now goes out again shortly."""
        session = self.sessions.get(client_id)
        if (session is not None and session.owner not in (None, access_key)) or len(
            client_id
        ) > ROUTE_ANSWER_ID_CHARS:
            return  # not the client's own call: nothing for it
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._route_answers[client_id] = now
        self._route_answers.move_to_end(client_id)
        while len(self._route_answers) > ROUTE_ANSWERS_KEPT:
            self._route_answers.popitem(last=False)
        if not any(
            st.answer is not None and not st.heartbeat_seen
            for st in self._streams.get(client_id, ())
        ):
            return  # no answer yet: the one to come follows this route answer
        if (pending := self._again.pop(client_id, None)) is not None:
            pending.cancel()  # one timer per client: the latest route answer's
        self._again[client_id] = loop.call_later(
            SETTINGS_AGAIN_AFTER_ROUTE_S, self._settings_again_after_route, client_id, now
        )

    def settings_again_pending(self, client_id: str) -> bool:
        """Whether *client_id*'s settings are to be sent again after a route answer."""
        return client_id in self._again

    def _settings_again_after_route(self, client_id: str, route_answered_at: float) -> None:
        self._again.pop(client_id, None)
        now = asyncio.get_running_loop().time()
        for st in self._streams.get(client_id, ()):
            # only before the client's first heartbeat: its start-up route queries
            if st.answer is not None and not st.heartbeat_seen and st.sent_at <= route_answered_at:
                st.send_settings(now)

    def _settings_again_on_heartbeat(self, client_id: str) -> None:
        route_answered_at = self._route_answers.get(client_id)
        now = asyncio.get_running_loop().time()
        for st in self._streams.get(client_id, ()):
            if st.heartbeat_seen:
                continue
            st.heartbeat_seen = True
            if st.answer is None:
                continue  # the answer to come follows a heartbeat: the client listens
            if route_answered_at is not None and st.answered_at > route_answered_at:
                continue  # answered after the client's last route query here
            st.send_settings(now)

    # -- the stream ---------------------------------------------------------------------
    async def stream(
        self,
        client_id: str,
        commands: AsyncIterator[s.TelemetryCommand],
        caller: Caller | None = None,
    ) -> AsyncIterator[s.TelemetryCommand]:
        """Answer *commands* until the client closes; carry the transaction checks
        *caller* may answer."""
        caller = caller or Caller("", "Telemetry")
        out: asyncio.Queue[s.TelemetryCommand | None] = asyncio.Queue(MAX_PENDING_COMMANDS + 1)
        st = _Stream(out, _bounded_put(out, client_id))
        loop = asyncio.get_running_loop()
        forwarder: asyncio.Task[None] | None = None

        async def read() -> None:
            nonlocal forwarder
            try:
                async for command in commands:
                    if not command.HasField("settings"):
                        continue
                    answer = self.on_settings(client_id, command.settings, caller)
                    if answer.HasField("settings"):
                        st.answer, st.answered_at = answer, loop.time()
                        st.send_settings(st.answered_at)
                    else:
                        st.put(answer)  # a refusal is said once
                    if command.settings.client_type == d.PRODUCER and forwarder is None:
                        forwarder = loop.create_task(
                            self._forward_checks(client_id, st.put, caller),
                            name=f"TelemetryChecks-{client_id}",
                        )
            finally:
                _end(out)

        reader = loop.create_task(read(), name=f"TelemetryReader-{client_id}")
        self._streams.setdefault(client_id, []).append(st)
        try:
            while (reply := await out.get()) is not None:
                yield reply
        finally:
            self._forget(client_id, st)
            for task in (reader, forwarder):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task

    def _forget(self, client_id: str, st: _Stream) -> None:
        streams = self._streams.get(client_id, [])
        if st in streams:
            streams.remove(st)
        if not streams:
            self._streams.pop(client_id, None)
            if (pending := self._again.pop(client_id, None)) is not None:
                pending.cancel()

    def release_all(self) -> None:
        """End every open stream (the broker is stopping)."""
        for pending in self._again.values():
            pending.cancel()
        self._again.clear()
        for streams in self._streams.values():
            for st in streams:
                _end(st.out)

    async def _forward_checks(
        self, client_id: str, put: Callable[[s.TelemetryCommand], None], caller: Caller
    ) -> None:
        channel = self._clients.open_channel(client_id)
        try:
            async for command in channel.commands():
                if isinstance(command, CheckTransactionStateCommand):
                    check = _check_command(command, caller)
                    if check is not None:
                        put(check)
        finally:
            self._clients.close_channel(channel, client_gone=False)


def _permitted(settings: d.Settings, caller: Caller) -> tuple[d.Settings, list[str]]:
    """*settings* without what *caller* may not declare, and what was dropped.

    NoPermissionError when the subscription's group is denied: a consumer
    of a group it may not use has nothing left to do.
    """
    out, dropped = d.Settings(), []
    out.CopyFrom(settings)
    if settings.HasField("publishing"):
        denied = [
            t.name
            for t in settings.publishing.topics
            if not _may(caller.write, t.name, as_method="SendMessage")
        ]
        if denied:
            del out.publishing.topics[:]
            out.publishing.topics.extend(
                t for t in settings.publishing.topics if t.name not in denied
            )
            dropped.append(
                f"publishing topics {denied} dropped: access key "
                f"{caller.access_key!r} may not send to them"
            )
    if settings.HasField("subscription"):
        group = settings.subscription.group.name
        if group:
            caller.need(group=group, as_method="ReceiveMessage")
        entries = settings.subscription.subscriptions
        denied = [
            e.topic.name
            for e in entries
            if not _may(caller.read, e.topic.name, group, as_method="ReceiveMessage")
        ]
        if denied:
            del out.subscription.subscriptions[:]
            out.subscription.subscriptions.extend(e for e in entries if e.topic.name not in denied)
            dropped.append(
                f"subscriptions of topics {denied} dropped: access key "
                f"{caller.access_key!r} may not consume them"
            )
    return out, dropped


def _may(check: Callable[..., None], *args: str, as_method: str) -> bool:
    try:
        check(*args, as_method=as_method)
    except NoPermissionError:
        return False
    return True


def _check_command(
    command: CheckTransactionStateCommand, caller: Caller
) -> s.TelemetryCommand | None:
    try:
        half = decode_record(command.record, check_crc=False)
    except CorruptRecordError as exc:
        log.error("transaction check of %s: the half message is damaged: %s", command.msg_id, exc)
        return None
    topic = half.properties.get(PROPERTY_REAL_TOPIC, half.topic)
    if not _may(caller.write, topic, as_method="EndTransaction"):
        log.warning(
            "transaction check of %s (topic %s) not sent to access key %r: it may "
            "not end that topic's transactions",
            command.msg_id,
            topic,
            caller.access_key,
        )
        return None
    message = message_pb(half, topic=topic, message_id=command.msg_id or command.offset_msg_id)
    return s.TelemetryCommand(
        status=status(),
        recover_orphaned_transaction_command=s.RecoverOrphanedTransactionCommand(
            message=message, transaction_id=command.offset_msg_id
        ),
    )


def _end(out: asyncio.Queue[s.TelemetryCommand | None]) -> None:
    if not out.full():  # put() leaves room for this end marker
        out.put_nowait(None)


def _bounded_put(
    out: asyncio.Queue[s.TelemetryCommand | None], client_id: str
) -> Callable[[s.TelemetryCommand], None]:
    def put(command: s.TelemetryCommand) -> None:
        if out.qsize() >= MAX_PENDING_COMMANDS:
            log.warning(
                "client %s has %d unread telemetry commands; dropping one",
                client_id,
                MAX_PENDING_COMMANDS,
            )
            return
        out.put_nowait(command)

    return put
