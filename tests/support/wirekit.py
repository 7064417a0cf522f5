"""Raw wire helpers for tests that talk to a broker through its gRPC stub."""

from __future__ import annotations

import time

from pocketmq.common.message import encode_record, pack_host
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import common_pb2


def record(
    topic: str = "TopicA",
    queue_id: int = 0,
    body: bytes = b"hello",
    tags: str = "",
    keys: str = "",
    uniq: str = "",
    *,
    delay: int = 0,
    sysflag: int = 0,
    **properties: str,
) -> bytes:
    """One record as a client encodes it (born now on 127.0.0.1:40000).

    Its properties: TAGS, KEYS, UNIQ_KEY and DELAY (a delay level) when given,
    then *properties* as named (``TIMER_DELAY_MS="500"``, ``PGROUP="tx"``).
    """
    given = (("TAGS", tags), ("KEYS", keys), ("UNIQ_KEY", uniq), ("DELAY", str(delay or "")))
    props = {k: v for k, v in given if v}
    return encode_record(
        topic=topic,
        body=body,
        queue_id=queue_id,
        properties={**props, **properties},
        sysflag=sysflag,
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
