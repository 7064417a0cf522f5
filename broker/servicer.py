"""BrokerServicer: the ``pocketmq.v1.Broker`` gRPC service as thin adapters.

The only broker module that sees the broker's protobuf. Each RPC turns its
request into plain values, calls one service method and turns the result into
a reply. A refusal (:class:`~pocketmq.broker.errors.BrokerError`) becomes the
gRPC status from :mod:`.grpc_status`, with its message as the details and its
reason as trailing metadata; anything else is logged with its traceback and
answered ``INTERNAL`` so that a bug fails one request, not the server.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc

from pocketmq.broker.admin_service import AdminProcessor, ResetPosition
from pocketmq.broker.client_manager import (
    ChannelOpenedCommand,
    CheckTransactionStateCommand,
    ClientManager,
    ConsumeFromWhere,
    ConsumerRegistration,
    ConsumeType,
    MessageModel,
    NotifyConsumerIdsChangedCommand,
    ResetConsumerClientOffsetCommand,
    ServerCommand,
)
from pocketmq.broker.consumer_offsets import ConsumerOffsetManager
from pocketmq.broker.errors import (
    BrokerError,
    BrokerNotMasterError,
    FailedPreconditionError,
    IllegalArgumentError,
    NoPermissionError,
)
from pocketmq.broker.grpc_status import (
    NOT_MASTER_METADATA_KEY,
    REASON_METADATA_KEY,
    grpc_code,
)
from pocketmq.broker.idempotence import IdempotenceProcessor
from pocketmq.broker.property_filter import FilterCompiler
from pocketmq.broker.pull_service import PullMessageProcessor, PullOutcome, PullRequest
from pocketmq.broker.rebalance_lock import MessageQueue, RebalanceLockManager
from pocketmq.broker.send_back import SendBackProcessor
from pocketmq.broker.send_service import SendMessageProcessor, SendOutcome, SendStatus
from pocketmq.broker.topic_config import BrokerTopicConfig, Perm
from pocketmq.broker.transaction import EndTransactionRequest, TransactionResolver
from pocketmq.broker.transaction_ops import Resolution
from pocketmq.broker.v1_authz import (
    authorize_end_transaction,
    authorize_heartbeat,
    check_readable,
    check_record_readable,
    check_subscribe,
    send_back_guard,
)
from pocketmq.common.msgid import decode_offset_msg_id
from pocketmq.common.validation import check_group, check_topic
from pocketmq.security import grpc_guard
from pocketmq.security.interceptor import AclError, current_owner
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2, controller_pb2

__all__ = ["BrokerServicer", "MalformedRequestInterceptor", "add_to_server"]

# Requests whose bytes are not this service's messages: INVALID_ARGUMENT, not UNKNOWN.
MalformedRequestInterceptor = grpc_guard.MalformedRequestInterceptor

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[Any, Req, grpc.aio.ServicerContext], Awaitable[Resp]]
Promote = Callable[..., Awaitable[tuple[int, int, str]]]

MAX_CLIENT_ID_LENGTH = 255
MAX_LOCK_QUEUES = 10_000  # queues one LockBatchMQ / UnlockBatchMQ may name


def _rpc(method: Handler[Req, Resp]) -> Handler[Req, Resp]:
    """Answer BrokerError with its gRPC status, anything unexpected with INTERNAL."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext) -> Resp:
        try:
            return await method(self, request, context)
        except BrokerError as exc:
            await _abort(context, exc)
        except AclError as exc:
            await context.abort(exc.code, exc.message)
        except Exception as exc:
            log.exception("%s failed on an unexpected error", method.__name__)
            await context.abort(
                grpc.StatusCode.INTERNAL,
                f"internal broker error in {method.__name__}: "
                f"{type(exc).__name__}: {exc}; see the broker log",
            )
        raise AssertionError("context.abort returned")  # pragma: no cover

    return wrapper


async def _abort(context: grpc.aio.ServicerContext, error: BrokerError) -> None:
    if isinstance(error, BrokerNotMasterError):
        context.set_trailing_metadata(
            (
                (REASON_METADATA_KEY, error.reason),
                (NOT_MASTER_METADATA_KEY, not_master_detail(error)),
            )
        )
        await context.abort(grpc_code(error), error.message)
    context.set_trailing_metadata(((REASON_METADATA_KEY, error.reason),))
    await context.abort(grpc_code(error), error.message)


def _check_names(*, topic: str | None = None, group: str | None = None) -> None:
    for problem in (
        check_topic(topic) if topic is not None else None,
        check_group(group) if group is not None else None,
    ):
        if problem:
            raise IllegalArgumentError(problem)


