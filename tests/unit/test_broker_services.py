"""Send, pull and admin services against a small in-memory store.

The fake implements the MessageStore protocol's read semantics (RocketMQ's
getMessage offset statuses) closely enough to drive the services; the real
store is exercised by tests/integration/test_broker_*.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools

import pytest
import storekit

from pocketmq.broker.admin_processor import AdminProcessor
from pocketmq.broker.client_manager import ClientManager
from pocketmq.broker.consumer_offsets import ConsumerOffsetManager
from pocketmq.broker.errors import (
    BrokerError,
    IllegalArgumentError,
    NoPermissionError,
    PutRejectedError,
    ResourceNotFoundError,
)
from pocketmq.broker.long_polling import PullRequestHolder
from pocketmq.broker.pull_processor import (
    PullMessageProcessor,
    PullOutcomeStatus,
    PullRequest,
)
from pocketmq.broker.send_processor import SendMessageProcessor, SendStatus
from pocketmq.broker.store.batch import scan_batch
from pocketmq.broker.store.results import GetResult, GetStatus, PutResult, PutStatus
from pocketmq.broker.topic_config import BrokerTopicConfig, Perm, TopicConfigManager
from pocketmq.common.clock import ManualClock
from pocketmq.common.hashing import tags_code
from pocketmq.common.message import decode_record, encode_record, iter_records
from pocketmq.common.msgid import encode_offset_msg_id

STORE_HOST = ("127.0.0.1", 10911)


class FakeStore:
    """Records per queue in memory; offsets and statuses as RocketMQ's store gives them."""

    def __init__(self) -> None:
        self.queues: dict[tuple[str, int], list[tuple[bytes, int, int]]] = {}
        self.by_phys: dict[int, bytes] = {}
        self.phys = 0
        self.listeners = []
        self.puts = 0
        self.put_status = PutStatus.PUT_OK
        self.flush_status: PutStatus | None = None
        self.now_ms = 1_700_000_000_000

    max_body_size = 1024  # as the broker's max_message_size_bytes in these tests

    def scan(self, blob, *, allow_empty_body=True):
        return scan_batch(blob, max_body_size=self.max_body_size, allow_empty_body=allow_empty_body)

    def put_batch(self, blob, *, scanned=None):
        self.puts += 1
        if self.put_status is not PutStatus.PUT_OK:
            return PutResult(status=self.put_status, error=f"fake {self.put_status.value}")
        lists = {
            k: []
            for k in ("topics", "queue_ids", "queue_offsets", "phys_offsets", "sizes", "uniq_keys")
        }
        arrived = {}
        for msg in iter_records(bytes(blob)):
            queue = self.queues.setdefault((msg.topic, msg.queue_id), [])
            rec = encode_record(
                topic=msg.topic,
                body=msg.body,
                queue_id=msg.queue_id,
                properties=msg.properties,
                queue_offset=len(queue),
                phys_offset=self.phys,
                store_timestamp_ms=self.now_ms,
            )
            queue.append((rec, tags_code(msg.tags), self.now_ms))
            self.by_phys[self.phys] = rec
            for key, value in (
                ("topics", msg.topic),
                ("queue_ids", msg.queue_id),
                ("queue_offsets", len(queue) - 1),
                ("phys_offsets", self.phys),
                ("sizes", len(rec)),
                ("uniq_keys", msg.uniq_key),
            ):
                lists[key].append(value)
            self.phys += len(rec)
            arrived[(msg.topic, msg.queue_id)] = len(queue)
        future = None
        if self.flush_status is not None:
            future = concurrent.futures.Future()
            future.set_result(self.flush_status)
        for (topic, qid), max_offset in arrived.items():
            for listener in self.listeners:
                listener(topic, qid, max_offset)
        return PutResult(
            status=PutStatus.PUT_OK, store_timestamp_ms=self.now_ms, flush_future=future, **lists
        )

    def get_messages(
        self, topic, queue_id, offset, *, max_count=None, max_bytes=None, tag_codes=None
    ):
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            return GetResult(
                status=GetStatus.NO_MATCHED_LOGIC_QUEUE,
                next_begin_offset=0,
                min_offset=0,
                max_offset=0,
            )
        lo, hi = 0, len(queue)

        def result(status, next_offset, records=()):
            return GetResult(
                status=status,
                next_begin_offset=next_offset,
                min_offset=lo,
                max_offset=hi,
                records=list(records),
            )

        if hi == 0:
            return result(GetStatus.NO_MESSAGE_IN_QUEUE, 0)
        if offset < lo:
            return result(GetStatus.OFFSET_TOO_SMALL, lo)
        if offset == hi:
            return result(GetStatus.OFFSET_OVERFLOW_ONE, offset)
        if offset > hi:
            return result(GetStatus.OFFSET_OVERFLOW_BADLY, hi)
        found, i = [], offset
        while i < hi and len(found) < (max_count or 32):
            rec, code, _ = queue[i]
            if tag_codes is None or code in tag_codes:
                found.append(rec)
            i += 1
        return result(GetStatus.FOUND if found else GetStatus.NO_MATCHED_MESSAGE, i, found)

    def get_message_blob(self, topic, queue_id, offset, **kwargs):
        return self.get_messages(topic, queue_id, offset, **kwargs)  # the list form is allowed

    def read_record(self, phys_offset):
        return self.by_phys.get(phys_offset)

    def log_end_offset(self):
        return max((p + len(r) for p, r in self.by_phys.items()), default=0)

    def flush_request(self, end_offset):
        return None

    def query_by_key(
        self, topic, key, *, max_count=None, begin_timestamp_ms=0, end_timestamp_ms=None
    ):
        return [r for r in self.by_phys.values() if key in decode_record(r).keys]

    def min_offset(self, topic, queue_id):
        return 0

    def max_offset(self, topic, queue_id):
        return len(self.queues.get((topic, queue_id), []))

    def end_offset(self, topic, queue_id):
        return self.max_offset(topic, queue_id)

    def store_timestamp(self, topic, queue_id, offset):
        queue = self.queues.get((topic, queue_id), [])
        return queue[offset][2] if 0 <= offset < len(queue) else None

    def offset_by_timestamp(self, topic, queue_id, timestamp_ms):
        return 0

    def delete_topics(self, topics):
        for key in [k for k in self.queues if k[0] in set(topics)]:
            del self.queues[key]

    def add_arrival_listener(self, listener):
        self.listeners.append(listener)


