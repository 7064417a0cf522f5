"""Dashboard: the web server, its routes, the login and the map from SDK errors to statuses.

::

    GET  /                      the single page (static/index.html)
    GET  /static/{file}         its script, styles and icon, shipped in the package
    GET  /api/session           {acl, logged_in, user, can_write}
    POST /api/login             {access_key, secret_key}: a session cookie (ACL on)
    POST /api/logout
    *    /api/...               the pages' API (api_cluster, api_groups, api_messages)

Every ``/api/`` answer is JSON; a failure is ``{"error": message}`` with a status:
400 bad input, 401 not logged in, 403 refused (a read-only user writing, or the
broker's ACL), 404 not found, 502 a broker or nameserver failed. A ``POST``
must carry ``Content-Type: application/json``: a form on another site cannot
send that without the browser asking first, and the session cookie is
``SameSite=Strict``, which together keep other sites from acting as the user.
"""

from __future__ import annotations

import logging
import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pocketmq.client.admin import AdminClient
from pocketmq.client.config import parse_namesrv
from pocketmq.client.errors import (
    ClientError,
    InvalidMessageError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    RouteNotFoundError,
)
from pocketmq.common.errors import ConfigError
from pocketmq.dashboard import api_cluster, api_groups, api_messages
from pocketmq.dashboard.history import History, HistoryService
from pocketmq.dashboard.http import HttpError, HttpServer, Request, Response, json_response
from pocketmq.dashboard.sessions import COOKIE, SessionManager
from pocketmq.dashboard.views import Ctx, View, str_arg

__all__ = ["Dashboard", "DashboardConfig"]

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
_STATIC_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ROUTES: list[tuple[str, re.Pattern[str], View, bool]] = [
    (method, re.compile(f"^{pattern}$"), view, write)
    for method, pattern, view, write in (
        *api_cluster.ROUTES,
        *api_groups.ROUTES,
        *api_messages.ROUTES,
    )
]


@dataclass(frozen=True, slots=True, kw_only=True)
class DashboardConfig:
    namesrv: str  # "host:port;host:port"
    host: str = "127.0.0.1"  # where the web server listens
    port: int = 8080  # 0 = any free port
    access_key: str = ""  # the dashboard's own keys: the charts' sampling, and
    secret_key: str = ""  # every request with the ACL off
    tls_ca: str = ""  # CA of the servers; given = TLS
    timeout_s: float = 5.0  # per admin call
    interval_s: float = 5.0  # between two samples of the charts
    retention_s: float = 3600.0  # history kept in memory
    prometheus_url: str = ""  # a Prometheus server the charts link to

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port {self.port}: give 0..65535")
        if self.interval_s <= 0 or self.retention_s < self.interval_s:
            raise ConfigError(
                f"interval {self.interval_s} s and retention "
                f"{self.retention_s} s: give 0 < interval <= retention"
            )
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("give both --access-key and --secret-key (or neither)")


