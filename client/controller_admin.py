"""Admin calls to the controller (``pocketmq.v1.Controller``): who is master, elect one.

::

    elect_master(admin, "broker-a", broker_id=0, controllers=["h1:9876", "h2:9876"])
      ├─ each controller address in turn; a standby answers UNAVAILABLE with the
      │  active one in the ``pocketmq-controller-leader`` trailer: asked next
      └─ ElectMaster{broker_name, broker_id}  ->  ControllerView (plain values)

The controller runs inside nameservers, on their port; the calls go through the
admin client's channels, so they carry its TLS and ACL signature (the
controller's methods need an admin account when the ACL is on). A refusal
(no live in-sync replica, a broker id that is not eligible) is a
:class:`~pocketmq.client.errors.RemoteError` whose ``reason`` names the rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from pocketmq.client.errors import ClientError, RemoteError
from pocketmq.client.remote_errors import remote_error
from pocketmq.v1 import controller_pb2, controller_pb2_grpc

if TYPE_CHECKING:
    from pocketmq.client.remoting import Remoting

__all__ = ["ControllerMember", "ControllerView", "elect_master", "replica_info"]

LEADER_METADATA_KEY = "pocketmq-controller-leader"


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerMember:
    broker_id: int
    addr: str
    alive: bool  # heard from within the controller's inactivity timeout
    in_sync: bool  # in the in-sync replica set (may be elected)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerView:
    """The controller's word on one broker name."""

    broker_name: str
    master_id: int  # 0 = no master
    master_addr: str
    master_epoch: int
    sync_state_set_epoch: int
    members: tuple[ControllerMember, ...] = field(default_factory=tuple)
    controller: str = ""  # the active controller that answered


def _view(info: Any, controller: str) -> ControllerView:
    in_sync = set(info.sync_state_set)
    return ControllerView(
        broker_name=info.broker_name,
        master_id=info.master_id,
        master_addr=info.master_addr,
        master_epoch=info.master_epoch,
        sync_state_set_epoch=info.sync_state_set_epoch,
        members=tuple(
            ControllerMember(
                broker_id=m.broker_id,
                addr=m.broker_addr,
                alive=m.alive,
                in_sync=m.broker_id in in_sync,
            )
            for m in info.members
        ),
        controller=controller,
    )


async def _call(
    remoting: Remoting, controllers: Sequence[str], method: str, request: Any, timeout_s: float
) -> ControllerView:
    """*method* on the active controller among *controllers* (following a standby's hint)."""
    queue = list(controllers)
    tried: list[str] = []
    last: RemoteError | None = None
    while queue:
        addr = queue.pop(0)
        if addr in tried:
            continue
        tried.append(addr)
        stub = controller_pb2_grpc.ControllerStub(remoting.channel(addr))
        try:
            reply = await getattr(stub, method)(request, timeout=timeout_s)
            return _view(reply, addr)
        except grpc.aio.AioRpcError as exc:
            last = remote_error(exc, addr, method)
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                last = RemoteError(
                    f"{addr} runs no controller (start its nameserver with --controller)",
                    addr=addr,
                    code="UNIMPLEMENTED",
                )
                continue
            if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise last from None
            hint = dict(exc.trailing_metadata() or ()).get(LEADER_METADATA_KEY, "")
            if hint and hint not in tried:
                queue.insert(0, str(hint))
    if last is not None:
        raise last
    raise ClientError("no controller address given")


async def elect_master(
    remoting: Remoting,
    broker_name: str,
    *,
    broker_id: int = 0,
    controllers: Sequence[str],
    timeout_s: float = 5.0,
) -> ControllerView:
    """Force an election for *broker_name* now (*broker_id* 0: the best in-sync replica)."""
    return await _call(
        remoting,
        controllers,
        "ElectMaster",
        controller_pb2.ElectMasterRequest(broker_name=broker_name, broker_id=broker_id),
        timeout_s,
    )


async def replica_info(
    remoting: Remoting, broker_name: str, *, controllers: Sequence[str], timeout_s: float = 5.0
) -> ControllerView:
    """The controller's current word on *broker_name*."""
    return await _call(
        remoting,
        controllers,
        "GetReplicaInfo",
        controller_pb2.GetReplicaInfoRequest(broker_name=broker_name),
        timeout_s,
    )
