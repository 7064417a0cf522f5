"""The security layer's errors::

PocketMQError               (pocketmq.common.errors)
 └── SecurityError
      └── AclError          a call the ACL refuses (unknown key, bad signature, no
                            permission); ``code`` is the gRPC status it is answered
                            with (security/interceptor.py)
"""

from __future__ import annotations

from pocketmq.common.errors import PocketMQError

__all__ = ["SecurityError"]


class SecurityError(PocketMQError):
    """Base of the errors the security layer raises on purpose."""
