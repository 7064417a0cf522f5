"""ConsumerSendMsgBack: the retry-or-dead-letter decision table, and the copies the
SendBackProcessor stores, over a real store on a manual clock."""

from __future__ import annotations

import pytest
from storekit import small_config

from pocketmq.broker.delay_levels import DelayLevels
from pocketmq.broker.errors import (
    IllegalArgumentError,
    NoPermissionError,
    PutRejectedError,
    ResourceNotFoundError,
)
from pocketmq.broker.schedule import ScheduleMessageService
from pocketmq.broker.send_back import (
    SendBackProcessor,
    SendBackTarget,
    decide_send_back,
)
from pocketmq.broker.store.message_store import DefaultMessageStore
from pocketmq.broker.store.results import PutStatus
from pocketmq.broker.topic_config import BrokerTopicConfig, Perm, TopicConfigManager
from pocketmq.common.message import decode_record

STORE_HOST = ("127.0.0.1", 10911)
LEVELS = DelayLevels.parse("1s 2s 3s 4s 5s 6s")
RETRY, DLQ = SendBackTarget.RETRY, SendBackTarget.DLQ


@pytest.mark.parametrize(
    "reconsume_times, delay_level, max_times, expected",
    [
        # (target, delay level, new reconsume times, max applied)
        (0, 0, 0, (RETRY, 3, 1, 16)),  # 0 = RocketMQ's default of 16
        (0, 0, -1, (RETRY, 3, 1, 16)),
        (2, 0, 16, (RETRY, 5, 3, 16)),  # level = 3 + reconsume times
        (15, 0, 16, (RETRY, 18, 16, 16)),  # the 16th retry
        (16, 0, 16, (DLQ, 0, 17, 16)),  # one too many
        (0, 7, 16, (RETRY, 7, 1, 16)),  # the consumer's own level
        (0, -1, 16, (DLQ, 0, 1, 16)),  # a negative level: straight to the DLQ
        (0, 0, 1, (RETRY, 3, 1, 1)),
        (1, 0, 1, (DLQ, 0, 2, 1)),
    ],
)
def test_the_send_back_decision(reconsume_times, delay_level, max_times, expected):
    decision = decide_send_back(
        group="G",
        reconsume_times=reconsume_times,
        delay_level=delay_level,
        max_reconsume_times=max_times,
    )
    assert (
        decision.target,
        decision.delay_level,
        decision.reconsume_times,
        decision.max_reconsume_times,
    ) == expected
    assert decision.topic == ("%RETRY%G" if expected[0] is RETRY else "%DLQ%G")


