"""The exception tree shared by every PocketMQ layer::

    PocketMQError
     ├── CorruptRecordError        a stored or sent record fails its checks
     ├── ConfigError               a configuration key has a bad value
     ├── StoreError                the message store cannot go on
     │    ├── StoreLockedError     another broker holds the data directory
     │    └── StoreReadOnlyError   an I/O error made the store read-only
     └── (client and server errors derive from here in their own packages)

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
