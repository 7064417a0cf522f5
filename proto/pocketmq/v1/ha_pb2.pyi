from pocketmq.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EpochEntry(_message.Message):
    __slots__ = ("epoch", "start_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "replica_id", "replica_addr", "max_offset", "epochs", "highest_epoch_seen")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ADDR_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_EPOCH_SEEN_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    replica_id: int
    replica_addr: str
    max_offset: int
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    highest_epoch_seen: int
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., replica_id: _Optional[int] = ..., replica_addr: _Optional[str] = ..., max_offset: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., highest_epoch_seen: _Optional[int] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("master_epoch", "epochs", "master_min_offset", "master_max_offset", "truncate_to", "start_offset")
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    MASTER_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MASTER_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_TO_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    master_epoch: int
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    master_min_offset: int
    master_max_offset: int
    truncate_to: int
    start_offset: int
    def __init__(self, master_epoch: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., master_min_offset: _Optional[int] = ..., master_max_offset: _Optional[int] = ..., truncate_to: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class Refuse(_message.Message):
    __slots__ = ("reason", "message", "master_epoch")
    class Reason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        REASON_UNSPECIFIED: _ClassVar[Refuse.Reason]
        WRONG_BROKER_NAME: _ClassVar[Refuse.Reason]
        NOT_MASTER: _ClassVar[Refuse.Reason]
        STALE_EPOCH: _ClassVar[Refuse.Reason]
        REPLICA_AHEAD: _ClassVar[Refuse.Reason]
        DUPLICATE_REPLICA: _ClassVar[Refuse.Reason]
    REASON_UNSPECIFIED: Refuse.Reason
    WRONG_BROKER_NAME: Refuse.Reason
    NOT_MASTER: Refuse.Reason
    STALE_EPOCH: Refuse.Reason
    REPLICA_AHEAD: Refuse.Reason
    DUPLICATE_REPLICA: Refuse.Reason
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    reason: Refuse.Reason
    message: str
    master_epoch: int
    def __init__(self, reason: _Optional[_Union[Refuse.Reason, str]] = ..., message: _Optional[str] = ..., master_epoch: _Optional[int] = ...) -> None: ...

class Data(_message.Message):
    __slots__ = ("offset", "epoch", "epoch_start_offset", "master_max_offset", "master_min_offset", "records", "confirm_offset", "lazy_ack")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EPOCH_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MASTER_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MASTER_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAZY_ACK_FIELD_NUMBER: _ClassVar[int]
    offset: int
    epoch: int
    epoch_start_offset: int
    master_max_offset: int
    master_min_offset: int
    records: bytes
    confirm_offset: int
    lazy_ack: bool
    def __init__(self, offset: _Optional[int] = ..., epoch: _Optional[int] = ..., epoch_start_offset: _Optional[int] = ..., master_max_offset: _Optional[int] = ..., master_min_offset: _Optional[int] = ..., records: _Optional[bytes] = ..., confirm_offset: _Optional[int] = ..., lazy_ack: _Optional[bool] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("max_offset", "flushed_offset")
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    max_offset: int
    flushed_offset: int
    def __init__(self, max_offset: _Optional[int] = ..., flushed_offset: _Optional[int] = ...) -> None: ...

class ReplicaFrame(_message.Message):
    __slots__ = ("hello", "ack")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    ack: Ack
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ...) -> None: ...

class MasterFrame(_message.Message):
    __slots__ = ("welcome", "data", "refuse")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    REFUSE_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    data: Data
    refuse: Refuse
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., data: _Optional[_Union[Data, _Mapping]] = ..., refuse: _Optional[_Union[Refuse, _Mapping]] = ...) -> None: ...

class GetMetadataRequest(_message.Message):
    __slots__ = ("broker_name", "known_data_version")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    KNOWN_DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    known_data_version: _common_pb2.DataVersion
    def __init__(self, broker_name: _Optional[str] = ..., known_data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class OffsetEntry(_message.Message):
    __slots__ = ("group", "topic", "queue_id", "offset")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    offset: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class MetadataSnapshot(_message.Message):
    __slots__ = ("topic_configs", "data_version", "consumer_offsets", "delay_offsets", "master_epoch", "log_end_offset", "topics_omitted")
    class DelayOffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DELAY_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOPICS_OMITTED_FIELD_NUMBER: _ClassVar[int]
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    data_version: _common_pb2.DataVersion
    consumer_offsets: _containers.RepeatedCompositeFieldContainer[OffsetEntry]
    delay_offsets: _containers.ScalarMap[int, int]
    master_epoch: int
    log_end_offset: int
    topics_omitted: bool
    def __init__(self, topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., consumer_offsets: _Optional[_Iterable[_Union[OffsetEntry, _Mapping]]] = ..., delay_offsets: _Optional[_Mapping[int, int]] = ..., master_epoch: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., topics_omitted: _Optional[bool] = ...) -> None: ...
