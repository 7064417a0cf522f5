"""Manual failover through :class:`~pocketmq.client.admin.AdminClient`.

:meth:`ReplicaAdmin.promote` makes a replica the master of its broker name
(``PromoteToMaster``), after comparing it with the other live members
(:meth:`ReplicaAdmin.replica_positions`): it refuses, unless forced, when one
of them holds a log that goes further, since promoting would drop what only
that one holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pocketmq.client.admin_model import PromoteResult, ReplicaPosition
from pocketmq.client.errors import ClientError
from pocketmq.client.remoting import BrokerClient
from pocketmq.v1 import broker_pb2 as bpb

__all__ = ["MASTER_ROLES", "PromotionRefusedError", "ReplicaAdmin"]

log = logging.getLogger(__name__)

MASTER_ROLES = ("SYNC_MASTER", "ASYNC_MASTER")


class PromotionRefusedError(ClientError):
    """:meth:`AdminClient.promote` found a live member of the broker name whose log goes
    further than the target's; ``target`` and ``ahead`` say how far each goes."""

    def __init__(
        self, message: str, *, target: ReplicaPosition, ahead: list[ReplicaPosition]
    ) -> None:
        super().__init__(message)
        self.target = target
        self.ahead = ahead


class ReplicaAdmin:
    """Mixed into AdminClient, which provides ``broker``, ``cluster_info``,
    ``broker_runtime_info`` and ``timeout_s``."""

    timeout_s: float
    broker: Callable[[str], BrokerClient]
    cluster_info: Callable[[], Awaitable[Any]]
    broker_runtime_info: Callable[[str], Awaitable[dict[str, str]]]

    async def replica_positions(
        self,
        addr: str,
    ) -> tuple[ReplicaPosition, list[ReplicaPosition], str]:
        """The broker at *addr*, the other members of its broker name, and why those could
        not be listed ("" when they could).

        The target's runtime info must answer (its errors propagate); the members come
        from the nameserver's cluster info, and each one that does not answer is kept
        with its error, so that a caller can say what was not compared.
        """
        target = _position(addr, await self.broker_runtime_info(addr), fallback_id=-1)
        try:
            info = await self.cluster_info()
        except ClientError as exc:
            return target, [], str(exc)
        members = [
            b for b in info.brokers if b.broker_name == target.broker_name and b.addr != addr
        ]

        async def one(addr: str, broker_id: int) -> ReplicaPosition:
            try:
                table = await self.broker_runtime_info(addr)
            except ClientError as exc:
                return ReplicaPosition(
                    broker_name=target.broker_name,
                    broker_id=broker_id,
                    addr=addr,
                    role="",
                    master_epoch=-1,
                    max_offset=-1,
                    error=str(exc),
                )
            return _position(addr, table, fallback_id=broker_id)

        return target, list(await asyncio.gather(*(one(b.addr, b.broker_id) for b in members))), ""

    async def promote(
        self, addr: str, *, epoch: int = 0, role: str = "", force: bool = False
    ) -> PromoteResult:
        """Make the replica at *addr* the master of its broker name (``PromoteToMaster``).

        *epoch*: the new master epoch, 0 = one above every epoch the broker has seen;
        *role*: SYNC_MASTER or ASYNC_MASTER, "" = the broker's choice (its configured
        master role, else ASYNC_MASTER). Raises :class:`PromotionRefusedError` when a
        live, unfenced member of the broker name is further ahead (a higher epoch, then
        a larger commit-log max offset), unless *force*; the broker itself refuses a
        master and an epoch that does not grow (RemoteError, FAILED_PRECONDITION).
        """
        if epoch < 0:
            raise ValueError(f"epoch is {epoch}; give 0 (one above every epoch seen) or more")
        if role and role not in MASTER_ROLES:
            raise ValueError(
                f"role {role!r} is not a master role; give SYNC_MASTER or ASYNC_MASTER"
            )
        target, members, namesrv_error = await self.replica_positions(addr)
        ahead = [m for m in members if m.reachable and not m.fenced and m.ahead_of(target)]
        if ahead and not force:
            raise PromotionRefusedError(
                f"not promoting {target.describe()}: "
                + "; ".join(f"{m.describe()} is {_how_far_ahead(m, target)}" for m in ahead)
                + ". Promoting it would drop what only the member(s) ahead hold; promote the "
                "one furthest ahead",
                target=target,
                ahead=ahead,
            )
        # BrokerClient has no promote() of its own (yet): its generic call maps errors
        # as for every other RPC.
        resp = await self.broker(addr)._call(
            "PromoteToMaster", bpb.PromoteToMasterRequest(epoch=epoch, role=role), self.timeout_s
        )
        if ahead:
            log.warning(
                "promoted %s although %s", target.describe(), "; ".join(m.describe() for m in ahead)
            )
        return PromoteResult(
            broker_name=target.broker_name,
            addr=addr,
            epoch=resp.epoch,
            start_offset=resp.start_offset,
            role=resp.role,
            previous=target,
            members=members,
            forced=bool(ahead),
            namesrv_error=namesrv_error,
        )


def _position(addr: str, table: dict[str, str], *, fallback_id: int) -> ReplicaPosition:
    def number(key: str, default: int) -> int:
        try:
            return int(table.get(key, ""))
        except ValueError:
            return default

    return ReplicaPosition(
        broker_name=table.get("broker_name", ""),
        broker_id=number("broker_id", fallback_id),
        addr=addr,
        role=table.get("broker_role", ""),
        master_epoch=number("master_epoch", 0),
        max_offset=number("commitlog_max_offset", 0),
        fenced=bool(table.get("fenced")),
    )


def _how_far_ahead(member: ReplicaPosition, target: ReplicaPosition) -> str:
    if member.master_epoch > target.master_epoch:
        return f"ahead by epoch ({member.master_epoch} > {target.master_epoch})"
    return f"{member.max_offset - target.max_offset} bytes ahead in epoch {member.master_epoch}"
