from collections.abc import Iterable as _Iterable
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar

from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper

from pocketmq.v1 import common_pb2 as _common_pb2

DESCRIPTOR: _descriptor.FileDescriptor

class SendStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEND_STATUS_UNSPECIFIED: _ClassVar[SendStatus]
    SEND_OK: _ClassVar[SendStatus]
    FLUSH_DISK_TIMEOUT: _ClassVar[SendStatus]

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
SEND_STATUS_UNSPECIFIED: SendStatus
SEND_OK: SendStatus
FLUSH_DISK_TIMEOUT: SendStatus
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

class SendMessageRequest(_message.Message):
    __slots__ = ("producer_group", "record")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    record: bytes
    producer_group: str
    def __init__(self, record: bytes | None = ..., producer_group: str | None = ...) -> None: ...

class SendBatchRequest(_message.Message):
    __slots__ = ("producer_group", "records")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    records: bytes
    producer_group: str
    def __init__(self, records: bytes | None = ..., producer_group: str | None = ...) -> None: ...

class SendResultEntry(_message.Message):
    __slots__ = ("msg_id", "offset_msg_id", "queue_id", "queue_offset", "status", "topic")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    def __init__(self, status: SendStatus | str | None = ..., msg_id: str | None = ..., offset_msg_id: str | None = ..., topic: str | None = ..., queue_id: int | None = ..., queue_offset: int | None = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("results", "store_timestamp_ms")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResultEntry]
    store_timestamp_ms: int
    def __init__(self, results: _Iterable[SendResultEntry | _Mapping] | None = ..., store_timestamp_ms: int | None = ...) -> None: ...

class PullMessageRequest(_message.Message):
    __slots__ = ("commit_offset", "consumer_group", "max_msg_nums", "queue_id", "queue_offset", "subscription", "suspend_timeout_ms", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MSG_NUMS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    subscription: str
    suspend_timeout_ms: int
    commit_offset: int
    def __init__(self, consumer_group: str | None = ..., topic: str | None = ..., queue_id: int | None = ..., queue_offset: int | None = ..., max_msg_nums: int | None = ..., subscription: str | None = ..., suspend_timeout_ms: int | None = ..., commit_offset: int | None = ...) -> None: ...

class PullMessageResponse(_message.Message):
    __slots__ = ("get_message_status", "max_offset", "message_count", "min_offset", "next_begin_offset", "records", "status")
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
    def __init__(self, status: PullStatus | str | None = ..., get_message_status: GetMessageStatus | str | None = ..., next_begin_offset: int | None = ..., min_offset: int | None = ..., max_offset: int | None = ..., records: bytes | None = ..., message_count: int | None = ...) -> None: ...

class QueryConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "queue_id", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    def __init__(self, consumer_group: str | None = ..., topic: str | None = ..., queue_id: int | None = ...) -> None: ...

class QueryConsumerOffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: int | None = ...) -> None: ...

class UpdateConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "offset", "queue_id", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    def __init__(self, consumer_group: str | None = ..., topic: str | None = ..., queue_id: int | None = ..., offset: int | None = ...) -> None: ...

class UpdateConsumerOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetQueueOffsetRequest(_message.Message):
    __slots__ = ("queue_id", "topic")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    def __init__(self, topic: str | None = ..., queue_id: int | None = ...) -> None: ...

class SearchOffsetByTimestampRequest(_message.Message):
    __slots__ = ("queue_id", "timestamp_ms", "topic")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp_ms: int
    def __init__(self, topic: str | None = ..., queue_id: int | None = ..., timestamp_ms: int | None = ...) -> None: ...

class GetQueueOffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: int | None = ...) -> None: ...

class QueryMessageRequest(_message.Message):
    __slots__ = ("begin_timestamp_ms", "end_timestamp_ms", "key", "max_num", "topic")
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
    def __init__(self, topic: str | None = ..., key: str | None = ..., max_num: int | None = ..., begin_timestamp_ms: int | None = ..., end_timestamp_ms: int | None = ...) -> None: ...

class QueryMessageResponse(_message.Message):
    __slots__ = ("message_count", "records")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    records: bytes
    message_count: int
    def __init__(self, records: bytes | None = ..., message_count: int | None = ...) -> None: ...

class ViewMessageRequest(_message.Message):
    __slots__ = ("offset_msg_id",)
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    offset_msg_id: str
    def __init__(self, offset_msg_id: str | None = ...) -> None: ...

class ViewMessageResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: bytes
    def __init__(self, record: bytes | None = ...) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("expression", "topic")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    expression: str
    def __init__(self, topic: str | None = ..., expression: str | None = ...) -> None: ...

