"""The controller's errors; the servicer maps each to one gRPC status code::

PocketMQError                         (pocketmq.common.errors)
 └── ControllerError
      ├── ControllerRefusalError      FAILED_PRECONDITION  the state does not allow the
      │                               request (no live in-sync replica, a stale epoch);
      │                               ``reason`` names the rule   (controller/state.py)
      └── StateStoreUnavailableError  UNAVAILABLE          the state store (etcd, or the
                                      file store) cannot be read or written now; retry
                                      later                      (controller/store.py)
"""

from __future__ import annotations

from pocketmq.common.errors import PocketMQError

__all__ = ["ControllerError"]


class ControllerError(PocketMQError):
    """Base of the errors the controller raises on purpose."""
