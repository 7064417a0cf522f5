"""Replication between the brokers of one broker name (RocketMQ's master/slave HA).

    role       HaController: the broker's role, promotion, fencing, metadata sync
    master     ReplicationMaster: frames for replicas, acks, SYNC_MASTER waiters
    replica    HaClient: the replica's copy loop (handshake, truncation by epoch)
    servicer   HaServicer: the HaService gRPC adapter on the master's ha_port
    metadata   the topics and offsets a replica copies, as a stream of parts

The store's side (frames of whole records, verbatim append, truncation, the
epoch file) is in :mod:`pocketmq.broker.store.replication` and
:mod:`pocketmq.broker.store.epochs`.
"""
