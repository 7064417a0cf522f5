"""Transactional records: the decision table, half-message rewriting, op records, commits."""

from __future__ import annotations

import functools

import pytest
import storekit

from pocketmq.broker.errors import IllegalArgumentError
from pocketmq.broker.transaction_ops import (
    Resolution,
    Verdict,
    commit_record,
    discard_record,
    is_commit_of,
    judge,
    op_record,
    parse_op,
    rewrite_half_messages,
)
from pocketmq.common.message import SysFlag, decode_record, encode_record

STORE_HOST = ("127.0.0.1", 10911)
HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
C, R, D = Resolution.COMMIT, Resolution.ROLLBACK, Resolution.DISCARD
APPLY, ALREADY, CONFLICT = Verdict.APPLY, Verdict.ALREADY, Verdict.CONFLICT

record = functools.partial(
    storekit.record,
    topic="TopicA",
    body=b"order-1",
    queue_id=3,
    tags="paid",
    uniq="U1",
    sysflag=SysFlag.TRANSACTION_PREPARED,
    flag=7,
    born_timestamp_ms=1_600_000_000_000,
    reconsume_times=2,
    TRAN_MSG="true",
    PGROUP="pg",
)


def sysflags(blob: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(blob):
        msg = decode_record(blob, pos, check_crc=False)
        out.append(msg.sysflag)
        pos += msg.total_size
    return out


def rewrite(blob: bytes, *, group: str = "") -> bytes | None:
    return rewrite_half_messages(blob, sysflags(blob), producer_group=group, store_host=STORE_HOST)


# -- the decision table ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("earlier", "requested", "verdict"),
    [
        (None, C, APPLY),
        (None, R, APPLY),
        (None, D, APPLY),
        (C, C, ALREADY),
        (C, R, CONFLICT),
        (C, D, CONFLICT),
        (R, C, CONFLICT),
        (R, R, ALREADY),
        (R, D, CONFLICT),
        (D, C, CONFLICT),
        (D, R, ALREADY),
        (D, D, ALREADY),
        (Resolution.RESOLVED, C, CONFLICT),
        (Resolution.RESOLVED, R, CONFLICT),
    ],
)
def test_the_decision_table(earlier, requested, verdict):
    assert judge(earlier, requested) is verdict


# -- half messages --------------------------------------------------------------------------
def test_a_prepared_record_moves_to_the_half_topic_keeping_where_it_was_sent():
    out = rewrite(record())
    half = decode_record(out)
    assert (half.topic, half.queue_id) == (HALF, 0)
    assert SysFlag.transaction_type(half.sysflag) == SysFlag.TRANSACTION_NOT_TYPE
    assert half.properties["REAL_TOPIC"] == "TopicA"
    assert half.properties["REAL_QID"] == "3"
    assert half.properties["PGROUP"] == "pg"
    assert (half.body, half.flag, half.reconsume_times, half.uniq_key) == (b"order-1", 7, 2, "U1")
    assert half.born_host == ("10.0.0.9", 4321)


def test_plain_and_committed_records_are_left_alone():
    assert rewrite(record(sysflag=0)) is None
    committed = record(sysflag=SysFlag.TRANSACTION_COMMIT)
    assert rewrite(record(sysflag=0) + committed) is None


def test_in_a_batch_only_the_prepared_records_move():
    plain, prepared = record(sysflag=0, uniq="P"), record(uniq="H")
    out = rewrite(plain + prepared + plain)
    topics = []
    pos = 0
    while pos < len(out):
        msg = decode_record(out, pos)
        topics.append((msg.topic, msg.uniq_key))
        pos += msg.total_size
    assert topics == [("TopicA", "P"), (HALF, "H"), ("TopicA", "P")]


def test_the_request_group_stands_in_for_a_missing_pgroup():
    assert decode_record(rewrite(record(PGROUP=""), group="req-g")).properties["PGROUP"] == "req-g"


def test_a_half_message_without_any_group_is_refused():
    with pytest.raises(IllegalArgumentError, match="producer group"):
        rewrite(record(PGROUP=""))


def test_a_damaged_half_message_is_refused():
    raw = bytearray(record())
    raw[90] ^= 0xFF  # a body byte: the CRC no longer matches
    with pytest.raises(IllegalArgumentError, match="CRC"):
        rewrite(bytes(raw))


# -- ops, commits, discards -----------------------------------------------------------------
def stored_half(phys_offset: int = 4096, queue_offset: int = 17):
    raw = bytearray(rewrite(record()))
    msg = decode_record(raw)
    return msg.__class__(
        **{
            **{f: getattr(msg, f) for f in msg.__slots__},
            "phys_offset": phys_offset,
            "queue_offset": queue_offset,
        }
    )


def test_an_op_record_names_the_half_by_queue_offset_and_commit_log_offset():
    raw = op_record(
        half_queue_offset=17, half_phys_offset=4096, resolution=C, now_ms=5, store_host=STORE_HOST
    )
    op = decode_record(raw)
    assert op.topic == "RMQ_SYS_TRANS_OP_HALF_TOPIC"
    assert (op.body, op.tags, op.keys) == (b"17", "d", ["4096"])
    assert parse_op(op).half_queue_offsets == (17,)
    assert parse_op(op).half_phys_offset == 4096
    assert parse_op(op).resolution is C


def test_rocketmq_style_ops_parse_with_several_offsets_and_no_resolution():
    raw = encode_record(
        topic="RMQ_SYS_TRANS_OP_HALF_TOPIC", body=b"3,4,9", properties={"TAGS": "d"}
    )
    entry = parse_op(decode_record(raw))
    assert entry.half_queue_offsets == (3, 4, 9)
    assert entry.half_phys_offset is None
    assert entry.resolution is Resolution.RESOLVED


@pytest.mark.parametrize("body, tags", [(b"x", "d"), (b"", "d"), (b"-1", "d"), (b"1", "TagA")])
def test_foreign_records_are_not_ops(body, tags):
    assert (
        parse_op(
            decode_record(encode_record(topic="T", body=body or b" ", properties={"TAGS": tags}))
        )
        is None
    )


def test_a_commit_restores_topic_and_queue_and_points_at_its_half():
    half = stored_half()
    committed = decode_record(commit_record(half, store_host=STORE_HOST))
    assert (committed.topic, committed.queue_id) == ("TopicA", 3)
    assert SysFlag.transaction_type(committed.sysflag) == SysFlag.TRANSACTION_COMMIT
    assert committed.prepared_transaction_offset == 4096
    assert "REAL_TOPIC" not in committed.properties and "REAL_QID" not in committed.properties
    assert (committed.uniq_key, committed.tags, committed.body) == ("U1", "paid", b"order-1")
    assert is_commit_of(commit_record(half, store_host=STORE_HOST), 4096)
    assert not is_commit_of(commit_record(half, store_host=STORE_HOST), 4097)
    assert not is_commit_of(record(sysflag=0), 4096)


def test_a_discarded_half_is_copied_with_its_properties():
    copy = decode_record(discard_record(stored_half(), store_host=STORE_HOST))
    assert copy.topic == "TRANS_CHECK_MAX_TIME_TOPIC"
    assert copy.properties["REAL_TOPIC"] == "TopicA"
    assert copy.prepared_transaction_offset == 4096
