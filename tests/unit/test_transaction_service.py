"""TransactionResolver over a real store: EndTransaction, idempotence, the op replay
that rebuilds the set of resolved halves, repair of a commit a crash cut, saved progress."""

from __future__ import annotations

import json

import pytest
from storekit import crash, open_store, small_config

from pocketmq.broker.errors import (
    FailedPreconditionError,
    IllegalArgumentError,
    NoPermissionError,
    ResourceNotFoundError,
)
from pocketmq.broker.send_processor import SendMessageProcessor
from pocketmq.broker.store.results import GetStatus
from pocketmq.broker.topic_config import BrokerTopicConfig, TopicConfigManager
from pocketmq.broker.transaction import EndTransactionRequest, TransactionResolver
from pocketmq.broker.transaction_ops import Resolution, op_record, rewrite_half_messages
from pocketmq.common.clock import ManualClock
from pocketmq.common.message import SysFlag, decode_record, encode_record, pack_host

STORE_HOST = ("127.0.0.1", 10911)
HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP = "RMQ_SYS_TRANS_OP_HALF_TOPIC"


def prepared(uniq: str, *, queue_id: int = 1, group: str = "pg") -> bytes:
    return encode_record(
        topic="TopicA",
        body=f"body-{uniq}".encode(),
        queue_id=queue_id,
        properties={"UNIQ_KEY": uniq, "TRAN_MSG": "true", "PGROUP": group},
        sysflag=SysFlag.TRANSACTION_PREPARED,
        born_timestamp_ms=1,
        born_host=pack_host(("10.0.0.9", 4321)),
    )


class Env:
    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.clock = ManualClock()
        self.store = open_store(small_config(tmp_path / "data"), clock=self.clock)
        self.service = self.new_service()

    def new_service(self) -> TransactionResolver:
        service = TransactionResolver(
            self.store, str(self.tmp_path / "config"), store_host=STORE_HOST, clock=self.clock
        )
        service.load()
        return service

    def reopen(self, *, crashed: bool = False) -> None:
        crash(self.store) if crashed else self.store.shutdown()
        self.store = open_store(small_config(self.tmp_path / "data"), clock=self.clock)
        self.service = self.new_service()

    def send_half(self, uniq: str) -> int:
        """Store a half message; its commit-log offset."""
        blob = rewrite_half_messages(
            prepared(uniq), [SysFlag.TRANSACTION_PREPARED], producer_group="", store_host=STORE_HOST
        )
        result = self.store.put_batch(blob)
        assert result.ok
        return result.phys_offsets[0]

    async def end(
        self, offset: int, resolution: Resolution, *, group: str = "pg", msg_id: str = ""
    ):
        return await self.service.end_transaction(
            EndTransactionRequest(
                producer_group=group, commit_log_offset=offset, resolution=resolution, msg_id=msg_id
            )
        )

    def delivered(self, queue_id: int = 1) -> list[str]:
        result = self.store.get_messages("TopicA", queue_id, 0, max_count=100)
        if result.status is not GetStatus.FOUND:
            return []
        return [decode_record(raw).uniq_key for raw in result.records]


@pytest.fixture
def env(tmp_path):
    env = Env(tmp_path)
    yield env
    env.store.shutdown()


async def test_a_commit_delivers_the_message_once_right_after_its_op(env):
    offset = env.send_half("A")
    assert env.delivered() == []  # a half message is invisible
    outcome = await env.end(offset, Resolution.COMMIT, msg_id="A")
    assert not outcome.already_resolved
    assert env.delivered() == ["A"]
    op = decode_record(env.store.get_messages(OP, 0, 0).records[0])
    committed = decode_record(env.store.get_messages("TopicA", 1, 0).records[0])
    assert committed.phys_offset == op.phys_offset + op.total_size  # one batch, op first
    assert committed.prepared_transaction_offset == offset
    assert SysFlag.transaction_type(committed.sysflag) == SysFlag.TRANSACTION_COMMIT
    assert committed.body == b"body-A"


async def test_ending_twice_the_same_way_is_acknowledged_and_changes_nothing(env):
    offset = env.send_half("A")
    await env.end(offset, Resolution.COMMIT)
    again = await env.end(offset, Resolution.COMMIT)
    assert again.already_resolved
    assert env.delivered() == ["A"]
    assert env.store.max_offset(OP, 0) == 1


async def test_the_other_decision_after_one_is_refused_naming_the_first(env):
    committed, rolled_back = env.send_half("A"), env.send_half("B")
    await env.end(committed, Resolution.COMMIT)
    await env.end(rolled_back, Resolution.ROLLBACK)
    with pytest.raises(FailedPreconditionError, match="already committed") as exc:
        await env.end(committed, Resolution.ROLLBACK)
    assert exc.value.reason == "TRANSACTION_COMMIT"
    with pytest.raises(FailedPreconditionError, match="already rolled back"):
        await env.end(rolled_back, Resolution.COMMIT)
    assert (await env.end(rolled_back, Resolution.ROLLBACK)).already_resolved
    assert env.delivered() == ["A"]


