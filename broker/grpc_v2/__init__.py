"""RocketMQ 5's gRPC API on a PocketMQ broker, so the official 5.x clients work unchanged.

A broker serves ``apache.rocketmq.v2.MessagingService`` on ``grpc_v2_port``
beside its own API. Protobuf stays at this edge: the broker's services (send,
transactions, send-back to the DLQ, the timer, offsets) never see a v2 type.

    server        GrpcV2Server: the second gRPC server, started and stopped by the Broker
    servicer      MessagingServicer: each RPC as a thin adapter; status codes
    convert       v2 Message <-> stored record; broker errors -> v2 status codes
    route         RouteResolver: QueryRoute / QueryAssignment from the nameservers
    telemetry     TelemetryService: client settings, producers, transaction checks
    pop_processor PopMessageProcessor: POP consumption (receive, ack, invisible time, FIFO, DLQ)
    pop_journal   PopJournal: the POP state, durable in DATA/pop/popJournal
    auth          HeaderAuthenticator: the MQv2-HMAC-SHA1 ``authorization`` header and
                  its clock window; Caller: what a call may touch (ACL, system topics)
"""

from pocketmq.broker.grpc_v2.auth import HeaderAuthenticator
from pocketmq.broker.grpc_v2.server import BrokerParts, GrpcV2Server

__all__ = ["BrokerParts", "GrpcV2Server", "HeaderAuthenticator"]
