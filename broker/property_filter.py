"""SQL92 property filters at the broker: compiled once per expression, run where records are read.

RocketMQ's ``ExpressionMessageFilter.isMatchedByCommitLog``. A subscription of
expression type ``SQL92`` (:mod:`pocketmq.common.filter.sql92`) is compiled by
:class:`FilterCompiler` when the consumer subscribes (heartbeat) and when it
pulls, and cached by its text, so a pull costs one dictionary look-up before
any record is read. A bad expression is refused with ``INVALID_ARGUMENT`` and
the line and column of the fault; with the broker switch
``enable_property_filter`` off every SQL92 subscription is refused.

:func:`read_filtered` reads a queue for a pull with a filter: it reads the
store in chunks, keeps the records whose properties match, and stops at the
pull's count and byte limits or after :func:`scan_units` units. Its
``next_begin_offset`` is past every record it examined, matching or not, so
that a backlog with no match is crossed in bounded steps and never read
twice; when nothing matched it answers ``NO_MATCHED_MESSAGE`` (the consumer
pulls again at once from there, or, at the end of the queue, the pull is
parked like an empty one).
"""

from __future__ import annotations

import logging

from pocketmq.broker.errors import FailedPreconditionError, IllegalArgumentError
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.results import GetResult, GetStatus
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.filter import SQL92, TAG, SqlFilter, SqlFilterError, compile_sql92
from pocketmq.common.message import check_record, decode_properties

__all__ = ["FilterCompiler", "read_filtered", "record_properties", "scan_units"]

log = logging.getLogger(__name__)

CHUNK_UNITS = 256  # units one store read covers
CHUNK_BYTES = 1024 * 1024  # bytes one store read gathers (at least one record)
MIN_SCAN_UNITS = 800  # as the store's tag filtering: RocketMQ's 16,000 bytes
_CACHE_LIMIT = 10_000  # compiled expressions kept (distinct texts)
_SCANNING = (
    GetStatus.FOUND,
    GetStatus.NO_MATCHED_MESSAGE,
    GetStatus.MESSAGE_WAS_REMOVING,
    GetStatus.OFFSET_FOUND_NULL,
)


class FilterCompiler:
    """Expression type and text -> a compiled :class:`SqlFilter` (None for tag expressions)."""

    def __init__(self, *, enable_property_filter: bool = True) -> None:
        self.enabled = enable_property_filter
        self._cache: dict[str, SqlFilter] = {}

    def compile(self, expression_type: str, expression: str) -> SqlFilter | None:
        """Raises IllegalArgumentError (bad type or expression, with its position) or
        FailedPreconditionError (SQL92 switched off on this broker)."""
        kind = (expression_type or TAG).upper()
        if kind == TAG:
            return None
        if kind != SQL92:
            raise IllegalArgumentError(
                f"expression type {expression_type[:40]!r} is unknown; give {TAG} or {SQL92}",
                reason="SUBSCRIPTION_PARSE_FAILED",
            )
        if not self.enabled:
            raise FailedPreconditionError(
                "this broker does not filter by SQL92 (enable_property_filter = false); "
                "subscribe by tag, or set enable_property_filter = true on the broker",
                reason="FILTER_NOT_SUPPORTED",
            )
        cached = self._cache.get(expression)
        if cached is not None:
            return cached
        try:
            compiled = compile_sql92(expression)
        except SqlFilterError as exc:
            raise IllegalArgumentError(
                f"SQL92 filter {expression[:200]!r} does not parse: {exc}",
                reason="SUBSCRIPTION_PARSE_FAILED",
            ) from None
        if len(self._cache) < _CACHE_LIMIT:
            self._cache[expression] = compiled
        return compiled


def record_properties(raw: bytes) -> dict[str, str] | None:
    """The properties of one stored record; None when the record is damaged."""
    try:
        lay = check_record(raw, 0, len(raw), check_crc=False)
    except CorruptRecordError:
        return None
    return decode_properties(
        raw[lay.props_pos : lay.props_pos + lay.props_len].decode("utf-8", "replace")
    )


def scan_units(max_count: int) -> int:
    """Units one filtered pull examines at most (a bound on its cost)."""
    return max(MIN_SCAN_UNITS, 20 * max_count)


def read_filtered(
    store: MessageStore,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    max_count: int,
    max_bytes: int,
    tag_codes: frozenset[int] | None,
    sql: SqlFilter,
) -> GetResult:
    """A read of ``[offset, ...)`` keeping the records *sql* matches; ``blob`` holds them."""
    budget = scan_units(max_count)
    kept: list[bytes] = []
    kept_offsets: list[int] = []
    kept_bytes = 0
    next_offset = offset
    first: GetResult | None = None
    last: GetResult | None = None
    while next_offset - offset < budget:
        result = store.get_messages(
            topic,
            queue_id,
            next_offset,
            max_count=min(CHUNK_UNITS, budget - (next_offset - offset)),
            max_bytes=CHUNK_BYTES,
            tag_codes=tag_codes,
        )
        first = first or result
        last = result
        if result.status not in _SCANNING:
            break
        if result.status is not GetStatus.FOUND:
            next_offset = max(next_offset + 1, result.next_begin_offset)
            if next_offset >= result.max_offset:
                break
            continue
        kept_bytes, full_at = _keep_matching(
            result, sql, kept, kept_offsets, kept_bytes, max_count=max_count, max_bytes=max_bytes
        )
        if full_at is not None:
            next_offset = full_at  # not examined: the next pull's first
            break
        next_offset = result.next_begin_offset
        if next_offset >= result.max_offset:
            break
    assert first is not None and last is not None
    if first.status not in _SCANNING:
        return first  # offset errors, empty queue: as read
    return GetResult(
        status=GetStatus.FOUND if kept else GetStatus.NO_MATCHED_MESSAGE,
        next_begin_offset=next_offset,
        min_offset=last.min_offset,
        max_offset=last.max_offset,
        queue_offsets=kept_offsets,
        blob=b"".join(kept),
    )


def _keep_matching(
    result: GetResult,
    sql: SqlFilter,
    kept: list[bytes],
    kept_offsets: list[int],
    kept_bytes: int,
    *,
    max_count: int,
    max_bytes: int,
) -> tuple[int, int | None]:
    """Append the records of *result* that *sql* matches to *kept* (their queue offsets
    to *kept_offsets*) until *max_count* records or *max_bytes* are held.

    Returns ``(kept_bytes, full_at)``: the bytes now held and, when it filled up, the
    queue offset of the first record it did not examine (else None).
    """
    for raw, queue_offset in zip(result.records, result.queue_offsets, strict=True):
        if len(kept) >= max_count or (kept and kept_bytes + len(raw) > max_bytes):
            return kept_bytes, queue_offset
        props = record_properties(raw)
        if props is not None and sql.matches(props):
            kept.append(raw)
            kept_offsets.append(queue_offset)
            kept_bytes += len(raw)
    return kept_bytes, None
