"""Route cache (template fallback, refresh) and the local offset file."""

from __future__ import annotations

import pytest

from pocketmq.client.config import ConsumerConfig, ProducerConfig, build, parse_namesrv
from pocketmq.client.errors import RouteNotFoundError
from pocketmq.client.model import MessageQueue
from pocketmq.client.offset_store import LocalFileOffsetStore
from pocketmq.client.route import QueueData, RouteService, TopicRoute
from pocketmq.common.errors import ConfigError


def route(topic: str, *brokers: str, perm: int = 6, queues: int = 2) -> TopicRoute:
    return TopicRoute(
        topic=topic,
        queue_datas=tuple(QueueData(b, queues, queues, perm) for b in brokers),
        broker_addrs={b: {0: f"127.0.0.1:{1000 + i}"} for i, b in enumerate(brokers)},
    )


class Nameserver:
    def __init__(self) -> None:
        self.routes: dict[str, TopicRoute] = {}
        self.asked: list[str] = []

    async def fetch(self, topic: str) -> TopicRoute:
        self.asked.append(topic)
        if topic not in self.routes:
            raise RouteNotFoundError(topic, "unknown")
        return self.routes[topic]


def test_route_queues_skip_brokers_without_the_permission():
    r = route("t", "a", "b")
    r = TopicRoute(
        topic="t",
        queue_datas=(QueueData("a", 2, 2, 6), QueueData("b", 2, 2, 4)),
        broker_addrs=r.broker_addrs,
    )
    assert [q.broker_name for q in r.write_queues()] == ["a", "a"]
    assert len(r.read_queues()) == 4


async def test_unknown_topics_borrow_the_template_route_until_their_own_exists(manual_clock):
    ns = Nameserver()
    ns.routes["TBW102"] = route("TBW102", "a", "b")
    routes = RouteService(ns.fetch, clock=manual_clock, provisional_ttl_s=1)
    queues = await routes.write_queues("new")
    assert {q.topic for q in queues} == {"new"} and len(queues) == 4
    ns.routes["new"] = route("new", "a")
    assert len(await routes.write_queues("new")) == 4  # cached
    manual_clock.advance(1.0)
    assert len(await routes.write_queues("new")) == 2
    with pytest.raises(RouteNotFoundError):
        await routes.get("consumers-do-not-borrow")


async def test_routes_refresh_on_schedule_and_after_failure(manual_clock):
    ns = Nameserver()
    ns.routes["t"] = route("t", "a")
    routes = RouteService(ns.fetch, clock=manual_clock, refresh_interval_s=30)
    await routes.get("t")
    await routes.get("t")
    assert ns.asked == ["t"]
    routes.invalidate("t")
    await routes.get("t")
    assert ns.asked == ["t", "t"]
    await routes.run_once()
    assert ns.asked == ["t", "t", "t"]
    assert routes.addr_of("a") == "127.0.0.1:1000"


async def test_the_cached_queues_fast_path_only_answers_for_a_fresh_route(manual_clock):
    ns = Nameserver()
    ns.routes["t"] = route("t", "a")
    routes = RouteService(ns.fetch, clock=manual_clock, refresh_interval_s=30)
    assert routes.cached_write_queues("t") is None  # never fetched
    queues = await routes.write_queues("t")
    assert routes.cached_write_queues("t") == queues
    routes.invalidate("t")
    assert routes.cached_write_queues("t") is None  # stale: the slow path refetches
    await routes.write_queues("t")
    manual_clock.advance(31)
    assert routes.cached_write_queues("t") is None  # expired
    assert ns.asked == ["t", "t"]


async def test_local_offsets_survive_a_restart(tmp_path):
    mq = MessageQueue("t", "a", 3)
    store = LocalFileOffsetStore("g", str(tmp_path))
    await store.load()
    assert await store.read_stored(mq) is None
    store.update(mq, 10)
    store.update(mq, 7)  # increase only
    assert await store.persist() == 1
    assert await store.persist() == 0  # unchanged: nothing written
    again = LocalFileOffsetStore("g", str(tmp_path))
    await again.load()
    assert await again.read_stored(mq) == 10


def test_options_are_checked_and_named():
    with pytest.raises(ConfigError, match="linger_ms must be >= 0"):
        ProducerConfig(linger_ms=-1)
    with pytest.raises(ConfigError, match="unknown option"):
        build(ProducerConfig, None, {"lingerms": 1})
    with pytest.raises(ConfigError, match="consume_from"):
        ConsumerConfig(consume_from="middle")
    assert build(ConsumerConfig, ConsumerConfig(orderly=True), {"pull_batch_size": 8}).orderly


def test_namesrv_defaults_to_the_environment_then_localhost(monkeypatch):
    monkeypatch.delenv("POCKETMQ_NAMESRV", raising=False)
    assert parse_namesrv(None) == ["127.0.0.1:9876"]
    monkeypatch.setenv("POCKETMQ_NAMESRV", "h1:1;h2:2")
    assert parse_namesrv(None) == ["h1:1", "h2:2"]
    with pytest.raises(ConfigError, match="host:port"):
        parse_namesrv("nohost")
