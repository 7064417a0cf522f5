"""Blocking calls into the asyncio SDK from Spark's Python processes.

Spark runs a data source in plain synchronous Python processes: a planner on
the driver (``partitions()`` of a batch read), one long-lived runner per
streaming query (every stream-reader method but ``read()``), and the executor
workers, which Spark reuses across tasks. The SDK is asyncio. Each such
process gets one event loop (uvloop when installed) on a daemon thread and one
:class:`~pocketmq.client.Remoting` on it, so every task a worker runs
shares one gRPC channel per server address::

    worker thread                         loop thread ("pocketmq-spark")
    ─────────────                         ─────────────────────────────────
    run(coro) / submit(coro) ───────────▶ coro uses remoting(): channels cached
          ◀─────────────── result ─────── per address for the process's life

A process forked after the loop started (Spark forks workers from its daemon)
starts a loop of its own: threads do not survive a fork.

Besides the wrapper, the planning calls every reader shares live here:
:func:`topic_queues` (nameserver routes of the selected topics) and
:func:`queue_offsets` (min, max or by-time offsets of many queues at once).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import logging
import os
import re
import threading
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from pocketmq.client import ClientError, MessageQueue, Remoting, RouteNotFoundError, Transport
from pocketmq.common.auth import Credentials
from pocketmq.common.runtime import tune_malloc
from pocketmq.spark.errors import OptionError
from pocketmq.spark.options import ClientSecurity, TopicSelection

__all__ = [
    "all_topics",
    "freeze_worker_heap",
    "queue_offsets",
    "remoting",
    "run",
    "submit",
    "topic_queues",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
RPC_TIMEOUT_S = 10.0

#: A queue and the address of the broker serving it.
QueueAddrs = dict[MessageQueue, str]


class _Loop:
    def __init__(self) -> None:
        try:
            import uvloop

            self.loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
            self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        self.remotings: dict[ClientSecurity | None, Remoting] = {}
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="pocketmq-spark", daemon=True
        )
        self.thread.start()


_lock = threading.Lock()
_current: _Loop | None = None


def _loop() -> _Loop:
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid():
            _current = _Loop()
        return _current


_frozen_in: int | None = None  # the pid that froze


def freeze_worker_heap() -> None:
    """In a Spark task, once per worker process: take every object the worker holds
    out of the cyclic collector's walks (``gc.freeze``).

    Called by the tasks that talk to brokers, before their first call: by then the
    worker holds what it keeps for life (pyspark, pyarrow, grpc, the SDK: hundreds
    of thousands of objects), and a read or write goes on to allocate short-lived
    ones by the million (the SDK's result per record sent, a reply per pull
    window), so the collector runs often, and its older generations walked all of
    the former: 0.3-0.5 us per row, measured (A/B in one Spark session). Frozen
    objects are never collected, which costs nothing for objects that live as long
    as the process.

    It also keeps freed heap memory in the worker (:func:`~pocketmq.common.runtime.tune_malloc`,
    as brokers do): every decoded block is a fresh set of Arrow buffers of up to
    8 MiB, which glibc would otherwise map and unmap each time, so that every page
    was faulted in and zeroed again: the page faults were a quarter of decoding a
    segment, and decoding took half the time with the thresholds raised (A/B, the
    same files, one process). Outside a Spark task (a driver, a test) it does nothing.
    """
    global _frozen_in
    if _frozen_in == os.getpid():
        return
    from pyspark import TaskContext

    if TaskContext.get() is None:
        return
    _frozen_in = os.getpid()
    tune_malloc()
    gc.freeze()


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Start *coro* on this process's loop; the future resolves in the calling thread."""
    return asyncio.run_coroutine_threadsafe(coro, _loop().loop)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run *coro* on this process's loop and wait for its result."""
    return submit(coro).result()


def remoting(credentials: ClientSecurity | None = None) -> Remoting:
    """The process's channel cache for *credentials* (ACL keys: every call signed; TLS
    files: TLS channels) or none; use it only in coroutines given to :func:`run`."""
    cache = _loop().remotings
    found = cache.get(credentials)
    if found is None:
        sec = credentials or ClientSecurity()
        signing = Credentials(sec.access_key, sec.secret_key) if sec.access_key else None
        found = cache[credentials] = Remoting(
            Transport(
                credentials=signing,
                tls_ca_file=sec.tls_ca_file,
                tls_cert_file=sec.tls_cert_file,
                tls_key_file=sec.tls_key_file,
                # the sink's batches over one SendStream per broker (unary SendBatch
                # where a broker does not serve it): 20-40 % more rows/s written
                send_stream=True,
            )
        )
    return found


