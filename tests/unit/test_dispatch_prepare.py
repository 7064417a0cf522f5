"""prepare_batch's count of records per queue: one queue, queues of one topic, any mix."""

from __future__ import annotations

from collections import Counter

import pytest

from pocketmq.broker.store.dispatch import _queue_counts


@pytest.mark.parametrize(
    ("topics", "queue_ids"),
    [
        (["T"] * 5, [3] * 5),  # a producer's SendBatch: one queue
        (["T"] * 6, [2, 0, 2, 1, 0, 2]),  # queues of one topic in turn
        (["A", "B", "A", "C", "B"], [0, 0, 1, 0, 0]),  # any mix
        (["A", "A", "B"], [0, 0, 0]),  # one queue id, two topics
    ],
)
def test_queue_counts_are_the_counts_of_each_queue_in_first_seen_order(topics, queue_ids):
    expected = list(Counter(zip(topics, queue_ids, strict=True)).items())
    assert list(_queue_counts(topics, queue_ids)) == expected


def test_equal_topics_that_are_distinct_objects_count_as_one_queue():
    topics = ["".join(["T", "x"]) for _ in range(4)]  # four str objects, one value
    assert list(_queue_counts(topics, [1, 1, 1, 1])) == [(("Tx", 1), 4)]
