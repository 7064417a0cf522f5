"""Queue allocation strategies: which of a topic's queues one group member reads.

Every member computes its own share from the same inputs — all queues and all
member ids, both sorted — so no coordinator is needed (RocketMQ's
``AllocateMessageQueueStrategy``). Each strategy is a pure function::

    allocate(group, client_id, all_queues, all_client_ids) -> list[MessageQueue]

* ``averagely`` (default): contiguous blocks; the first ``len(queues) % len(ids)``
  members get one queue more (``AllocateMessageQueueAveragely``).
* ``circle``: round robin, member *i* takes queues *i*, *i+n*, *i+2n* ...
  (``AllocateMessageQueueAveragelyByCircle``).
* ``consistent_hash``: a hash ring of 10 virtual nodes per member; a member
  joining or leaving moves only the queues next to its nodes
  (``AllocateMessageQueueConsistentHash``, MD5 like RocketMQ's).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence

from pocketmq.client.model import MessageQueue

__all__ = [
    "ALLOCATE_STRATEGIES",
    "AllocateStrategy",
    "allocate_averagely",
    "allocate_by_circle",
    "allocate_consistent_hash",
    "resolve_strategy",
]

AllocateStrategy = Callable[[str, str, Sequence[MessageQueue], Sequence[str]], list[MessageQueue]]

CONSISTENT_HASH_VIRTUAL_NODES = 10


def _index_of(client_id: str, all_client_ids: Sequence[str]) -> int | None:
    try:
        return list(all_client_ids).index(client_id)
    except ValueError:
        return None  # not yet registered with the broker: take nothing this round


def allocate_averagely(
    group: str, client_id: str, all_queues: Sequence[MessageQueue], all_client_ids: Sequence[str]
) -> list[MessageQueue]:
    index = _index_of(client_id, all_client_ids)
    if index is None or not all_queues:
        return []
    n_queues, n_ids = len(all_queues), len(all_client_ids)
    mod = n_queues % n_ids
    if n_queues <= n_ids:
        size = 1
    elif mod > 0 and index < mod:
        size = n_queues // n_ids + 1
    else:
        size = n_queues // n_ids
    start = index * size if mod > 0 and index < mod else index * size + mod
    count = min(size, n_queues - start)
    return [all_queues[(start + i) % n_queues] for i in range(max(count, 0))]


def allocate_by_circle(
    group: str, client_id: str, all_queues: Sequence[MessageQueue], all_client_ids: Sequence[str]
) -> list[MessageQueue]:
    index = _index_of(client_id, all_client_ids)
    if index is None:
        return []
    return list(all_queues[index :: len(all_client_ids)])


def _md5_hash(key: str) -> int:
    digest = hashlib.md5(key.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big")  # RocketMQ's MD5Hash keeps the first 4 bytes


def _queue_key(mq: MessageQueue) -> str:
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


def allocate_consistent_hash(
    group: str,
    client_id: str,
    all_queues: Sequence[MessageQueue],
    all_client_ids: Sequence[str],
    virtual_nodes: int = CONSISTENT_HASH_VIRTUAL_NODES,
) -> list[MessageQueue]:
    if client_id not in all_client_ids:
        return []
    ring = sorted(
        (_md5_hash(f"{cid}-{i}"), cid) for cid in all_client_ids for i in range(virtual_nodes)
    )
    points = [h for h, _ in ring]
    mine = []
    for mq in all_queues:
        pos = bisect.bisect_left(points, _md5_hash(_queue_key(mq)))
        if ring[pos % len(ring)][1] == client_id:
            mine.append(mq)
    return mine


ALLOCATE_STRATEGIES: dict[str, AllocateStrategy] = {
    "averagely": allocate_averagely,
    "circle": allocate_by_circle,
    "consistent_hash": allocate_consistent_hash,
}


def resolve_strategy(strategy: str | AllocateStrategy) -> AllocateStrategy:
    """A strategy by name (``averagely``, ``circle``, ``consistent_hash``) or as given."""
    if callable(strategy):
        return strategy
    try:
        return ALLOCATE_STRATEGIES[strategy]
    except KeyError:
        raise ValueError(
            f"allocation strategy {strategy!r} is unknown; use one of "
            f"{sorted(ALLOCATE_STRATEGIES)} or a callable"
        ) from None