class ConsumerData(_message.Message):
    __slots__ = ("consume_from_where", "consume_type", "group", "message_model", "subscriptions")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_WHERE_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    group: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    def __init__(self, group: str | None = ..., consume_type: ConsumeType | str | None = ..., message_model: MessageModel | str | None = ..., consume_from_where: ConsumeFromWhere | str | None = ..., subscriptions: _Iterable[Subscription | _Mapping] | None = ...) -> None: ...

class HeartBeatRequest(_message.Message):
    __slots__ = ("client_id", "consumers", "producer_groups")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    producer_groups: _containers.RepeatedScalarFieldContainer[str]
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerData]
    def __init__(self, client_id: str | None = ..., producer_groups: _Iterable[str] | None = ..., consumers: _Iterable[ConsumerData | _Mapping] | None = ...) -> None: ...

class HeartBeatResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UnregisterClientRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group", "producer_group")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    producer_group: str
    consumer_group: str
    def __init__(self, client_id: str | None = ..., producer_group: str | None = ..., consumer_group: str | None = ...) -> None: ...

class UnregisterClientResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetConsumerListByGroupRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: str | None = ...) -> None: ...

class GetConsumerListByGroupResponse(_message.Message):
    __slots__ = ("consumer_ids",)
    CONSUMER_IDS_FIELD_NUMBER: _ClassVar[int]
    consumer_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, consumer_ids: _Iterable[str] | None = ...) -> None: ...

class ClientChannelRequest(_message.Message):
    __slots__ = ("client_id",)
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    def __init__(self, client_id: str | None = ...) -> None: ...

class ServerCommand(_message.Message):
    __slots__ = ("channel_opened", "notify_consumer_ids_changed")
    CHANNEL_OPENED_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_CONSUMER_IDS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    channel_opened: ChannelOpened
    notify_consumer_ids_changed: NotifyConsumerIdsChanged
    def __init__(self, channel_opened: ChannelOpened | _Mapping | None = ..., notify_consumer_ids_changed: NotifyConsumerIdsChanged | _Mapping | None = ...) -> None: ...

class ChannelOpened(_message.Message):
    __slots__ = ("broker_name",)
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    def __init__(self, broker_name: str | None = ...) -> None: ...

class NotifyConsumerIdsChanged(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: str | None = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic_config",)
    TOPIC_CONFIG_FIELD_NUMBER: _ClassVar[int]
    topic_config: _common_pb2.TopicConfig
    def __init__(self, topic_config: _common_pb2.TopicConfig | _Mapping | None = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("topic_config",)
    TOPIC_CONFIG_FIELD_NUMBER: _ClassVar[int]
    topic_config: _common_pb2.TopicConfig
    def __init__(self, topic_config: _common_pb2.TopicConfig | _Mapping | None = ...) -> None: ...

class UpdateTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: str | None = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetAllTopicConfigRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetAllTopicConfigResponse(_message.Message):
    __slots__ = ("data_version", "topic_configs")
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    data_version: _common_pb2.DataVersion
    def __init__(self, topic_configs: _Iterable[_common_pb2.TopicConfig | _Mapping] | None = ..., data_version: _common_pb2.DataVersion | _Mapping | None = ...) -> None: ...

class GetTopicStatusRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: str | None = ...) -> None: ...

class QueueStatus(_message.Message):
    __slots__ = ("last_store_timestamp_ms", "max_offset", "min_offset", "queue_id")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp_ms: int
    def __init__(self, queue_id: int | None = ..., min_offset: int | None = ..., max_offset: int | None = ..., last_store_timestamp_ms: int | None = ...) -> None: ...

class GetTopicStatusResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueStatus]
    def __init__(self, queues: _Iterable[QueueStatus | _Mapping] | None = ...) -> None: ...

class GetConsumeProgressRequest(_message.Message):
    __slots__ = ("consumer_group", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    def __init__(self, consumer_group: str | None = ..., topic: str | None = ...) -> None: ...

class QueueProgress(_message.Message):
    __slots__ = ("broker_offset", "consumer_offset", "lag", "last_timestamp_ms", "queue_id", "topic")
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
    def __init__(self, topic: str | None = ..., queue_id: int | None = ..., broker_offset: int | None = ..., consumer_offset: int | None = ..., lag: int | None = ..., last_timestamp_ms: int | None = ...) -> None: ...

class GetConsumeProgressResponse(_message.Message):
    __slots__ = ("queues", "total_lag")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LAG_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueProgress]
    total_lag: int
    def __init__(self, queues: _Iterable[QueueProgress | _Mapping] | None = ..., total_lag: int | None = ...) -> None: ...

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
        def __init__(self, key: str | None = ..., value: str | None = ...) -> None: ...
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: _containers.ScalarMap[str, str]
    def __init__(self, table: _Mapping[str, str] | None = ...) -> None: ...
