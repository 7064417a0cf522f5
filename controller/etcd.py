"""EtcdClient: the few etcd v3 calls the controller needs, over grpc.aio.

Stubs are generated from etcd's own ``.proto`` files (``pocketmq.etcd``);
this module is the only user. It speaks to a list of endpoints and moves to
the next one when a call finds the current one unavailable::

    get(key)                       -> (value, mod_revision) | None
    get_prefix(prefix)             -> {key: (value, mod_revision)}
    put_if(key, value, mod_rev, *, guard)   Txn: if mod_revision(key) == mod_rev
                                   [and create_revision(guard key) == guard rev]
                                   then put -> new revision, else None
    create_if_absent(key, value, lease)     Txn: if create_revision(key) == 0 then put
                                   -> (won, create_revision of the key, holder value)
    delete_if(key, create_rev)     Txn: delete while it is still ours
    lease_grant(ttl_s) / lease_keepalive(id) / lease_revoke(id)
    watch(key)                     async iterator of ("PUT"|"DELETE", value) events

Errors: every gRPC failure becomes :class:`~pocketmq.controller.store.StateStoreUnavailableError`
naming the endpoint, so callers have one exception to catch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from pocketmq.controller.store import StateStoreUnavailableError
from pocketmq.etcd import rpc_pb2 as rpc
from pocketmq.etcd import rpc_pb2_grpc as stubs

__all__ = ["EtcdClient", "parse_endpoints"]

log = logging.getLogger(__name__)


def parse_endpoints(spec: str) -> list[str]:
    """``http://h1:2379,h2:2379`` -> ``["h1:2379", "h2:2379"]`` (only plain http)."""
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("https://"):
            raise ValueError(
                f"etcd endpoint {part!r}: TLS to etcd is not supported; give http://host:port"
            )
        part = part.removeprefix("http://").rstrip("/")
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(
                f"etcd endpoint {part!r} is not host:port (e.g. http://127.0.0.1:2379)"
            )
        out.append(part)
    if not out:
        raise ValueError(f"no etcd endpoint in {spec!r}; give http://host:port[,...]")
    return out


