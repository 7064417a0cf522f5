from collections.abc import Iterable as _Iterable
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar

from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper

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
    __slots__ = ("order", "perm", "read_queue_nums", "topic_name", "topic_sys_flag", "write_queue_nums")
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
    def __init__(self, topic_name: str | None = ..., read_queue_nums: int | None = ..., write_queue_nums: int | None = ..., perm: int | None = ..., order: bool | None = ..., topic_sys_flag: int | None = ...) -> None: ...

class DataVersion(_message.Message):
    __slots__ = ("counter", "timestamp_ms")
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    timestamp_ms: int
    counter: int
    def __init__(self, timestamp_ms: int | None = ..., counter: int | None = ...) -> None: ...

class QueueData(_message.Message):
    __slots__ = ("broker_name", "perm", "read_queue_nums", "write_queue_nums")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    def __init__(self, broker_name: str | None = ..., read_queue_nums: int | None = ..., write_queue_nums: int | None = ..., perm: int | None = ...) -> None: ...

class BrokerData(_message.Message):
    __slots__ = ("broker_addrs", "broker_name", "cluster")
    class BrokerAddrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: int | None = ..., value: str | None = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDRS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_addrs: _containers.ScalarMap[int, str]
    def __init__(self, cluster: str | None = ..., broker_name: str | None = ..., broker_addrs: _Mapping[int, str] | None = ...) -> None: ...

class TopicRouteData(_message.Message):
    __slots__ = ("broker_datas", "queue_datas")
    QUEUE_DATAS_FIELD_NUMBER: _ClassVar[int]
    BROKER_DATAS_FIELD_NUMBER: _ClassVar[int]
    queue_datas: _containers.RepeatedCompositeFieldContainer[QueueData]
    broker_datas: _containers.RepeatedCompositeFieldContainer[BrokerData]
    def __init__(self, queue_datas: _Iterable[QueueData | _Mapping] | None = ..., broker_datas: _Iterable[BrokerData | _Mapping] | None = ...) -> None: ...
