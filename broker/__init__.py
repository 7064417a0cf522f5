"""The broker: services around the message store, served over gRPC.

Modules by role. Layers, lowest first; a layer never imports one above it
(tests/unit/test_layering.py checks it): ``store/`` (files and bytes only, no gRPC,
no protobuf, no asyncio servers), the services below, then the gRPC servicers
(the only modules that see protobuf)::

    config           BrokerConfig (and the StoreConfig derived from it)
    topic_config     TopicConfigManager: topics.json, system topics, auto-create
    consumer_offsets ConsumerOffsetManager: consumerOffset.json
    client_manager   producer/consumer heartbeats, expiry, client command channels
    long_polling     PullRequestHolder: parked pulls woken by message arrival
    send_processor   SendMessage / SendBatch checks and acknowledgements
    pull_processor   PullMessage: offset statuses, tag filter, long polling
    admin_processor  topic admin, queue offsets, message queries, runtime info
    delay_levels     RocketMQ's 18 delay levels; moving a delayed record to SCHEDULE_TOPIC_XXXX
    reput            storing a message again elsewhere (delay, timer, retry deliveries)
    schedule         ScheduleMessageService: re-puts due messages, delayOffset.json
    send_back        ConsumerSendMsgBack: the retry (%RETRY%group) or dead-letter copy
    rebalance_lock   RebalanceLockManager: queue locks for orderly consumption
    timer_messages   any delivery time: moving a timed record to rmq_sys_wheel_timer
    timer_service    TimerService: walks the timing wheel (store/timer_*), re-puts due messages
    transaction_ops  half messages, op records, the commit/rollback decision table
    transaction      TransactionResolver: EndTransaction, op replay, progress
    transaction_check  TransactionalMessageCheckService: asks live producers about old halves
    registration     RegisterBrokerService (namesrv_client: its gRPC client)
    errors           the refusals services raise; grpc_status maps them to codes
    servicer         the gRPC adapters: the only module seeing broker protobuf (with the
                     v1_* families; v1_send_stream serves SendBatch over one stream)
    broker           Broker: starts and stops all of the above in order

This package imports nothing at import time, so ``pocketmq.broker.store``
stays free of gRPC; import ``pocketmq.broker.broker.Broker`` to run one.
"""
