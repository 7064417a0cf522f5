"""Who a browser is: the dashboard's sessions, and the clients that act as each user.

Two modes, found by asking the nameserver once without a key (:meth:`probe`)::

    ACL off   every browser shares one session: an AdminClient and a Producer
              signed with the dashboard's own keys (--access-key, when given)
    ACL on    a browser logs in with an access key and secret (POST /api/login);
              the keys stay in this process, in a Session named by a random
              cookie (HttpOnly, SameSite=Strict), never in a URL or the page.
              Every action is signed as that user; a user that is not an admin
              account (the admin RPCs refuse it) gets ``can_write = False``

Sessions expire after ``SESSION_IDLE_S`` without use; at most ``MAX_SESSIONS``
live at once (the oldest is closed first), so logins cannot grow memory
without bound.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from dataclasses import dataclass, field

from pocketmq.client.admin import AdminClient
from pocketmq.client.errors import ClientError, PermissionDeniedError
from pocketmq.client.producer import Producer

__all__ = ["COOKIE", "DASHBOARD_PRODUCER_GROUP", "Session", "SessionManager"]

log = logging.getLogger(__name__)

COOKIE = "pocketmq_dashboard"
SESSION_IDLE_S = 12 * 3600.0
MAX_SESSIONS = 256
DASHBOARD_PRODUCER_GROUP = "PMQ_DASHBOARD_PRODUCER"


@dataclass(slots=True)
class Session:
    """One user's clients; ``user`` is the access key ("" without the ACL)."""

    token: str
    user: str
    admin: AdminClient
    can_write: bool
    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    last_used_s: float = 0.0
    _producer: Producer | None = None
    _producer_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def producer(self, namesrv: list[str], tls_ca: str) -> Producer:
        """The session's producer (the send form, resends), started on first use."""
        async with self._producer_lock:
            if self._producer is None:
                producer = Producer(
                    group=DASHBOARD_PRODUCER_GROUP,
                    namesrv=namesrv,
                    access_key=self.access_key,
                    secret_key=self.secret_key,
                    tls_ca_file=tls_ca,
                    retry_times_when_send_failed=1,
                )
                await producer.start()
                self._producer = producer
            return self._producer

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.shutdown()
        await self.admin.shutdown()


class SessionManager:
    """The shared session (ACL off) or the logged-in ones (ACL on)."""

    def __init__(
        self,
        namesrv: list[str],
        *,
        access_key: str = "",
        secret_key: str = "",
        tls_ca: str = "",
        timeout_s: float = 5.0,
    ) -> None:
        self.namesrv = namesrv
        self.tls_ca = tls_ca
        self.timeout_s = timeout_s
        self._keys = (access_key, secret_key)
        self.acl_on: bool | None = None  # None until the nameserver has answered
        self._shared: Session | None = None
        self._shared_lock = asyncio.Lock()  # one shared session, however many ask
        self._sessions: dict[str, Session] = {}

    def _admin(self, access_key: str, secret_key: str) -> AdminClient:
        return AdminClient(
            self.namesrv,
            timeout_s=self.timeout_s,
            access_key=access_key,
            secret_key=secret_key,
            tls_ca_file=self.tls_ca,
        )

    async def probe(self) -> bool:
        """Whether the cluster wants signed requests (asked once, then remembered).
        The nameserver's errors other than a refusal propagate: the page shows them."""
        if self.acl_on is not None:
            return self.acl_on
        async with self._admin("", "") as anonymous:
            try:
                await anonymous.cluster_info()
                self.acl_on = False
            except PermissionDeniedError:
                self.acl_on = True
        log.info("dashboard: the cluster's ACL is %s", "on" if self.acl_on else "off")
        return self.acl_on

    async def session_of(self, token: str) -> Session | None:
        """The session a cookie names; the shared one with the ACL off."""
        if not await self.probe():
            async with self._shared_lock:
                if self._shared is None:
                    admin = self._admin(*self._keys)
                    await admin.start()
                    self._shared = Session(
                        token="",
                        user=self._keys[0],
                        admin=admin,
                        can_write=True,
                        access_key=self._keys[0],
                        secret_key=self._keys[1],
                    )
                return self._shared
        now = time.monotonic()
        await self._expire(now)
        for known, session in self._sessions.items():
            if token and hmac.compare_digest(known, token):
                session.last_used_s = now
                return session
        return None

    async def login(self, access_key: str, secret_key: str) -> Session:
        """A new session signed with the keys; PermissionDeniedError when the cluster
        refuses them. Whether the user may write: one admin RPC that changes nothing."""
        admin = self._admin(access_key, secret_key)
        await admin.start()
        try:
            info = await admin.cluster_info()
            can_write = await _is_admin(admin, list(info.masters().values()))
        except BaseException:
            await admin.shutdown()
            raise
        token = secrets.token_urlsafe(32)
        session = Session(
            token=token,
            user=access_key,
            admin=admin,
            can_write=can_write,
            access_key=access_key,
            secret_key=secret_key,
            last_used_s=time.monotonic(),
        )
        self._sessions[token] = session
        while len(self._sessions) > MAX_SESSIONS:
            oldest = min(self._sessions.values(), key=lambda s: s.last_used_s)
            await self._sessions.pop(oldest.token).close()
        return session

    async def logout(self, token: str) -> None:
        session = self._sessions.pop(token, None) if token else None
        if session is not None:
            await session.close()

    async def _expire(self, now: float) -> None:
        for token in [t for t, s in self._sessions.items() if now - s.last_used_s > SESSION_IDLE_S]:
            await self._sessions.pop(token).close()

    async def close(self) -> None:
        sessions = [*self._sessions.values(), *([self._shared] if self._shared else [])]
        self._sessions.clear()
        self._shared = None
        for session in sessions:
            await session.close()


async def _is_admin(admin: AdminClient, masters: list[str]) -> bool:
    """An admin account may read a broker's configuration; other users are refused."""
    for addr in masters:
        try:
            await admin.broker_config(addr)
            return True
        except PermissionDeniedError:
            return False
        except ClientError:
            continue  # this broker did not answer; ask the next
    return False
