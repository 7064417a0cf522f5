"""Server-side security: the ACL (:mod:`.acl`), the interceptor that enforces it
(:mod:`.interceptor`) and TLS credentials (:mod:`.tls`). Request signing, shared with
the client, is :mod:`pocketmq.common.auth`. Errors: :mod:`.errors`."""
