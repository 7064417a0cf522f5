from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Perm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERM_NONE: _ClassVar[Perm]
    PERM_INHERIT: _ClassVar[Perm]
    PERM_WRITE: _ClassVar[Perm]
    PERM_READ: _ClassVar[Perm]
    PERM_PRIORITY: _ClassVar[Perm]
PERM_NONE: Perm
PERM_INHERIT: Perm
PERM_WRITE: Perm
PERM_READ: Perm
PERM_PRIORITY: Perm

class TopicConfig(_message.Message):
    __slots__ = ("topic_name", "read_queue_nums", "write_queue_nums", "perm", "order", "topic_sys_flag")
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool
    topic_sys_flag: int
    def __init__(self, topic_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., order: _Optional[bool] = ..., topic_sys_flag: _Optional[int] = ...) -> None: ...

class DataVersion(_message.Message):
    __slots__ = ("timestamp_ms", "counter")
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    timestamp_ms: int
    counter: int
    def __init__(self, timestamp_ms: _Optional[int] = ..., counter: _Optional[int] = ...) -> None: ...

class QueueData(_message.Message):
    __slots__ = ("broker_name", "read_queue_nums", "write_queue_nums", "perm")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    def __init__(self, broker_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ...) -> None: ...

class BrokerData(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_addrs", "master_epoch")
    class BrokerAddrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDRS_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_addrs: _containers.ScalarMap[int, str]
    master_epoch: int
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_addrs: _Optional[_Mapping[int, str]] = ..., master_epoch: _Optional[int] = ...) -> None: ...

class TopicRouteData(_message.Message):
    __slots__ = ("queue_datas", "broker_datas")
    QUEUE_DATAS_FIELD_NUMBER: _ClassVar[int]
    BROKER_DATAS_FIELD_NUMBER: _ClassVar[int]
    queue_datas: _containers.RepeatedCompositeFieldContainer[QueueData]
    broker_datas: _containers.RepeatedCompositeFieldContainer[BrokerData]
    def __init__(self, queue_datas: _Optional[_Iterable[_Union[QueueData, _Mapping]]] = ..., broker_datas: _Optional[_Iterable[_Union[BrokerData, _Mapping]]] = ...) -> None: ...