record = functools.partial(
    storekit.record,
    topic="TopicA",
    uniq="U1",
    born_timestamp_ms=0,
    born_host=("10.0.0.9", 5000),
    store_host=STORE_HOST,
)


class Env:
    def __init__(self, tmp_path, *, auto_create=True):
        self.store = FakeStore()
        self.clock = ManualClock()
        self.topics = TopicConfigManager(
            str(tmp_path / "config"),
            broker_name="broker-a",
            cluster_name="DefaultCluster",
            auto_create_enable=auto_create,
            clock=self.clock,
        )
        self.topics.load()
        self.offsets = ConsumerOffsetManager(str(tmp_path / "config"))
        self.hold = PullRequestHolder(max_parked=100)
        self.store.add_arrival_listener(self.hold.on_arrival)
        self.clients = ClientManager(broker_name="broker-a", clock=self.clock)
        self.send = SendMessageProcessor(self.store, self.topics, store_host=STORE_HOST)
        self.pull_service = PullMessageProcessor(
            self.store, self.topics, self.offsets, self.hold, max_pull_messages=32
        )
        self.admin = AdminProcessor(
            self.store,
            self.topics,
            self.offsets,
            self.clients,
            self.hold,
            broker_name="broker-a",
            cluster_name="DefaultCluster",
            store_host=STORE_HOST,
        )

    async def pull(self, **kwargs):
        kwargs.setdefault("consumer_group", "GroupA")
        kwargs.setdefault("topic", "TopicA")
        kwargs.setdefault("queue_id", 0)
        kwargs.setdefault("queue_offset", 0)
        kwargs.setdefault("suspend_timeout_ms", 0)
        return await self.pull_service.pull(PullRequest(**kwargs))


@pytest.fixture
def env(tmp_path):
    return Env(tmp_path)


# -- send -----------------------------------------------------------------------------------
async def test_send_answers_ids_queue_and_offset_per_message(env):
    blob = (
        record(queue_id=1, uniq="A")
        + record(queue_id=1, uniq="B")
        + record(topic="TopicB", queue_id=0, uniq="C")
    )
    outcome = await env.send.send(blob)
    assert list(
        zip(outcome.topics, outcome.queue_ids, outcome.queue_offsets, outcome.msg_ids, strict=True)
    ) == [("TopicA", 1, 0, "A"), ("TopicA", 1, 1, "B"), ("TopicB", 0, 0, "C")]
    assert outcome.status is SendStatus.SEND_OK
    first_record_size = len(env.store.queues[("TopicA", 1)][0][0])
    assert outcome.offset_msg_ids[1] == encode_offset_msg_id(*STORE_HOST, first_record_size)
    assert outcome.store_timestamp_ms == env.store.now_ms
    assert env.topics.get("TopicB").write_queue_nums == 8  # auto-created


