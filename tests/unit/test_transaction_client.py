"""TransactionProducer's pure parts: the prepared sysflag, the checked message as sent,
user callbacks (sync, async, failing, answering nonsense), what it refuses."""

from __future__ import annotations

import pytest

from pocketmq.client import LocalTransactionState, Message, TransactionProducer
from pocketmq.client.errors import ClientStateError
from pocketmq.client.message_codec import encode_message
from pocketmq.client.remoting import CheckTransactionState
from pocketmq.client.transaction_producer import _ask, _check_message, _prepared
from pocketmq.common.message import SysFlag, decode_record, encode_record

COMMIT, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.UNKNOWN


def test_a_half_record_is_marked_prepared_and_otherwise_unchanged():
    record = encode_message(
        Message(topic="T", body=b"x" * 5000, tags="a"),
        queue_id=2,
        uniq_key="U",
        born_host=b"\x7f\0\0\1\0\0\0\0",
        born_timestamp_ms=1,
    )
    half = decode_record(_prepared(record))
    assert SysFlag.transaction_type(half.sysflag) == SysFlag.TRANSACTION_PREPARED
    assert half.sysflag & SysFlag.COMPRESSED  # other bits kept
    assert (half.topic, half.queue_id, half.tags, half.uniq_key) == ("T", 2, "a", "U")


def test_a_checked_message_comes_back_as_sent():
    stored = encode_record(
        topic="RMQ_SYS_TRANS_HALF_TOPIC",
        body=b"b",
        queue_id=0,
        properties={"REAL_TOPIC": "orders", "REAL_QID": "3", "UNIQ_KEY": "U", "KEYS": "k1"},
        phys_offset=77,
    )
    command = CheckTransactionState(
        broker_addr="b:1",
        producer_group="pg",
        record=stored,
        commit_log_offset=77,
        offset_msg_id="OFFSET-ID",
        msg_id="U",
        check_times=1,
    )
    msg = _check_message(command, "broker-a")
    assert (msg.topic, msg.queue_id, msg.msg_id, msg.keys, msg.broker_name) == (
        "orders",
        3,
        "U",
        ["k1"],
        "broker-a",
    )
    assert msg.offset_msg_id == "OFFSET-ID"
    damaged = CheckTransactionState(
        broker_addr="b:1",
        producer_group="pg",
        record=b"junk",
        commit_log_offset=0,
        offset_msg_id="",
        msg_id="U",
        check_times=1,
    )
    assert _check_message(damaged, "") is None


async def test_callbacks_may_be_sync_or_async_and_failures_mean_unknown(caplog):
    async def coro(msg):
        return COMMIT

    def boom(msg):
        raise RuntimeError("db down")

    assert await _ask(lambda msg: COMMIT, "checker", "U", None) is COMMIT
    assert await _ask(coro, "checker", "U", None) is COMMIT
    assert await _ask(boom, "checker", "U", None) is UNKNOWN
    assert "db down" in caplog.text
    assert await _ask(lambda msg: "COMMIT", "checker", "U", None) is UNKNOWN
    assert "expected a LocalTransactionState" in caplog.text


async def test_sending_needs_a_started_producer_and_a_checker():
    producer = TransactionProducer("pg", "127.0.0.1:9876", checker=lambda msg: COMMIT)
    with pytest.raises(ClientStateError):
        await producer.send_in_transaction(Message(topic="T", body=b"x"), lambda msg, arg: COMMIT)
    with pytest.raises(TypeError, match="checker"):
        TransactionProducer("pg", "127.0.0.1:9876", checker=None)