class Dashboard:
    """``await start()`` serves the dashboard (``url`` says where); ``await stop()``."""

    def __init__(self, config: DashboardConfig) -> None:
        self.config = config
        self.namesrv = parse_namesrv(config.namesrv)
        self.sessions = SessionManager(
            self.namesrv,
            access_key=config.access_key,
            secret_key=config.secret_key,
            tls_ca=config.tls_ca,
            timeout_s=config.timeout_s,
        )
        self._sampler_admin = AdminClient(
            self.namesrv,
            timeout_s=config.timeout_s,
            access_key=config.access_key,
            secret_key=config.secret_key,
            tls_ca_file=config.tls_ca,
        )
        self.history = HistoryService(
            self._sampler_admin,
            History(retention_s=config.retention_s, interval_s=config.interval_s),
        )
        self._server = HttpServer(self.handle, host=config.host, port=config.port)
        self._brokers_config: dict[str, dict[str, str]] = {}

    @property
    def url(self) -> str:
        return self._server.url

    async def start(self) -> None:
        await self._sampler_admin.start()
        await self._server.start()
        self.history.start()
        log.info("dashboard serving on %s (nameservers %s)", self.url, ";".join(self.namesrv))

    async def stop(self) -> None:
        await self._server.stop()
        await self.history.stop()
        await self.sessions.close()
        await self._sampler_admin.shutdown()

    async def __aenter__(self) -> Dashboard:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- requests --------------------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        if not request.path.startswith("/api/"):
            return self._static(request)
        try:
            return await self._api(request)
        except HttpError:
            raise
        except PermissionDeniedError as exc:
            raise HttpError(403, f"refused: {exc}") from None
        except (NotFoundError, RouteNotFoundError) as exc:
            raise HttpError(404, str(exc)) from None
        except (InvalidRequestError, InvalidMessageError, ValueError, ConfigError) as exc:
            raise HttpError(400, str(exc)) from None
        except ClientError as exc:
            raise HttpError(502, str(exc)) from None

    def _static(self, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            raise HttpError(405, "pages are read with GET")
        name = (
            "index.html"
            if request.path in ("/", "/index.html")
            else request.path.removeprefix("/static/")
        )
        path = STATIC_DIR / name
        if not _STATIC_NAME.match(name) or not path.is_file():
            raise HttpError(404, f"no page {request.path}")
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind.endswith("javascript"):
            kind += "; charset=utf-8"
        return Response(
            body=path.read_bytes(),
            content_type=kind,
            headers={
                "Cache-Control": "no-cache",
                "Content-Security-Policy": "default-src 'self'; "
                "img-src 'self' data:; frame-ancestors 'none'",
            },
        )

    async def _api(self, request: Request) -> Response:
        if request.method == "POST" and not request.headers.get("content-type", "").startswith(
            "application/json"
        ):
            raise HttpError(400, "POST /api/ takes Content-Type: application/json")
        token = request.cookies.get(COOKIE, "")
        if request.path == "/api/session":
            return await self._session_info(token)
        if request.path == "/api/login" and request.method == "POST":
            return await self._login(request)
        if request.path == "/api/logout" and request.method == "POST":
            await self.sessions.logout(token)
            return json_response({"logged_in": False}, **{"Set-Cookie": _cookie("", max_age=0)})
        session = await self.sessions.session_of(token)
        if session is None:
            raise HttpError(
                401, "log in with an access key and secret key: the cluster's ACL is on"
            )
        for method, pattern, view, write in _ROUTES:
            match = pattern.match(request.path)
            if match is None or method != request.method:
                continue
            if write and not session.can_write:
                raise HttpError(
                    403,
                    f"user {session.user!r} is read-only here (not an "
                    "admin account of the cluster's ACL)",
                )
            ctx = Ctx(
                session=session,
                history=self.history,
                namesrv=self.namesrv,
                tls_ca=self.config.tls_ca,
                prometheus_url=self.config.prometheus_url,
                brokers_config=self._brokers_config,
            )
            result: Any = await view(request, ctx, **match.groupdict())
            return result if isinstance(result, Response) else json_response(result)
        raise HttpError(404, f"no API {request.method} {request.path}")

    async def _session_info(self, token: str) -> Response:
        acl = await self.sessions.probe()
        session = await self.sessions.session_of(token)
        return json_response(
            {
                "acl": acl,
                "logged_in": session is not None,
                "user": session.user if session else "",
                "can_write": bool(session and session.can_write),
                "namesrv": ";".join(self.namesrv),
            }
        )

    async def _login(self, request: Request) -> Response:
        data = request.json()
        access_key = str_arg(data, "access_key", max_len=255)
        secret_key = str_arg(data, "secret_key", max_len=1024)
        try:
            session = await self.sessions.login(access_key, secret_key)
        except PermissionDeniedError as exc:
            raise HttpError(401, f"the cluster refused access key {access_key!r}: {exc}") from None
        return json_response(
            {"logged_in": True, "user": session.user, "can_write": session.can_write},
            **{"Set-Cookie": _cookie(session.token)},
        )


def _cookie(token: str, *, max_age: int | None = None) -> str:
    age = f"; Max-Age={max_age}" if max_age is not None else ""
    return f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{age}"