async def test_a_timed_out_sync_flush_still_acknowledges_with_its_status(env):
    env.store.flush_status = PutStatus.FLUSH_DISK_TIMEOUT
    outcome = await env.send.send(record())
    assert outcome.status is SendStatus.FLUSH_DISK_TIMEOUT


def _corrupt(rec: bytes, pos: int, value: bytes) -> bytes:
    return rec[:pos] + value + rec[pos + len(value) :]


@pytest.mark.parametrize(
    ("blob", "reason", "words"),
    [
        (b"", "MESSAGE_ILLEGAL", "no records"),
        (record()[:40], "MESSAGE_ILLEGAL", "cut short"),
        (_corrupt(record(), 4, b"\x00\x00\x00\x00"), "MESSAGE_ILLEGAL", "magic code"),
        (record()[:-1], "MESSAGE_ILLEGAL", "TOTALSIZE"),
        (record(body=b""), "MESSAGE_ILLEGAL", "body is empty"),
        (
            record(body=b"x" * 2048),
            "MESSAGE_BODY_TOO_LARGE",
            "message body is 2048 bytes; this broker accepts at most 1024 (max_message_size_bytes)",
        ),
        (record(topic="bad topic"), "MESSAGE_ILLEGAL", "contains"),
        (record(queue_id=8), "QUEUE_OUT_OF_RANGE", "queue id 8 is out of range"),
        (record(queue_id=-1), "QUEUE_OUT_OF_RANGE", "queue id -1 is out of range"),
    ],
)
async def test_each_malformed_send_gets_its_own_refusal_and_stores_nothing(
    env, blob, reason, words
):
    with pytest.raises(IllegalArgumentError) as info:
        await env.send.send(blob)
    assert info.value.reason == reason
    assert words in info.value.message
    assert env.store.puts == 0


async def test_a_mixed_batch_refusal_names_its_first_bad_record_and_creates_no_topic(env):
    good, other_topic = record(), record(topic="TopicNew", queue_id=1)
    bad_queue, system = record(queue_id=8), record(topic="SCHEDULE_TOPIC_XXXX")
    with pytest.raises(IllegalArgumentError) as info:
        await env.send.send(good + other_topic + bad_queue + system)
    assert info.value.reason == "QUEUE_OUT_OF_RANGE"
    assert info.value.message.startswith(
        f"record at batch offset {len(good) + len(other_topic)}: queue id 8 is out of range"
    )
    with pytest.raises(NoPermissionError, match="written by the broker only"):
        await env.send.send(good + system + bad_queue)
    assert env.store.puts == 0
    assert env.topics.get("TopicNew") is None


async def test_send_refuses_system_topics_and_unwritable_topics(env):
    with pytest.raises(NoPermissionError, match="written by the broker only"):
        await env.send.send(record(topic="SCHEDULE_TOPIC_XXXX"))
    env.topics.create(BrokerTopicConfig(topic_name="ReadOnly", perm=Perm.READ))
    with pytest.raises(NoPermissionError, match="not writable"):
        await env.send.send(record(topic="ReadOnly"))
    assert env.store.puts == 0


async def test_send_to_an_unknown_topic_with_auto_create_off_says_how_to_create_it(tmp_path):
    env = Env(tmp_path, auto_create=False)
    with pytest.raises(ResourceNotFoundError, match="CreateTopic") as info:
        await env.send.send(record(topic="Unknown"))
    assert info.value.reason == "TOPIC_NOT_EXIST"
    assert env.topics.get("Unknown") is None and env.store.puts == 0


async def test_a_bad_record_late_in_a_batch_creates_no_topic(env):
    with pytest.raises(IllegalArgumentError):
        await env.send.send(record(topic="NewTopic") + record(topic="NewTopic", queue_id=99))
    assert env.topics.get("NewTopic") is None


async def test_send_message_refuses_more_than_one_record(env):
    with pytest.raises(IllegalArgumentError, match="SendBatch"):
        await env.send.send(record() + record(), single=True)
    assert env.store.puts == 0


