"""The nameserver over real gRPC: registration, routes, liveness, errors, the CLI.

Servers run in-process on port 0 with a ManualClock, so expiry is driven by
``clock.advance`` and ``run_once`` rather than by waiting.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import grpc
import pytest

from pocketmq.common.clock import ManualClock
from pocketmq.nameserver import NameServer, NamesrvConfig
from pocketmq.v1 import common_pb2, nameserver_pb2, nameserver_pb2_grpc

pb = nameserver_pb2
REPO_ROOT = Path(__file__).resolve().parents[2]
EXPIRE_S = 120.0


# ------------------------------------------------------------------------- helpers


@pytest.fixture
async def nameserver(manual_clock: ManualClock) -> AsyncIterator[NameServer]:
    server = NameServer(
        NamesrvConfig(host="127.0.0.1", port=0, broker_expire_seconds=EXPIRE_S), clock=manual_clock
    )
    await server.start()
    yield server
    await server.stop(0)


@pytest.fixture
async def stub(nameserver: NameServer) -> AsyncIterator[nameserver_pb2_grpc.NameServerStub]:
    async with grpc.aio.insecure_channel(nameserver.address) as channel:
        yield nameserver_pb2_grpc.NameServerStub(channel)


def registration(
    *,
    cluster: str = "DefaultCluster",
    name: str = "broker-a",
    addr: str = "127.0.0.1:10911",
    broker_id: int = 0,
    topics: Mapping[str, tuple[int, int]] | None = None,
    version: tuple[int, int] = (1_700_000_000_000, 1),
    perm: int = 6,
    heartbeat_timeout_ms: int = 0,
) -> pb.RegisterBrokerRequest:
    topics = {"orders": (8, 8)} if topics is None else topics
    return pb.RegisterBrokerRequest(
        cluster_name=cluster,
        broker_name=name,
        broker_addr=addr,
        broker_id=broker_id,
        topic_configs=[
            common_pb2.TopicConfig(topic_name=t, read_queue_nums=r, write_queue_nums=w, perm=perm)
            for t, (r, w) in topics.items()
        ],
        data_version=common_pb2.DataVersion(timestamp_ms=version[0], counter=version[1]),
        heartbeat_timeout_ms=heartbeat_timeout_ms,
    )


async def route_of(
    stub: nameserver_pb2_grpc.NameServerStub, topic: str
) -> common_pb2.TopicRouteData:
    reply = await stub.GetRouteInfoByTopic(pb.GetRouteInfoByTopicRequest(topic=topic))
    return reply.route


async def status_of(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await call  # type: ignore[misc]
    return exc.value


# ------------------------------------------------------------------ register, route


async def test_registered_topic_routes_to_the_broker(stub) -> None:
    reply = await stub.RegisterBroker(registration(topics={"orders": (8, 4)}))
    assert reply.topic_configs_accepted
    assert reply.master_addr == ""

    route = await route_of(stub, "orders")

    assert [
        (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas
    ] == [("broker-a", 8, 4, 6)]
    [broker] = route.broker_datas
    assert (broker.cluster, broker.broker_name) == ("DefaultCluster", "broker-a")
    assert dict(broker.broker_addrs) == {0: "127.0.0.1:10911"}


async def test_topic_nobody_serves_is_not_found_with_its_name(stub) -> None:
    await stub.RegisterBroker(registration(topics={"orders": (8, 8)}))

    error = await status_of(route_of(stub, "payments"))

    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert "'payments'" in error.details()


async def test_routes_of_named_topics_come_in_one_call_with_the_missing_listed(stub) -> None:
    await stub.RegisterBroker(registration(topics={"orders": (8, 4), "payments": (2, 2)}))
    await stub.RegisterBroker(
        registration(name="broker-b", addr="127.0.0.1:10921", topics={"orders": (4, 4)})
    )

    reply = await stub.GetTopicRoutes(
        pb.GetTopicRoutesRequest(names=["payments", "nobody-serves-this", "orders"])
    )

    rows = {
        t.topic: [(q.broker_name, q.write_queue_nums) for q in t.queue_datas] for t in reply.topics
    }
    assert rows == {"payments": [("broker-a", 2)], "orders": [("broker-a", 4), ("broker-b", 4)]}
    assert list(reply.missing) == ["nobody-serves-this"]
    assert dict(reply.brokers["broker-b"].broker_addrs) == {0: "127.0.0.1:10921"}


async def test_routes_of_more_than_a_thousand_names_or_a_bad_name_are_refused(stub) -> None:
    too_many = await status_of(
        stub.GetTopicRoutes(pb.GetTopicRoutesRequest(names=[f"t{i}" for i in range(1001)]))
    )
    bad = await status_of(stub.GetTopicRoutes(pb.GetTopicRoutesRequest(names=["ok", "a b"])))

    assert too_many.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "1001" in too_many.details() and "1000" in too_many.details()
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT and "'a b'" in bad.details()


async def test_a_client_refreshes_all_its_routes_in_one_call_per_thousand_topics(
    stub, nameserver
) -> None:
    from pocketmq.client.remoting import Remoting
    from pocketmq.client.route import RouteService

    await stub.RegisterBroker(registration(topics={f"t{i:04d}": (2, 2) for i in range(1500)}))
    remoting = Remoting()
    try:
        ns = remoting.nameserver([nameserver.address])
        asked: list[int] = []

        async def fetch_many(topics):
            asked.append(len(topics))
            return await ns.get_routes(topics)

        routes = RouteService(ns.get_route, fetch_many=fetch_many)
        for i in range(1500):
            await routes.get(f"t{i:04d}")
        await stub.RegisterBroker(
            registration(
                topics={f"t{i:04d}": (4, 4) for i in range(1500)}, version=(1_700_000_000_000, 2)
            )
        )

        await routes.run_once()

        assert asked == [1000, 500]
        assert all(
            routes.cached(f"t{i:04d}").queue_datas[0].write_queue_nums == 4 for i in range(1500)
        )
    finally:
        await remoting.close()


async def test_unchanged_data_version_only_refreshes_liveness(stub, nameserver, manual_clock):
    counters = nameserver.route_table.counters
    await stub.RegisterBroker(registration(topics={"orders": (8, 8)}, version=(1000, 7)))
    assert (counters.topic_config_updates, counters.liveness_refreshes) == (1, 0)
    manual_clock.advance(30)

    # Same version, different (even malformed) configs: they are not read at all.
    reply = await stub.RegisterBroker(
        registration(topics={"other": (1, 1), "": (-1, -1)}, version=(1000, 7))
    )

    assert not reply.topic_configs_accepted
    assert (counters.topic_config_updates, counters.liveness_refreshes) == (1, 1)
    assert (await stub.GetAllTopicList(pb.GetAllTopicListRequest())).topics == ["orders"]
    live = nameserver.route_table.live_broker("127.0.0.1:10911")
    assert live is not None and live.last_update_timestamp_ms == manual_clock.now_ms()


async def test_new_data_version_replaces_the_brokers_topics(stub, nameserver) -> None:
    await stub.RegisterBroker(
        registration(topics={"orders": (8, 8), "old": (4, 4)}, version=(1000, 1))
    )

    reply = await stub.RegisterBroker(
        registration(topics={"orders": (16, 16), "new": (2, 2)}, version=(2000, 2))
    )

    assert reply.topic_configs_accepted
    assert nameserver.route_table.counters.topic_config_updates == 2
    assert (await stub.GetAllTopicList(pb.GetAllTopicListRequest())).topics == ["new", "orders"]
    assert (await route_of(stub, "orders")).queue_datas[0].read_queue_nums == 16
    assert (await status_of(route_of(stub, "old"))).code() == grpc.StatusCode.NOT_FOUND


async def test_two_brokers_serving_one_topic_get_both_queue_datas(stub) -> None:
    await stub.RegisterBroker(
        registration(name="broker-b", addr="10.0.0.2:10911", topics={"orders": (4, 4)})
    )
    await stub.RegisterBroker(
        registration(
            name="broker-a", addr="10.0.0.1:10911", topics={"orders": (8, 8), "solo": (1, 1)}
        )
    )

    route = await route_of(stub, "orders")

    assert [(q.broker_name, q.read_queue_nums) for q in route.queue_datas] == [
        ("broker-a", 8),
        ("broker-b", 4),
    ]
    assert [(b.broker_name, dict(b.broker_addrs)) for b in route.broker_datas] == [
        ("broker-a", {0: "10.0.0.1:10911"}),
        ("broker-b", {0: "10.0.0.2:10911"}),
    ]
    assert [b.broker_name for b in (await route_of(stub, "solo")).broker_datas] == ["broker-a"]


async def test_all_topic_list_is_sorted_and_deduplicated(stub) -> None:
    await stub.RegisterBroker(
        registration(name="broker-a", addr="10.0.0.1:1", topics={"b": (1, 1), "a": (1, 1)})
    )
    await stub.RegisterBroker(
        registration(name="broker-b", addr="10.0.0.2:1", topics={"c": (1, 1), "a": (1, 1)})
    )

    reply = await stub.GetAllTopicList(pb.GetAllTopicListRequest())

    assert list(reply.topics) == ["a", "b", "c"]


# ----------------------------------------------------------------- slaves, clusters


async def test_cluster_info_lists_brokers_by_name_and_cluster(stub, manual_clock) -> None:
    await stub.RegisterBroker(registration(cluster="c1", name="broker-a", addr="10.0.0.1:1"))
    slave = await stub.RegisterBroker(
        registration(cluster="c1", name="broker-a", addr="10.0.0.11:1", broker_id=1)
    )
    await stub.RegisterBroker(
        registration(
            cluster="c2",
            name="broker-b",
            addr="10.0.0.2:1",
            heartbeat_timeout_ms=30_000,
            version=(5, 9),
        )
    )

    info = await stub.GetBrokerClusterInfo(pb.GetBrokerClusterInfoRequest())

    assert slave.master_addr == "10.0.0.1:1"
    assert {c: list(n.broker_names) for c, n in info.cluster_addr_table.items()} == {
        "c1": ["broker-a"],
        "c2": ["broker-b"],
    }
    assert dict(info.broker_addr_table["broker-a"].broker_addrs) == {
        0: "10.0.0.1:1",
        1: "10.0.0.11:1",
    }
    assert info.broker_addr_table["broker-b"].cluster == "c2"
    assert [b.broker_addr for b in info.live_brokers] == ["10.0.0.1:1", "10.0.0.11:1", "10.0.0.2:1"]
    b = info.live_brokers[2]
    assert (b.cluster_name, b.broker_name, b.broker_id) == ("c2", "broker-b", 0)
    assert (b.heartbeat_timeout_ms, b.data_version.timestamp_ms, b.data_version.counter) == (
        30_000,
        5,
        9,
    )
    assert b.last_update_timestamp_ms == manual_clock.now_ms()
    assert info.live_brokers[0].heartbeat_timeout_ms == int(EXPIRE_S * 1000)


async def test_slave_registration_keeps_the_masters_routes(stub) -> None:
    await stub.RegisterBroker(registration(addr="10.0.0.1:1", topics={"orders": (8, 8)}))

    reply = await stub.RegisterBroker(
        registration(
            addr="10.0.0.11:1", broker_id=1, topics={"slave-only": (1, 1)}, version=(99, 99)
        )
    )

    assert not reply.topic_configs_accepted
    assert (await stub.GetAllTopicList(pb.GetAllTopicListRequest())).topics == ["orders"]
    assert dict((await route_of(stub, "orders")).broker_datas[0].broker_addrs) == {
        0: "10.0.0.1:1",
        1: "10.0.0.11:1",
    }


async def test_broker_name_live_in_another_cluster_is_failed_precondition(stub) -> None:
    await stub.RegisterBroker(registration(cluster="c1", name="broker-a", addr="10.0.0.1:1"))

    error = await status_of(
        stub.RegisterBroker(
            registration(cluster="c2", name="broker-a", addr="10.0.0.9:1", broker_id=1)
        )
    )

    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "'c1'" in error.details() and "'c2'" in error.details()
    info = await stub.GetBrokerClusterInfo(pb.GetBrokerClusterInfoRequest())
    assert [b.broker_addr for b in info.live_brokers] == ["10.0.0.1:1"]


async def test_address_reregistering_under_a_new_name_drops_the_old_identity(stub) -> None:
    await stub.RegisterBroker(
        registration(name="broker-a", addr="10.0.0.1:1", topics={"old": (1, 1)})
    )

    await stub.RegisterBroker(
        registration(name="broker-z", addr="10.0.0.1:1", topics={"new": (1, 1)})
    )

    info = await stub.GetBrokerClusterInfo(pb.GetBrokerClusterInfoRequest())
    assert list(info.broker_addr_table) == ["broker-z"]
    assert (await stub.GetAllTopicList(pb.GetAllTopicListRequest())).topics == ["new"]


async def test_master_moving_to_a_new_address_replaces_the_old_one(stub) -> None:
    await stub.RegisterBroker(registration(addr="10.0.0.1:1"))

    await stub.RegisterBroker(registration(addr="10.0.0.2:1"))

    info = await stub.GetBrokerClusterInfo(pb.GetBrokerClusterInfoRequest())
    assert dict(info.broker_addr_table["broker-a"].broker_addrs) == {0: "10.0.0.2:1"}
    assert [b.broker_addr for b in info.live_brokers] == ["10.0.0.2:1"]


# -------------------------------------------------------------- expiry, unregister


async def test_broker_silent_past_the_timeout_is_dropped(stub, nameserver, manual_clock):
    await stub.RegisterBroker(registration(topics={"orders": (8, 8)}))
    manual_clock.advance(EXPIRE_S)
    assert nameserver.run_once() == []  # exactly at the timeout: still alive

    manual_clock.advance(1)
    expired = nameserver.run_once()

    assert [e.broker.broker_addr for e in expired] == ["127.0.0.1:10911"]
    assert (await status_of(route_of(stub, "orders"))).code() == grpc.StatusCode.NOT_FOUND
    info = await stub.GetBrokerClusterInfo(pb.GetBrokerClusterInfoRequest())
    assert (len(info.live_brokers), len(info.broker_addr_table), len(info.cluster_addr_table)) == (
        0,
        0,
        0,
    )
    assert nameserver.route_table.counters.expirations == 1


async def test_heartbeat_keeps_a_broker_alive_past_the_first_timeout(
    stub, nameserver, manual_clock
) -> None:
    await stub.RegisterBroker(registration())
    for _ in range(4):
        manual_clock.advance(EXPIRE_S / 2)
        await stub.RegisterBroker(registration())
        assert nameserver.run_once() == []
    assert len((await route_of(stub, "orders")).queue_datas) == 1


async def test_heartbeat_timeout_in_the_request_overrides_the_default(
    stub, nameserver, manual_clock
) -> None:
    await stub.RegisterBroker(
        registration(name="short", addr="10.0.0.1:1", heartbeat_timeout_ms=10_000)
    )
    await stub.RegisterBroker(registration(name="default", addr="10.0.0.2:1"))

    manual_clock.advance(11)

    assert [e.broker.broker_name for e in nameserver.run_once()] == ["short"]


async def test_expired_master_leaves_the_route_to_its_live_slave(
    stub, nameserver, manual_clock
) -> None:
    await stub.RegisterBroker(registration(addr="10.0.0.1:1", heartbeat_timeout_ms=10_000))
    await stub.RegisterBroker(registration(addr="10.0.0.11:1", broker_id=1))
    manual_clock.advance(11)

    nameserver.run_once()

    route = await route_of(stub, "orders")
    assert dict(route.broker_datas[0].broker_addrs) == {1: "10.0.0.11:1"}


async def test_broker_reregisters_after_expiry(stub, nameserver, manual_clock) -> None:
    await stub.RegisterBroker(registration(topics={"orders": (8, 8)}, version=(1000, 3)))
    manual_clock.advance(EXPIRE_S + 1)
    assert len(nameserver.run_once()) == 1

    # The same data version again: after expiry it is a first registration.
    reply = await stub.RegisterBroker(registration(topics={"orders": (8, 8)}, version=(1000, 3)))

    assert reply.topic_configs_accepted
    assert [q.broker_name for q in (await route_of(stub, "orders")).queue_datas] == ["broker-a"]


async def test_background_scan_drops_silent_brokers(manual_clock, eventually) -> None:
    config = NamesrvConfig(
        host="127.0.0.1", port=0, broker_expire_seconds=1, scan_interval_seconds=0.01
    )
    async with (
        NameServer(config, clock=manual_clock) as server,
        grpc.aio.insecure_channel(server.address) as channel,
    ):
        stub = nameserver_pb2_grpc.NameServerStub(channel)
        await stub.RegisterBroker(registration())
        manual_clock.advance(2)

        await eventually(
            lambda: server.route_table.counters.expirations == 1,
            what="the liveness scan expiring the broker",
        )

        assert (await status_of(route_of(stub, "orders"))).code() == grpc.StatusCode.NOT_FOUND


async def test_unregister_removes_the_broker_and_its_routes(stub) -> None:
    await stub.RegisterBroker(registration(topics={"orders": (8, 8)}))
    request = pb.UnregisterBrokerRequest(
        cluster_name="DefaultCluster",
        broker_name="broker-a",
        broker_addr="127.0.0.1:10911",
        broker_id=0,
    )

    first = await stub.UnregisterBroker(request)
    second = await stub.UnregisterBroker(request)

    assert (first.was_registered, second.was_registered) == (True, False)
    assert (await status_of(route_of(stub, "orders"))).code() == grpc.StatusCode.NOT_FOUND
    assert (await stub.GetAllTopicList(pb.GetAllTopicListRequest())).topics == []


async def test_unregister_naming_the_wrong_broker_changes_nothing(stub) -> None:
    await stub.RegisterBroker(registration(name="broker-a", addr="10.0.0.1:1"))

    reply = await stub.UnregisterBroker(
        pb.UnregisterBrokerRequest(
            cluster_name="DefaultCluster", broker_name="broker-x", broker_addr="10.0.0.1:1"
        )
    )

    assert not reply.was_registered
    assert len((await route_of(stub, "orders")).broker_datas) == 1


# ------------------------------------------------------------- several nameservers


async def test_two_nameservers_in_one_process_are_independent(manual_clock) -> None:
    config = NamesrvConfig(host="127.0.0.1", port=0)
    async with (
        NameServer(config, clock=manual_clock) as first,
        NameServer(config, clock=manual_clock) as second,
        grpc.aio.insecure_channel(first.address) as ch1,
        grpc.aio.insecure_channel(second.address) as ch2,
    ):
        stub1 = nameserver_pb2_grpc.NameServerStub(ch1)
        stub2 = nameserver_pb2_grpc.NameServerStub(ch2)
        assert first.port != second.port

        await stub1.RegisterBroker(registration(topics={"only-on-first": (1, 1)}))
        await stub2.RegisterBroker(
            registration(name="broker-b", addr="10.0.0.2:1", topics={"only-on-second": (1, 1)})
        )

        assert (await stub1.GetAllTopicList(pb.GetAllTopicListRequest())).topics == [
            "only-on-first"
        ]
        assert (await stub2.GetAllTopicList(pb.GetAllTopicListRequest())).topics == [
            "only-on-second"
        ]
        error = await status_of(route_of(stub2, "only-on-first"))
        assert error.code() == grpc.StatusCode.NOT_FOUND


# ------------------------------------------------------------------ invalid inputs


def _invalid_registrations() -> list[tuple[pb.RegisterBrokerRequest, str]]:
    no_version = registration()
    no_version.ClearField("data_version")
    duplicate = registration()
    duplicate.topic_configs.append(duplicate.topic_configs[0])
    return [
        (registration(cluster=""), "cluster_name"),
        (registration(name=""), "broker_name"),
        (registration(name="broker a"), "broker_name"),
        (registration(addr=""), "broker_addr"),
        (registration(addr="nohost"), "broker_addr"),
        (registration(addr="h:70000"), "broker_addr"),
        (registration(addr="h:0"), "broker_addr"),
        (registration(broker_id=-1), "broker_id"),
        (registration(heartbeat_timeout_ms=-5), "heartbeat_timeout_ms"),
        (no_version, "data_version"),
        (registration(version=(-1, 0)), "data_version.timestamp_ms"),
        (registration(topics={"orders": (-1, 8)}), "topic_configs[0].read_queue_nums"),
        (registration(topics={"orders": (8, -2)}), "topic_configs[0].write_queue_nums"),
        (registration(topics={"": (8, 8)}), "topic_configs[0].topic_name"),
        (registration(topics={"bad topic": (8, 8)}), "topic_configs[0].topic_name"),
        (registration(perm=64), "topic_configs[0].perm"),
        (duplicate, "topic_configs[1].topic_name"),
    ]


@pytest.mark.parametrize(("request_pb", "field"), _invalid_registrations())
async def test_invalid_registration_is_invalid_argument_naming_the_field(
    stub, request_pb, field
) -> None:
    error = await status_of(stub.RegisterBroker(request_pb))

    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith(f"{field}: "), error.details()
    # Nothing was stored, and the server still answers.
    info = await stub.GetBrokerClusterInfo(pb.GetBrokerClusterInfoRequest())
    assert len(info.live_brokers) == 0


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("", "topic: topic name is empty"),
        ("x" * 128, "topic: topic name is 128 characters"),
        ("a b", "topic: topic name 'a b' contains ' '"),
    ],
)
async def test_invalid_topic_lookup_is_invalid_argument(stub, topic, expected) -> None:
    error = await status_of(route_of(stub, topic))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith(expected), error.details()


async def test_invalid_unregister_is_invalid_argument(stub) -> None:
    error = await status_of(
        stub.UnregisterBroker(
            pb.UnregisterBrokerRequest(cluster_name="c", broker_name="b", broker_addr="bad")
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("broker_addr: ")


async def test_a_bug_is_internal_and_the_server_keeps_serving(stub, nameserver, monkeypatch):
    def broken() -> list[str]:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(nameserver.route_table, "topics", broken)

    error = await status_of(stub.GetAllTopicList(pb.GetAllTopicListRequest()))

    assert error.code() == grpc.StatusCode.INTERNAL
    assert "GetAllTopicList" in error.details() and "simulated bug" in error.details()
    await stub.RegisterBroker(registration())
    assert len((await route_of(stub, "orders")).queue_datas) == 1


# ---------------------------------------------------------------------------- CLI


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pocketmq", "nameserver", *args]


async def test_cli_serves_until_sigterm_then_exits_zero(unused_tcp_port, eventually) -> None:
    port = unused_tcp_port
    proc = subprocess.Popen(
        _cli("--host", "127.0.0.1", "--port", str(port)),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = nameserver_pb2_grpc.NameServerStub(channel)

            async def serving() -> bool:
                if proc.poll() is not None:
                    raise AssertionError(f"nameserver exited with {proc.returncode}")
                try:
                    await asyncio.wait_for(channel.channel_ready(), timeout=0.2)
                except TimeoutError:
                    return False
                return True

            await eventually(serving, timeout_s=30, what="the nameserver accepting connections")
            await stub.RegisterBroker(registration())
            reply = await stub.GetAllTopicList(pb.GetAllTopicListRequest())
            assert list(reply.topics) == ["orders"]

        proc.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(proc.wait, 20)
    finally:
        if proc.poll() is None:
            proc.kill()
        _, stderr = proc.communicate()
    assert returncode == 0, stderr.decode()
    assert f"listening on 127.0.0.1:{port}" in stderr.decode()


def test_cli_config_error_prints_the_message_and_exits_2(tmp_path) -> None:
    config = tmp_path / "namesrv.toml"
    config.write_text("broker_expire_secs = 30\n")

    done = subprocess.run(
        _cli("--config", str(config)), cwd=REPO_ROOT, capture_output=True, timeout=60
    )

    assert done.returncode == 2
    assert "unknown key 'broker_expire_secs'" in done.stderr.decode()
    assert "did you mean 'broker_expire_seconds'" in done.stderr.decode()
