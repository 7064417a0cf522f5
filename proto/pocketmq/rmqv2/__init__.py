"""RocketMQ 5's gRPC API (``apache.rocketmq.v2``), generated from the ``.proto`` files here.

Only :mod:`pocketmq.broker.grpc_v2` imports these modules; see
``definition.proto`` for the schema revision they follow.
"""
