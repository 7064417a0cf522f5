from pocketmq.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SendStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEND_STATUS_UNSPECIFIED: _ClassVar[SendStatus]
    SEND_OK: _ClassVar[SendStatus]
    FLUSH_DISK_TIMEOUT: _ClassVar[SendStatus]
    FLUSH_SLAVE_TIMEOUT: _ClassVar[SendStatus]
    SLAVE_NOT_AVAILABLE: _ClassVar[SendStatus]

class PullStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PULL_STATUS_UNSPECIFIED: _ClassVar[PullStatus]
    FOUND: _ClassVar[PullStatus]
    NO_NEW_MSG: _ClassVar[PullStatus]
    NO_MATCHED_MSG: _ClassVar[PullStatus]
    OFFSET_ILLEGAL: _ClassVar[PullStatus]

class GetMessageStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GET_MESSAGE_STATUS_UNSPECIFIED: _ClassVar[GetMessageStatus]
    GET_FOUND: _ClassVar[GetMessageStatus]
    GET_NO_MATCHED_MESSAGE: _ClassVar[GetMessageStatus]
    GET_MESSAGE_WAS_REMOVING: _ClassVar[GetMessageStatus]
    GET_OFFSET_FOUND_NULL: _ClassVar[GetMessageStatus]
    GET_OFFSET_OVERFLOW_BADLY: _ClassVar[GetMessageStatus]
    GET_OFFSET_OVERFLOW_ONE: _ClassVar[GetMessageStatus]
    GET_OFFSET_TOO_SMALL: _ClassVar[GetMessageStatus]
    GET_NO_MATCHED_LOGIC_QUEUE: _ClassVar[GetMessageStatus]
    GET_NO_MESSAGE_IN_QUEUE: _ClassVar[GetMessageStatus]
    GET_OFFSET_RESET: _ClassVar[GetMessageStatus]

class TransactionResolution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSACTION_RESOLUTION_UNSPECIFIED: _ClassVar[TransactionResolution]
    COMMIT: _ClassVar[TransactionResolution]
    ROLLBACK: _ClassVar[TransactionResolution]

class ConsumeType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSUME_TYPE_UNSPECIFIED: _ClassVar[ConsumeType]
    CONSUME_ACTIVELY: _ClassVar[ConsumeType]
    CONSUME_PASSIVELY: _ClassVar[ConsumeType]

class MessageModel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_MODEL_UNSPECIFIED: _ClassVar[MessageModel]
    CLUSTERING: _ClassVar[MessageModel]
    BROADCASTING: _ClassVar[MessageModel]

