from pocketmq.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TopicTableKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOPIC_TABLE_FULL: _ClassVar[TopicTableKind]
    TOPIC_TABLE_DELTA: _ClassVar[TopicTableKind]
TOPIC_TABLE_FULL: TopicTableKind
TOPIC_TABLE_DELTA: TopicTableKind

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_addr", "broker_id", "topic_configs", "data_version", "heartbeat_timeout_ms", "grpc_v2_addr", "ha_addr", "master_epoch", "topic_table_kind", "base_version", "deleted_topics", "chunk_index", "chunk_count")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    GRPC_V2_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPIC_TABLE_KIND_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    DELETED_TOPICS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: int
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    data_version: _common_pb2.DataVersion
    heartbeat_timeout_ms: int
    grpc_v2_addr: str
    ha_addr: str
    master_epoch: int
    topic_table_kind: TopicTableKind
    base_version: _common_pb2.DataVersion
    deleted_topics: _containers.RepeatedScalarFieldContainer[str]
    chunk_index: int
    chunk_count: int
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_addr: _Optional[str] = ..., broker_id: _Optional[int] = ..., topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., heartbeat_timeout_ms: _Optional[int] = ..., grpc_v2_addr: _Optional[str] = ..., ha_addr: _Optional[str] = ..., master_epoch: _Optional[int] = ..., topic_table_kind: _Optional[_Union[TopicTableKind, str]] = ..., base_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., deleted_topics: _Optional[_Iterable[str]] = ..., chunk_index: _Optional[int] = ..., chunk_count: _Optional[int] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("master_addr", "topic_configs_accepted", "master_ha_addr", "master_epoch", "stale_master", "full_table_needed")
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CONFIGS_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MASTER_HA_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STALE_MASTER_FIELD_NUMBER: _ClassVar[int]
    FULL_TABLE_NEEDED_FIELD_NUMBER: _ClassVar[int]
    master_addr: str
    topic_configs_accepted: bool
    master_ha_addr: str
    master_epoch: int
    stale_master: bool
    full_table_needed: bool
    def __init__(self, master_addr: _Optional[str] = ..., topic_configs_accepted: _Optional[bool] = ..., master_ha_addr: _Optional[str] = ..., master_epoch: _Optional[int] = ..., stale_master: _Optional[bool] = ..., full_table_needed: _Optional[bool] = ...) -> None: ...

class UnregisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_addr", "broker_id")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: int
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_addr: _Optional[str] = ..., broker_id: _Optional[int] = ...) -> None: ...

class UnregisterBrokerResponse(_message.Message):
    __slots__ = ("was_registered",)
    WAS_REGISTERED_FIELD_NUMBER: _ClassVar[int]
    was_registered: bool
    def __init__(self, was_registered: _Optional[bool] = ...) -> None: ...

class GetRouteInfoByTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class GetRouteInfoByTopicResponse(_message.Message):
    __slots__ = ("route", "grpc_v2_addrs")
    class GrpcV2AddrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    GRPC_V2_ADDRS_FIELD_NUMBER: _ClassVar[int]
    route: _common_pb2.TopicRouteData
    grpc_v2_addrs: _containers.ScalarMap[str, str]
    def __init__(self, route: _Optional[_Union[_common_pb2.TopicRouteData, _Mapping]] = ..., grpc_v2_addrs: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetAllTopicListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetAllTopicListResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class GetTopicRoutesRequest(_message.Message):
    __slots__ = ("start_after", "limit", "names")
    START_AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    start_after: str
    limit: int
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, start_after: _Optional[str] = ..., limit: _Optional[int] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class TopicQueues(_message.Message):
    __slots__ = ("topic", "queue_datas")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DATAS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_datas: _containers.RepeatedCompositeFieldContainer[_common_pb2.QueueData]
    def __init__(self, topic: _Optional[str] = ..., queue_datas: _Optional[_Iterable[_Union[_common_pb2.QueueData, _Mapping]]] = ...) -> None: ...

class GetTopicRoutesResponse(_message.Message):
    __slots__ = ("topics", "brokers", "next_start_after", "total_topics", "missing")
    class BrokersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.BrokerData
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.BrokerData, _Mapping]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_START_AFTER_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOPICS_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicQueues]
    brokers: _containers.MessageMap[str, _common_pb2.BrokerData]
    next_start_after: str
    total_topics: int
    missing: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicQueues, _Mapping]]] = ..., brokers: _Optional[_Mapping[str, _common_pb2.BrokerData]] = ..., next_start_after: _Optional[str] = ..., total_topics: _Optional[int] = ..., missing: _Optional[_Iterable[str]] = ...) -> None: ...

class GetBrokerClusterInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterBrokerNames(_message.Message):
    __slots__ = ("broker_names",)
    BROKER_NAMES_FIELD_NUMBER: _ClassVar[int]
    broker_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, broker_names: _Optional[_Iterable[str]] = ...) -> None: ...

class BrokerLiveInfo(_message.Message):
    __slots__ = ("broker_addr", "cluster_name", "broker_name", "broker_id", "last_update_timestamp_ms", "heartbeat_timeout_ms", "data_version")
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    broker_addr: str
    cluster_name: str
    broker_name: str
    broker_id: int
    last_update_timestamp_ms: int
    heartbeat_timeout_ms: int
    data_version: _common_pb2.DataVersion
    def __init__(self, broker_addr: _Optional[str] = ..., cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., last_update_timestamp_ms: _Optional[int] = ..., heartbeat_timeout_ms: _Optional[int] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class GetBrokerClusterInfoResponse(_message.Message):
    __slots__ = ("broker_addr_table", "cluster_addr_table", "live_brokers")
    class BrokerAddrTableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.BrokerData
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.BrokerData, _Mapping]] = ...) -> None: ...
    class ClusterAddrTableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ClusterBrokerNames
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ClusterBrokerNames, _Mapping]] = ...) -> None: ...
    BROKER_ADDR_TABLE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ADDR_TABLE_FIELD_NUMBER: _ClassVar[int]
    LIVE_BROKERS_FIELD_NUMBER: _ClassVar[int]
    broker_addr_table: _containers.MessageMap[str, _common_pb2.BrokerData]
    cluster_addr_table: _containers.MessageMap[str, ClusterBrokerNames]
    live_brokers: _containers.RepeatedCompositeFieldContainer[BrokerLiveInfo]
    def __init__(self, broker_addr_table: _Optional[_Mapping[str, _common_pb2.BrokerData]] = ..., cluster_addr_table: _Optional[_Mapping[str, ClusterBrokerNames]] = ..., live_brokers: _Optional[_Iterable[_Union[BrokerLiveInfo, _Mapping]]] = ...) -> None: ...
