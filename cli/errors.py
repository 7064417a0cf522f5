"""The command line's errors::

    PocketMQError                    (pocketmq.common.errors)
     └── UsageError                  also a ValueError: arguments that cannot be used as
                                     given (a bad value, two options that exclude each
                                     other); the command prints its usage and exits 2

Errors of the parts a command drives (the client's ``ClientError``, a ``ConfigError``)
reach the command as they are; it prints them and exits 1 or 2.
"""

from __future__ import annotations

from pocketmq.common.errors import PocketMQError

__all__ = ["UsageError"]


class UsageError(PocketMQError, ValueError):
    """The command line asks for something that cannot be done as asked (exit 2)."""
