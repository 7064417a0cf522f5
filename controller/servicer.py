"""ControllerServicer: the ``pocketmq.v1.Controller`` gRPC service, a thin adapter.

Protobuf stays here; :class:`~pocketmq.controller.manager.ReplicasManager`
works on plain values. Outcomes map to status codes in one place::

    standby controller                UNAVAILABLE, trailing `pocketmq-controller-leader: addr`
    StateStoreUnavailableError (etcd) UNAVAILABLE
    ControllerRefusalError (a rule)   FAILED_PRECONDITION, `pocketmq-reason: <rule>`
    a malformed request               INVALID_ARGUMENT

(the errors' tree: :mod:`pocketmq.controller.errors`)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn

import grpc

from pocketmq.controller.manager import Heartbeat, ReplicasManager
from pocketmq.controller.state import ControllerRefusalError, GroupState
from pocketmq.controller.store import StateStoreUnavailableError
from pocketmq.v1 import controller_pb2 as pb
from pocketmq.v1 import controller_pb2_grpc

__all__ = ["LEADER_METADATA_KEY", "ControllerServicer", "replica_info"]

LEADER_METADATA_KEY = "pocketmq-controller-leader"


def replica_info(state: GroupState, live: set[int], your_id: int = 0) -> pb.ReplicaInfo:
    master = state.master
    return pb.ReplicaInfo(
        cluster_name=state.cluster_name,
        broker_name=state.broker_name,
        master_id=state.master_id,
        master_addr=master.addr if master else "",
        master_ha_addr=master.ha_addr if master else "",
        master_epoch=state.master_epoch,
        sync_state_set=sorted(state.sync_state_set),
        sync_state_set_epoch=state.sss_epoch,
        members=[
            pb.ReplicaMember(broker_id=i, broker_addr=r.addr, ha_addr=r.ha_addr, alive=i in live)
            for i, r in sorted(state.replicas.items())
        ],
        your_broker_id=your_id,
    )


class ControllerServicer(controller_pb2_grpc.ControllerServicer):
    def __init__(
        self,
        manager: ReplicasManager,
        *,
        is_active: Callable[[], bool],
        leader_addr: Callable[[], str],
    ) -> None:
        self._manager = manager
        self._is_active = is_active
        self._leader_addr = leader_addr

    async def _check_active(self, context: grpc.aio.ServicerContext) -> None:
        if not self._is_active():
            leader = self._leader_addr()
            context.set_trailing_metadata(((LEADER_METADATA_KEY, leader),))
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                "this nameserver's controller is a standby; the active one is "
                f"{leader or 'not known yet'}",
            )

    async def _run(self, context: grpc.aio.ServicerContext, call: Any) -> Any:
        await self._check_active(context)
        try:
            return await call
        except ControllerRefusalError as exc:
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc), exc.reason)
        except StateStoreUnavailableError as exc:
            await _abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"the controller cannot reach its state store: {exc}",
                "STORE_DOWN",
            )

    def _info(self, state: GroupState, your_id: int = 0) -> pb.ReplicaInfo:
        return replica_info(state, set(self._manager.live(state.broker_name)), your_id)

    async def Heartbeat(
        self, request: pb.ControllerHeartbeat, context: grpc.aio.ServicerContext
    ) -> pb.ReplicaInfo:
        if not request.broker_name or not request.broker_addr or request.broker_id < 0:
            await _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "a controller heartbeat needs broker_name, broker_addr and a "
                f"broker_id >= 0 (got {request.broker_name!r}, "
                f"{request.broker_addr!r}, {request.broker_id})",
                "BAD_REQUEST",
            )
        state, broker_id = await self._run(
            context,
            self._manager.heartbeat(
                Heartbeat(
                    cluster_name=request.cluster_name,
                    broker_name=request.broker_name,
                    broker_id=request.broker_id,
                    broker_addr=request.broker_addr,
                    ha_addr=request.ha_addr,
                    incarnation=request.incarnation,
                    epoch=request.epoch,
                    max_offset=request.max_offset,
                    confirm_offset=request.confirm_offset,
                    priority=request.election_priority,
                )
            ),
        )
        return self._info(state, broker_id)

    async def AlterSyncStateSet(
        self, request: pb.AlterSyncStateSetRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReplicaInfo:
        state = await self._run(
            context,
            self._manager.alter_sync_state_set(
                request.broker_name,
                master_id=request.master_id,
                master_epoch=request.master_epoch,
                sss_epoch=request.sync_state_set_epoch,
                new_set=frozenset(request.new_sync_state_set),
            ),
        )
        return self._info(state)

    async def ElectMaster(
        self, request: pb.ElectMasterRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReplicaInfo:
        state = await self._run(
            context, self._manager.elect_master(request.broker_name, request.broker_id)
        )
        return self._info(state)

    async def GetReplicaInfo(
        self, request: pb.GetReplicaInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReplicaInfo:
        await self._check_active(context)
        state = self._manager.get(request.broker_name)
        if state is None:
            await _abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"the controller knows no broker name {request.broker_name!r}",
                "UNKNOWN_BROKER_NAME",
            )
        return self._info(state)

    async def WatchReplicaInfo(
        self,
        request: pb.GetReplicaInfoRequest,
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.ReplicaInfo]:
        await self._check_active(context)
        queue = self._manager.watch()
        try:
            for state in self._manager.groups():
                if request.broker_name in ("", state.broker_name):
                    yield self._info(state)
            while self._is_active():
                try:
                    async with asyncio.timeout(1.0):  # wait_for may swallow a cancel
                        state = await queue.get()
                except TimeoutError:
                    continue
                if request.broker_name in ("", state.broker_name):
                    yield self._info(state)
        finally:
            self._manager.unwatch(queue)


async def _abort(
    context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str, reason: str
) -> NoReturn:
    context.set_trailing_metadata((("pocketmq-reason", reason),))
    await context.abort(code, message)
    raise AssertionError("unreachable")
