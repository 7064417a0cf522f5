"""Putting a stored message again, elsewhere: what delay, timer and retry deliveries share.

A re-put keeps everything the producer wrote (body, flag, sysflag, born time
and host, prepared-transaction offset) and changes only where the message goes
and its properties; a retry also counts one more reconsume.
"""

from __future__ import annotations

from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.results import PutResult
from pocketmq.common.message import StoredMessage

__all__ = ["reput"]


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
