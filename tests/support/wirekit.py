"""Raw wire helpers for tests that talk to a broker through its gRPC stub."""

from __future__ import annotations

import time

from pocketmq.common.message import encode_record, pack_host
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import common_pb2


def record(topic="TopicA", queue_id=0, body=b"hello", tags="", keys="", uniq="") -> bytes:
    """One record as a client encodes it (born now on 127.0.0.1:40000)."""
    props = {k: v for k, v in (("TAGS", tags), ("KEYS", keys), ("UNIQ_KEY", uniq)) if v}
    return encode_record(
        topic=topic,
        body=body,
        queue_id=queue_id,
        properties=props,
        born_timestamp_ms=int(time.time() * 1000),
        born_host=pack_host(("127.0.0.1", 40000)),
        store_host=pack_host(("127.0.0.1", 0)),
    )


async def create_topic(stub, name="TopicA", queues=4):
    await stub.CreateTopic(
        pb.CreateTopicRequest(
            topic_config=common_pb2.TopicConfig(
                topic_name=name, read_queue_nums=queues, write_queue_nums=queues, perm=6
            )
        )
    )
