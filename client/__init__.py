"""The PocketMQ client SDK (asyncio first).

::

    from pocketmq.client import Producer, PushConsumer, Message, ConsumeResult

    async with Producer(group="pg", namesrv="127.0.0.1:9876") as producer:
        result = await producer.send(Message(topic="orders", body=b"...", tags="paid"))

    consumer = PushConsumer(group="cg", namesrv="127.0.0.1:9876", consume_from="first")
    consumer.subscribe("orders", "paid || refunded")      # tags; or on properties:
    # consumer.subscribe("orders", MessageSelector.by_sql("region = 'eu' AND amount > 100"))

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        return ConsumeResult.CONSUME_SUCCESS

    await consumer.start(); ...; await consumer.shutdown()

Modules by role: :mod:`.producer` with :mod:`.accumulator` (send coalescing),
:mod:`.send_retry` (retries and back-off) and :mod:`.fault_strategy` (queue
choice); :mod:`.transaction_producer` (half messages, local transactions,
answering the broker's checks); :mod:`.push_consumer` and :mod:`.pull_consumer`,
each assembled from parts (:mod:`.consumer_base`): :mod:`.subscription`,
:mod:`.offset_keeper` (over :mod:`.offset_store`), :mod:`.fetcher` (over
:mod:`.process_queue` and :mod:`.pull_coalescer`), :mod:`.coordinator` (over
:mod:`.rebalance` and :mod:`.allocate`), :mod:`.queue_locks`, with
:mod:`.consume_service`; :mod:`.route`, :mod:`.heartbeat`; :mod:`.remoting`
(channels) with :mod:`.nameserver_client`, :mod:`.broker_client`,
:mod:`.remote_values` and :mod:`.remote_errors`, the only modules that see gRPC
and protobuf; :mod:`.model`, :mod:`.config`, :mod:`.errors`; :mod:`.sync` (a
blocking facade for scripts); :mod:`.admin` (``AdminClient``, RocketMQ's
``DefaultMQAdminExt``) with :mod:`.admin_groups`, :mod:`.admin_messages`,
:mod:`.admin_replicas` and its rows in :mod:`.admin_model`.
"""

from pocketmq.client.admin import AdminClient
from pocketmq.client.admin_model import TopicConfig
from pocketmq.client.allocate import (
    allocate_averagely,
    allocate_by_circle,
    allocate_consistent_hash,
)
from pocketmq.client.config import ConsumerConfig, ProducerConfig, PullConsumerConfig
from pocketmq.client.errors import (
    BusyError,
    ClientError,
    ClientStateError,
    InvalidMessageError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    RemoteError,
    RouteNotFoundError,
    SendTimeoutError,
    ServerError,
    UnavailableError,
    UnsupportedError,
)
from pocketmq.client.model import (
    ClientState,
    ConsumeFrom,
    ConsumeResult,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    SendResult,
    SendStatus,
    dlq_topic,
    retry_topic,
)
from pocketmq.client.producer import MessageQueueSelector, Producer
from pocketmq.client.pull_consumer import PullConsumer
from pocketmq.client.push_consumer import PushConsumer
from pocketmq.client.transaction_producer import (
    LocalTransactionState,
    TransactionProducer,
    TransactionSendResult,
)
from pocketmq.common.filter import SQL92, TAG, MessageSelector, SqlFilterError

__all__ = [
    "SQL92",
    "TAG",
    "AdminClient",
    "BusyError",
    "ClientError",
    "ClientState",
    "ClientStateError",
    "ConsumeFrom",
    "ConsumeResult",
    "ConsumerConfig",
    "InvalidMessageError",
    "InvalidRequestError",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageQueueSelector",
    "MessageSelector",
    "NotFoundError",
    "PermissionDeniedError",
    "Producer",
    "ProducerConfig",
    "PullConsumer",
    "PullConsumerConfig",
    "PushConsumer",
    "RemoteError",
    "RouteNotFoundError",
    "SendResult",
    "SendStatus",
    "SendTimeoutError",
    "ServerError",
    "SqlFilterError",
    "TopicConfig",
    "TransactionProducer",
    "TransactionSendResult",
    "UnavailableError",
    "UnsupportedError",
    "allocate_averagely",
    "allocate_by_circle",
    "allocate_consistent_hash",
    "dlq_topic",
    "retry_topic",
]
