"""Spark's discovery shim for the ``pocketmq`` format.

Spark registers, in every session, each top-level module named ``pyspark_*``
on its Python path that exposes a ``DefaultSource``, under
``DefaultSource.name()``; with PocketMQ installed,
``spark.read.format("pocketmq")`` thus works without a register call. The
data source itself is :mod:`pocketmq.spark.source`; the store reader
(``pocketmq-store``) needs :func:`pocketmq.spark.register`, which also covers
editable installs, whose modules Spark's discovery cannot list.
"""

from pocketmq.spark.source import PocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
