"""PocketMQ: Apache RocketMQ's architecture re-built in Python.

The import namespace is one package; the repository's top-level folders are
mapped into it (see ``pyproject.toml``)::

    common/        -> pocketmq.common         codec, ids, hashing, clock, errors
    broker/store/  -> pocketmq.broker.store   commit log, consume queues, index (files only)
    broker/        -> pocketmq.broker         broker services and gRPC servicer
    nameserver/    -> pocketmq.nameserver     route table and broker liveness
    client/        -> pocketmq.client         producer, consumers, rebalance
    cli/           -> pocketmq.cli            the ``pocketmq`` command
    proto/pocketmq/v1 -> pocketmq.v1          generated protobuf code (wire contract)
"""

__version__ = "0.1.0"
