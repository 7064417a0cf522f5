"""The v1 broker servicer's shared parts: the RPC wrapper, request checks and the
protobuf <-> value conversions every RPC family (``v1_messages``, ``v1_consume``,
``v1_admin``) uses.

:func:`_rpc` answers a refusal (:class:`~pocketmq.broker.errors.BrokerError`)
with the gRPC status from :mod:`.grpc_status`, its message as the details and
its reason as trailing metadata; anything else is logged with its traceback and
answered ``INTERNAL`` so that a bug fails one request, not the server.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc

from pocketmq.broker.admin_processor import AdminProcessor, ResetPosition
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
    IllegalArgumentError,
)
from pocketmq.broker.grpc_status import (
    NOT_MASTER_METADATA_KEY,
    REASON_METADATA_KEY,
    grpc_code,
)
from pocketmq.broker.idempotence import IdempotenceProcessor
from pocketmq.broker.property_filter import FilterCompiler
from pocketmq.broker.pull_processor import PullMessageProcessor, PullOutcome
from pocketmq.broker.rebalance_lock import MessageQueue, RebalanceLockManager
from pocketmq.broker.send_back import SendBackProcessor
from pocketmq.broker.send_processor import SendMessageProcessor, SendOutcome, SendStatus
from pocketmq.broker.topic_config import BrokerTopicConfig, Perm
from pocketmq.broker.transaction import EndTransactionRequest, TransactionResolver
from pocketmq.broker.transaction_ops import Resolution
from pocketmq.common.msgid import decode_offset_msg_id
from pocketmq.common.validation import check_group, check_topic
from pocketmq.security.interceptor import AclError
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import common_pb2, controller_pb2

__all__ = [
    "MAX_CLIENT_ID_LENGTH",
    "MAX_LOCK_QUEUES",
    "Promote",
    "ServicerParts",
    "not_master_detail",
]

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


def _send_response(outcome: SendOutcome, *, sent_columns: bool = True) -> pb.SendMessageResponse:
    """The answer to a send; without *sent_columns* it leaves out the UNIQ_KEYs and
    queue ids, which a SendBatch sender that asked ``omit_sent_columns`` has."""
    return pb.SendMessageResponse(
        status=_SEND_STATUS[outcome.status],
        store_timestamp_ms=outcome.store_timestamp_ms,
        msg_ids=outcome.msg_ids if sent_columns else (),
        queue_ids=outcome.queue_ids if sent_columns else (),
        queue_offsets=outcome.queue_offsets,
        phys_offsets=outcome.phys_offsets,
        offset_msg_id_prefix=outcome.offset_msg_id_prefix,
        duplicates=outcome.duplicates,
    )


def _pull_response(
    outcome: PullOutcome, into: pb.PullMessageResponse | None = None
) -> pb.PullMessageResponse:
    """*outcome* as a reply: a new message, or *into* (a PullBatch's, filled in place)."""
    reply = pb.PullMessageResponse() if into is None else into
    reply.status = pb.PullStatus.Value(outcome.status.value)
    reply.get_message_status = pb.GetMessageStatus.Value("GET_" + outcome.get_status.value)
    reply.next_begin_offset = outcome.next_begin_offset
    reply.min_offset = outcome.min_offset
    reply.max_offset = outcome.max_offset
    reply.records = outcome.records_blob
    reply.message_count = outcome.message_count
    return reply


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


class ServicerParts:
    """What the RPC families read: the broker's services, set by BrokerServicer."""

    _idempotence: IdempotenceProcessor | None
    _update_config: Callable[[dict[str, str]], dict[str, str]] | None
    _promote: Promote | None
    _send: SendMessageProcessor
    _transactions: TransactionResolver
    _send_back: SendBackProcessor
    _locks: RebalanceLockManager
    _pull: PullMessageProcessor
    _offsets: ConsumerOffsetManager
    _clients: ClientManager
    _admin: AdminProcessor
    _default_queue_nums: int
    _figures: Sequence[Callable[[], dict[str, str]]]
    _max_auto_retry_topics: int