class ConsumeFromWhere(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSUME_FROM_WHERE_UNSPECIFIED: _ClassVar[ConsumeFromWhere]
    CONSUME_FROM_LAST_OFFSET: _ClassVar[ConsumeFromWhere]
    CONSUME_FROM_FIRST_OFFSET: _ClassVar[ConsumeFromWhere]
    CONSUME_FROM_TIMESTAMP: _ClassVar[ConsumeFromWhere]

class ResetPosition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESET_POSITION_UNSPECIFIED: _ClassVar[ResetPosition]
    RESET_TO_EARLIEST: _ClassVar[ResetPosition]
    RESET_TO_LATEST: _ClassVar[ResetPosition]
    RESET_TO_TIMESTAMP: _ClassVar[ResetPosition]
    RESET_TO_OFFSETS: _ClassVar[ResetPosition]
SEND_STATUS_UNSPECIFIED: SendStatus
SEND_OK: SendStatus
FLUSH_DISK_TIMEOUT: SendStatus
FLUSH_SLAVE_TIMEOUT: SendStatus
SLAVE_NOT_AVAILABLE: SendStatus
PULL_STATUS_UNSPECIFIED: PullStatus
FOUND: PullStatus
NO_NEW_MSG: PullStatus
NO_MATCHED_MSG: PullStatus
OFFSET_ILLEGAL: PullStatus
GET_MESSAGE_STATUS_UNSPECIFIED: GetMessageStatus
GET_FOUND: GetMessageStatus
GET_NO_MATCHED_MESSAGE: GetMessageStatus
GET_MESSAGE_WAS_REMOVING: GetMessageStatus
GET_OFFSET_FOUND_NULL: GetMessageStatus
GET_OFFSET_OVERFLOW_BADLY: GetMessageStatus
GET_OFFSET_OVERFLOW_ONE: GetMessageStatus
GET_OFFSET_TOO_SMALL: GetMessageStatus
GET_NO_MATCHED_LOGIC_QUEUE: GetMessageStatus
GET_NO_MESSAGE_IN_QUEUE: GetMessageStatus
GET_OFFSET_RESET: GetMessageStatus
TRANSACTION_RESOLUTION_UNSPECIFIED: TransactionResolution
COMMIT: TransactionResolution
ROLLBACK: TransactionResolution
CONSUME_TYPE_UNSPECIFIED: ConsumeType
CONSUME_ACTIVELY: ConsumeType
CONSUME_PASSIVELY: ConsumeType
MESSAGE_MODEL_UNSPECIFIED: MessageModel
CLUSTERING: MessageModel
BROADCASTING: MessageModel
CONSUME_FROM_WHERE_UNSPECIFIED: ConsumeFromWhere
CONSUME_FROM_LAST_OFFSET: ConsumeFromWhere
CONSUME_FROM_FIRST_OFFSET: ConsumeFromWhere
CONSUME_FROM_TIMESTAMP: ConsumeFromWhere
RESET_POSITION_UNSPECIFIED: ResetPosition
RESET_TO_EARLIEST: ResetPosition
RESET_TO_LATEST: ResetPosition
RESET_TO_TIMESTAMP: ResetPosition
RESET_TO_OFFSETS: ResetPosition

class SendMessageRequest(_message.Message):
    __slots__ = ("record", "producer_group")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    record: bytes
    producer_group: str
    def __init__(self, record: _Optional[bytes] = ..., producer_group: _Optional[str] = ...) -> None: ...

class SendBatchRequest(_message.Message):
    __slots__ = ("records", "producer_group", "omit_sent_columns")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OMIT_SENT_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    records: bytes
    producer_group: str
    omit_sent_columns: bool
    def __init__(self, records: _Optional[bytes] = ..., producer_group: _Optional[str] = ..., omit_sent_columns: _Optional[bool] = ...) -> None: ...

class SendStreamRequest(_message.Message):
    __slots__ = ("request_id", "deadline_ms", "batch", "access_key", "timestamp_ms", "nonce", "signature")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    deadline_ms: int
    batch: SendBatchRequest
    access_key: str
    timestamp_ms: int
    nonce: str
    signature: str
    def __init__(self, request_id: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., batch: _Optional[_Union[SendBatchRequest, _Mapping]] = ..., access_key: _Optional[str] = ..., timestamp_ms: _Optional[int] = ..., nonce: _Optional[str] = ..., signature: _Optional[str] = ...) -> None: ...

class SendStreamResponse(_message.Message):
    __slots__ = ("request_id", "response", "error_code", "error_message", "error_reason", "not_master")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    NOT_MASTER_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    response: SendMessageResponse
    error_code: int
    error_message: str
    error_reason: str
    not_master: bytes
    def __init__(self, request_id: _Optional[int] = ..., response: _Optional[_Union[SendMessageResponse, _Mapping]] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., error_reason: _Optional[str] = ..., not_master: _Optional[bytes] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("status", "store_timestamp_ms", "msg_ids", "queue_ids", "queue_offsets", "phys_offsets", "offset_msg_id_prefix", "duplicates")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    MSG_IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    PHYS_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    status: SendStatus
    store_timestamp_ms: int
    msg_ids: _containers.RepeatedScalarFieldContainer[str]
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    queue_offsets: _containers.RepeatedScalarFieldContainer[int]
    phys_offsets: _containers.RepeatedScalarFieldContainer[int]
    offset_msg_id_prefix: str
    duplicates: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, status: _Optional[_Union[SendStatus, str]] = ..., store_timestamp_ms: _Optional[int] = ..., msg_ids: _Optional[_Iterable[str]] = ..., queue_ids: _Optional[_Iterable[int]] = ..., queue_offsets: _Optional[_Iterable[int]] = ..., phys_offsets: _Optional[_Iterable[int]] = ..., offset_msg_id_prefix: _Optional[str] = ..., duplicates: _Optional[_Iterable[bool]] = ...) -> None: ...

class InitProducerIdRequest(_message.Message):
    __slots__ = ("producer_group", "identity", "topics")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    identity: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, producer_group: _Optional[str] = ..., identity: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ...) -> None: ...

