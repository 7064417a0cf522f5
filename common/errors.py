"""The exception tree shared by every PocketMQ layer::

    PocketMQError
     ├── CorruptRecordError        a stored or sent record fails its checks
     ├── ConfigError               a configuration key has a bad value; names the key
     │    └── OptionError          a Spark source or sink option (pocketmq.spark.errors)
     ├── SqlFilterError            also a ValueError: an SQL92 filter expression that does
     │                             not compile (common/filter/sql92.py)
     ├── TagExpressionError        also a ValueError: a tag expression that names no tag
     │                             (common/filter/tags.py)
     ├── StoreError                the message store cannot go on, or cannot take a request
     │    ├── StoreLockedError     another broker holds the data directory
     │    ├── StoreReadOnlyError   an I/O error made the store read-only
     │    ├── BatchError           a record of a batch is unacceptable; ``kind`` picks the
     │    │                        put status (broker/store/batch.py)
     │    ├── ReplicationError     a replicated frame cannot be appended: wrong offset,
     │    │                        damaged, or no room (broker/store/replication.py)
     │    └── ProducerStateError   an idempotent producer's record the producer table
     │                             refuses; ``kind`` says which rule
     │                             (broker/store/producer_state.py)
     └── each package's own tree:
          ClientError              pocketmq.client.errors
          BrokerError, ...         pocketmq.broker.errors
          NameServerError          pocketmq.nameserver.errors
          ControllerError          pocketmq.controller.errors
          SecurityError            pocketmq.security.errors
          DashboardError           pocketmq.dashboard.errors
          SparkConnectorError      pocketmq.spark.errors
          UsageError               pocketmq.cli.errors

Expected outcomes on hot paths are status enums, not exceptions; these are for
broken invariants and for conditions a person has to act on.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CorruptRecordError",
    "PocketMQError",
    "StoreError",
    "StoreLockedError",
    "StoreReadOnlyError",
]


class PocketMQError(Exception):
    """Base of every error PocketMQ raises on purpose."""

    retriable: bool = False


class CorruptRecordError(PocketMQError):
    """A record fails its magic, length or CRC checks at *offset*."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"corrupt record at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class ConfigError(PocketMQError):
    """A configuration value is invalid; the message names the key."""


class StoreError(PocketMQError):
    """The message store cannot carry out a request."""


class StoreLockedError(StoreError):
    """Another process holds the data directory's lock file."""


class StoreReadOnlyError(StoreError):
    """An I/O error made the store read-only; the first error is kept."""