def _check_given(*, topic: str = "", groups: tuple[str, ...] = ()) -> None:
    """Names a request may leave empty are checked like any other when it gives them."""
    if topic:
        _check_names(topic=topic)
    for group in groups:
        if group:
            _check_names(group=group)


def _check_client_id(client_id: str) -> None:
    if not client_id:
        raise IllegalArgumentError(
            "client_id is empty; a client names itself, e.g. '10.0.0.7@12345#uuid'"
        )
    if len(client_id) > MAX_CLIENT_ID_LENGTH:
        raise IllegalArgumentError(
            f"client_id is {len(client_id)} characters; at most {MAX_CLIENT_ID_LENGTH} are allowed"
        )


def _queues(refs: Any) -> list[MessageQueue]:
    if len(refs) > MAX_LOCK_QUEUES:
        raise IllegalArgumentError(
            f"the request names {len(refs)} queues; at most {MAX_LOCK_QUEUES} are allowed per call"
        )
    queues = []
    for ref in refs:
        _check_names(topic=ref.topic)
        if ref.queue_id < 0:
            raise IllegalArgumentError(
                f"queue {ref.topic}/{ref.broker_name} has queue_id "
                f"{ref.queue_id}; queue ids are >= 0"
            )
        if len(ref.broker_name) > MAX_CLIENT_ID_LENGTH:
            raise IllegalArgumentError(
                f"broker_name is {len(ref.broker_name)} characters; at "
                f"most {MAX_CLIENT_ID_LENGTH} are allowed"
            )
        queues.append(MessageQueue(ref.topic, ref.broker_name, ref.queue_id))
    return queues


def _queue_refs(queues: list[MessageQueue]) -> list[pb.MessageQueueRef]:
    return [
        pb.MessageQueueRef(topic=q.topic, broker_name=q.broker_name, queue_id=q.queue_id)
        for q in queues
    ]


_SEND_STATUS = {
    SendStatus.SEND_OK: pb.SEND_OK,
    SendStatus.FLUSH_DISK_TIMEOUT: pb.FLUSH_DISK_TIMEOUT,
    SendStatus.FLUSH_SLAVE_TIMEOUT: pb.FLUSH_SLAVE_TIMEOUT,
    SendStatus.SLAVE_NOT_AVAILABLE: pb.SLAVE_NOT_AVAILABLE,
}


def _send_response(outcome: SendOutcome) -> pb.SendMessageResponse:
    return pb.SendMessageResponse(
        status=_SEND_STATUS[outcome.status],
        store_timestamp_ms=outcome.store_timestamp_ms,
        msg_ids=outcome.msg_ids,
        queue_ids=outcome.queue_ids,
        queue_offsets=outcome.queue_offsets,
        phys_offsets=outcome.phys_offsets,
        offset_msg_id_prefix=outcome.offset_msg_id_prefix,
        duplicates=outcome.duplicates,
    )


def _pull_response(outcome: PullOutcome) -> pb.PullMessageResponse:
    return pb.PullMessageResponse(
        status=pb.PullStatus.Value(outcome.status.value),
        get_message_status=pb.GetMessageStatus.Value("GET_" + outcome.get_status.value),
        next_begin_offset=outcome.next_begin_offset,
        min_offset=outcome.min_offset,
        max_offset=outcome.max_offset,
        records=outcome.records_blob,
        message_count=outcome.message_count,
    )


def _refusal(index: int, error: BrokerError) -> pb.QueuePullResult:
    """One queue of a PullBatch refused, as a failed PullMessage would have said it."""
    return pb.QueuePullResult(
        index=index,
        error_code=grpc_code(error).name,
        error_reason=error.reason,
        error_message=error.message,
    )


def _topic_config(
    msg: common_pb2.TopicConfig, *, default_queue_nums: int | None
) -> BrokerTopicConfig:
    """Domain config; on create, zero queue counts and perm mean the defaults."""
    read, write, perm = msg.read_queue_nums, msg.write_queue_nums, msg.perm
    if default_queue_nums is not None:
        read = read or write or default_queue_nums
        write = write or read
        perm = perm or Perm.READ_WRITE
    return BrokerTopicConfig(
        topic_name=msg.topic_name,
        read_queue_nums=read,
        write_queue_nums=write,
        perm=perm,
        order=msg.order,
        topic_sys_flag=msg.topic_sys_flag,
    )


