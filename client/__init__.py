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
(channels) with :mod:`.nameserver_client`, :mod:`.broker_client` (its batches over
one SendStream per broker: :mod:`.send_stream`),
:mod:`.remote_values` and :mod:`.remote_errors`, the only modules that see gRPC
and protobuf; :mod:`.model`, :mod:`.config`, :mod:`.errors`; :mod:`.sync` (a
blocking facade for scripts); :mod:`.admin` (``AdminClient``, RocketMQ's
``DefaultMQAdminExt``) with :mod:`.admin_groups`, :mod:`.admin_messages`,
:mod:`.admin_replicas` and its rows in :mod:`.admin_model`.

One level below the producer and the consumers, the *connector API* is public
too, for readers and writers that drive the wire themselves (the Spark
connector, ``pocketmq.spark``, uses only this package's exports)::

    remoting = Remoting(Transport(...))          one gRPC channel per address
    names = remoting.nameserver(addrs)           NameserverClient: get_route, topic_list
    broker = remoting.broker(addr)               BrokerClient: pull, pull_batch (QueuePull
                                                 -> PullReply), min/max_offset,
                                                 offset_by_timestamp, init_producer_id,
                                                 send_batch_to, send_batch_request (a
                                                 request framed already: frame_records(
                                                 blob, BrokerClient.send_batch_tail(group)))
    routes = RouteService(names.get_route)       cached routes: write_queues, addr_of
    decode_messages(blob, broker_name)           the block codec: records back to back (a
                                                 PullReply's, a stored segment's) -> MessageExt
    check_message(msg)                           what the broker would refuse, raised here
    encode_message(msg, queue_id=..., ...)       one Message -> one record in the stored
                                                 layout (SendBatch blobs are these joined)
    stamp, outcome_unknown, try_again_here,      an idempotent writer's numbering and
    back_off                                     retry decisions, as the producer makes them
    local_ip, parse_namesrv, PROPERTY_*, ...     what a writer needs to make records alike
"""

from pocketmq.client.admin import AdminClient
from pocketmq.client.admin_model import TopicConfig
from pocketmq.client.allocate import (
    allocate_averagely,
    allocate_by_circle,
    allocate_consistent_hash,
)
from pocketmq.client.config import (
    ConsumerConfig,
    ProducerConfig,
    PullConsumerConfig,
    Transport,
    parse_namesrv,
)
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
from pocketmq.client.heartbeat import local_ip
from pocketmq.client.idempotence import stamp
from pocketmq.client.idempotent_send import outcome_unknown, try_again_here
from pocketmq.client.message_codec import (
    COMPRESS_OVER_BYTES,
    DEFAULT_MAX_BODY_BYTES,
    check_message,
    decode_messages,
    encode_message,
    frame_records,
)
from pocketmq.client.model import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
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
from pocketmq.client.remoting import (
    BrokerClient,
    NameserverClient,
    PullReply,
    PullStatus,
    QueuePull,
    Remoting,
)
from pocketmq.client.route import RouteService
from pocketmq.client.send_retry import _back_off as back_off
from pocketmq.client.transaction_producer import (
    LocalTransactionState,
    TransactionProducer,
    TransactionSendResult,
)
from pocketmq.common.filter import SQL92, TAG, MessageSelector, SqlFilterError

__all__ = [
    "COMPRESS_OVER_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "PROPERTY_KEYS",
    "PROPERTY_TAGS",
    "PROPERTY_UNIQ_KEY",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SQL92",
    "TAG",
    "AdminClient",
    "BrokerClient",
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
    "NameserverClient",
    "NotFoundError",
    "PermissionDeniedError",
    "Producer",
    "ProducerConfig",
    "PullConsumer",
    "PullConsumerConfig",
    "PullReply",
    "PullStatus",
    "PushConsumer",
    "QueuePull",
    "RemoteError",
    "Remoting",
    "RouteNotFoundError",
    "RouteService",
    "SendResult",
    "SendStatus",
    "SendTimeoutError",
    "ServerError",
    "SqlFilterError",
    "TopicConfig",
    "TransactionProducer",
    "TransactionSendResult",
    "Transport",
    "UnavailableError",
    "UnsupportedError",
    "allocate_averagely",
    "allocate_by_circle",
    "allocate_consistent_hash",
    "back_off",
    "check_message",
    "decode_messages",
    "dlq_topic",
    "encode_message",
    "frame_records",
    "local_ip",
    "outcome_unknown",
    "parse_namesrv",
    "retry_topic",
    "stamp",
    "try_again_here",
]
