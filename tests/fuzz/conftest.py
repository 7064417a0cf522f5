"""One nameserver and one broker process for the whole fuzz session.

After each test that takes ``untouched`` the servers must still be running and
serving, and must have stored nothing: the fuzzed requests are all refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aclmode
import pytest
from fuzzkit import QUEUES, TOPIC, Servers
from processkit import ProcessKit

from pocketmq.v1 import broker_pb2, common_pb2


@pytest.fixture(autouse=True)
def _acl_mode(monkeypatch, tmp_path) -> None:
    """POCKETMQ_TEST_ACL=1: servers with the ACL on, clients signing (tests/support/aclmode)."""
    aclmode.install(monkeypatch.setattr, tmp_path)


@pytest.fixture(scope="session")
def servers(tmp_path_factory) -> Iterator[Servers]:
    loop = asyncio.new_event_loop()
    kit = ProcessKit(tmp_path_factory.mktemp("fuzz"))
    try:
        namesrv = loop.run_until_complete(kit.nameserver())
        broker = loop.run_until_complete(
            kit.broker(
                namesrv=namesrv.addr,
                auto_create_topic_enable=False,
                max_message_size_bytes=65536,
                max_batch_size_bytes=262144,
            )
        )
        servers = Servers(broker, namesrv)
        channel = servers.channels["broker"]
        channel.unary_unary("/pocketmq.v1.Broker/CreateTopic")(
            broker_pb2.CreateTopicRequest(
                topic_config=common_pb2.TopicConfig(
                    topic_name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES, perm=6
                ),
            ).SerializeToString(),
            timeout=10,
        )
        servers.send_reference()
        yield servers
        servers.close()
    finally:
        loop.run_until_complete(kit.close())
        loop.close()


@pytest.fixture
def untouched(servers) -> Iterator[Servers]:
    """The servers, checked after the test: up, and nothing stored by the fuzz input."""
    puts, offsets = servers.puts(), servers.max_offsets()
    yield servers
    servers.assert_up()
    assert servers.puts() == puts, "a fuzzed request stored a message"
    assert servers.max_offsets() == offsets
