"""``POCKETMQ_TEST_ACL=1``: run a suite again with every server's ACL on.

``./dev.sh test`` runs ``tests/fuzz`` and ``tests/fault`` a second time this way.
Then:

* brokers and nameservers started by ``ProcessKit`` (and in-process ``Broker`` /
  ``NameServer`` objects built in a test) get ``acl_enable`` and
  :data:`ACL` in ``acl.toml``; brokers register with the admin's keys;
* SDK clients (producers, consumers) built without keys sign as the ordinary
  user :data:`USER` (PUB|SUB on every topic and group, not admin), so every
  heartbeat, send-back, lock and offset commit goes through the broker's
  authorization;
* ``AdminClient`` and raw channels (``grpc.aio.insecure_channel`` without
  interceptors, the fuzz suite's sync channels) sign as :data:`ADMIN`, the
  way admin tools do.

:func:`install` takes a ``setattr``-like function: pytest's
``monkeypatch.setattr`` in a fixture (undone after the test) or ``setattr`` in
a helper process (``consumer_proc.py``).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import message_factory

from pocketmq.client.remoting import signers
from pocketmq.common.auth import Credentials, signed_metadata

ENV = "POCKETMQ_TEST_ACL"
ADMIN = Credentials("test-admin", "test-admin-secret")
USER = Credentials("test-user", "test-user-secret")
ACL = f"""
[[accounts]]
access_key = "{ADMIN.access_key}"
secret_key = "{ADMIN.secret_key}"
admin = true

[[accounts]]
access_key = "{USER.access_key}"
secret_key = "{USER.secret_key}"
default_topic_perm = "PUB|SUB"
default_group_perm = "PUB|SUB"
"""


# The ACL of the tests that exercise it by hand: an admin, and an application that may use
# topic orders (and read audit) with group billing, and nothing else.
APP_ACL = """
[[accounts]]
access_key = "admin"
secret_key = "admin-secret"
admin = true

[[accounts]]
access_key = "app"
secret_key = "app-secret"
default_topic_perm = "DENY"
default_group_perm = "DENY"
topic_perms = { orders = "PUB|SUB", audit = "SUB" }
group_perms = { billing = "SUB" }
"""


APP = Credentials("app", "app-secret")  # APP_ACL's account


async def app_acl_broker(start_broker: Any, directory: Path, topics: Iterable[str]) -> Any:
    """A broker of the integration conftest's *start_broker* with :data:`APP_ACL` (app:
    orders PUB|SUB, billing SUB) written in *directory*, and *topics* of one queue."""
    from pocketmq.broker.topic_config import BrokerTopicConfig

    acl = directory / "acl.toml"
    acl.write_text(APP_ACL)
    broker = await start_broker(acl_enable=True, acl_file=str(acl))
    for topic in topics:
        broker.topics.create(
            BrokerTopicConfig(topic_name=topic, read_queue_nums=1, write_queue_nums=1)
        )
    return broker


def enabled() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def acl_file(directory: Path | None = None) -> Path:
    """:data:`ACL` written in *directory* (a temporary one when None)."""
    directory = directory or Path(tempfile.mkdtemp(prefix="pocketmq-acl-"))
    path = directory / "test-acl.toml"
    if not path.exists():
        path.write_text(ACL)
    return path


def server_options(directory: Path) -> dict[str, Any]:
    """Extra config keys of a nameserver with the ACL on; {} when the mode is off."""
    if not enabled():
        return {}
    return {"acl_enable": True, "acl_file": str(acl_file(directory))}


def broker_options(directory: Path) -> dict[str, Any]:
    """Extra config keys of a broker: the ACL, and the admin's keys to register with."""
    if not enabled():
        return {}
    return {
        **server_options(directory),
        "access_key": ADMIN.access_key,
        "secret_key": ADMIN.secret_key,
    }


class _SyncCallDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, base: Any, metadata: Any) -> None:
        self.method, self.timeout, self.metadata = base.method, base.timeout, metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class RawBytesSigner(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Signs requests given as bytes (the fuzz suite): parsed as the method's input type.

    Bytes that are not the message are signed over an empty body; the server refuses
    them as INVALID_ARGUMENT before it looks at the signature.
    """

    def __init__(self, credentials: Credentials, inputs: dict[str, Any]) -> None:
        self._credentials = credentials
        self._classes = {
            path: message_factory.GetMessageClass(desc) for path, desc in inputs.items()
        }

    def _signed(self, details: Any, payload: bytes) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        request: Any = None
        cls = self._classes.get(method)
        if cls is not None:
            try:
                request = cls.FromString(payload)
            except Exception:  # not the message: the server says so first
                request = None
        metadata = (*(details.metadata or ()), *signed_metadata(self._credentials, method, request))
        return _SyncCallDetails(details, metadata)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._signed(details, request), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._signed(details, request), request)


def install(patch: Callable[[Any, str, Any], None], directory: Path | None = None) -> None:
    """Clients sign by default (users as :data:`USER`, admin tools as :data:`ADMIN`) and
    in-process servers turn their ACL on. A no-op when the mode is off."""
    if not enabled():
        return
    from pocketmq.broker.broker import Broker
    from pocketmq.client import admin, remoting
    from pocketmq.client.config import Transport
    from pocketmq.nameserver import NameServer

    written: list[Path] = []

    def path() -> Path:
        # Written when an in-process server first needs it: a client-only process (a
        # consumer a fault test kills) leaves no temporary directory behind.
        if not written:
            written.append(acl_file(directory))
        return written[0]

    def with_default(credentials: Credentials) -> Callable[..., Any]:
        original = remoting.Remoting.__init__

        def init(self: Any, transport: Any = None) -> None:
            transport = transport or Transport()
            if transport.credentials is None:
                transport = dataclasses.replace(transport, credentials=credentials)
            original(self, transport)

        return init

    user_init = with_default(USER)
    patch(remoting.Remoting, "__init__", user_init)

    class AdminRemoting(remoting.Remoting):
        def __init__(self, transport: Any = None) -> None:
            transport = transport or Transport()
            if transport.credentials is None:
                transport = dataclasses.replace(transport, credentials=ADMIN)
            user_init(self, transport)

    patch(admin, "Remoting", AdminRemoting)

    raw_channel = grpc.aio.insecure_channel

    def insecure_channel(
        target: str, options: Any = None, compression: Any = None, interceptors: Any = None
    ) -> Any:
        return raw_channel(
            target,
            options=options,
            compression=compression,
            interceptors=interceptors or signers(ADMIN),
        )

    patch(grpc.aio, "insecure_channel", insecure_channel)

    broker_init = Broker.__init__

    def broker_with_acl(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        if not config.acl_enable:
            config = dataclasses.replace(
                config,
                acl_enable=True,
                acl_file=str(path()),
                access_key=ADMIN.access_key,
                secret_key=ADMIN.secret_key,
            )
        broker_init(self, config, *args, **kwargs)

    patch(Broker, "__init__", broker_with_acl)

    namesrv_init = NameServer.__init__

    def namesrv_with_acl(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        if not config.acl_enable:
            config = dataclasses.replace(config, acl_enable=True, acl_file=str(path()))
        namesrv_init(self, config, *args, **kwargs)

    patch(NameServer, "__init__", namesrv_with_acl)
