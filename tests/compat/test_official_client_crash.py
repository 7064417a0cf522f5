"""A broker process killed (SIGKILL) between receive and ack keeps its POP state.

The broker runs as a real process; the official client, in an agent, receives
four messages, acks two, and the broker dies. Restarted on the same ports and
data, it takes the acks still owed with the handles given before the crash,
gives back the one message never acked (attempt 2) and none of the acked ones.
"""

from __future__ import annotations

import time

import pytest
from processkit import ProcessKit, free_port

from .test_official_client import receive_until


@pytest.fixture
async def kit(tmp_path):
    processes = ProcessKit(tmp_path)
    yield processes
    await processes.close()


async def _retrying(agent, op, timeout_s=15.0, **fields):
    """A call that may meet the client's channel still reconnecting after the restart."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await agent.call(op, **fields)
        except AssertionError:
            if time.monotonic() > deadline:
                raise


async def test_a_killed_broker_keeps_acks_and_in_flight_messages(kit, agent, nameserver):
    ports = dict(port=free_port(), grpc_v2_port=free_port())
    options = dict(namesrv=nameserver.address, default_topic_queue_nums=2, **ports)
    await kit.broker("broker-a", **options)
    endpoints = f"127.0.0.1:{ports['grpc_v2_port']}"
    a = await agent()
    await a.call("producer", name="p", endpoints=endpoints, topics=["Crash"])
    for i in range(4):
        await a.call("send", producer="p", topic="Crash", body=f"m{i}")
    await a.call("simple", name="c", endpoints=endpoints, group="g", topic="Crash", await_s=1)
    got = sorted(await receive_until(a, "c", 4, invisible_s=4), key=lambda m: m["body"])
    assert [m["body"] for m in got] == ["m0", "m1", "m2", "m3"]
    for msg in got[:2]:
        await a.call("ack", consumer="c", message_id=msg["message_id"])

    await kit.started[-1].kill()
    await kit.broker("broker-a", **options)

    await _retrying(a, "ack", consumer="c", message_id=got[2]["message_id"])
    back = await receive_until(a, "c", 1, timeout_s=10)
    assert [(m["body"], m["attempt"]) for m in back] == [("m3", 2)]
    await a.call("ack", consumer="c", message_id=back[0]["message_id"])
    assert await receive_until(a, "c", 1, timeout_s=2, invisible_s=1) == []
