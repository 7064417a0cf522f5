"""A blocking facade over the asyncio clients, for scripts and threaded programs.

::

    from pocketmq.client import Message
    from pocketmq.client.sync import SyncProducer, SyncPullConsumer, SyncPushConsumer

    with SyncProducer(group="pg", namesrv="127.0.0.1:9876") as producer:
        result = producer.send(Message(topic="orders", body=b"..."))

    with SyncPullConsumer(group="cg", namesrv="127.0.0.1:9876", consume_from="first") as c:
        c.subscribe("orders")          # before start, i.e. pass start=False, or after: both work
        for msg in c.poll(timeout_s=5):
            ...
        c.commit()

Each facade owns one event loop running on a daemon thread of its own (uvloop
when installed) and the asyncio client living on it; a blocking method submits
the matching coroutine to that loop and waits for its result, so a facade can
be shared by any number of threads. Exceptions are the asyncio clients' own.

``SyncPushConsumer`` takes a plain function as listener and runs it on a pool of
``consume_threads`` worker threads (RocketMQ's ``consumeThreadMin``, 20), so
blocking work in the listener never stalls the pull loops.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

from pocketmq.client.model import (
    ClientState,
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    SendResult,
)
from pocketmq.client.producer import MessageQueueSelector, Producer
from pocketmq.client.pull_consumer import PullConsumer
from pocketmq.client.push_consumer import PushConsumer
from pocketmq.client.transaction_producer import (
    LocalTransactionExecutor,
    TransactionProducer,
    TransactionSendResult,
)
from pocketmq.common.filter import MessageSelector

__all__ = ["SyncProducer", "SyncPullConsumer", "SyncPushConsumer", "SyncTransactionProducer"]

T = TypeVar("T")
C = TypeVar("C", Producer, PullConsumer, PushConsumer)

DEFAULT_CONSUME_THREADS = 20


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class _LoopThread:
    """An event loop run forever on a daemon thread, until :meth:`close`."""

    def __init__(self, name: str) -> None:
        self.loop = _new_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(
                "a blocking PocketMQ call was made on the client's own loop "
                "thread (from a listener?); use the asyncio client there"
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class _Facade(Generic[C]):
    """Owns the loop thread and the asyncio client built on it."""

    def __init__(self, factory: Callable[[], C], name: str, *, start: bool) -> None:
        self._thread = _LoopThread(name)

        async def build() -> C:
            return factory()

        try:
            self.client: C = self._thread.run(build())
        except BaseException:
            self._thread.close()
            raise
        self._closed = False
        if start:
            self.start()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._thread.run(coro)

    def start(self) -> None:
        self._run(self.client.start())

    def shutdown(self) -> None:
        """Stop the client, then its loop thread; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.client.state is ClientState.RUNNING:
                self._run(self.client.shutdown())
        finally:
            self._thread.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()


class SyncProducer(_Facade[Producer]):
    """:class:`~pocketmq.client.Producer`, blocking. Started on construction
    unless ``start=False``."""

    def __init__(
        self,
        *,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        start: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(
            lambda: Producer(group=group, namesrv=namesrv, **options),
            f"pocketmq-producer-{group}",
            start=start,
        )

    def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        return self._run(
            self.client.send(msg, queue=queue, selector=selector, arg=arg, timeout_ms=timeout_ms)
        )

    def send_batch(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        timeout_ms: int | None = None,
    ) -> Sequence[SendResult]:
        return self._run(self.client.send_batch(msgs, queue=queue, timeout_ms=timeout_ms))

    def send_oneway(self, msg: Message) -> None:
        self._run(self.client.send_oneway(msg))

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self.client.fetch_publish_queues(topic))


