"""BrokerClient: typed calls to one broker, plain values in and out.

Messages (send, pull, PullBatch), consumer offsets, queue offsets, client
registration (heartbeat, the broker's command stream), transactions, send-back
and queue locks. A failed call raises the
:class:`~pocketmq.client.errors.RemoteError` that :mod:`.remote_errors` picks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import grpc

from pocketmq.client.broker_admin_calls import BrokerAdminCalls
from pocketmq.client.errors import RemoteError, ServerError, UnavailableError
from pocketmq.client.model import (
    MessageQueue,
    SendResult,
    SendResults,
    SendStatus,
    _new_send_result,
)
from pocketmq.client.remote_errors import STATUS_ERRORS, remote_error
from pocketmq.client.remote_values import (
    _CONSUME_FROM,
    _SEND_STATUS,
    ChannelOpened,
    CheckTransactionState,
    ConsumerIdsChanged,
    ConsumerInfo,
    HeartbeatAnswer,
    PullReply,
    QueuePull,
    ResetConsumerOffset,
    SendReceipt,
    ServerCommand,
    _pull_reply,
    _receipts,
    _subscription_pb,
    _wire_type,
)
from pocketmq.client.send_stream import SendStreamSender, _StreamUnsupported
from pocketmq.common.auth import Credentials
from pocketmq.common.filter import TAG
from pocketmq.v1 import broker_pb2 as bpb
from pocketmq.v1 import broker_pb2_grpc

__all__ = ["BrokerClient"]

Code = grpc.StatusCode

#: SendBatch's method path, for the call that sends a request serialized already
_SEND_BATCH_PATH = "/{}/SendBatch".format(bpb.DESCRIPTOR.services_by_name["Broker"].full_name)


class BrokerClient(BrokerAdminCalls):
    """Typed calls to one broker. A call that finds it unreachable is reported to
    *on_unreachable* (the route cache stops reading from it for a while).

    The operators' calls (topics, groups, message look-ups, runtime figures) are
    in :class:`~pocketmq.client.broker_admin_calls.BrokerAdminCalls`."""

    def __init__(
        self,
        addr: str,
        channel: grpc.aio.Channel,
        *,
        on_unreachable: Callable[[str], None] | None = None,
        signed: bool = False,
        send_stream: bool = False,
        credentials: Credentials | None = None,
    ) -> None:
        self.addr = addr
        self._stub = broker_pb2_grpc.BrokerStub(channel)
        self._channel = channel
        self._on_unreachable = on_unreachable
        # SendBatch of a request serialized already (send_batch_request): no protobuf
        # message, no second copy of the records. A *signed* channel signs the message's
        # fields, so it gets the message.
        self._send_batch_raw = (
            None
            if signed
            else channel.unary_unary(
                _SEND_BATCH_PATH,
                request_serializer=None,
                response_deserializer=bpb.SendMessageResponse.FromString,
                _registered_method=True,  # as the generated stub's: no per-call method lookup
            )
        )

        # SendBatch over one SendStream (client/send_stream.py); on a signed channel each
        # request signed with *credentials*, as a call's metadata is.
        self._stream = (
            SendStreamSender(
                addr,
                channel,
                failed=lambda exc: self._failed(exc, "SendBatch"),
                reported=self._reported,
                credentials=credentials,
            )
            if send_stream and (credentials is not None or not signed)
            else None
        )

    def _failed(self, exc: grpc.aio.AioRpcError, rpc: str) -> RemoteError:
        return self._reported(remote_error(exc, self.addr, rpc))

    def _reported(self, error: RemoteError) -> RemoteError:
        """*error*, told to the route cache first when it says the broker is unreachable."""
        if (
            self._on_unreachable is not None
            and isinstance(error, UnavailableError)
            and error.unreachable
        ):
            self._on_unreachable(self.addr)
        return error

    async def close(self) -> None:
        """End this client's SendStream, if open (its channel is the caller's to close)."""
        if self._stream is not None:
            await self._stream.close()

    async def _call(self, rpc: str, request: object, timeout_s: float | None) -> Any:
        method = getattr(self._stub, rpc)  # *rpc* is one of broker.proto's, named here
        try:
            return await method(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise self._failed(exc, rpc) from None

    # -- messages -----------------------------------------------------------------------
    async def send_message(
        self, record: bytes, *, producer_group: str = "", timeout_s: float = 3.0
    ) -> list[SendReceipt]:
        if self._stream is not None and not self._stream.unsupported:
            # One record on the stream: a SendBatch of one is stored and answered as a
            # SendMessage is, and sends of one and of many then wait in one line.
            return await self.send_batch(record, producer_group=producer_group, timeout_s=timeout_s)
        resp = await self._call(
            "SendMessage",
            bpb.SendMessageRequest(record=record, producer_group=producer_group),
            timeout_s,
        )
        return _receipts(resp)

    async def send_batch(
        self, records: bytes, *, producer_group: str = "", timeout_s: float = 3.0
    ) -> list[SendReceipt]:
        request = bpb.SendBatchRequest(records=records, producer_group=producer_group)
        if self._stream is not None and not self._stream.unsupported:
            with contextlib.suppress(_StreamUnsupported):
                return _receipts(await self._stream.send(request.SerializeToString(), timeout_s))
        return _receipts(await self._call("SendBatch", request, timeout_s))

    async def init_producer_id(
        self,
        *,
        identity: str,
        topics: list[str],
        producer_group: str = "",
        timeout_s: float = 3.0,
    ) -> tuple[int, int, list[tuple[str, int, int]]]:
        """(producer id, epoch, [(topic, queue id, last sequence)]) for an idempotent
        producer; *identity* "" asks for a fresh id."""
        resp = await self._call(
            "InitProducerId",
            bpb.InitProducerIdRequest(
                producer_group=producer_group, identity=identity, topics=topics
            ),
            timeout_s,
        )
        return (
            resp.producer_id,
            resp.epoch,
            [(q.topic, q.queue_id, q.last_seq) for q in resp.sequences],
        )

    async def send_batch_to(
        self,
        records: bytes,
        queue: MessageQueue,
        *,
        msg_ids: Sequence[str] | None = None,
        producer_group: str = "",
        timeout_s: float = 3.0,
    ) -> Sequence[SendResult]:
        """Records all aimed at *queue*: their :class:`SendResult` s, made when read
        (:class:`SendResults`; ``Producer.send_batch``'s hot path). *msg_ids*: the
        records' UNIQ_KEYs, which the broker then leaves out of its answer, with the
        queue ids."""
        request = bpb.SendBatchRequest(
            records=records, producer_group=producer_group, omit_sent_columns=msg_ids is not None
        )
        return await self.send_batch_request(
            request.SerializeToString(), queue, msg_ids=msg_ids, timeout_s=timeout_s
        )

    @staticmethod
    def send_batch_tail(producer_group: str) -> bytes:
        """What follows the records in a :meth:`send_batch_request` request: the
        serialized later fields of a ``SendBatchRequest`` (the producer group, and
        ``omit_sent_columns``), for ``message_codec.encode_messages(..., tail=)``."""
        return bpb.SendBatchRequest(
            producer_group=producer_group, omit_sent_columns=True
        ).SerializeToString()

    async def send_batch_request(
        self,
        request: bytes,
        queue: MessageQueue,
        *,
        msg_ids: Sequence[str] | None,
        timeout_s: float,
    ) -> Sequence[SendResult]:
        """:meth:`send_batch_to` of a whole ``SendBatchRequest`` serialized already: the
        records framed with :meth:`send_batch_tail` (``message_codec.frame_records``),
        *msg_ids* their UNIQ_KEYs; sent as these very bytes (on the SendStream when
        there is one)."""
        if self._stream is not None and not self._stream.unsupported:
            with contextlib.suppress(_StreamUnsupported):
                return _send_results(await self._stream.send(request, timeout_s), queue, msg_ids)
        if self._send_batch_raw is None:
            resp = await self._call(
                "SendBatch", bpb.SendBatchRequest.FromString(request), timeout_s
            )
        else:
            try:
                resp = await self._send_batch_raw(request, timeout=timeout_s)
            except grpc.aio.AioRpcError as exc:
                raise self._failed(exc, "SendBatch") from None
        return _send_results(resp, queue, msg_ids)

    async def pull(
        self,
        *,
        group: str,
        queue: MessageQueue,
        offset: int,
        max_messages: int,
        subscription: str,
        suspend_ms: int,
        commit_offset: int | None = None,
        timeout_s: float,
        expression_type: str = TAG,
    ) -> PullReply:
        """One PullMessage of *queue* from *offset*, long-polling up to *suspend_ms*."""
        request = bpb.PullMessageRequest(
            consumer_group=group,
            topic=queue.topic,
            queue_id=queue.queue_id,
            queue_offset=offset,
            max_msg_nums=max_messages,
            subscription=subscription,
            suspend_timeout_ms=suspend_ms,
            expression_type=_wire_type(expression_type),
        )
        if commit_offset is not None:
            request.commit_offset = commit_offset
        return _pull_reply(await self._call("PullMessage", request, timeout_s))

    async def pull_batch(
        self,
        *,
        group: str,
        pulls: Sequence[QueuePull],
        suspend_ms: int,
        timeout_s: float,
        bulk: bool = False,
    ) -> list[PullReply | RemoteError | None]:
        """Long-poll several queues at once; per pull, in order: its reply, the
        refusal of that queue alone, or None when the broker did not read it this
        time (its reply was full): pull it again. *bulk*: a reader of known ranges
        (each pull may ask up to 1,024 messages and the reply's 4 MiB; see
        ``PullBatchRequest.bulk``)."""
        request = bpb.PullBatchRequest(
            consumer_group=group, suspend_timeout_ms=suspend_ms, bulk=bulk
        )
        for pull in pulls:
            entry = request.pulls.add(
                topic=pull.queue.topic,
                queue_id=pull.queue.queue_id,
                queue_offset=pull.offset,
                max_msg_nums=pull.max_messages,
                subscription=pull.subscription,
                expression_type=_wire_type(pull.expression_type),
            )
            if pull.commit_offset is not None:
                entry.commit_offset = pull.commit_offset
        resp = await self._call("PullBatch", request, timeout_s)
        out: list[PullReply | RemoteError | None] = [None] * len(pulls)
        for result in resp.results:
            if not 0 <= result.index < len(pulls):
                continue
            if result.error_code:
                code = Code.__members__.get(result.error_code, Code.UNKNOWN)
                cls = STATUS_ERRORS.get(code, ServerError)
                out[result.index] = cls(
                    f"PullBatch to {self.addr} refused {pulls[result.index].queue}: "
                    f"{result.error_code}: {result.error_message}",
                    addr=self.addr,
                    code=result.error_code,
                    reason=result.error_reason,
                )
            else:
                out[result.index] = _pull_reply(result.reply)
        return out

    # -- offsets ------------------------------------------------------------------------
    async def query_consumer_offset(
        self, group: str, queue: MessageQueue, *, timeout_s: float = 3.0
    ) -> int | None:
        resp = await self._call(
            "QueryConsumerOffset",
            bpb.QueryConsumerOffsetRequest(
                consumer_group=group, topic=queue.topic, queue_id=queue.queue_id
            ),
            timeout_s,
        )
        return resp.offset if resp.HasField("offset") else None

    async def update_consumer_offset(
        self, group: str, queue: MessageQueue, offset: int, *, timeout_s: float = 3.0
    ) -> None:
        await self._call(
            "UpdateConsumerOffset",
            bpb.UpdateConsumerOffsetRequest(
                consumer_group=group, topic=queue.topic, queue_id=queue.queue_id, offset=offset
            ),
            timeout_s,
        )

    async def min_offset(self, queue: MessageQueue, *, timeout_s: float = 3.0) -> int:
        """The first queue offset the broker still holds (GetMinOffset)."""
        resp = await self._call(
            "GetMinOffset",
            bpb.GetQueueOffsetRequest(topic=queue.topic, queue_id=queue.queue_id),
            timeout_s,
        )
        return resp.offset

    async def max_offset(self, queue: MessageQueue, *, timeout_s: float = 3.0) -> int:
        """The queue offset the next message will get (GetMaxOffset)."""
        resp = await self._call(
            "GetMaxOffset",
            bpb.GetQueueOffsetRequest(topic=queue.topic, queue_id=queue.queue_id),
            timeout_s,
        )
        return resp.offset

    async def offset_by_timestamp(
        self, queue: MessageQueue, timestamp_ms: int, *, timeout_s: float = 3.0
    ) -> int:
        """The first queue offset stored at or after *timestamp_ms*."""
        resp = await self._call(
            "SearchOffsetByTimestamp",
            bpb.SearchOffsetByTimestampRequest(
                topic=queue.topic, queue_id=queue.queue_id, timestamp_ms=timestamp_ms
            ),
            timeout_s,
        )
        return resp.offset

    # -- clients ------------------------------------------------------------------------
    async def heartbeat(
        self,
        client_id: str,
        *,
        producer_groups: Iterable[str] = (),
        consumers: Iterable[ConsumerInfo] = (),
        fingerprints: Mapping[str, str] | None = None,
        unchanged: Collection[str] = (),
        timeout_s: float = 3.0,
    ) -> HeartbeatAnswer:
        """Register the client; groups in *unchanged* (with a fingerprint) go as
        their fingerprint only, the rest whole with theirs."""
        fingerprints = fingerprints or {}
        data = []
        for c in consumers:
            fingerprint = fingerprints.get(c.group, "")
            if fingerprint and c.group in unchanged:
                data.append(
                    bpb.ConsumerData(group=c.group, fingerprint=fingerprint, unchanged=True)
                )
                continue
            data.append(
                bpb.ConsumerData(
                    group=c.group,
                    consume_type=bpb.CONSUME_PASSIVELY if c.push else bpb.CONSUME_ACTIVELY,
                    message_model=bpb.BROADCASTING if c.broadcasting else bpb.CLUSTERING,
                    consume_from_where=_CONSUME_FROM.get(
                        c.consume_from, bpb.CONSUME_FROM_LAST_OFFSET
                    ),
                    subscriptions=[
                        _subscription_pb(t, e) for t, e in sorted(c.subscriptions.items())
                    ],
                    fingerprint=fingerprint,
                )
            )
        request = bpb.HeartBeatRequest(
            client_id=client_id, producer_groups=list(producer_groups), consumers=data
        )
        resp = await self._call("HeartBeat", request, timeout_s)
        return HeartbeatAnswer(
            unknown_groups=tuple(resp.unknown_groups),
            keeps_fingerprints=resp.keeps_fingerprints,
            request_bytes=request.ByteSize(),
        )

    async def unregister_client(
        self,
        client_id: str,
        *,
        producer_group: str = "",
        consumer_group: str = "",
        timeout_s: float = 3.0,
    ) -> None:
        await self._call(
            "UnregisterClient",
            bpb.UnregisterClientRequest(
                client_id=client_id, producer_group=producer_group, consumer_group=consumer_group
            ),
            timeout_s,
        )

    async def consumer_ids(self, group: str, *, timeout_s: float = 3.0) -> list[str]:
        resp = await self._call(
            "GetConsumerListByGroup",
            bpb.GetConsumerListByGroupRequest(consumer_group=group),
            timeout_s,
        )
        return list(resp.consumer_ids)

    async def commands(self, client_id: str) -> AsyncIterator[ServerCommand]:
        """The broker's command stream for this client, until it ends or fails."""
        call = self._stub.ClientChannel(bpb.ClientChannelRequest(client_id=client_id))
        try:
            async for command in call:
                kind = command.WhichOneof("command")
                if kind == "channel_opened":
                    yield ChannelOpened(command.channel_opened.broker_name)
                elif kind == "notify_consumer_ids_changed":
                    yield ConsumerIdsChanged(command.notify_consumer_ids_changed.consumer_group)
                elif kind == "check_transaction_state":
                    check = command.check_transaction_state
                    yield CheckTransactionState(
                        broker_addr=self.addr,
                        producer_group=check.producer_group,
                        record=check.record,
                        commit_log_offset=check.commit_log_offset,
                        offset_msg_id=check.offset_msg_id,
                        msg_id=check.msg_id,
                        check_times=check.check_times,
                    )
                elif kind == "reset_consumer_client_offset":
                    reset = command.reset_consumer_client_offset
                    yield ResetConsumerOffset(
                        group=reset.consumer_group,
                        topic=reset.topic,
                        broker_name=reset.broker_name,
                        offsets=dict(reset.offsets),
                    )
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError
        except grpc.aio.AioRpcError as exc:
            raise self._failed(exc, "ClientChannel") from None
        finally:
            call.cancel()

    # -- transactions -------------------------------------------------------------------
    async def end_transaction(
        self,
        *,
        producer_group: str,
        commit_log_offset: int,
        offset_msg_id: str,
        msg_id: str,
        commit: bool,
        from_transaction_check: bool = False,
        timeout_s: float = 3.0,
    ) -> bool:
        """Commit or roll back a half message; True if it was already resolved so."""
        resp = await self._call(
            "EndTransaction",
            bpb.EndTransactionRequest(
                producer_group=producer_group,
                commit_log_offset=commit_log_offset,
                offset_msg_id=offset_msg_id,
                msg_id=msg_id,
                resolution=bpb.COMMIT if commit else bpb.ROLLBACK,
                from_transaction_check=from_transaction_check,
            ),
            timeout_s,
        )
        return bool(resp.already_resolved)

    # -- retries and ordered consumption (newer RPCs) -----------------------------------
    async def consumer_send_msg_back(
        self,
        *,
        group: str,
        phys_offset: int,
        delay_level: int,
        origin_topic: str,
        origin_msg_id: str,
        max_reconsume_times: int,
        timeout_s: float = 3.0,
    ) -> None:
        await self._call(
            "ConsumerSendMsgBack",
            bpb.ConsumerSendMsgBackRequest(
                group=group,
                phys_offset=phys_offset,
                delay_level=delay_level,
                origin_topic=origin_topic,
                origin_msg_id=origin_msg_id,
                max_reconsume_times=max_reconsume_times,
            ),
            timeout_s,
        )

    async def lock_batch(
        self, group: str, client_id: str, queues: Sequence[MessageQueue], *, timeout_s: float = 3.0
    ) -> set[MessageQueue]:
        """Lock *queues* for this client; returns those it now holds."""
        resp = await self._call(
            "LockBatchMQ",
            bpb.LockBatchMQRequest(
                group=group, client_id=client_id, queues=[_queue_ref(q) for q in queues]
            ),
            timeout_s,
        )
        return {MessageQueue(r.topic, r.broker_name, r.queue_id) for r in resp.locked}

    async def unlock_batch(
        self, group: str, client_id: str, queues: Sequence[MessageQueue], *, timeout_s: float = 3.0
    ) -> None:
        await self._call(
            "UnlockBatchMQ",
            bpb.UnlockBatchMQRequest(
                group=group, client_id=client_id, queues=[_queue_ref(q) for q in queues]
            ),
            timeout_s,
        )


def _send_results(
    resp: bpb.SendMessageResponse, queue: MessageQueue, msg_ids: Sequence[str] | None
) -> Sequence[SendResult]:
    """The results of records all sent to *queue*, made when read (:class:`SendResults`);
    *msg_ids*: their UNIQ_KEYs, when the broker leaves them out of its answer."""
    status = _SEND_STATUS.get(resp.status, SendStatus.SEND_OK)
    ids = msg_ids if msg_ids is not None and not resp.msg_ids else resp.msg_ids
    same = queue.queue_id
    if resp.queue_ids and any(queue_id != same for queue_id in resp.queue_ids):
        return _results_by_queue(resp, status, queue, ids)
    return SendResults(
        status, queue, ids, resp.offset_msg_id_prefix, resp.queue_offsets, resp.phys_offsets
    )


def _results_by_queue(
    resp: bpb.SendMessageResponse, status: SendStatus, queue: MessageQueue, ids: Sequence[str]
) -> list[SendResult]:
    """One result per record, each in the queue the broker names (a broker answering
    queue ids other than the one the records were sent to: never expected)."""
    prefix = resp.offset_msg_id_prefix
    return [
        _new_send_result(
            status,
            msg_id,
            f"{prefix}{phys:016X}",
            MessageQueue(queue.topic, queue.broker_name, queue_id),
            queue_offset,
        )
        for msg_id, queue_id, queue_offset, phys in zip(
            ids, resp.queue_ids, resp.queue_offsets, resp.phys_offsets, strict=True
        )
    ]


def _queue_ref(queue: MessageQueue) -> object:
    return bpb.MessageQueueRef(
        topic=queue.topic, broker_name=queue.broker_name, queue_id=queue.queue_id
    )
