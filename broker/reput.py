"""Putting a stored message again, elsewhere: what delay, timer and retry deliveries share.

A re-put keeps everything the producer wrote (body, flag, sysflag, born time
and host, prepared-transaction offset) and changes only where the message goes
and its properties; a retry also counts one more reconsume.
"""

from __future__ import annotations

from collections.abc import Iterator

from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.results import PutResult
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import StoredMessage, decode_record

__all__ = ["copies_after", "reput"]

COPIES_QUERY_MAX = 64  # key-index hits read when looking for an earlier re-put


def reput(
    store: MessageStore,
    msg: StoredMessage,
    *,
    topic: str,
    queue_id: int,
    properties: dict[str, str],
    reconsume_times: int | None = None,
) -> PutResult:
    """Store *msg* again in *topic*/*queue_id* with *properties*."""
    return store.put_message(
        topic=topic,
        queue_id=queue_id,
        body=msg.body,
        properties=properties,
        flag=msg.flag,
        sysflag=msg.sysflag,
        born_timestamp_ms=msg.born_timestamp_ms,
        born_host=msg.born_host,
        reconsume_times=msg.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
    )


def copies_after(store: MessageStore, topic: str, msg: StoredMessage) -> Iterator[StoredMessage]:
    """Records of *topic* with *msg*'s ``UNIQ_KEY`` stored after it, by the key index:
    re-puts of it a run before this one made (a crash, the master before a promotion).
    None without a ``UNIQ_KEY``; a damaged hit is passed over."""
    uniq = msg.uniq_key
    if not uniq:
        return
    for raw in store.query_by_key(topic, uniq, max_count=COPIES_QUERY_MAX):
        try:
            found = decode_record(raw, check_crc=False)
        except CorruptRecordError:
            continue
        if found.uniq_key == uniq and found.phys_offset > msg.phys_offset:
            yield found