def _topic_config_pb(tc: BrokerTopicConfig) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        topic_name=tc.topic_name,
        read_queue_nums=tc.read_queue_nums,
        write_queue_nums=tc.write_queue_nums,
        perm=tc.perm,
        order=tc.order,
        topic_sys_flag=tc.topic_sys_flag,
    )


def _consumer(msg: pb.ConsumerData, filters: FilterCompiler) -> ConsumerRegistration:
    _check_names(group=msg.group)
    subscriptions = {}
    for sub in msg.subscriptions:
        _check_names(topic=sub.topic)
        # an SQL92 filter that does not parse is refused here, when the consumer subscribes
        filters.compile(sub.expression_type, sub.expression)
        subscriptions[sub.topic] = sub.expression or "*"
    kwargs: dict[str, Any] = {}
    for field, pb_enum, enum_cls in (
        ("consume_type", pb.ConsumeType, ConsumeType),
        ("message_model", pb.MessageModel, MessageModel),
        ("consume_from_where", pb.ConsumeFromWhere, ConsumeFromWhere),
    ):
        value = getattr(msg, field)
        if value:  # 0 = unspecified: the default
            try:
                kwargs[field] = enum_cls[pb_enum.Name(value)]
            except (KeyError, ValueError):
                raise IllegalArgumentError(
                    f"consumer {msg.group!r}: {field} {value} is unknown; this broker knows "
                    f"{', '.join(m.name for m in enum_cls)}"
                ) from None
    return ConsumerRegistration(
        group=msg.group, subscriptions=subscriptions, fingerprint=msg.fingerprint, **kwargs
    )


def _command_pb(command: ServerCommand) -> pb.ServerCommand:
    if isinstance(command, CheckTransactionStateCommand):
        return pb.ServerCommand(
            check_transaction_state=pb.CheckTransactionState(
                producer_group=command.producer_group,
                record=command.record,
                commit_log_offset=command.commit_log_offset,
                offset_msg_id=command.offset_msg_id,
                msg_id=command.msg_id,
                check_times=command.check_times,
            )
        )
    if isinstance(command, NotifyConsumerIdsChangedCommand):
        return pb.ServerCommand(
            notify_consumer_ids_changed=pb.NotifyConsumerIdsChanged(
                consumer_group=command.consumer_group
            )
        )
    if isinstance(command, ChannelOpenedCommand):
        return pb.ServerCommand(channel_opened=pb.ChannelOpened(broker_name=command.broker_name))
    if isinstance(command, ResetConsumerClientOffsetCommand):
        return pb.ServerCommand(
            reset_consumer_client_offset=pb.ResetConsumerClientOffset(
                consumer_group=command.consumer_group,
                topic=command.topic,
                broker_name=command.broker_name,
                offsets=command.offsets,
            )
        )
    raise TypeError(f"no protobuf form for {command!r}")


_RESOLUTIONS = {pb.COMMIT: Resolution.COMMIT, pb.ROLLBACK: Resolution.ROLLBACK}
_RESET_POSITIONS = {
    pb.RESET_TO_EARLIEST: ResetPosition.EARLIEST,
    pb.RESET_TO_LATEST: ResetPosition.LATEST,
    pb.RESET_TO_TIMESTAMP: ResetPosition.TIMESTAMP,
    pb.RESET_TO_OFFSETS: ResetPosition.OFFSETS,
}
_CONSUME_TYPES = {
    ConsumeType.CONSUME_ACTIVELY: pb.CONSUME_ACTIVELY,
    ConsumeType.CONSUME_PASSIVELY: pb.CONSUME_PASSIVELY,
}
_MESSAGE_MODELS = {
    MessageModel.CLUSTERING: pb.CLUSTERING,
    MessageModel.BROADCASTING: pb.BROADCASTING,
}


def _end_transaction(request: pb.EndTransactionRequest) -> EndTransactionRequest:
    _check_names(group=request.producer_group)
    resolution = _RESOLUTIONS.get(request.resolution)
    if resolution is None:
        raise IllegalArgumentError(
            f"resolution is {request.resolution}; a transaction ends "
            "with COMMIT (1) or ROLLBACK (2)"
        )
    if request.HasField("commit_log_offset"):
        offset = request.commit_log_offset
    elif request.offset_msg_id:
        try:
            offset = decode_offset_msg_id(request.offset_msg_id).phys_offset
        except ValueError as exc:
            raise IllegalArgumentError(str(exc)) from None
    else:
        raise IllegalArgumentError(
            "name the half message: give commit_log_offset or the offset_msg_id its send answered"
        )
    return EndTransactionRequest(
        producer_group=request.producer_group,
        commit_log_offset=offset,
        resolution=resolution,
        msg_id=request.msg_id,
        from_transaction_check=request.from_transaction_check,
    )


