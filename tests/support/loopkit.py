"""In-process servers for tests that run no event loop (Spark, Selenium): an event loop on a
thread of its own.

``LoopThread`` runs the loop; ``run(coro)`` waits for a coroutine's result there (the
servers' objects belong to that loop). ``single_broker(loop, namesrv_config,
broker_config, topic)`` starts a nameserver and one broker on it, creates *topic*
and waits until the nameserver routes it; it yields the nameserver's address and
stops both after.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from waitkit import eventually

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.nameserver import NameServer, NamesrvConfig

__all__ = ["LoopThread", "single_broker"]

T = TypeVar("T")


class LoopThread:
    """An event loop running on a daemon thread until :meth:`close`."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop or asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@contextlib.contextmanager
def single_broker(
    loop: LoopThread,
    namesrv_config: NamesrvConfig,
    broker_config: Callable[[str], BrokerConfig],
    topic: str,
    queues: int = 2,
) -> Iterator[str]:
    """A nameserver and a broker (``broker_config(namesrv address)``) serving *topic*."""
    nameserver = NameServer(namesrv_config)
    loop.run(nameserver.start())
    broker = Broker(broker_config(nameserver.address))
    try:
        loop.run(broker.start())

        async def create() -> None:
            broker.topics.create(
                BrokerTopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues)
            )
            await eventually(
                lambda: nameserver.route_table.get_route(topic) is not None,
                interval_s=0.02,
                what=f"route of {topic}",
            )

        loop.run(create())
        yield nameserver.address
    finally:
        loop.run(broker.stop(0))
        loop.run(nameserver.stop(0))
