"""HaController: a broker's role in its broker name, and the parts that go with it.

::

    ASYNC_MASTER / SYNC_MASTER                       SLAVE
    ──────────────────────────                       ─────
    serves Replicate on ha_port                      HaClient copies the master's log
    (ReplicationMaster, HaServicer)                 store refuses puts (replica_of)
    SYNC: a send waits for min_sync_replicas         serves pulls, offsets, queries
    delay, timer and transaction services run        those services wait
    registers as broker id 0 with its epoch          registers as its broker id; learns
                                                     the master's HA address from the reply

``promote()`` turns a replica into the master (manual failover): it stops
copying, starts a new epoch at the end of its log (the epoch file records
where), and registers as id 0 with it; the nameserver then refuses the old
master (a lower epoch), and so do replicas that saw the new epoch. A master
told by the nameserver that it is stale stops taking writes (fenced) until it
is restarted as a replica, whose handshake cuts the tail it wrote alone.

The role a promotion gave survives a restart (``config/role.json``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from pocketmq.broker.errors import BrokerNotMasterError, FailedPreconditionError
from pocketmq.broker.ha.master import ReplicationMaster, SyncOutcome
from pocketmq.broker.ha.metadata_sync import MetadataSync
from pocketmq.broker.ha.replica import HaClient
from pocketmq.broker.ha.servicer import HaServicer
from pocketmq.broker.namesrv_client import RegisterReply
from pocketmq.common.auth import signed_metadata
from pocketmq.v1 import common_pb2

if TYPE_CHECKING:
    from pocketmq.broker.config import BrokerConfig
    from pocketmq.broker.consumer_offsets import ConsumerOffsetManager
    from pocketmq.broker.schedule import ScheduleMessageService
    from pocketmq.broker.store.message_store import DefaultMessageStore
    from pocketmq.broker.topic_config import TopicConfigManager
    from pocketmq.security.interceptor import AclInterceptor

__all__ = ["MASTER_ROLES", "HaController", "RoleError"]

log = logging.getLogger(__name__)

MASTER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER")


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class RoleError(FailedPreconditionError):
    """A role change that cannot be made (promote a master, an epoch that does not grow)."""

    default_reason = "ROLE_CHANGE_REFUSED"


class HaController:
    def __init__(
        self,
        config: BrokerConfig,
        store: DefaultMessageStore,
        *,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        schedule: ScheduleMessageService | None,
        replica_addr: str,
        acl: AclInterceptor | None = None,
        server_credentials: grpc.ServerCredentials | None = None,
    ) -> None:
        self._config = config
        self._store = store
        self._topics = topics
        self._replica_addr = replica_addr
        self._acl = acl
        self._server_credentials = server_credentials
        self._role_file = os.path.join(config.config_dir, "role.json")
        self.controller_mode = config.controller_mode
        if self.controller_mode:
            # The controller names the master; until it has spoken this broker takes no
            # writes, whatever it was before a restart (RocketMQ's controller mode).
            self.role, self.broker_id = "SLAVE", 0
        else:
            self.role, self.broker_id = self._load_role()
        self.fenced = ""  # why this master stopped taking writes
        self.redirect: tuple[str, int] = ("", 0)  # (master address, epoch) when not master
        self._master_ha_addr = config.ha_master_address
        self.replication = ReplicationMaster(
            store,
            broker_name=config.broker_name,
            batch_bytes=config.ha_transfer_batch_bytes,
            heartbeat_s=config.ha_heartbeat_interval_ms / 1000,
            housekeeping_s=config.ha_housekeeping_interval_ms / 1000,
            fallbehind_max_bytes=config.ha_slave_fallbehind_max_bytes,
            min_sync_replicas=config.min_sync_replicas,
            is_master=self.is_master,
            on_replica_ahead=self.fence,
            linger_s=config.ha_transfer_linger_ms / 1000,
        )
        store.add_append_listener(self.replication.on_append)
        #: the topic configs, consumer offsets and delay progress a replica copies
        self.metadata = MetadataSync(
            store, topics=topics, offsets=offsets, schedule=schedule, epoch=lambda: self.epoch
        )
        self.client: HaClient | None = None
        self._server: grpc.aio.Server | None = None
        self.ha_port = 0
        self._on_become_master: list[Callable[[bool], Awaitable[None] | None]] = []
        self._on_step_down: list[Callable[[], Awaitable[None]]] = []
        self._on_role_change: list[Callable[[int, int], None]] = []

    # -- role ---------------------------------------------------------------------------
    def _load_role(self) -> tuple[str, int]:
        cfg = self._config
        try:
            with open(self._role_file, encoding="utf-8") as f:
                saved = json.load(f)
            role, broker_id = str(saved["role"]), int(saved["broker_id"])
        except FileNotFoundError:
            return cfg.broker_role, cfg.broker_id
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error(
                "ignoring %s (%s); using the configured role %s",
                self._role_file,
                exc,
                cfg.broker_role,
            )
            return cfg.broker_role, cfg.broker_id
        if (role, broker_id) != (cfg.broker_role, cfg.broker_id):
            log.warning(
                "broker %s runs as %s id %d, the role a promotion or step-down gave it "
                "(%s), not the configured %s id %d; delete that file to go back",
                cfg.broker_name,
                role,
                broker_id,
                self._role_file,
                cfg.broker_role,
                cfg.broker_id,
            )
        return role, broker_id

    def _save_role(self) -> None:
        tmp = self._role_file + ".tmp"
        os.makedirs(os.path.dirname(self._role_file), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "role": self.role,
                    "broker_id": self.broker_id,
                    "epoch": self._store.epochs.last_epoch,
                },
                f,
            )
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._role_file)

    @property
    def store(self) -> DefaultMessageStore:
        return self._store

    @property
    def master_ha_address(self) -> str:
        return self._master_ha_addr

    def is_master(self) -> bool:
        return self.role in MASTER_ROLES and not self.fenced

    def not_master(self) -> BrokerNotMasterError | None:
        """None while this broker takes writes; else the NOT_MASTER refusal of a send,
        naming the master it knows (the controller's or the nameserver's word)."""
        if self.role in MASTER_ROLES and not self.fenced:
            return None
        name = self._config.broker_name
        addr, epoch = self.redirect
        why = (
            f"fenced: {self.fenced}"
            if self.fenced
            else f"it is a replica (SLAVE), id {self.broker_id}"
        )
        where = (
            f"the master is {addr} in epoch {epoch}"
            if addr
            else "no master is known yet; refresh the route and retry"
        )
        return BrokerNotMasterError(
            f"this broker is not the master of {name} ({why}); {where}",
            broker_name=name,
            master_addr=addr,
            master_epoch=epoch,
        )

    @property
    def epoch(self) -> int:
        return self._store.epochs.last_epoch

    def on_become_master(self, callback: Callable[[bool], Awaitable[None] | None]) -> None:
        """*callback(resumed)* once this broker is master: *resumed* when it goes on with
        the term it was master of before a restart (controller mode), its own files."""
        self._on_become_master.append(callback)

    def on_step_down(self, callback: Callable[[], Awaitable[None]]) -> None:
        """*callback()* when a master becomes a replica without a restart (controller
        mode), before it follows the new master: what only a master runs stops."""
        self._on_step_down.append(callback)

    def on_role_change(self, callback: Callable[[int, int], None]) -> None:
        """*callback(broker_id, epoch)* after a promotion or step-down (re-registration)."""
        self._on_role_change.append(callback)

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self._config
        store = self._store
        if self.controller_mode:
            store.replica_of = f"{cfg.broker_name} (waiting for the controller to name a master)"
            if cfg.ha_listen_port >= 0:
                await self._serve()
            return
        if self.role in MASTER_ROLES and not store.epochs.entries:
            store.epochs.begin(1, store.commitlog.min_offset)
            log.info(
                "broker %s starts master epoch 1 at commit-log offset %d",
                cfg.broker_name,
                store.commitlog.min_offset,
            )
        if cfg.ha_listen_port >= 0:
            await self._serve()
        if self.role == "SLAVE":
            self._become_replica()

    async def _serve(self) -> None:
        cfg = self._config
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", 4 << 20),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
            ]
        )
        HaServicer(self.replication, metadata=self.metadata.parts, acl=self._acl).add_to_server(
            server
        )
        where = f"{cfg.host}:{cfg.ha_listen_port}"
        try:
            self.ha_port = (
                server.add_secure_port(where, self._server_credentials)
                if self._server_credentials is not None
                else server.add_insecure_port(where)
            )
        except RuntimeError as exc:
            raise OSError(f"cannot listen for replicas on {where} (ha_port): {exc}") from None
        await server.start()
        self._server = server
        log.info("replication service of %s on %s", cfg.broker_name, self.ha_address)

    @property
    def ha_address(self) -> str:
        if self._server is None:
            return ""
        if self._config.ha_advertise_addr:
            return self._config.ha_advertise_addr
        ip = self._config.advertised_ip
        return f"[{ip}]:{self.ha_port}" if ":" in ip else f"{ip}:{self.ha_port}"

    def _become_replica(self) -> None:
        cfg = self._config
        self._store.replica_of = f"{cfg.broker_name} id 0"
        if self.client is not None:
            return
        self.client = HaClient(
            self._store,
            cluster_name=cfg.cluster_name,
            broker_name=cfg.broker_name,
            replica_id=self.broker_id,
            replica_addr=self._replica_addr,
            master_ha_addr=lambda: self._master_ha_addr,
            channel_factory=self._channel,
            sign=self._sign,
            heartbeat_s=cfg.ha_heartbeat_interval_ms / 1000,
            housekeeping_s=cfg.ha_housekeeping_interval_ms / 1000,
            topics_version=self._topics_version,
            on_topics=self.metadata.apply_topics,
            on_progress=self.metadata.apply_progress,
            max_metadata_bytes=cfg.ha_max_metadata_bytes,
        )
        self.client.start()

    def _topics_version(self) -> common_pb2.DataVersion:
        version = self._topics.data_version
        return common_pb2.DataVersion(timestamp_ms=version.timestamp_ms, counter=version.counter)

    def _channel(self, addr: str) -> grpc.aio.Channel:
        cfg = self._config
        options = [
            (
                "grpc.max_receive_message_length",
                cfg.ha_transfer_batch_bytes + cfg.max_message_size_bytes + (1 << 20),
            )
        ]
        if cfg.tls_enabled:
            ca = _read(cfg.tls_ca_file or cfg.tls_cert_file)
            creds = grpc.ssl_channel_credentials(
                ca,
                *(
                    (_read(cfg.tls_key_file), _read(cfg.tls_cert_file))
                    if cfg.tls_require_client_auth
                    else ()
                ),
            )
            return grpc.aio.secure_channel(addr, creds, options=options)
        return grpc.aio.insecure_channel(addr, options=options)

    def _sign(self, method: str, request: Any) -> Any:
        credentials = self._config.credentials
        return None if credentials is None else signed_metadata(credentials, method, request)

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.stop()
        self.replication.close()
        if self._server is not None:
            await self._server.stop(1.0)
            self._server = None

    # -- the nameserver's word ------------------------------------------------------------
    def on_register_reply(self, reply: RegisterReply) -> None:
        if self.role == "SLAVE":
            # In controller mode the controller names the master: a nameserver that has
            # not heard of the last election yet would point this replica back at the
            # replaced master (its registration reply lags by one register interval).
            if (
                reply.master_ha_addr
                and reply.master_ha_addr != self._master_ha_addr
                and not self._config.ha_master_address
                and not self.controller_mode
            ):
                self._master_ha_addr = reply.master_ha_addr
                log.info(
                    "master of %s replicates from %s (epoch %d)",
                    self._config.broker_name,
                    reply.master_ha_addr,
                    reply.master_epoch,
                )
                if self.client is not None:
                    self.client.master_changed()
            if self.client is not None:
                self.client.saw_epoch(reply.master_epoch)
            if reply.master_addr and reply.master_epoch >= self.redirect[1]:
                self.redirect = (reply.master_addr, reply.master_epoch)
        elif reply.stale_master and not self.fenced:
            if reply.master_addr:
                self.redirect = (reply.master_addr, reply.master_epoch)
            self.fence(
                f"this broker was master of {self._config.broker_name} in epoch "
                f"{self.epoch}, and the nameserver knows epoch {reply.master_epoch} "
                f"(master {reply.master_addr or 'unknown'}); restart it as a replica "
                "(--broker-role SLAVE --broker-id N) to rejoin",
                by=reply.master_addr or "a newer master",
            )

    def fence(self, why: str, *, by: str = "") -> None:
        """Stop taking writes as master, for good in this process (a stale epoch, or a
        replica that holds records of this term this master lost)."""
        if self.fenced:
            return
        self.fenced = why
        self._store.replica_of = f"{by or self._config.broker_name} (fenced)"
        self.replication.close()
        log.error("%s", why)

    async def follow(
        self, *, broker_id: int, master_ha_addr: str, master_epoch: int, master_addr: str
    ) -> None:
        """Controller mode: be a replica (id *broker_id*) of the master at *master_ha_addr*;
        a master steps down first (its log is cut by epoch at the first handshake)."""
        was_master = self.role in MASTER_ROLES
        if was_master:
            self.replication.close()
            log.warning(
                "broker %s steps down: the controller named %s master in epoch %d",
                self._config.broker_name,
                master_addr,
                master_epoch,
            )
            for step_down in self._on_step_down:
                await step_down()
        self.role, self.broker_id = "SLAVE", broker_id
        self.fenced = ""
        self.redirect = (master_addr, master_epoch)
        changed = master_ha_addr != self._master_ha_addr
        self._master_ha_addr = master_ha_addr
        if self.client is not None and (changed or was_master):
            await self.client.stop()
            self.client = None
        self._become_replica()
        self._store.replica_of = f"{self._config.broker_name} master {master_addr}"
        assert self.client is not None
        self.client.saw_epoch(master_epoch)
        self.client.master_changed()
        if was_master or changed:
            for callback in self._on_role_change:
                callback(broker_id, master_epoch)

    # -- sends ------------------------------------------------------------------------------
    async def wait_replicated(self, end_offset: int) -> SyncOutcome:
        if self.role != "SYNC_MASTER":
            return SyncOutcome.OK
        return await self.replication.wait_replicated(
            end_offset, self._config.slave_timeout_ms / 1000
        )

    # -- manual failover ---------------------------------------------------------------------
    async def promote(
        self, *, epoch: int = 0, role: str = "", resume: bool = False
    ) -> tuple[int, int, str]:
        """Make this replica the master of its broker name; (epoch, start offset, role).

        *resume* (controller mode): the controller names this broker master of the
        epoch its epoch file already ends with — it was, before a restart."""
        if self.role in MASTER_ROLES and not self.fenced:
            raise RoleError(
                f"broker {self._config.broker_name} is already its master "
                f"({self.role}, epoch {self.epoch})"
            )
        role = role or (
            self._config.broker_role if self._config.broker_role in MASTER_ROLES else "ASYNC_MASTER"
        )
        if role not in MASTER_ROLES:
            raise RoleError(f"role {role!r} is not a master role; give SYNC_MASTER or ASYNC_MASTER")
        seen = max(self.epoch, self.client.highest_epoch_seen if self.client else 0)
        new_epoch = epoch or seen + 1
        if new_epoch <= seen and not (resume and new_epoch == self.epoch == seen):
            raise RoleError(
                f"epoch {new_epoch} is not above {seen}, the highest this broker has seen"
            )
        if self.client is not None:
            await self.client.stop()
            self.client = None
        store = self._store
        store.dispatch_replicated()  # the last frame copied, acked, maybe not dispatched
        start = store.commitlog.max_offset
        resumed = resume and new_epoch == self.epoch
        if not resumed:
            store.epochs.begin(new_epoch, start)
        store.replica_of = ""
        self.fenced = ""
        self.replication.closed = False
        self.role, self.broker_id = role, 0
        self.redirect = ("", 0)
        if not self.controller_mode:
            self._save_role()
        log.warning(
            "broker %s promoted to %s in epoch %d at commit-log offset %d",
            self._config.broker_name,
            role,
            new_epoch,
            start,
        )
        self.metadata.adopt_unconfigured_topics()
        self.metadata.clamp_progress()
        for callback in self._on_role_change:
            callback(0, new_epoch)
        for become in self._on_become_master:
            result = become(resumed)
            if result is not None:
                await result
        return new_epoch, start, role

    # -- what cluster list shows -------------------------------------------------------------------
    def runtime_info(self) -> dict[str, str]:
        info = {
            "broker_role": self.role,
            "broker_id": str(self.broker_id),
            "master_epoch": str(self.epoch),
            "ha_address": self.ha_address,
        }
        if self.fenced:
            info["fenced"] = self.fenced
        if self.client is not None:
            status = self.client.status
            info["ha_master_address"] = status.master_ha_addr or self._master_ha_addr
            info["ha_connected"] = str(status.connected).lower()
            info["replication_lag_bytes"] = str(status.lag(self._store.commitlog.max_offset))
            info["ha_truncated_bytes"] = str(status.truncated_bytes)
            if status.last_error:
                info["ha_last_error"] = status.last_error
        else:
            lags = self.replication.lag_table()
            info["in_sync_replicas"] = str(self.replication.in_sync())
            info["replicas"] = " ".join(f"{rid}:{lag}" for rid, lag in lags.items())
        return info