class SyncTransactionProducer(_Facade[TransactionProducer]):
    """:class:`~pocketmq.client.TransactionProducer`, blocking. The checker and the
    local-transaction functions may be plain functions; they run on the loop thread,
    so keep them short or make them coroutines."""

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        checker: Callable[..., Any],
        start: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(
            lambda: TransactionProducer(group, namesrv, checker=checker, **options),
            f"pocketmq-tx-producer-{group}",
            start=start,
        )

    def send_in_transaction(
        self,
        msg: Message,
        execute_local: LocalTransactionExecutor,
        arg: Any = None,
        *,
        timeout_ms: int | None = None,
    ) -> TransactionSendResult:
        return self._run(
            self.client.send_in_transaction(msg, execute_local, arg, timeout_ms=timeout_ms)
        )


class SyncPullConsumer(_Facade[PullConsumer]):
    """:class:`~pocketmq.client.PullConsumer` (lite pull), blocking. Not started
    on construction: subscribe or assign, then :meth:`start` (or ``with``)."""

    def __init__(
        self, *, group: str, namesrv: str | Sequence[str] | None = None, **options: Any
    ) -> None:
        super().__init__(
            lambda: PullConsumer(group=group, namesrv=namesrv, **options),
            f"pocketmq-pull-consumer-{group}",
            start=False,
        )

    def __enter__(self) -> SyncPullConsumer:
        if self.client.state is ClientState.CREATED:
            self.start()
        return self

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        self._run(_call(self.client.subscribe, topic, expression))

    def assign(self, queues: Sequence[MessageQueue]) -> None:
        self._run(_call(self.client.assign, queues))

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self.client.fetch_message_queues(topic))

    def poll(self, timeout_s: float = 5.0) -> list[MessageExt]:
        return self._run(self.client.poll(timeout_s))

    def commit(self) -> int:
        return self._run(self.client.commit())

    def committed(self, queue: MessageQueue) -> int | None:
        return self._run(_call(self.client.committed, queue))

    def seek(self, queue: MessageQueue, offset: int) -> None:
        self._run(self.client.seek(queue, offset))

    def seek_to_begin(self, queue: MessageQueue) -> None:
        self._run(self.client.seek_to_begin(queue))

    def seek_to_end(self, queue: MessageQueue) -> None:
        self._run(self.client.seek_to_end(queue))


class SyncPushConsumer(_Facade[PushConsumer]):
    """:class:`~pocketmq.client.PushConsumer` with a plain-function listener run on
    ``consume_threads`` worker threads. Register the listener, then :meth:`start`."""

    def __init__(
        self,
        *,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        consume_threads: int = DEFAULT_CONSUME_THREADS,
        **options: Any,
    ) -> None:
        if consume_threads < 1:
            raise ValueError(f"consume_threads must be at least 1, got {consume_threads}")
        super().__init__(
            lambda: PushConsumer(group=group, namesrv=namesrv, **options),
            f"pocketmq-push-consumer-{group}",
            start=False,
        )
        self._pool = concurrent.futures.ThreadPoolExecutor(
            consume_threads, thread_name_prefix=f"pocketmq-consume-{group}"
        )

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        self._run(_call(self.client.subscribe, topic, expression))

    def listener(
        self, fn: Callable[[list[MessageExt]], ConsumeResult]
    ) -> Callable[[list[MessageExt]], ConsumeResult]:
        """Decorator: ``@consumer.listener`` registers a blocking handler."""
        self.register_listener(fn)
        return fn

    def register_listener(self, fn: Callable[[list[MessageExt]], ConsumeResult]) -> None:
        pool = self._pool

        async def on_pool(messages: list[MessageExt]) -> ConsumeResult:
            return await asyncio.get_running_loop().run_in_executor(pool, fn, messages)

        self._run(_call(self.client.register_listener, on_pool))

    @property
    def consumed(self) -> int:
        """Messages handled so far."""
        return self.client.consumed

    def shutdown(self) -> None:
        try:
            super().shutdown()
        finally:
            self._pool.shutdown(wait=True)


async def _call(fn: Callable[..., T], *args: Any) -> T:
    """Run a plain method on the loop thread, where the client's state lives."""
    return fn(*args)