class EtcdClient:
    def __init__(self, endpoints: Sequence[str], *, timeout_s: float = 2.0) -> None:
        self.endpoints = list(endpoints)
        self._timeout_s = timeout_s
        self._index = 0
        self._channel: grpc.aio.Channel | None = None
        self._kv: stubs.KVStub | None = None
        self._lease: stubs.LeaseStub | None = None
        self._watch: stubs.WatchStub | None = None

    @property
    def endpoint(self) -> str:
        return self.endpoints[self._index]

    def _connect(self) -> None:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self.endpoint)
            self._kv = stubs.KVStub(self._channel)
            self._lease = stubs.LeaseStub(self._channel)
            self._watch = stubs.WatchStub(self._channel)

    async def _rotate(self) -> None:
        channel, self._channel = self._channel, None
        self._index = (self._index + 1) % len(self.endpoints)
        if channel is not None:
            await channel.close()

    async def _call(self, what: str, call: Any) -> Any:
        """*call(stubs)* on the current endpoint, then once on each other one."""
        last: grpc.aio.AioRpcError | None = None
        for _ in range(len(self.endpoints)):
            self._connect()
            try:
                return await call(self)
            except grpc.aio.AioRpcError as exc:
                last = exc
                log.debug("etcd %s on %s failed: %s", what, self.endpoint, exc.details())
                await self._rotate()
        assert last is not None
        raise StateStoreUnavailableError(
            f"etcd {what} failed on every endpoint "
            f"({', '.join(self.endpoints)}): {last.code().name} "
            f"{last.details()}"
        )

    # -- KV -----------------------------------------------------------------------------
    async def get(self, key: bytes) -> tuple[bytes, int] | None:
        resp = await self._call(
            "get", lambda c: c._kv.Range(rpc.RangeRequest(key=key), timeout=self._timeout_s)
        )
        if not resp.kvs:
            return None
        return resp.kvs[0].value, resp.kvs[0].mod_revision

    async def get_prefix(self, prefix: bytes) -> dict[bytes, tuple[bytes, int]]:
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        resp = await self._call(
            "get",
            lambda c: c._kv.Range(
                rpc.RangeRequest(key=prefix, range_end=end), timeout=self._timeout_s
            ),
        )
        return {kv.key: (kv.value, kv.mod_revision) for kv in resp.kvs}

    async def put_if(
        self, key: bytes, value: bytes, mod_revision: int, *, guard: tuple[bytes, int] | None = None
    ) -> int | None:
        compare = [
            rpc.Compare(
                key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=mod_revision
            )
        ]
        if guard is not None:
            compare.append(
                rpc.Compare(
                    key=guard[0],
                    target=rpc.Compare.CREATE,
                    result=rpc.Compare.EQUAL,
                    create_revision=guard[1],
                )
            )
        txn = rpc.TxnRequest(
            compare=compare,
            success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))],
        )
        resp = await self._call("txn", lambda c: c._kv.Txn(txn, timeout=self._timeout_s))
        return resp.header.revision if resp.succeeded else None

    async def create_if_absent(
        self, key: bytes, value: bytes, lease: int
    ) -> tuple[bool, int, bytes]:
        txn = rpc.TxnRequest(
            compare=[
                rpc.Compare(
                    key=key, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=0
                )
            ],
            success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=lease))],
            failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=key))],
        )
        resp = await self._call("txn", lambda c: c._kv.Txn(txn, timeout=self._timeout_s))
        if resp.succeeded:
            return True, resp.header.revision, value
        kvs = resp.responses[0].response_range.kvs
        if not kvs:
            return False, 0, b""
        return False, kvs[0].create_revision, kvs[0].value

    async def delete_if(self, key: bytes, create_revision: int) -> bool:
        txn = rpc.TxnRequest(
            compare=[
                rpc.Compare(
                    key=key,
                    target=rpc.Compare.CREATE,
                    result=rpc.Compare.EQUAL,
                    create_revision=create_revision,
                )
            ],
            success=[rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key))],
        )
        resp = await self._call("txn", lambda c: c._kv.Txn(txn, timeout=self._timeout_s))
        return bool(resp.succeeded)

    # -- leases -------------------------------------------------------------------------
    async def lease_grant(self, ttl_s: int) -> int:
        resp = await self._call(
            "lease grant",
            lambda c: c._lease.LeaseGrant(
                rpc.LeaseGrantRequest(TTL=ttl_s), timeout=self._timeout_s
            ),
        )
        if resp.error:
            raise StateStoreUnavailableError(f"etcd refused a lease: {resp.error}")
        return int(resp.ID)

    async def lease_keepalive(self, lease: int) -> int:
        """Refresh *lease* once; its remaining TTL in seconds (0 = it expired)."""

        async def once(c: EtcdClient) -> Any:
            assert c._lease is not None
            call = c._lease.LeaseKeepAlive(timeout=self._timeout_s)
            await call.write(rpc.LeaseKeepAliveRequest(ID=lease))
            resp = await call.read()
            await call.done_writing()
            call.cancel()
            return resp

        resp = await self._call("lease keepalive", once)
        if resp is grpc.aio.EOF:
            raise StateStoreUnavailableError("etcd closed the keepalive stream")
        return int(resp.TTL)

    async def lease_revoke(self, lease: int) -> None:
        try:
            await self._call(
                "lease revoke",
                lambda c: c._lease.LeaseRevoke(
                    rpc.LeaseRevokeRequest(ID=lease), timeout=self._timeout_s
                ),
            )
        except StateStoreUnavailableError as exc:
            log.info("could not revoke etcd lease %x (it expires by itself): %s", lease, exc)

    # -- watch --------------------------------------------------------------------------
    async def watch(self, key: bytes) -> AsyncIterator[tuple[str, bytes]]:
        """Events on *key* until the stream breaks (:class:`StateStoreUnavailableError`)."""
        self._connect()
        assert self._watch is not None
        call = self._watch.Watch()
        try:
            await call.write(rpc.WatchRequest(create_request=rpc.WatchCreateRequest(key=key)))
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    raise StateStoreUnavailableError(
                        f"etcd {self.endpoint} closed the watch on {key!r}"
                    )
                for event in resp.events:
                    yield ("DELETE" if event.type == 1 else "PUT"), event.kv.value
        except grpc.aio.AioRpcError as exc:
            await self._rotate()
            raise StateStoreUnavailableError(f"etcd watch broke: {exc.code().name}") from None
        finally:
            call.cancel()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            await asyncio.sleep(0)
