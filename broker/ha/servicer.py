"""HaServicer: the ``pocketmq.v1.HaService`` gRPC adapter of a master's replication.

The only replication module that sees the HA protobuf on the master's side.
Registered with :meth:`HaServicer.add_to_server`, it sends Data frames
encoded by hand (:mod:`.wire`, one copy of the records instead of three);
registered by the generated ``add_HaServiceServicer_to_server``, protobuf
messages (the same bytes on the wire).
With the ACL on, every call must be signed by an **admin** account (replicas
authenticate as admins; RocketMQ 4's HA port had no authentication at all).
A bidirectional stream is not covered by the broker's ACL interceptor, so the
servicer checks the signature itself, on the stream's opening metadata, with
the same rules (clock window, replayed signatures) as every other request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc

from pocketmq.broker.ha import wire
from pocketmq.broker.ha.master import HandshakeRefusedError, ReplicationMaster
from pocketmq.broker.ha.metadata import merged
from pocketmq.broker.store.epochs import EpochEntry
from pocketmq.common.aio import cancel_and_wait
from pocketmq.security.interceptor import AclError, AclInterceptor, peer_ip
from pocketmq.v1 import common_pb2, ha_pb2, ha_pb2_grpc

__all__ = ["HaServicer"]

log = logging.getLogger(__name__)

SERVICE = "pocketmq.v1.HaService"
REPLICATE = "/pocketmq.v1.HaService/Replicate"
GET_METADATA = "/pocketmq.v1.HaService/GetMetadata"
STREAM_METADATA = "/pocketmq.v1.HaService/StreamMetadata"


class HaServicer(ha_pb2_grpc.HaServiceServicer):
    def __init__(
        self,
        service: ReplicationMaster,
        *,
        metadata: Callable[[common_pb2.DataVersion | None], Iterator[ha_pb2.MetadataSnapshot]],
        acl: AclInterceptor | None = None,
    ) -> None:
        self._service = service
        self._metadata = metadata
        self._acl = acl
        self._raw = False  # True once add_to_server registered the hand-encoded frames

    def add_to_server(self, server: grpc.aio.Server) -> None:
        """Register this servicer, with Data frames encoded by hand (:mod:`.wire`): what
        ``ha_pb2_grpc.add_HaServiceServicer_to_server`` does, but the Replicate stream's
        serializer passes the encoded frames through."""
        self._raw = True
        handlers = {
            "Replicate": grpc.stream_stream_rpc_method_handler(
                self.Replicate,
                request_deserializer=ha_pb2.ReplicaFrame.FromString,
                response_serializer=wire.serialize,
            ),
            "GetMetadata": grpc.unary_unary_rpc_method_handler(
                self.GetMetadata,
                request_deserializer=ha_pb2.GetMetadataRequest.FromString,
                response_serializer=ha_pb2.MetadataSnapshot.SerializeToString,
            ),
            "StreamMetadata": grpc.unary_stream_rpc_method_handler(
                self.StreamMetadata,
                request_deserializer=ha_pb2.GetMetadataRequest.FromString,
                response_serializer=ha_pb2.MetadataSnapshot.SerializeToString,
            ),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        server.add_registered_method_handlers(SERVICE, handlers)

    async def _authorize(
        self, method: str, request: Any, context: grpc.aio.ServicerContext
    ) -> None:
        if self._acl is None:
            return
        try:
            account = self._acl.check(
                method,
                request,
                dict(context.invocation_metadata() or ()),
                peer_ip(context.peer() or ""),
            )
        except AclError as exc:
            await context.abort(exc.code, exc.message)
            return
        if account is not None and not account.admin:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"replication needs an admin account; access key "
                f"{account.access_key!r} is not one (admin = true in the ACL)",
            )

    async def GetMetadata(
        self, request: ha_pb2.GetMetadataRequest, context: grpc.aio.ServicerContext
    ) -> ha_pb2.MetadataSnapshot:
        return merged(await self._metadata_parts(GET_METADATA, request, context))

    async def StreamMetadata(
        self, request: ha_pb2.GetMetadataRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[ha_pb2.MetadataSnapshot]:
        for part in await self._metadata_parts(STREAM_METADATA, request, context):
            yield part

    async def _metadata_parts(
        self, method: str, request: ha_pb2.GetMetadataRequest, context: grpc.aio.ServicerContext
    ) -> Iterator[ha_pb2.MetadataSnapshot]:
        await self._authorize(method, request, context)
        if request.broker_name != self._service.broker_name:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"this master serves broker name {self._service.broker_name!r}, "
                f"not {request.broker_name!r}",
            )
        known = request.known_data_version if request.HasField("known_data_version") else None
        return self._metadata(known)

    async def Replicate(
        self,
        request_iterator: AsyncIterator[ha_pb2.ReplicaFrame],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[ha_pb2.MasterFrame]:
        await self._authorize(REPLICATE, ha_pb2.ReplicaFrame(), context)
        service = self._service
        frames = request_iterator.__aiter__()
        try:
            first = await frames.__anext__()
        except StopAsyncIteration:
            return
        if not first.HasField("hello"):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "the first frame of a replication stream is a Hello",
            )
        hello = first.hello
        if hello.replica_id <= 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"replica_id is {hello.replica_id}; a replica's broker_id is above 0",
            )
        try:
            welcome = service.handshake(
                broker_name=hello.broker_name,
                replica_id=hello.replica_id,
                max_offset=hello.max_offset,
                epochs=[EpochEntry(e.epoch, e.start_offset) for e in hello.epochs],
                highest_epoch_seen=hello.highest_epoch_seen,
            )
        except HandshakeRefusedError as exc:
            log.warning(
                "refused replica %d of %s from %s: %s",
                hello.replica_id,
                hello.broker_name,
                context.peer(),
                exc.message,
            )
            yield ha_pb2.MasterFrame(
                refuse=ha_pb2.Refuse(
                    reason=ha_pb2.Refuse.Reason.Value(exc.reason),
                    message=exc.message,
                    master_epoch=service.current_epoch,
                )
            )
            return
        yield ha_pb2.MasterFrame(
            welcome=ha_pb2.Welcome(
                master_epoch=welcome.master_epoch,
                epochs=[
                    ha_pb2.EpochEntry(epoch=e.epoch, start_offset=e.start_offset)
                    for e in welcome.epochs
                ],
                master_min_offset=welcome.min_offset,
                master_max_offset=welcome.max_offset,
                truncate_to=welcome.truncate_to,
                start_offset=welcome.start_offset,
            )
        )
        state = service.connected(
            hello.replica_id, hello.replica_addr or context.peer(), welcome.start_offset
        )
        reader = asyncio.get_running_loop().create_task(self._read_acks(frames, state))
        try:
            async for frame in service.frames(
                state, welcome.start_offset, self._encode_raw if self._raw else self._encode
            ):
                if reader.done():
                    break
                yield frame
        except TimeoutError as exc:
            log.warning("%s; dropping its stream", exc)
        finally:
            service.disconnected(state)
            await cancel_and_wait(reader)

    def _encode_raw(
        self, offset: int, epoch: int, start: int, records: memoryview | bytes, lazy_ack: bool
    ) -> bytes:
        """A Data frame, encoded by hand (:mod:`.wire`): the records copied once."""
        store = self._service.store
        gate = store.gate
        return wire.encode_data(
            offset=offset,
            epoch=epoch,
            epoch_start_offset=start,
            master_max_offset=store.commitlog.max_offset,
            master_min_offset=store.commitlog.min_offset,
            records=records,
            confirm_offset=gate.confirm_offset if gate.on else None,
            lazy_ack=lazy_ack,
        )

    def _encode(
        self, offset: int, epoch: int, start: int, records: memoryview | bytes, lazy_ack: bool
    ) -> ha_pb2.MasterFrame:
        """A Data frame as a protobuf message (registered by the generated code)."""
        store = self._service.store
        data = ha_pb2.Data(
            offset=offset,
            epoch=epoch,
            epoch_start_offset=start,
            master_max_offset=store.commitlog.max_offset,
            master_min_offset=store.commitlog.min_offset,
            records=bytes(records),
            lazy_ack=lazy_ack,
        )
        if store.gate.on:
            data.confirm_offset = store.gate.confirm_offset
        return ha_pb2.MasterFrame(data=data)

    async def _read_acks(self, frames: AsyncIterator[ha_pb2.ReplicaFrame], state: Any) -> None:
        async for frame in frames:
            if frame.HasField("ack"):
                self._service.on_ack(state, frame.ack.max_offset, frame.ack.flushed_offset)