async def test_a_rollback_never_delivers(env):
    offset = env.send_half("A")
    await env.end(offset, Resolution.ROLLBACK)
    assert env.delivered() == []
    assert env.service.resolution_of(0) is Resolution.ROLLBACK


async def test_requests_naming_the_wrong_message_are_refused(env):
    offset = env.send_half("A")
    with pytest.raises(NoPermissionError, match="not one of producer group 'other'"):
        await env.end(offset, Resolution.COMMIT, group="other")
    with pytest.raises(IllegalArgumentError, match="msg id"):
        await env.end(offset, Resolution.COMMIT, msg_id="B")
    with pytest.raises(ResourceNotFoundError, match="no message starts"):
        await env.end(offset + 1, Resolution.COMMIT)
    plain = env.store.put_batch(encode_record(topic="TopicA", body=b"x")).phys_offsets[0]
    with pytest.raises(ResourceNotFoundError, match="not a half message"):
        await env.end(plain, Resolution.COMMIT)
    with pytest.raises(IllegalArgumentError, match="COMMIT or ROLLBACK"):
        await env.end(offset, Resolution.DISCARD)
    assert env.delivered() == []


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "kill -9"])
async def test_the_op_replay_rebuilds_the_resolved_set_after_a_restart(env, crashed):
    a, b, c = env.send_half("A"), env.send_half("B"), env.send_half("C")
    await env.end(a, Resolution.COMMIT)
    await env.end(b, Resolution.ROLLBACK)
    env.reopen(crashed=crashed)
    assert [env.service.resolution_of(q) for q in (0, 1, 2)] == [
        Resolution.COMMIT,
        Resolution.ROLLBACK,
        None,
    ]
    assert (await env.end(a, Resolution.COMMIT)).already_resolved
    with pytest.raises(FailedPreconditionError):
        await env.end(b, Resolution.COMMIT)
    await env.end(c, Resolution.COMMIT)
    assert env.delivered() == ["A", "C"]


async def test_a_commit_whose_message_a_crash_cut_is_put_again_by_the_replay(env):
    offset = env.send_half("A")
    half = decode_record(env.store.read_record(offset))
    # What a torn tail leaves: the op of the batch, not the committed message after it.
    env.store.put_batch(
        op_record(
            half_queue_offset=half.queue_offset,
            half_phys_offset=offset,
            resolution=Resolution.COMMIT,
            now_ms=1,
            store_host=STORE_HOST,
        )
    )
    env.reopen(crashed=True)
    assert env.delivered() == ["A"]
    env.reopen(crashed=True)  # found now: never put twice
    assert env.delivered() == ["A"]


async def test_progress_is_saved_and_old_halves_are_found_through_the_index(env, tmp_path):
    a, b = env.send_half("A"), env.send_half("B")
    await env.end(a, Resolution.COMMIT)
    await env.end(b, Resolution.ROLLBACK)
    env.service.advance(2)  # what the check service does once both are resolved
    env.service.persist()
    saved = json.loads((tmp_path / "config" / "transactionProgress.json").read_text())
    assert saved == {"halfOffset": 2, "opOffset": 2, "checkTimes": {}}
    env.reopen()
    assert env.service.resolution_of(0) is None  # no longer kept in memory
    assert (await env.end(a, Resolution.COMMIT)).already_resolved
    with pytest.raises(FailedPreconditionError, match="rolled back"):
        await env.end(b, Resolution.COMMIT)
    assert env.delivered() == ["A"]


async def test_progress_past_the_end_of_a_shortened_queue_is_pulled_back(env, tmp_path):
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "transactionProgress.json").write_text(
        json.dumps({"halfOffset": 50, "opOffset": 40, "checkTimes": {"55": 3}})
    )
    env.reopen()
    assert (env.service.progress.half_offset, env.service.progress.op_offset) == (0, 0)
    await env.end(env.send_half("A"), Resolution.COMMIT)  # offset 0 is not taken for done
    assert env.delivered() == ["A"]


async def test_the_send_path_stores_prepared_records_as_half_messages(env, tmp_path):
    topics = TopicConfigManager(
        str(tmp_path / "config"), broker_name="broker-a", cluster_name="DefaultCluster"
    )
    topics.load()
    topics.create(BrokerTopicConfig(topic_name="TopicA", read_queue_nums=4, write_queue_nums=4))
    send = SendMessageProcessor(env.store, topics, store_host=STORE_HOST)
    outcome = await send.send(prepared("A", group=""), single=True, producer_group="pg")
    assert (outcome.topics, outcome.queue_ids, outcome.msg_ids) == (["TopicA"], [1], ["A"])
    assert env.delivered() == []
    half = decode_record(env.store.get_messages(HALF, 0, 0).records[0])
    assert half.properties["PGROUP"] == "pg"
    assert outcome.offset_msg_ids[0].endswith(f"{half.phys_offset:016X}")
