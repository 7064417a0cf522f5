"""ControllerClient: a broker in controller mode (RocketMQ 5's ReplicasManager).

::

    every controller_heartbeat_interval_ms        WatchReplicaInfo stream
    Heartbeat{id, epoch, max, confirm} ──▶ controller ◀── (role changes at once)
                  │ ReplicaInfo                         │ ReplicaInfo
                  └────────────────▶ take(info) ◀───────┘
       master_id == me, epoch newer   ─▶ HaController.promote(epoch)   (new term)
       master_id == me, same epoch    ─▶ promote(resume=True)         (after a restart)
       master_id == other             ─▶ HaController.follow(master)  (step down / repoint)
       master_id == 0                 ─▶ nothing: wait for an election

A master also keeps its in-sync set (RocketMQ's maybeShrink/ExpandSyncStateSet)
each round: a member not connected, or not caught up for
``ha_max_time_replica_not_catchup_ms``, is dropped; a connected replica whose
ack reached the confirm offset and the current epoch's start is added. The
change goes to the controller (CAS on both epochs); until it answers, SYNC
sends wait for the union of the old and the new set, so a shrink takes
effect only once the controller holds it — a master cut off from the
controller cannot drop its replicas and acknowledge alone.

The broker's id comes from the controller at the first heartbeat and is kept
in ``config/controller_identity.json``. The channel to the controller uses TLS
when ``namesrv_tls_ca_file`` is set (the controller runs in a nameserver) and
every call is signed with the broker's keys (the controller's methods need an
admin account when the nameserver's ACL is on). Controllers are tried in order; a
standby's answer names the active one (trailing ``pocketmq-controller-leader``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import uuid
from typing import TYPE_CHECKING, Any

import grpc

from pocketmq.common.aio import cancel_and_wait
from pocketmq.v1 import controller_pb2 as cpb
from pocketmq.v1 import controller_pb2_grpc

if TYPE_CHECKING:
    from pocketmq.broker.config import BrokerConfig
    from pocketmq.broker.ha.role import HaController

__all__ = ["ControllerClient"]

log = logging.getLogger(__name__)

LEADER_KEY = "pocketmq-controller-leader"
# A live replica this close to the master's end is held for the in-sync set (see
# ControllerClient._check_sync_state_set): it reaches a held gate within milliseconds.
_JOIN_LAG_BYTES = 4 << 20


class ControllerClient:
    def __init__(self, config: BrokerConfig, ha: HaController, *, broker_addr: str) -> None:
        self._config = config
        self._ha = ha
        self._broker_addr = broker_addr
        self._addrs = [a.strip() for a in config.controller_addr.split(",") if a.strip()]
        self._current = self._addrs[0] if self._addrs else ""
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._identity_file = os.path.join(config.config_dir, "controller_identity.json")
        self.broker_id = self._load_identity()
        self.incarnation = uuid.uuid4().hex
        self.info: cpb.ReplicaInfo | None = None
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._altering = False
        self._unsettled = False  # an in-sync set change went unanswered (see _settle_pending)
        self.last_error = ""

    # -- identity ---------------------------------------------------------------------------
    def _load_identity(self) -> int:
        try:
            with open(self._identity_file, encoding="utf-8") as f:
                return int(json.load(f)["broker_id"])
        except FileNotFoundError:
            return self._config.broker_id
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("ignoring %s (%s); asking the controller for an id", self._identity_file, exc)
            return 0

    def _save_identity(self, broker_id: int) -> None:
        os.makedirs(os.path.dirname(self._identity_file), exist_ok=True)
        tmp = self._identity_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"broker_id": broker_id}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._identity_file)

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._heartbeat_loop(), name="ControllerHeartbeat"),
            loop.create_task(self._watch_loop(), name="ControllerWatch"),
        ]

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks = []
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    def _stub(self, addr: str) -> controller_pb2_grpc.ControllerStub:
        channel = self._channels.get(addr)
        if channel is None:
            # The controller runs in a nameserver: TLS to it as to the nameservers.
            ca_file = self._config.namesrv_tls_ca_file
            if ca_file:
                with open(ca_file, "rb") as f:
                    creds = grpc.ssl_channel_credentials(root_certificates=f.read())
                channel = grpc.aio.secure_channel(addr, creds)
            else:
                channel = grpc.aio.insecure_channel(addr)
            self._channels[addr] = channel
        return controller_pb2_grpc.ControllerStub(channel)

    def _sign(self, method: str, request: Any) -> Any:
        from pocketmq.common.auth import signed_metadata

        credentials = self._config.credentials
        return None if credentials is None else signed_metadata(credentials, method, request)

    async def call(self, method: str, request: Any, timeout_s: float = 2.0) -> Any:
        """*method* on the active controller: the current one, a standby's hint, the rest."""
        tried: list[str] = []
        addr = self._current
        last: Exception | None = None
        while addr and addr not in tried:
            tried.append(addr)
            try:
                reply = await getattr(self._stub(addr), method)(
                    request,
                    timeout=timeout_s,
                    metadata=self._sign(f"/pocketmq.v1.Controller/{method}", request),
                )
                self._current = addr
                return reply
            except grpc.aio.AioRpcError as exc:
                last = exc
                if (
                    exc.code() != grpc.StatusCode.UNAVAILABLE
                    and exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED
                ):
                    raise
                hint = dict(exc.trailing_metadata() or ()).get(LEADER_KEY, "")
                rest = [a for a in self._addrs if a not in tried]
                addr = hint if hint and hint not in tried else (rest[0] if rest else "")
        raise last if last is not None else RuntimeError("no controller address configured")

    # -- heartbeats ---------------------------------------------------------------------------
    def _heartbeat(self) -> cpb.ControllerHeartbeat:
        store = self._ha.store
        cfg = self._config
        return cpb.ControllerHeartbeat(
            cluster_name=cfg.cluster_name,
            broker_name=cfg.broker_name,
            broker_id=self.broker_id,
            broker_addr=self._broker_addr,
            ha_addr=self._ha.ha_address,
            incarnation=self.incarnation,
            epoch=self._ha.epoch,
            max_offset=store.commitlog.max_offset,
            confirm_offset=max(0, store.gate.confirm_offset),
            election_priority=cfg.election_priority,
        )

    async def run_once(self) -> None:
        """One heartbeat, the role it implies, and (a master) one in-sync-set check."""
        info = await self.call("Heartbeat", self._heartbeat())
        if info.your_broker_id and info.your_broker_id != self.broker_id:
            self.broker_id = int(info.your_broker_id)
            self._save_identity(self.broker_id)
            log.info(
                "the controller gave %s broker id %d", self._config.broker_name, self.broker_id
            )
        await self.take(info)
        self._unsettled = False
        self._settle_pending()
        await self._check_sync_state_set()

    async def _heartbeat_loop(self) -> None:
        interval = self._config.controller_heartbeat_interval_ms / 1000
        while True:
            started = time.monotonic()
            try:
                await self.run_once()
                self.last_error = ""
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                why = (
                    f"{exc.code().name}: {exc.details()}"
                    if isinstance(exc, grpc.aio.AioRpcError)
                    else repr(exc)
                )
                if why != self.last_error:
                    log.warning(
                        "controller heartbeat of %s failed: %s", self._config.broker_name, why
                    )
                self.last_error = why
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    async def _watch_loop(self) -> None:
        request = cpb.GetReplicaInfoRequest(broker_name=self._config.broker_name)
        while True:
            addr = self._current
            try:
                stream = self._stub(addr).WatchReplicaInfo(
                    request,
                    metadata=self._sign("/pocketmq.v1.Controller/WatchReplicaInfo", request),
                )
                async for info in stream:
                    if self.broker_id:
                        await self.take(info)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("controller watch on %s ended: %s", addr, exc)
            # the heartbeat loop finds the active controller; wait for it or a moment
            for _ in range(20):
                if self._current != addr:
                    break
                await asyncio.sleep(0.05)

    # -- roles --------------------------------------------------------------------------------
    async def take(self, info: cpb.ReplicaInfo) -> None:
        async with self._lock:
            if self.info is not None and info.master_epoch < self.info.master_epoch:
                return  # an older word than one already taken
            self.info = info
            ha = self._ha
            me = self.broker_id
            if not me or not info.master_id:
                return
            if info.master_id == me:
                if not ha.is_master() or ha.epoch < info.master_epoch:
                    resume = info.master_epoch == ha.epoch
                    # The set first: an elected master is alone in it, so its gate opens
                    # to its whole log before it answers anything as master; left at the
                    # replica's (lagging) confirm offset, the queues' max offsets would
                    # drop below what consumers read on the old master.
                    self._apply_sync_state_set(info)
                    await ha.promote(
                        epoch=info.master_epoch, role=self._master_role(), resume=resume
                    )
                self._apply_sync_state_set(info)
            else:
                master = next((m for m in info.members if m.broker_id == info.master_id), None)
                ha_addr = info.master_ha_addr or (master.ha_addr if master else "")
                if (
                    ha.role == "SLAVE"
                    and ha.client is not None
                    and ha.master_ha_address == ha_addr
                    and ha.broker_id == me
                ):
                    ha.client.saw_epoch(info.master_epoch)
                    ha.redirect = (info.master_addr, info.master_epoch)
                    return
                await ha.follow(
                    broker_id=me,
                    master_ha_addr=ha_addr,
                    master_epoch=info.master_epoch,
                    master_addr=info.master_addr,
                )

    async def elect_me(self) -> tuple[int, int, str]:
        """``broker promote`` in controller mode: ask the controller to elect this broker
        (ElectMaster with its id) and take the answer; (epoch, start offset, role).
        Refused (RoleError) when the controller will not: not live, not in sync."""
        from pocketmq.broker.ha.role import RoleError

        if not self.broker_id:
            raise RoleError(
                f"{self._config.broker_name} has no broker id from the controller "
                "yet; retry once it has heartbeated"
            )
        request = cpb.ElectMasterRequest(
            broker_name=self._config.broker_name, broker_id=self.broker_id
        )
        try:
            info = await self.call("ElectMaster", request)
        except grpc.aio.AioRpcError as exc:
            raise RoleError(
                f"the controller refused to elect {self._config.broker_name} id "
                f"{self.broker_id}: {exc.details()}"
            ) from None
        await self.take(info)
        ha = self._ha
        if not ha.is_master():
            raise RoleError(
                f"the controller elected id {info.master_id}, not this broker (id {self.broker_id})"
            )
        entries = ha.store.epochs.entries
        return ha.epoch, entries[-1].start_offset if entries else 0, ha.role

    def _master_role(self) -> str:
        role = self._config.broker_role
        return role if role in ("ASYNC_MASTER", "SYNC_MASTER") else "SYNC_MASTER"

    def _apply_sync_state_set(self, info: cpb.ReplicaInfo) -> None:
        members = frozenset(info.sync_state_set) - {self.broker_id}
        replication = self._ha.replication
        sync = self._ha.role == "SYNC_MASTER"
        gated = sync and bool(members | replication.pending_set)
        if replication.sync_state_set != members or replication.gated != gated:
            replication.set_sync_state_set(members, gated=sync)

    async def _check_sync_state_set(self) -> None:
        """Shrink or expand the in-sync set through the controller (a master only).

        A replica joins in two steps. First it is *held*: a live replica within
        ``_JOIN_LAG_BYTES`` of the end becomes a pending member, so SYNC sends wait
        for it and (a SYNC master) reads are gated where it already is. Once it
        holds everything readable, the master asks the controller to add it. Holding
        first gives the joiner a fixed point to reach instead of a moving end, and
        nothing read on the master is missing from a joiner the controller may elect.
        """
        info = self.info
        ha = self._ha
        if (
            info is None
            or info.master_id != self.broker_id
            or not ha.is_master()
            or self._altering
            or self._unsettled
        ):
            return
        replication = ha.replication
        current = frozenset(info.sync_state_set) - {self.broker_id}
        now = time.monotonic()
        limit = self._config.ha_max_time_replica_not_catchup_ms / 1000
        wanted = set(current)
        for member in current:
            state = replication.replicas.get(member)
            if state is None or now - max(state.last_caught_up_at, state.connected_at) > limit:
                wanted.discard(member)
        store = ha.store
        end = store.commitlog.max_offset
        epoch_start = store.epochs.entries[-1].start_offset if store.epochs.entries else 0
        joining = frozenset(
            rid
            for rid, state in replication.replicas.items()
            if rid not in current
            and now - state.last_frame_at < limit
            and state.ack_offset >= epoch_start
            and end - state.ack_offset <= _JOIN_LAG_BYTES
        )
        sync = ha.role == "SYNC_MASTER"
        gate = store.gate
        confirm = gate.confirm_offset if gate.on else end
        if joining != replication.pending_set:
            # (no await since *confirm* was read: nothing past it has been served)
            replication.set_pending(joining, gated=sync, gate_at=confirm)
            confirm = gate.confirm_offset if gate.on else store.commitlog.max_offset
        wanted |= {
            rid
            for rid in joining
            if replication.replicas[rid].ack_offset >= max(confirm, epoch_start)
        }
        if wanted == current:
            return
        self._altering = True
        request = cpb.AlterSyncStateSetRequest(
            broker_name=self._config.broker_name,
            master_id=self.broker_id,
            master_epoch=info.master_epoch,
            sync_state_set_epoch=info.sync_state_set_epoch,
            new_sync_state_set=sorted(wanted | {self.broker_id}),
        )
        settled = True
        try:
            reply = await self.call("AlterSyncStateSet", request)
            log.info(
                "in-sync set of %s: %s -> %s",
                self._config.broker_name,
                sorted(current),
                sorted(wanted),
            )
            await self.take(reply)
        except grpc.aio.AioRpcError as exc:
            # No answer is no "no": the controller may have written the change. Keep
            # waiting for the joiners until a heartbeat's answer says what it holds.
            settled = exc.code() not in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.StatusCode.CANCELLED,
            )
            log.warning(
                "in-sync set change of %s to %s %s: %s",
                self._config.broker_name,
                sorted(wanted),
                "refused" if settled else "unanswered",
                exc.details(),
            )
        finally:
            self._altering = False
            self._unsettled = not settled
            if settled:
                self._settle_pending()

    def _settle_pending(self) -> None:
        """Joiners that made it into the set stop being pending (the change was answered,
        or a heartbeat answered after it went unanswered carried the set the controller
        holds, already taken); the rest stay held until the next check drops or asks for
        them. A broker that stepped down meanwhile only forgets them: its gate follows
        its new master's frames now."""
        if self._unsettled:
            return
        ha = self._ha
        replication = ha.replication
        if not replication.pending_set:
            return
        if ha.is_master() and not replication.closed:
            left = replication.pending_set - (replication.sync_state_set or frozenset())
            if left != replication.pending_set:
                replication.set_pending(left, gated=ha.role == "SYNC_MASTER")
        else:
            replication.pending_set = frozenset()

    def runtime_info(self) -> dict[str, str]:
        info = self.info
        out = {"controller": self._current, "controller_broker_id": str(self.broker_id)}
        if info is not None:
            out["sync_state_set"] = " ".join(str(i) for i in info.sync_state_set)
            out["sync_state_set_epoch"] = str(info.sync_state_set_epoch)
        if self.last_error:
            out["controller_last_error"] = self.last_error
        with contextlib.suppress(Exception):
            out["confirm_offset"] = str(self._ha.store.gate.confirm_offset)
        return out