# -- planning calls ---------------------------------------------------------------------------
async def all_topics(
    namesrv: Sequence[str], credentials: ClientSecurity | None = None
) -> list[str]:
    """Every topic a nameserver knows (GetAllTopicList), for ``subscribePattern``."""
    nameserver = remoting(credentials).nameserver(namesrv, timeout_s=RPC_TIMEOUT_S)
    try:
        return await nameserver.topic_list()
    except ClientError as exc:  # every nameserver was tried
        raise OptionError(
            f"option namesrv: no nameserver of {list(namesrv)} answered GetAllTopicList: {exc}"
        ) from None


async def topic_queues(
    namesrv: Sequence[str],
    selection: TopicSelection,
    *,
    strict: bool,
    credentials: ClientSecurity | None = None,
) -> QueueAddrs:
    """The readable queues *selection* names, with their brokers' addresses.

    *strict* (batch queries) refuses a subscribed topic no nameserver routes and
    an assigned queue no broker serves; a streaming query waits for them instead
    (they are picked up once they appear).
    """
    nameserver = remoting(credentials).nameserver(namesrv, timeout_s=RPC_TIMEOUT_S)
    if selection.pattern:
        regex = re.compile(selection.pattern)
        topics = [t for t in await all_topics(namesrv, credentials) if regex.fullmatch(t)]
    elif selection.assigned:
        topics = sorted({t for t, _b, _q in selection.assigned})
    else:
        topics = list(selection.topics)
    routes = await asyncio.gather(
        *(nameserver.get_route(t) for t in topics), return_exceptions=True
    )
    found: QueueAddrs = {}
    for topic, route in zip(topics, routes, strict=True):
        if isinstance(route, RouteNotFoundError):
            if strict and not selection.pattern:
                raise OptionError(
                    f"{selection.describe()}: topic {topic!r} does not exist "
                    f"(no nameserver of {list(namesrv)} routes it)"
                )
            log.info("topic %s has no route yet; its queues are read once it has", topic)
            continue
        if isinstance(route, BaseException):
            raise route
        for mq in route.read_queues():
            addr = route.master_addr(mq.broker_name)
            if addr is not None:
                found[mq] = addr
    if selection.assigned:
        found = _assigned(found, selection, strict=strict)
    return found


def _assigned(found: QueueAddrs, selection: TopicSelection, *, strict: bool) -> QueueAddrs:
    out: QueueAddrs = {}
    for topic, broker, queue_ids in selection.assigned:
        for qid in queue_ids:
            matches = [
                mq
                for mq in found
                if mq.topic == topic
                and mq.queue_id == qid
                and (broker is None or mq.broker_name == broker)
            ]
            if not matches and strict:
                serving = sorted(str(mq) for mq in found if mq.topic == topic)
                raise OptionError(
                    f"option assign names queue {qid} of {topic!r}"
                    f"{' on ' + broker if broker else ''}, which no broker serves "
                    f"(readable queues: {', '.join(serving) or 'none'})"
                )
            out.update((mq, found[mq]) for mq in matches)
    return out


async def queue_offsets(
    queues: Mapping[MessageQueue, str],
    which: str,
    *,
    timestamp_ms: int = 0,
    credentials: ClientSecurity | None = None,
) -> dict[MessageQueue, int]:
    """``min``, ``max`` or ``time`` (first offset stored at or after *timestamp_ms*) offsets."""

    async def one(mq: MessageQueue, addr: str) -> int:
        broker = remoting(credentials).broker(addr)
        if which == "min":
            return await broker.min_offset(mq, timeout_s=RPC_TIMEOUT_S)
        if which == "max":
            return await broker.max_offset(mq, timeout_s=RPC_TIMEOUT_S)
        return await broker.offset_by_timestamp(mq, timestamp_ms, timeout_s=RPC_TIMEOUT_S)

    items: Iterable[tuple[MessageQueue, str]] = list(queues.items())
    values = await asyncio.gather(*(one(mq, addr) for mq, addr in items))
    return {mq: value for (mq, _addr), value in zip(items, values, strict=True)}