class QueueSequence(_message.Message):
    __slots__ = ("topic", "queue_id", "last_seq")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    last_seq: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., last_seq: _Optional[int] = ...) -> None: ...

class InitProducerIdResponse(_message.Message):
    __slots__ = ("producer_id", "epoch", "sequences")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    epoch: int
    sequences: _containers.RepeatedCompositeFieldContainer[QueueSequence]
    def __init__(self, producer_id: _Optional[int] = ..., epoch: _Optional[int] = ..., sequences: _Optional[_Iterable[_Union[QueueSequence, _Mapping]]] = ...) -> None: ...

class PullMessageRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "queue_offset", "max_msg_nums", "subscription", "suspend_timeout_ms", "commit_offset", "expression_type")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MSG_NUMS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    subscription: str
    suspend_timeout_ms: int
    commit_offset: int
    expression_type: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., max_msg_nums: _Optional[int] = ..., subscription: _Optional[str] = ..., suspend_timeout_ms: _Optional[int] = ..., commit_offset: _Optional[int] = ..., expression_type: _Optional[str] = ...) -> None: ...

class PullMessageResponse(_message.Message):
    __slots__ = ("status", "get_message_status", "next_begin_offset", "min_offset", "max_offset", "records", "message_count")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GET_MESSAGE_STATUS_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEGIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    status: PullStatus
    get_message_status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: bytes
    message_count: int
    def __init__(self, status: _Optional[_Union[PullStatus, str]] = ..., get_message_status: _Optional[_Union[GetMessageStatus, str]] = ..., next_begin_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., records: _Optional[bytes] = ..., message_count: _Optional[int] = ...) -> None: ...

class QueuePull(_message.Message):
    __slots__ = ("topic", "queue_id", "queue_offset", "max_msg_nums", "subscription", "commit_offset", "expression_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MSG_NUMS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    subscription: str
    commit_offset: int
    expression_type: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., max_msg_nums: _Optional[int] = ..., subscription: _Optional[str] = ..., commit_offset: _Optional[int] = ..., expression_type: _Optional[str] = ...) -> None: ...

class PullBatchRequest(_message.Message):
    __slots__ = ("consumer_group", "pulls", "suspend_timeout_ms", "bulk")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    PULLS_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    BULK_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    pulls: _containers.RepeatedCompositeFieldContainer[QueuePull]
    suspend_timeout_ms: int
    bulk: bool
    def __init__(self, consumer_group: _Optional[str] = ..., pulls: _Optional[_Iterable[_Union[QueuePull, _Mapping]]] = ..., suspend_timeout_ms: _Optional[int] = ..., bulk: _Optional[bool] = ...) -> None: ...

class PullBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[QueuePullResult]
    def __init__(self, results: _Optional[_Iterable[_Union[QueuePullResult, _Mapping]]] = ...) -> None: ...

class QueuePullResult(_message.Message):
    __slots__ = ("index", "reply", "error_code", "error_reason", "error_message")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    index: int
    reply: PullMessageResponse
    error_code: str
    error_reason: str
    error_message: str
    def __init__(self, index: _Optional[int] = ..., reply: _Optional[_Union[PullMessageResponse, _Mapping]] = ..., error_code: _Optional[str] = ..., error_reason: _Optional[str] = ..., error_message: _Optional[str] = ...) -> None: ...

class QueryConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class QueryConsumerOffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class UpdateConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "offset")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class UpdateConsumerOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetQueueOffsetRequest(_message.Message):
    __slots__ = ("topic", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class SearchOffsetByTimestampRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class GetQueueOffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class QueryMessageRequest(_message.Message):
    __slots__ = ("topic", "key", "max_num", "begin_timestamp_ms", "end_timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    max_num: int
    begin_timestamp_ms: int
    end_timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., max_num: _Optional[int] = ..., begin_timestamp_ms: _Optional[int] = ..., end_timestamp_ms: _Optional[int] = ...) -> None: ...

class QueryMessageResponse(_message.Message):
    __slots__ = ("records", "message_count")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    records: bytes
    message_count: int
    def __init__(self, records: _Optional[bytes] = ..., message_count: _Optional[int] = ...) -> None: ...

class ViewMessageRequest(_message.Message):
    __slots__ = ("offset_msg_id",)
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    offset_msg_id: str
    def __init__(self, offset_msg_id: _Optional[str] = ...) -> None: ...

class ViewMessageResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: bytes
    def __init__(self, record: _Optional[bytes] = ...) -> None: ...

class ConsumerSendMsgBackRequest(_message.Message):
    __slots__ = ("group", "phys_offset", "delay_level", "origin_topic", "origin_msg_id", "max_reconsume_times")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_TOPIC_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    group: str
    phys_offset: int
    delay_level: int
    origin_topic: str
    origin_msg_id: str
    max_reconsume_times: int
    def __init__(self, group: _Optional[str] = ..., phys_offset: _Optional[int] = ..., delay_level: _Optional[int] = ..., origin_topic: _Optional[str] = ..., origin_msg_id: _Optional[str] = ..., max_reconsume_times: _Optional[int] = ...) -> None: ...

class ConsumerSendMsgBackResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EndTransactionRequest(_message.Message):
    __slots__ = ("producer_group", "commit_log_offset", "offset_msg_id", "msg_id", "resolution", "from_transaction_check")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    FROM_TRANSACTION_CHECK_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    commit_log_offset: int
    offset_msg_id: str
    msg_id: str
    resolution: TransactionResolution
    from_transaction_check: bool
    def __init__(self, producer_group: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., offset_msg_id: _Optional[str] = ..., msg_id: _Optional[str] = ..., resolution: _Optional[_Union[TransactionResolution, str]] = ..., from_transaction_check: _Optional[bool] = ...) -> None: ...

class EndTransactionResponse(_message.Message):
    __slots__ = ("already_resolved",)
    ALREADY_RESOLVED_FIELD_NUMBER: _ClassVar[int]
    already_resolved: bool
    def __init__(self, already_resolved: _Optional[bool] = ...) -> None: ...

class MessageQueueRef(_message.Message):
    __slots__ = ("topic", "broker_name", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker_name: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class LockBatchMQRequest(_message.Message):
    __slots__ = ("group", "client_id", "queues")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    group: str
    client_id: str
    queues: _containers.RepeatedCompositeFieldContainer[MessageQueueRef]
    def __init__(self, group: _Optional[str] = ..., client_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[MessageQueueRef, _Mapping]]] = ...) -> None: ...

class LockBatchMQResponse(_message.Message):
    __slots__ = ("locked",)
    LOCKED_FIELD_NUMBER: _ClassVar[int]
    locked: _containers.RepeatedCompositeFieldContainer[MessageQueueRef]
    def __init__(self, locked: _Optional[_Iterable[_Union[MessageQueueRef, _Mapping]]] = ...) -> None: ...

class UnlockBatchMQRequest(_message.Message):
    __slots__ = ("group", "client_id", "queues")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    group: str
    client_id: str
    queues: _containers.RepeatedCompositeFieldContainer[MessageQueueRef]
    def __init__(self, group: _Optional[str] = ..., client_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[MessageQueueRef, _Mapping]]] = ...) -> None: ...

class UnlockBatchMQResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("topic", "expression", "expression_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    expression: str
    expression_type: str
    def __init__(self, topic: _Optional[str] = ..., expression: _Optional[str] = ..., expression_type: _Optional[str] = ...) -> None: ...

class ConsumerData(_message.Message):
    __slots__ = ("group", "consume_type", "message_model", "consume_from_where", "subscriptions", "fingerprint", "unchanged")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_WHERE_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    group: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    fingerprint: str
    unchanged: bool
    def __init__(self, group: _Optional[str] = ..., consume_type: _Optional[_Union[ConsumeType, str]] = ..., message_model: _Optional[_Union[MessageModel, str]] = ..., consume_from_where: _Optional[_Union[ConsumeFromWhere, str]] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., fingerprint: _Optional[str] = ..., unchanged: _Optional[bool] = ...) -> None: ...

class HeartBeatRequest(_message.Message):
    __slots__ = ("client_id", "producer_groups", "consumers")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    producer_groups: _containers.RepeatedScalarFieldContainer[str]
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerData]
    def __init__(self, client_id: _Optional[str] = ..., producer_groups: _Optional[_Iterable[str]] = ..., consumers: _Optional[_Iterable[_Union[ConsumerData, _Mapping]]] = ...) -> None: ...

class HeartBeatResponse(_message.Message):
    __slots__ = ("unknown_groups", "keeps_fingerprints")
    UNKNOWN_GROUPS_FIELD_NUMBER: _ClassVar[int]
    KEEPS_FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    unknown_groups: _containers.RepeatedScalarFieldContainer[str]
    keeps_fingerprints: bool
    def __init__(self, unknown_groups: _Optional[_Iterable[str]] = ..., keeps_fingerprints: _Optional[bool] = ...) -> None: ...

class UnregisterClientRequest(_message.Message):
    __slots__ = ("client_id", "producer_group", "consumer_group")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    producer_group: str
    consumer_group: str
    def __init__(self, client_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., consumer_group: _Optional[str] = ...) -> None: ...

class UnregisterClientResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetConsumerListByGroupRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class GetConsumerListByGroupResponse(_message.Message):
    __slots__ = ("consumer_ids",)
    CONSUMER_IDS_FIELD_NUMBER: _ClassVar[int]
    consumer_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, consumer_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ClientChannelRequest(_message.Message):
    __slots__ = ("client_id",)
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    def __init__(self, client_id: _Optional[str] = ...) -> None: ...

class ServerCommand(_message.Message):
    __slots__ = ("channel_opened", "notify_consumer_ids_changed", "check_transaction_state", "reset_consumer_client_offset")
    CHANNEL_OPENED_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_CONSUMER_IDS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    CHECK_TRANSACTION_STATE_FIELD_NUMBER: _ClassVar[int]
    RESET_CONSUMER_CLIENT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    channel_opened: ChannelOpened
    notify_consumer_ids_changed: NotifyConsumerIdsChanged
    check_transaction_state: CheckTransactionState
    reset_consumer_client_offset: ResetConsumerClientOffset
    def __init__(self, channel_opened: _Optional[_Union[ChannelOpened, _Mapping]] = ..., notify_consumer_ids_changed: _Optional[_Union[NotifyConsumerIdsChanged, _Mapping]] = ..., check_transaction_state: _Optional[_Union[CheckTransactionState, _Mapping]] = ..., reset_consumer_client_offset: _Optional[_Union[ResetConsumerClientOffset, _Mapping]] = ...) -> None: ...

class ChannelOpened(_message.Message):
    __slots__ = ("broker_name",)
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    def __init__(self, broker_name: _Optional[str] = ...) -> None: ...