@pytest.mark.parametrize(
    "status", [PutStatus.DISK_FULL, PutStatus.SERVICE_NOT_AVAILABLE, PutStatus.MESSAGE_ILLEGAL]
)
async def test_store_refusals_carry_the_put_status(env, status):
    env.store.put_status = status
    with pytest.raises(PutRejectedError) as info:
        await env.send.send(record())
    assert info.value.status is status and info.value.reason == status.value


# -- pull -----------------------------------------------------------------------------------
async def test_pull_statuses_and_next_offsets_follow_rocketmq(env):
    env.topics.create(BrokerTopicConfig(topic_name="TopicA"))
    empty = await env.pull(queue_offset=0)
    assert (empty.status, empty.get_status) == (
        PullOutcomeStatus.NO_NEW_MSG,
        GetStatus.NO_MATCHED_LOGIC_QUEUE,
    )
    await env.send.send(record() + record() + record())
    found = await env.pull(queue_offset=1)
    assert (found.status, found.next_begin_offset, len(found.records)) == (
        PullOutcomeStatus.FOUND,
        3,
        2,
    )
    assert [m.queue_offset for m in iter_records(b"".join(found.records))] == [1, 2]
    one = await env.pull(queue_offset=3)
    assert (one.status, one.get_status, one.next_begin_offset) == (
        PullOutcomeStatus.NO_NEW_MSG,
        GetStatus.OFFSET_OVERFLOW_ONE,
        3,
    )
    badly = await env.pull(queue_offset=10)
    assert (badly.status, badly.get_status, badly.next_begin_offset) == (
        PullOutcomeStatus.OFFSET_ILLEGAL,
        GetStatus.OFFSET_OVERFLOW_BADLY,
        3,
    )
    assert (badly.min_offset, badly.max_offset) == (0, 3)


async def test_pull_filters_on_tag_codes(env):
    await env.send.send(record(tags="TagA") + record(tags="TagB") + record(tags="TagC"))
    out = await env.pull(subscription="TagA || TagC")
    assert [m.tags for m in iter_records(b"".join(out.records))] == ["TagA", "TagC"]
    none = await env.pull(subscription="TagZ")
    assert (none.status, none.next_begin_offset) == (PullOutcomeStatus.NO_MATCHED_MSG, 3)


async def test_pull_honours_max_msg_nums_and_the_broker_cap(env):
    await env.send.send(b"".join(record() for _ in range(40)))
    assert len((await env.pull(max_msg_nums=5)).records) == 5
    assert len((await env.pull(max_msg_nums=1000)).records) == 32


async def test_the_consumer_offset_rides_on_the_pull(env):
    await env.send.send(record())
    await env.pull(commit_offset=1)
    assert env.offsets.query("GroupA", "TopicA", 0) == 1


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"consumer_group": ""}, IllegalArgumentError, "group name is empty"),
        ({"topic": "bad/topic"}, IllegalArgumentError, "contains"),
        ({"topic": "Nope"}, ResourceNotFoundError, "does not exist"),
        ({"queue_id": 8}, IllegalArgumentError, "queue id 8 is out of range"),
        ({"queue_offset": -1}, IllegalArgumentError, "queue_offset is -1"),
        ({"max_msg_nums": -2}, IllegalArgumentError, "max_msg_nums is -2"),
        ({"suspend_timeout_ms": -5}, IllegalArgumentError, "suspend_timeout_ms is -5"),
        ({"commit_offset": -1}, IllegalArgumentError, "commit_offset is -1"),
        ({"subscription": " || "}, IllegalArgumentError, "names no tags"),
    ],
)
async def test_each_malformed_pull_gets_its_own_refusal(env, kwargs, error, words):
    env.topics.create(BrokerTopicConfig(topic_name="TopicA"))
    with pytest.raises(error, match=words):
        await env.pull(**kwargs)


async def test_pull_refuses_an_unreadable_topic(env):
    env.topics.create(BrokerTopicConfig(topic_name="WriteOnly", perm=Perm.WRITE))
    with pytest.raises(NoPermissionError, match="not readable"):
        await env.pull(topic="WriteOnly")


# -- long polling through the pull service ----------------------------------------------------
async def wait_parked(hold, count=1):
    for _ in range(100):
        if hold.parked_count >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError("pull never parked")