def not_master_detail(error: BrokerNotMasterError) -> bytes:
    """The ``pocketmq-not-master-bin`` trailer of a NOT_MASTER answer."""
    return controller_pb2.NotMaster(
        broker_name=error.broker_name,
        master_addr=error.master_addr,
        master_epoch=error.master_epoch,
    ).SerializeToString()


class BrokerServicer(broker_pb2_grpc.BrokerServicer):
    def __init__(
        self,
        *,
        send: SendMessageProcessor,
        pull: PullMessageProcessor,
        offsets: ConsumerOffsetManager,
        clients: ClientManager,
        admin: AdminProcessor,
        send_back: SendBackProcessor,
        locks: RebalanceLockManager,
        transactions: TransactionResolver,
        default_topic_queue_nums: int,
        figures: Sequence[Callable[[], dict[str, str]]] = (),
        max_auto_retry_topics: int = 10_000,
        promote: Promote | None = None,
        idempotence: IdempotenceProcessor | None = None,
        update_config: Callable[[dict[str, str]], dict[str, str]] | None = None,
    ) -> None:
        self._idempotence = idempotence
        self._update_config = update_config  # UpdateBrokerConfig (broker/runtime_config.py)
        self._promote = promote  # the broker's HaController.promote (manual failover)
        self._send = send
        self._transactions = transactions
        self._send_back = send_back
        self._locks = locks
        self._pull = pull
        self._offsets = offsets
        self._clients = clients
        self._admin = admin
        self._default_queue_nums = default_topic_queue_nums
        self._figures = figures  # more GetBrokerRuntimeInfo rows (flow control, ...)
        self._max_auto_retry_topics = max_auto_retry_topics

    # -- messages -----------------------------------------------------------------------
    @_rpc
    async def SendMessage(
        self, request: pb.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.SendMessageResponse:
        _check_given(groups=(request.producer_group,))
        return _send_response(
            await self._send.send(
                request.record, single=True, producer_group=request.producer_group
            )
        )

    @_rpc
    async def SendBatch(
        self, request: pb.SendBatchRequest, context: grpc.aio.ServicerContext
    ) -> pb.SendMessageResponse:
        _check_given(groups=(request.producer_group,))
        return _send_response(
            await self._send.send(request.records, producer_group=request.producer_group)
        )

    @_rpc
    async def InitProducerId(
        self, request: pb.InitProducerIdRequest, context: grpc.aio.ServicerContext
    ) -> pb.InitProducerIdResponse:
        if self._idempotence is None:
            raise FailedPreconditionError(
                "this broker hands out no producer ids", reason="UNSUPPORTED"
            )
        init = self._idempotence.init_producer_id(
            producer_group=request.producer_group,
            identity=request.identity,
            topics=list(request.topics),
        )
        return pb.InitProducerIdResponse(
            producer_id=init.producer_id,
            epoch=init.epoch,
            sequences=[
                pb.QueueSequence(topic=t, queue_id=q, last_seq=s) for t, q, s in init.sequences
            ],
        )

    @_rpc
    async def EndTransaction(
        self, request: pb.EndTransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.EndTransactionResponse:
        end = _end_transaction(request)
        authorize_end_transaction(
            self._transactions.half_message(end.commit_log_offset), end.producer_group
        )
        outcome = await self._transactions.end_transaction(end)
        return pb.EndTransactionResponse(already_resolved=outcome.already_resolved)

    @_rpc
    async def PullMessage(
        self, request: pb.PullMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.PullMessageResponse:
        check_readable(request.topic)
        commit_offset = request.commit_offset if request.HasField("commit_offset") else None
        fenced, commit_offset = self._reset_fence(request.consumer_group, request, commit_offset)
        if fenced is not None:
            return fenced
        outcome = await self._pull.pull(
            PullRequest(
                consumer_group=request.consumer_group,
                topic=request.topic,
                queue_id=request.queue_id,
                queue_offset=request.queue_offset,
                max_msg_nums=request.max_msg_nums,
                subscription=request.subscription,
                expression_type=request.expression_type,
                suspend_timeout_ms=(
                    request.suspend_timeout_ms if request.HasField("suspend_timeout_ms") else None
                ),
                commit_offset=commit_offset,
            )
        )
        return _pull_response(outcome)

    @_rpc
    async def PullBatch(
        self, request: pb.PullBatchRequest, context: grpc.aio.ServicerContext
    ) -> pb.PullBatchResponse:
        group = request.consumer_group
        answered: list[pb.QueuePullResult] = []
        queued: list[tuple[int, PullRequest]] = []
        for index, pull in enumerate(request.pulls):
            try:
                check_subscribe(pull.topic)
            except NoPermissionError as exc:
                answered.append(_refusal(index, exc))
                continue
            commit_offset = pull.commit_offset if pull.HasField("commit_offset") else None
            fenced, commit_offset = self._reset_fence(group, pull, commit_offset)
            if fenced is not None:
                answered.append(pb.QueuePullResult(index=index, reply=fenced))
                continue
            queued.append(
                (
                    index,
                    PullRequest(
                        consumer_group=group,
                        topic=pull.topic,
                        queue_id=pull.queue_id,
                        queue_offset=pull.queue_offset,
                        max_msg_nums=pull.max_msg_nums,
                        subscription=pull.subscription,
                        expression_type=pull.expression_type,
                        commit_offset=commit_offset,
                    ),
                )
            )
        suspend_ms = request.suspend_timeout_ms if request.HasField("suspend_timeout_ms") else None
        results = await self._pull.pull_batch(
            group, [r for _, r in queued], 0 if answered else suspend_ms
        )
        for result in results:
            index = queued[result.index][0]
            if result.error is not None:
                answered.append(_refusal(index, result.error))
            elif result.outcome is not None:
                answered.append(
                    pb.QueuePullResult(index=index, reply=_pull_response(result.outcome))
                )
        return pb.PullBatchResponse(results=answered)

    def _reset_fence(
        self,
        group: str,
        pull: pb.PullMessageRequest | pb.QueuePull,
        commit_offset: int | None,
    ) -> tuple[pb.PullMessageResponse | None, int | None]:
        """After an admin reset of this queue: (the answer that moves the consumer, or
        None once it reads from the reset offset; the commit offset still to store)."""
        reset_to = self._admin.reset_fence(group, pull.topic, pull.queue_id)
        if reset_to is None:
            return None, commit_offset
        if pull.queue_offset != reset_to:  # the consumer's position predates the reset
            return pb.PullMessageResponse(
                status=pb.OFFSET_ILLEGAL,
                get_message_status=pb.GET_OFFSET_RESET,
                next_begin_offset=reset_to,
                min_offset=self._admin.min_offset(pull.topic, pull.queue_id),
                max_offset=self._admin.max_offset(pull.topic, pull.queue_id),
            ), None
        self._admin.lift_reset_fence(group, pull.topic, pull.queue_id)
        return None, None

    @_rpc
    async def QueryConsumerOffset(
        self,
        request: pb.QueryConsumerOffsetRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.QueryConsumerOffsetResponse:
        _check_names(topic=request.topic, group=request.consumer_group)
        offset = self._offsets.query(request.consumer_group, request.topic, request.queue_id)
        return pb.QueryConsumerOffsetResponse(offset=offset)

    @_rpc
    async def UpdateConsumerOffset(
        self,
        request: pb.UpdateConsumerOffsetRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.UpdateConsumerOffsetResponse:
        _check_names(topic=request.topic, group=request.consumer_group)
        self._admin.check_queue(request.topic, request.queue_id)
        # The real end, not the visible max: a new SYNC master's gate may stand below an
        # offset the consumer read (and the master held) before the election.
        max_offset = self._admin.end_offset(request.topic, request.queue_id)
        if request.offset > max_offset:
            raise IllegalArgumentError(
                f"offset {request.offset} of {request.topic}:{request.queue_id} is past the "
                f"queue's max offset {max_offset}; commit the next offset to consume, at most "
                "the max offset",
                reason="OFFSET_PAST_MAX",
            )
        if (
            self._admin.reset_fence(request.consumer_group, request.topic, request.queue_id)
            is not None
        ):
            log.debug(
                "offset %d of %s:%d for group %s predates an offset reset; ignored",
                request.offset,
                request.topic,
                request.queue_id,
                request.consumer_group,
            )
            return pb.UpdateConsumerOffsetResponse()
        self._offsets.commit(
            request.consumer_group, request.topic, request.queue_id, request.offset
        )
        return pb.UpdateConsumerOffsetResponse()

    @_rpc
    async def GetMinOffset(
        self, request: pb.GetQueueOffsetRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetQueueOffsetResponse:
        return pb.GetQueueOffsetResponse(
            offset=self._admin.min_offset(request.topic, request.queue_id)
        )

    @_rpc
    async def GetMaxOffset(
        self, request: pb.GetQueueOffsetRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetQueueOffsetResponse:
        return pb.GetQueueOffsetResponse(
            offset=self._admin.max_offset(request.topic, request.queue_id)
        )

    @_rpc
    async def SearchOffsetByTimestamp(
        self,
        request: pb.SearchOffsetByTimestampRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetQueueOffsetResponse:
        return pb.GetQueueOffsetResponse(
            offset=self._admin.offset_by_timestamp(
                request.topic, request.queue_id, request.timestamp_ms
            )
        )

    @_rpc
    async def QueryMessage(
        self, request: pb.QueryMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.QueryMessageResponse:
        check_readable(request.topic)
        records = self._admin.query_by_key(
            request.topic,
            request.key,
            max_num=request.max_num,
            begin_timestamp_ms=request.begin_timestamp_ms,
            end_timestamp_ms=request.end_timestamp_ms,
        )
        return pb.QueryMessageResponse(records=b"".join(records), message_count=len(records))

    @_rpc
    async def ViewMessage(
        self, request: pb.ViewMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.ViewMessageResponse:
        record = self._admin.view_message(request.offset_msg_id)
        check_record_readable(record)
        return pb.ViewMessageResponse(record=record)

    @_rpc
    async def ConsumerSendMsgBack(
        self,
        request: pb.ConsumerSendMsgBackRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.ConsumerSendMsgBackResponse:
        _check_given(topic=request.origin_topic)
        await self._send_back.send_back(
            group=request.group,
            phys_offset=request.phys_offset,
            delay_level=request.delay_level,
            origin_topic=request.origin_topic,
            origin_msg_id=request.origin_msg_id,
            max_reconsume_times=request.max_reconsume_times,
            authorize=send_back_guard(
                request.group, request.phys_offset, self._clients, self._offsets
            ),
        )
        return pb.ConsumerSendMsgBackResponse()

    # -- orderly consumption ------------------------------------------------------------
    @_rpc
    async def LockBatchMQ(
        self, request: pb.LockBatchMQRequest, context: grpc.aio.ServicerContext
    ) -> pb.LockBatchMQResponse:
        _check_names(group=request.group)
        _check_client_id(request.client_id)
        queues = _queues(request.queues)
        check_subscribe(*{q.topic for q in queues})
        locked = self._locks.try_lock_batch(request.group, request.client_id, queues)
        return pb.LockBatchMQResponse(locked=_queue_refs(locked))

    @_rpc
    async def UnlockBatchMQ(
        self, request: pb.UnlockBatchMQRequest, context: grpc.aio.ServicerContext
    ) -> pb.UnlockBatchMQResponse:
        _check_names(group=request.group)
        _check_client_id(request.client_id)
        queues = _queues(request.queues)
        check_subscribe(*{q.topic for q in queues})
        self._locks.unlock_batch(request.group, request.client_id, queues)
        return pb.UnlockBatchMQResponse()

    # -- clients ------------------------------------------------------------------------
    @_rpc
    async def HeartBeat(
        self, request: pb.HeartBeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.HeartBeatResponse:
        _check_client_id(request.client_id)
        for group in request.producer_groups:
            _check_names(group=group)
        consumers = [_consumer(c, self._pull.filters) for c in request.consumers if not c.unchanged]
        # Sent as a fingerprint only: its topics were checked when it was sent whole,
        # by the same owner (check_owner); the group is checked again here.
        unchanged = [(c.group, c.fingerprint) for c in request.consumers if c.unchanged]
        for group, _fingerprint in unchanged:
            _check_names(group=group)
        authorize_heartbeat(
            request.producer_groups,
            [*consumers, *(ConsumerRegistration(group=g) for g, _ in unchanged)],
        )
        owner = current_owner()
        self._clients.check_owner(request.client_id, owner)
        for consumer in consumers:
            if consumer.message_model is MessageModel.CLUSTERING:
                # Its retry topic exists before anything fails, as RocketMQ's heartbeat does.
                self._send_back.ensure_retry_topic(
                    consumer.group, max_topics=self._max_auto_retry_topics, requester=owner
                )
        unknown = self._clients.heartbeat(
            request.client_id,
            producer_groups=request.producer_groups,
            consumers=consumers,
            unchanged=unchanged,
            owner=owner,
        )
        return pb.HeartBeatResponse(unknown_groups=unknown, keeps_fingerprints=True)

    @_rpc
    async def UnregisterClient(
        self,
        request: pb.UnregisterClientRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.UnregisterClientResponse:
        _check_client_id(request.client_id)
        _check_given(groups=(request.producer_group, request.consumer_group))
        self._clients.unregister(
            request.client_id,
            producer_group=request.producer_group,
            consumer_group=request.consumer_group,
            owner=current_owner(),
        )
        return pb.UnregisterClientResponse()

    @_rpc
    async def GetConsumerListByGroup(
        self,
        request: pb.GetConsumerListByGroupRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetConsumerListByGroupResponse:
        _check_names(group=request.consumer_group)
        return pb.GetConsumerListByGroupResponse(
            consumer_ids=self._clients.consumer_ids(request.consumer_group)
        )

    async def ClientChannel(
        self, request: pb.ClientChannelRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ServerCommand]:
        try:
            _check_client_id(request.client_id)
            channel = self._clients.open_channel(request.client_id, owner=current_owner())
        except BrokerError as exc:
            await _abort(context, exc)
            raise AssertionError("context.abort returned") from None  # pragma: no cover
        try:
            async for command in channel.commands():
                yield _command_pb(command)
        finally:
            self._clients.close_channel(channel)

    # -- admin --------------------------------------------------------------------------
    @_rpc
    async def CreateTopic(
        self, request: pb.CreateTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTopicResponse:
        self._admin.create_topic(
            _topic_config(request.topic_config, default_queue_nums=self._default_queue_nums)
        )
        return pb.CreateTopicResponse()

    @_rpc
    async def UpdateTopic(
        self, request: pb.UpdateTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateTopicResponse:
        self._admin.update_topic(_topic_config(request.topic_config, default_queue_nums=None))
        return pb.UpdateTopicResponse()

    @_rpc
    async def DeleteTopic(
        self, request: pb.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicResponse:
        _check_names(topic=request.topic)
        self._admin.delete_topic(request.topic)
        return pb.DeleteTopicResponse()

    @_rpc
    async def CreateTopics(
        self, request: pb.CreateTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTopicsResponse:
        result = self._admin.create_topics(
            [
                _topic_config(tc, default_queue_nums=self._default_queue_nums)
                for tc in request.topic_configs
            ],
            update_existing=request.update_existing,
        )
        version = self._admin.topic_data_version
        return pb.CreateTopicsResponse(
            created=len(result.created),
            updated=len(result.updated),
            unchanged=len(result.unchanged),
            data_version=common_pb2.DataVersion(
                timestamp_ms=version.timestamp_ms, counter=version.counter
            ),
        )

    @_rpc
    async def DeleteTopics(
        self, request: pb.DeleteTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicsResponse:
        for topic in request.topics:
            _check_names(topic=topic)
        deleted = self._admin.delete_topics(
            list(request.topics), ignore_missing=request.ignore_missing
        )
        version = self._admin.topic_data_version
        return pb.DeleteTopicsResponse(
            deleted=deleted,
            data_version=common_pb2.DataVersion(
                timestamp_ms=version.timestamp_ms, counter=version.counter
            ),
        )

    @_rpc
    async def GetAllTopicConfig(
        self,
        request: pb.GetAllTopicConfigRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetAllTopicConfigResponse:
        configs, version = self._admin.all_topics()
        return pb.GetAllTopicConfigResponse(
            topic_configs=[_topic_config_pb(tc) for tc in configs],
            data_version=common_pb2.DataVersion(
                timestamp_ms=version.timestamp_ms, counter=version.counter
            ),
        )

    @_rpc
    async def GetTopicStatus(
        self, request: pb.GetTopicStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTopicStatusResponse:
        return pb.GetTopicStatusResponse(
            queues=[
                pb.QueueStatus(
                    queue_id=q.queue_id,
                    min_offset=q.min_offset,
                    max_offset=q.max_offset,
                    last_store_timestamp_ms=q.last_store_timestamp_ms,
                )
                for q in self._admin.topic_status(request.topic)
            ]
        )

    @_rpc
    async def GetConsumeProgress(
        self,
        request: pb.GetConsumeProgressRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetConsumeProgressResponse:
        progress = self._admin.consume_progress(request.consumer_group, request.topic)
        return pb.GetConsumeProgressResponse(
            total_lag=sum(p.lag for p in progress),
            queues=[
                pb.QueueProgress(
                    topic=p.topic,
                    queue_id=p.queue_id,
                    broker_offset=p.broker_offset,
                    consumer_offset=p.consumer_offset,
                    lag=p.lag,
                    last_timestamp_ms=p.last_timestamp_ms,
                )
                for p in progress
            ],
        )

    @_rpc
    async def GetBrokerRuntimeInfo(
        self,
        request: pb.GetBrokerRuntimeInfoRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetBrokerRuntimeInfoResponse:
        table = {**self._admin.runtime_info(), **self._transactions.figures()}
        for figures in self._figures:
            table.update(figures())
        return pb.GetBrokerRuntimeInfoResponse(table=table)

    @_rpc
    async def GetBrokerConfig(
        self, request: pb.GetBrokerConfigRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetBrokerConfigResponse:
        return pb.GetBrokerConfigResponse(table=self._admin.config_table())

    @_rpc
    async def GetAllConsumerGroups(
        self,
        request: pb.GetAllConsumerGroupsRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetAllConsumerGroupsResponse:
        return pb.GetAllConsumerGroupsResponse(
            groups=[
                pb.ConsumerGroupInfo(
                    group=g.group,
                    client_ids=g.client_ids,
                    consume_type=_CONSUME_TYPES.get(g.consume_type, pb.CONSUME_TYPE_UNSPECIFIED),
                    message_model=_MESSAGE_MODELS.get(
                        g.message_model, pb.MESSAGE_MODEL_UNSPECIFIED
                    ),
                    subscribed_topics=g.subscribed_topics,
                    offset_topics=g.offset_topics,
                )
                for g in self._admin.consumer_groups()
            ]
        )

    @_rpc
    async def ResetConsumerOffset(
        self,
        request: pb.ResetConsumerOffsetRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.ResetConsumerOffsetResponse:
        position = _RESET_POSITIONS.get(request.position)
        if position is None:
            raise IllegalArgumentError(
                f"position is {request.position}; give RESET_TO_EARLIEST "
                "(1), RESET_TO_LATEST (2), RESET_TO_TIMESTAMP (3) or "
                "RESET_TO_OFFSETS (4)"
            )
        moves, notified = self._admin.reset_offset(
            request.consumer_group,
            request.topic,
            position,
            request.timestamp_ms,
            dict(request.offsets),
        )
        return pb.ResetConsumerOffsetResponse(
            notified_client_ids=notified,
            queues=[
                pb.QueueOffsetReset(
                    queue_id=m.queue_id, previous_offset=m.previous_offset, offset=m.offset
                )
                for m in moves
            ],
        )

    @_rpc
    async def DeleteConsumerGroup(
        self,
        request: pb.DeleteConsumerGroupRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.DeleteConsumerGroupResponse:
        topics, retry_deleted = self._admin.delete_group(request.consumer_group)
        return pb.DeleteConsumerGroupResponse(
            offset_topics=topics, retry_topic_deleted=retry_deleted
        )

    @_rpc
    async def UpdateBrokerConfig(
        self,
        request: pb.UpdateBrokerConfigRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.UpdateBrokerConfigResponse:
        if self._update_config is None:
            raise IllegalArgumentError("this broker cannot change its configuration at runtime")
        return pb.UpdateBrokerConfigResponse(previous=self._update_config(dict(request.updates)))

    @_rpc
    async def GetConsumerConnections(
        self,
        request: pb.GetConsumerConnectionsRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetConsumerConnectionsResponse:
        return pb.GetConsumerConnectionsResponse(
            connections=[
                pb.ConsumerConnection(
                    client_id=client_id,
                    silent_ms=int(silent_s * 1000),
                    subscriptions=[f"{t}: {e}" for t, e in sorted(reg.subscriptions.items())],
                    consume_type=_CONSUME_TYPES.get(reg.consume_type, pb.CONSUME_TYPE_UNSPECIFIED),
                    message_model=_MESSAGE_MODELS.get(
                        reg.message_model, pb.MESSAGE_MODEL_UNSPECIFIED
                    ),
                )
                for client_id, reg, silent_s in self._admin.consumer_connections(
                    request.consumer_group
                )
            ]
        )

    @_rpc
    async def PromoteToMaster(
        self, request: pb.PromoteToMasterRequest, context: grpc.aio.ServicerContext
    ) -> pb.PromoteToMasterResponse:
        if self._promote is None:
            raise IllegalArgumentError(
                "this broker has no replication (ha_port is -1); it cannot be promoted"
            )
        if request.epoch < 0:
            raise IllegalArgumentError(
                f"epoch is {request.epoch}; give 0 (one above every epoch seen) or a larger epoch"
            )
        epoch, start, role = await self._promote(epoch=request.epoch, role=request.role)
        return pb.PromoteToMasterResponse(epoch=epoch, start_offset=start, role=role)


def add_to_server(servicer: BrokerServicer, server: grpc.aio.Server) -> None:
    broker_pb2_grpc.add_BrokerServicer_to_server(servicer, server)