class NotifyConsumerIdsChanged(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class CheckTransactionState(_message.Message):
    __slots__ = ("producer_group", "record", "commit_log_offset", "offset_msg_id", "msg_id", "check_times")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    CHECK_TIMES_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    record: bytes
    commit_log_offset: int
    offset_msg_id: str
    msg_id: str
    check_times: int
    def __init__(self, producer_group: _Optional[str] = ..., record: _Optional[bytes] = ..., commit_log_offset: _Optional[int] = ..., offset_msg_id: _Optional[str] = ..., msg_id: _Optional[str] = ..., check_times: _Optional[int] = ...) -> None: ...

class ResetConsumerClientOffset(_message.Message):
    __slots__ = ("consumer_group", "topic", "broker_name", "offsets")
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    broker_name: str
    offsets: _containers.ScalarMap[int, int]
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic_config",)
    TOPIC_CONFIG_FIELD_NUMBER: _ClassVar[int]
    topic_config: _common_pb2.TopicConfig
    def __init__(self, topic_config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("topic_config",)
    TOPIC_CONFIG_FIELD_NUMBER: _ClassVar[int]
    topic_config: _common_pb2.TopicConfig
    def __init__(self, topic_config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class UpdateTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CreateTopicsRequest(_message.Message):
    __slots__ = ("topic_configs", "update_existing")
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    UPDATE_EXISTING_FIELD_NUMBER: _ClassVar[int]
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    update_existing: bool
    def __init__(self, topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ..., update_existing: _Optional[bool] = ...) -> None: ...

class CreateTopicsResponse(_message.Message):
    __slots__ = ("created", "updated", "unchanged", "data_version")
    CREATED_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    created: int
    updated: int
    unchanged: int
    data_version: _common_pb2.DataVersion
    def __init__(self, created: _Optional[int] = ..., updated: _Optional[int] = ..., unchanged: _Optional[int] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class DeleteTopicsRequest(_message.Message):
    __slots__ = ("topics", "ignore_missing")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_MISSING_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    ignore_missing: bool
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., ignore_missing: _Optional[bool] = ...) -> None: ...

class DeleteTopicsResponse(_message.Message):
    __slots__ = ("deleted", "data_version")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    data_version: _common_pb2.DataVersion
    def __init__(self, deleted: _Optional[int] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class GetAllTopicConfigRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetAllTopicConfigResponse(_message.Message):
    __slots__ = ("topic_configs", "data_version")
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    data_version: _common_pb2.DataVersion
    def __init__(self, topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class GetTopicStatusRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueueStatus(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset", "last_store_timestamp_ms")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp_ms: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., last_store_timestamp_ms: _Optional[int] = ...) -> None: ...

class GetTopicStatusResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueStatus]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueStatus, _Mapping]]] = ...) -> None: ...

class GetConsumeProgressRequest(_message.Message):
    __slots__ = ("consumer_group", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class QueueProgress(_message.Message):
    __slots__ = ("topic", "queue_id", "broker_offset", "consumer_offset", "lag", "last_timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    lag: int
    last_timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., broker_offset: _Optional[int] = ..., consumer_offset: _Optional[int] = ..., lag: _Optional[int] = ..., last_timestamp_ms: _Optional[int] = ...) -> None: ...

class GetConsumeProgressResponse(_message.Message):
    __slots__ = ("queues", "total_lag")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LAG_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueProgress]
    total_lag: int
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueProgress, _Mapping]]] = ..., total_lag: _Optional[int] = ...) -> None: ...

class GetBrokerRuntimeInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetBrokerRuntimeInfoResponse(_message.Message):
    __slots__ = ("table",)
    class TableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: _containers.ScalarMap[str, str]
    def __init__(self, table: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PromoteToMasterRequest(_message.Message):
    __slots__ = ("epoch", "role")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    role: str
    def __init__(self, epoch: _Optional[int] = ..., role: _Optional[str] = ...) -> None: ...

class PromoteToMasterResponse(_message.Message):
    __slots__ = ("epoch", "start_offset", "role")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    role: str
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ..., role: _Optional[str] = ...) -> None: ...

class GetBrokerConfigRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetBrokerConfigResponse(_message.Message):
    __slots__ = ("table",)
    class TableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: _containers.ScalarMap[str, str]
    def __init__(self, table: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetAllConsumerGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ConsumerGroupInfo(_message.Message):
    __slots__ = ("group", "client_ids", "consume_type", "message_model", "subscribed_topics", "offset_topics")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPICS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_TOPICS_FIELD_NUMBER: _ClassVar[int]
    group: str
    client_ids: _containers.RepeatedScalarFieldContainer[str]
    consume_type: ConsumeType
    message_model: MessageModel
    subscribed_topics: _containers.RepeatedScalarFieldContainer[str]
    offset_topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., client_ids: _Optional[_Iterable[str]] = ..., consume_type: _Optional[_Union[ConsumeType, str]] = ..., message_model: _Optional[_Union[MessageModel, str]] = ..., subscribed_topics: _Optional[_Iterable[str]] = ..., offset_topics: _Optional[_Iterable[str]] = ...) -> None: ...

class GetAllConsumerGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[ConsumerGroupInfo]
    def __init__(self, groups: _Optional[_Iterable[_Union[ConsumerGroupInfo, _Mapping]]] = ...) -> None: ...

class ResetConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "position", "timestamp_ms", "offsets")
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    position: ResetPosition
    timestamp_ms: int
    offsets: _containers.ScalarMap[int, int]
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., position: _Optional[_Union[ResetPosition, str]] = ..., timestamp_ms: _Optional[int] = ..., offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...

class QueueOffsetReset(_message.Message):
    __slots__ = ("queue_id", "previous_offset", "offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    previous_offset: int
    offset: int
    def __init__(self, queue_id: _Optional[int] = ..., previous_offset: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ResetConsumerOffsetResponse(_message.Message):
    __slots__ = ("queues", "notified_client_ids")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    NOTIFIED_CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsetReset]
    notified_client_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueOffsetReset, _Mapping]]] = ..., notified_client_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteConsumerGroupRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class DeleteConsumerGroupResponse(_message.Message):
    __slots__ = ("offset_topics", "retry_topic_deleted")
    OFFSET_TOPICS_FIELD_NUMBER: _ClassVar[int]
    RETRY_TOPIC_DELETED_FIELD_NUMBER: _ClassVar[int]
    offset_topics: _containers.RepeatedScalarFieldContainer[str]
    retry_topic_deleted: bool
    def __init__(self, offset_topics: _Optional[_Iterable[str]] = ..., retry_topic_deleted: _Optional[bool] = ...) -> None: ...

class UpdateBrokerConfigRequest(_message.Message):
    __slots__ = ("updates",)
    class UpdatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    updates: _containers.ScalarMap[str, str]
    def __init__(self, updates: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateBrokerConfigResponse(_message.Message):
    __slots__ = ("previous",)
    class PreviousEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    previous: _containers.ScalarMap[str, str]
    def __init__(self, previous: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetConsumerConnectionsRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class ConsumerConnection(_message.Message):
    __slots__ = ("client_id", "subscriptions", "consume_type", "message_model", "silent_ms")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    SILENT_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    subscriptions: _containers.RepeatedScalarFieldContainer[str]
    consume_type: ConsumeType
    message_model: MessageModel
    silent_ms: int
    def __init__(self, client_id: _Optional[str] = ..., subscriptions: _Optional[_Iterable[str]] = ..., consume_type: _Optional[_Union[ConsumeType, str]] = ..., message_model: _Optional[_Union[MessageModel, str]] = ..., silent_ms: _Optional[int] = ...) -> None: ...

class GetConsumerConnectionsResponse(_message.Message):
    __slots__ = ("connections",)
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    connections: _containers.RepeatedCompositeFieldContainer[ConsumerConnection]
    def __init__(self, connections: _Optional[_Iterable[_Union[ConsumerConnection, _Mapping]]] = ...) -> None: ...
