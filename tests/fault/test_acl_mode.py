"""The suite's ACL mode (``POCKETMQ_TEST_ACL=1``, tests/support/aclmode.py) really is on.

Run in both modes by ``./dev.sh test``: without the mode an unsigned request is
served; with it the same request is refused, while the suite's own clients (an
SDK producer, a raw admin channel) keep working because they sign.
"""

from __future__ import annotations

import asyncio

import aclmode
import grpc
from faultkit import create_topic, routed_brokers, wait_for

from pocketmq.client import Message, Producer
from pocketmq.v1 import broker_pb2 as pb

TOPIC = "AclModeTopic"


def unsigned_status(addr: str) -> grpc.StatusCode:
    # The sync API: aclmode signs only grpc.aio channels made without interceptors.
    with grpc.insecure_channel(addr) as channel:
        try:
            channel.unary_unary("/pocketmq.v1.Broker/GetMaxOffset")(
                pb.GetQueueOffsetRequest(topic=TOPIC).SerializeToString(), timeout=10
            )
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


async def test_servers_follow_the_acl_mode_and_the_suites_clients_sign(kit):
    namesrv = await kit.nameserver()
    broker = await kit.broker("broker-a", namesrv=namesrv.addr)
    await create_topic(broker.addr, TOPIC, 1)  # a raw channel: signed as the admin
    await wait_for(
        lambda: routed_brokers(namesrv.addr, TOPIC), timeout_s=10, what="the topic's route"
    )
    expected = grpc.StatusCode.UNAUTHENTICATED if aclmode.enabled() else grpc.StatusCode.OK
    assert await asyncio.to_thread(unsigned_status, broker.addr) is expected
    async with Producer(group="acl-mode", namesrv=namesrv.addr) as producer:
        sent = await producer.send(Message(topic=TOPIC, body=b"signed"))
    assert sent.queue_offset == 0