async def test_an_empty_pull_is_answered_by_the_next_matching_send(env):
    env.topics.create(BrokerTopicConfig(topic_name="TopicA"))
    pull = asyncio.create_task(env.pull(suspend_timeout_ms=30_000))
    await wait_parked(env.hold)
    await env.send.send(record(body=b"late"))
    out = await asyncio.wait_for(pull, 1)
    assert out.status is PullOutcomeStatus.FOUND
    assert [m.body for m in iter_records(b"".join(out.records))] == [b"late"]


async def test_a_non_matching_arrival_parks_the_pull_again_past_it(env):
    env.topics.create(BrokerTopicConfig(topic_name="TopicA"))
    pull = asyncio.create_task(env.pull(subscription="TagA", suspend_timeout_ms=30_000))
    await wait_parked(env.hold)
    await env.send.send(record(tags="TagB"))
    await asyncio.sleep(0)
    await wait_parked(env.hold)
    assert not pull.done()
    await env.send.send(record(tags="TagA"))
    out = await asyncio.wait_for(pull, 1)
    assert out.status is PullOutcomeStatus.FOUND and out.next_begin_offset == 2
    assert [m.tags for m in iter_records(b"".join(out.records))] == ["TagA"]


async def test_a_parked_pull_is_answered_empty_at_its_suspend_time(env):
    env.topics.create(BrokerTopicConfig(topic_name="TopicA"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    out = await env.pull(suspend_timeout_ms=50)
    assert out.status is PullOutcomeStatus.NO_NEW_MSG
    assert loop.time() - started >= 0.045


async def test_offset_errors_are_answered_at_once_without_parking(env):
    await env.send.send(record())
    out = await env.pull(queue_offset=5, suspend_timeout_ms=30_000)
    assert out.status is PullOutcomeStatus.OFFSET_ILLEGAL and env.hold.parked_count == 0


# -- admin ----------------------------------------------------------------------------------
async def test_topic_status_and_consume_progress(env):
    env.topics.create(BrokerTopicConfig(topic_name="TopicA", read_queue_nums=2, write_queue_nums=2))
    await env.send.send(record(queue_id=0) + record(queue_id=0) + record(queue_id=1))
    status = env.admin.topic_status("TopicA")
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in status] == [(0, 0, 2), (1, 0, 1)]
    assert status[0].last_store_timestamp_ms == env.store.now_ms
    env.offsets.commit("GroupA", "TopicA", 0, 1)
    progress = env.admin.consume_progress("GroupA")
    assert [(p.queue_id, p.broker_offset, p.consumer_offset, p.lag) for p in progress] == [
        (0, 2, 1, 1),
        (1, 1, -1, 1),
    ]
    with pytest.raises(ResourceNotFoundError, match="no offsets"):
        env.admin.consume_progress("Nobody")


async def test_view_message_by_offset_msg_id(env):
    outcome = await env.send.send(record(body=b"find me"))
    assert decode_record(env.admin.view_message(outcome.offset_msg_ids[0])).body == b"find me"
    with pytest.raises(IllegalArgumentError, match="not hexadecimal"):
        env.admin.view_message("Z" * 32)
    with pytest.raises(IllegalArgumentError, match=r"names broker 10\.1\.1\.1:10911"):
        env.admin.view_message(encode_offset_msg_id("10.1.1.1", 10911, 0))
    with pytest.raises(ResourceNotFoundError, match="no message at commit-log offset 999"):
        env.admin.view_message(encode_offset_msg_id(*STORE_HOST, 999))


async def test_query_by_key_validates_its_arguments(env):
    await env.send.send(record(keys="order-1"))
    assert len(env.admin.query_by_key("TopicA", "order-1")) == 1
    for kwargs, words in (
        ({"key": ""}, "key is empty"),
        ({"max_num": -1}, "max_num is -1"),
        ({"begin_timestamp_ms": 5, "end_timestamp_ms": 2}, "is after"),
    ):
        args = {"key": "order-1", **kwargs}
        with pytest.raises(IllegalArgumentError, match=words):
            env.admin.query_by_key("TopicA", args.pop("key"), **args)


async def test_delete_topic_drops_queues_and_offsets(env):
    await env.send.send(record(topic="Gone"))
    env.offsets.commit("G", "Gone", 0, 1)
    env.admin.delete_topic("Gone")
    assert env.topics.get("Gone") is None
    assert env.store.max_offset("Gone", 0) == 0
    assert env.offsets.query("G", "Gone", 0) is None


def test_every_refusal_is_a_broker_error():
    for cls in (IllegalArgumentError, ResourceNotFoundError, NoPermissionError):
        assert issubclass(cls, BrokerError)
