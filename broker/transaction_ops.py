"""Transactional messages as records: half messages, op records, commits, the decision table.

Pure functions, no store and no clock of their own; :mod:`.transaction` and
:mod:`.transaction_check` put what these build.

A producer sends a transactional message with sysflag ``TRANSACTION_PREPARED``
and properties ``TRAN_MSG=true``, ``PGROUP={producer group}``. The send path
(:func:`rewrite_half_messages`, keyed on the sysflag) stores it as a *half message*, as RocketMQ's
``TransactionalMessageBridge.parseHalfMessageInner`` does::

                    as sent                        as stored
    topic           TopicA                         RMQ_SYS_TRANS_HALF_TOPIC
    queue id        3                              0
    sysflag         TRANSACTION_PREPARED           TRANSACTION_NOT_TYPE, so the half
                                                   topic's consume queue indexes it
    properties      TRAN_MSG, PGROUP, TAGS, …      the same, plus REAL_TOPIC=TopicA,
                                                   REAL_QID=3

Consumers of ``TopicA`` never see it. Every resolution is an *op record* in
``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (queue 0), RocketMQ's layout plus two
properties of ours::

    body             the half's queue offset, decimal ("17"; RocketMQ 5 joins
                     several with ',', which :func:`parse_op` accepts)
    TAGS             "d" (RocketMQ's REMOVETAG)
    KEYS             the half's commit-log offset, decimal: the key index finds
                     the op of a half from it
    TRAN_RESOLUTION  COMMIT | ROLLBACK | DISCARD

A COMMIT writes the op and the committed message (:func:`commit_record`:
``REAL_TOPIC`` / ``REAL_QID`` restored, sysflag ``TRANSACTION_COMMIT``,
PREPAREDTRANSACTIONOFFSET = the half's commit-log offset) as one batch, op
first, so a crash keeps both, neither, or the op alone, which the op replay
detects and repairs. A DISCARD (too many checks) writes the op and a copy of
the half to ``TRANS_CHECK_MAX_TIME_TOPIC`` for operators.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from pocketmq.broker.delay_levels import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    restore_properties,
)
from pocketmq.broker.errors import IllegalArgumentError
from pocketmq.broker.topic_config import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import (
    StoredMessage,
    SysFlag,
    check_record,
    decode_record,
    encode_record,
    pack_host,
)

__all__ = [
    "OP_TAG",
    "PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS",
    "PROPERTY_PRODUCER_GROUP",
    "PROPERTY_RESOLUTION",
    "PROPERTY_TRANSACTION_PREPARED",
    "OpEntry",
    "Resolution",
    "Verdict",
    "commit_record",
    "discard_record",
    "is_commit_of",
    "judge",
    "op_record",
    "parse_op",
    "rewrite_half_messages",
]

PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_RESOLUTION = "TRAN_RESOLUTION"
OP_TAG = "d"


class Resolution(enum.Enum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    DISCARD = "DISCARD"  # checked transaction_check_max times without an answer
    RESOLVED = "RESOLVED"  # resolved long ago; the op that said how is gone

    def describe(self) -> str:
        return {
            Resolution.COMMIT: "committed",
            Resolution.ROLLBACK: "rolled back",
            Resolution.DISCARD: "discarded after too many unanswered checks",
            Resolution.RESOLVED: "resolved earlier (how is no longer recorded)",
        }[self]


class Verdict(enum.Enum):
    APPLY = "APPLY"  # first decision: write it
    ALREADY = "ALREADY"  # the same decision again: acknowledge, do nothing
    CONFLICT = "CONFLICT"  # the other decision: refuse, naming the earlier one


def judge(earlier: Resolution | None, requested: Resolution) -> Verdict:
    """What an EndTransaction (or a discard) does to a half already resolved *earlier*.

    ==============  =========  ========  ========
    earlier         COMMIT     ROLLBACK  DISCARD
    ==============  =========  ========  ========
    none            APPLY      APPLY     APPLY
    COMMIT          ALREADY    CONFLICT  CONFLICT
    ROLLBACK        CONFLICT   ALREADY   CONFLICT
    DISCARD         CONFLICT   ALREADY   ALREADY
    RESOLVED        CONFLICT   CONFLICT  CONFLICT
    ==============  =========  ========  ========

    A discarded half counts as rolled back (RocketMQ's rule), so a late rollback
    is acknowledged and a late commit refused.
    """
    if earlier is None:
        return Verdict.APPLY
    if earlier is requested:
        return Verdict.ALREADY if earlier is not Resolution.RESOLVED else Verdict.CONFLICT
    if earlier is Resolution.DISCARD and requested is Resolution.ROLLBACK:
        return Verdict.ALREADY
    return Verdict.CONFLICT


# -- the send path ---------------------------------------------------------------------------
def rewrite_half_messages(
    blob: bytes | bytearray | memoryview,
    sysflags: Iterable[int],
    *,
    producer_group: str,
    store_host: tuple[str, int],
) -> bytes | None:
    """*blob* with every prepared record moved to the half topic; None if there is none.

    *sysflags* are the records' SYSFLAGs from the send path's scan; the common
    case, none prepared, costs one ``set`` of them (the flags of a batch are
    mostly equal). *producer_group* stands in for a missing ``PGROUP``.
    Raises IllegalArgumentError for a half message without any producer group.
    """
    if not any(_is_prepared(sysflag) for sysflag in set(sysflags)):
        return None
    raw = blob if isinstance(blob, bytes | bytearray) else bytes(blob)
    packed_store_host = pack_host(store_host)
    parts: list[bytes | bytearray] = []
    changed = False
    pos = 0
    while pos < len(raw):
        try:
            layout = check_record(raw, pos, len(raw), check_crc=False)
        except CorruptRecordError as exc:
            raise _illegal(pos, exc.reason) from None
        end = pos + layout.total_size
        if _is_prepared(layout.sysflag):
            parts.append(_half_record(raw, pos, end, producer_group, packed_store_host))
            changed = True
        else:
            parts.append(raw[pos:end])
        pos = end
    return b"".join(parts) if changed else None


def _is_prepared(sysflag: int) -> bool:
    return SysFlag.transaction_type(sysflag) == SysFlag.TRANSACTION_PREPARED


def _half_record(
    raw: bytes | bytearray, pos: int, end: int, producer_group: str, packed_store_host: bytes
) -> bytes:
    try:
        msg = decode_record(raw, pos, limit=end, check_crc=True)
    except CorruptRecordError as exc:
        raise _illegal(pos, exc.reason) from None
    props = dict(msg.properties)
    group = props.get(PROPERTY_PRODUCER_GROUP) or producer_group
    if not group:
        raise _illegal(
            pos,
            "a transactional (prepared) message needs its producer group, in "
            "property PGROUP or the request's producer_group, so the broker "
            "knows whom to ask about it",
        )
    props[PROPERTY_PRODUCER_GROUP] = group
    props[PROPERTY_TRANSACTION_PREPARED] = "true"
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    try:
        return encode_record(
            topic=TRANS_HALF_TOPIC,
            body=msg.body,
            queue_id=0,
            flag=msg.flag,
            properties=props,
            sysflag=_with_transaction_type(msg.sysflag, SysFlag.TRANSACTION_NOT_TYPE),
            born_timestamp_ms=msg.born_timestamp_ms,
            born_host=pack_host(msg.born_host),
            store_host=packed_store_host,
            reconsume_times=msg.reconsume_times,
        )
    except ValueError as exc:
        raise IllegalArgumentError(
            f"record at batch offset {pos}: cannot store it as a half message: {exc}",
            reason="PROPERTIES_SIZE_EXCEEDED",
        ) from None


def _with_transaction_type(sysflag: int, kind: int) -> int:
    return (sysflag & ~SysFlag.TRANSACTION_MASK) | kind


def _illegal(pos: int, what: str) -> IllegalArgumentError:
    return IllegalArgumentError(f"record at batch offset {pos}: {what}", reason="MESSAGE_ILLEGAL")


# -- what a resolution writes --------------------------------------------------------------
def op_record(
    *,
    half_queue_offset: int,
    half_phys_offset: int,
    resolution: Resolution,
    now_ms: int,
    store_host: tuple[str, int],
) -> bytes:
    """The op record saying how the half at these offsets was resolved."""
    host = pack_host(store_host)
    return encode_record(
        topic=TRANS_OP_HALF_TOPIC,
        body=str(half_queue_offset).encode(),
        queue_id=0,
        properties={
            "TAGS": OP_TAG,
            "KEYS": str(half_phys_offset),
            PROPERTY_RESOLUTION: resolution.value,
        },
        born_timestamp_ms=now_ms,
        born_host=host,
        store_host=host,
    )


@dataclass(frozen=True, slots=True)
class OpEntry:
    """One op record, parsed: the halves it resolves and how."""

    half_queue_offsets: tuple[int, ...]
    half_phys_offset: int | None  # None in an op written by another broker build
    resolution: Resolution  # RESOLVED when the op does not say


def parse_op(msg: StoredMessage) -> OpEntry | None:
    """The op in *msg*, or None when it is not one (a foreign or damaged record)."""
    if msg.properties.get("TAGS") != OP_TAG:
        return None
    try:
        offsets = tuple(int(part) for part in msg.body.decode("ascii").split(",") if part)
    except (UnicodeDecodeError, ValueError):
        return None
    if not offsets or min(offsets) < 0:
        return None
    raw_phys = msg.properties.get("KEYS", "")
    try:
        resolution = Resolution(msg.properties.get(PROPERTY_RESOLUTION, "RESOLVED"))
    except ValueError:
        resolution = Resolution.RESOLVED
    return OpEntry(offsets, int(raw_phys) if raw_phys.isdigit() else None, resolution)


def commit_record(half: StoredMessage, *, store_host: tuple[str, int]) -> bytes:
    """The committed message: the half back in its topic and queue, sysflag COMMIT.

    ValueError when the half does not name its topic and queue (REAL_TOPIC/REAL_QID).
    """
    topic, queue_id, properties = restore_properties(half.properties)
    return encode_record(
        topic=topic,
        body=half.body,
        queue_id=queue_id,
        flag=half.flag,
        properties=properties,
        sysflag=_with_transaction_type(half.sysflag, SysFlag.TRANSACTION_COMMIT),
        born_timestamp_ms=half.born_timestamp_ms,
        born_host=pack_host(half.born_host),
        store_host=pack_host(store_host),
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half.phys_offset,
    )


def is_commit_of(raw: bytes, half_phys_offset: int) -> bool:
    """Whether *raw* is the committed message of the half at *half_phys_offset*."""
    try:
        msg = decode_record(raw, check_crc=False)
    except CorruptRecordError:
        return False
    return (
        SysFlag.transaction_type(msg.sysflag) == SysFlag.TRANSACTION_COMMIT
        and msg.prepared_transaction_offset == half_phys_offset
    )


def discard_record(half: StoredMessage, *, store_host: tuple[str, int]) -> bytes:
    """A copy of a discarded half in TRANS_CHECK_MAX_TIME_TOPIC, properties as stored."""
    return encode_record(
        topic=TRANS_CHECK_MAX_TIME_TOPIC,
        body=half.body,
        queue_id=0,
        flag=half.flag,
        properties=half.properties,
        sysflag=half.sysflag,
        born_timestamp_ms=half.born_timestamp_ms,
        born_host=pack_host(half.born_host),
        store_host=pack_host(store_host),
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half.phys_offset,
    )