class Env:
    def __init__(self, tmp_path, clock):
        self.clock = clock
        self.store = DefaultMessageStore(
            small_config(tmp_path / "data", store_host=STORE_HOST), clock=clock
        )
        self.store.start()
        self.topics = TopicConfigManager(
            str(tmp_path / "config"),
            broker_name="broker-a",
            cluster_name="DefaultCluster",
            auto_create_enable=False,
            clock=clock,
        )
        self.topics.load()
        self.service = SendBackProcessor(
            self.store, self.topics, LEVELS, store_host=STORE_HOST, clock=clock
        )
        self.schedule = ScheduleMessageService(
            self.store, LEVELS, str(tmp_path / "config"), clock=clock
        )

    def sent(self, topic="TopicA", **props) -> int:
        result = self.store.put_message(
            topic=topic,
            queue_id=1,
            body=b"payload",
            flag=7,
            born_timestamp_ms=123,
            properties={"UNIQ_KEY": "U1", "TAGS": "TagA", **props},
        )
        assert result.ok
        return result.phys_offsets[0]

    def read(self, topic, queue_id=0):
        return [decode_record(r) for r in self.store.get_messages(topic, queue_id, 0).records]

    async def deliver_after(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.schedule.run_once()


@pytest.fixture
def env(tmp_path, manual_clock):
    env = Env(tmp_path, manual_clock)
    yield env
    env.store.shutdown()


async def test_a_retry_shows_up_in_the_retry_topic_after_its_delay(env):
    phys = env.sent()
    decision = await env.service.send_back(
        group="G", phys_offset=phys, delay_level=0, origin_topic="TopicA", origin_msg_id="U1"
    )
    assert (decision.topic, decision.delay_level) == ("%RETRY%G", 3)
    assert env.topics.get("%RETRY%G") == BrokerTopicConfig(
        topic_name="%RETRY%G", read_queue_nums=1, write_queue_nums=1, perm=Perm.READ_WRITE
    )
    await env.deliver_after(2.999)
    assert env.read("%RETRY%G") == []
    await env.deliver_after(0.001)
    [msg] = env.read("%RETRY%G")
    assert (msg.body, msg.flag, msg.born_timestamp_ms, msg.reconsume_times) == (
        b"payload",
        7,
        123,
        1,
    )
    assert msg.properties == {
        "UNIQ_KEY": "U1",
        "TAGS": "TagA",
        "RETRY_TOPIC": "TopicA",
        "ORIGIN_MESSAGE_ID": "U1",
        "MAX_RECONSUME_TIMES": "16",
    }


async def test_a_second_retry_keeps_the_first_topic_and_waits_longer(env):
    await env.service.send_back(group="G", phys_offset=env.sent(), delay_level=0)
    await env.deliver_after(3)
    [first] = env.read("%RETRY%G")
    decision = await env.service.send_back(
        group="G", phys_offset=first.phys_offset, delay_level=0, origin_topic="TopicA"
    )
    assert (decision.delay_level, decision.reconsume_times) == (4, 2)
    await env.deliver_after(4)
    second = env.read("%RETRY%G")[1]
    assert (
        second.reconsume_times,
        second.properties["RETRY_TOPIC"],
        second.properties["ORIGIN_MESSAGE_ID"],
    ) == (2, "TopicA", "U1")


async def test_past_max_reconsume_times_the_message_is_dead(env):
    phys = env.sent()
    decision = await env.service.send_back(
        group="G", phys_offset=phys, delay_level=0, origin_msg_id="U1", max_reconsume_times=-5
    )
    assert decision.target is RETRY
    phys = env.store.put_message(
        topic="TopicA", queue_id=1, body=b"tired", reconsume_times=3, properties={"UNIQ_KEY": "U2"}
    ).phys_offsets[0]
    decision = await env.service.send_back(
        group="G", phys_offset=phys, delay_level=0, max_reconsume_times=3
    )
    assert (decision.target, decision.reconsume_times) == (DLQ, 4)
    [dead] = env.read("%DLQ%G")  # at once, no delay
    assert (dead.body, dead.reconsume_times) == (b"tired", 4)
    assert dead.properties == {
        "UNIQ_KEY": "U2",
        "RETRY_TOPIC": "TopicA",
        "ORIGIN_MESSAGE_ID": "U2",
        "MAX_RECONSUME_TIMES": "3",
        "DLQ_ORIGIN_TOPIC": "TopicA",
        "DLQ_ORIGIN_MESSAGE_ID": "U2",
    }
    assert env.topics.get("%DLQ%G").write_queue_nums == 1


async def test_a_message_without_uniq_key_is_named_by_its_offset_message_id(env):
    phys = env.store.put_message(topic="TopicA", queue_id=0, body=b"x").phys_offsets[0]
    await env.service.send_back(group="G", phys_offset=phys, delay_level=-1)
    [dead] = env.read("%DLQ%G")
    assert dead.properties["ORIGIN_MESSAGE_ID"] == "7F00000100002A9F" + f"{phys:016X}"


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"group": "bad group"}, IllegalArgumentError, "contains ' '"),
        ({"group": ""}, IllegalArgumentError, "group name is empty"),
        ({"phys_offset": -1}, IllegalArgumentError, "phys_offset is -1"),
        (
            {"phys_offset": 10**9},
            ResourceNotFoundError,
            "no message starts at commit-log offset 1000000000",
        ),
        ({"phys_offset": 3}, ResourceNotFoundError, "no message starts at commit-log offset 3"),
        ({"origin_topic": "TopicB"}, ResourceNotFoundError, "is not of topic 'TopicB'"),
    ],
)
async def test_send_back_refusals_say_what_is_wrong(env, kwargs, error, words):
    request = {"group": "G", "phys_offset": env.sent(), "delay_level": 0, **kwargs}
    with pytest.raises(error, match=words):
        await env.service.send_back(**request)
    assert not [
        tc
        for tc in env.topics.all()  # nothing created for a refusal
        if tc.topic_name.startswith(("%RETRY%", "%DLQ%"))
    ]


async def test_a_closed_retry_topic_is_refused(env):
    env.topics.get_or_create(BrokerTopicConfig(topic_name="%RETRY%G", perm=Perm.READ))
    with pytest.raises(NoPermissionError, match="not writable"):
        await env.service.send_back(group="G", phys_offset=env.sent(), delay_level=0)


async def test_a_store_refusal_is_passed_on(env):
    phys = env.sent()
    env.store.health.disk_full = True
    with pytest.raises(PutRejectedError) as info:
        await env.service.send_back(group="G", phys_offset=phys, delay_level=0)
    assert info.value.status is PutStatus.DISK_FULL


def test_the_retry_topic_is_created_once_with_one_queue(env):
    first = env.service.ensure_retry_topic("G")
    version = env.topics.data_version
    assert env.service.ensure_retry_topic("G") is first
    assert env.topics.data_version == version
