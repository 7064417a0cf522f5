"""The worker-process plumbing of :mod:`pocketmq.spark.remote` that is not a remote call."""

from __future__ import annotations

import gc
from typing import Any

from pocketmq.spark.remote import freeze_worker_heap


def _freeze_in_task(_: object) -> int:
    from pocketmq.spark.remote import freeze_worker_heap

    freeze_worker_heap()
    return gc.get_freeze_count()


def test_a_spark_task_freezes_its_worker_heap_and_a_driver_does_not(spark: Any) -> None:
    before = gc.get_freeze_count()
    freeze_worker_heap()  # the test process is no Spark task: nothing is frozen
    assert gc.get_freeze_count() == before
    frozen = spark.sparkContext.parallelize([0, 1], 2).map(_freeze_in_task).collect()
    assert all(count > 0 for count in frozen), frozen
