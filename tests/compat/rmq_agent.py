"""Drive RocketMQ's official Python client (rocketmq-python-client 5.1.2) from a test.

Run as a subprocess (``python rmq_agent.py``): the official client and the
broker cannot share a process, because both register the ``apache.rocketmq.v2``
protobuf types in the one default descriptor pool. The agent reads one JSON
command per line on stdin and writes one JSON answer per line on stdout:
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "Type: text"}``.

Commands (``op`` and its fields)::

    producer   name, endpoints, topics, checker ("commit" | "rollback" | null), ak, sk,
               tls (true: over TLS, trusting GRPC_DEFAULT_SSL_ROOTS_FILE_PATH)
    send       producer, topic, body, tag, keys, props, group, delivery_ms,
               delivery_raw (put as is into the client's field), transaction
               ("commit" | "rollback" | "open"; absent = not transactional)
    simple     name, endpoints, group, topic (or topics: a list), expr (for each topic), sql
               (true: expr is SQL92), await_s, ak, sk
    receive    consumer, max, invisible_s -> [message]
    ack        consumer, message_id          (of the last receive that had it)
    change     consumer, message_id, invisible_s -> new receipt handle
    push       name, endpoints, group, topic (or topics), expr, sql, behaviour ("success" |
               "fail" | "fail_once": the first consumption of each message fails), delay_s
               (time each consume takes)
    consumed   name -> [message] consumed so far (each call, in consumption order)
    schema     -> the schema of the client's own apache.rocketmq.v2 protos (v2_schema.py)
    shutdown   name
    exit

A message is ``{"body", "topic", "tag", "keys", "props", "message_id", "handle",
"attempt", "group", "type", "delivery_ms", "corrupted"}``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import FilterType

clients: dict[str, Any] = {}
received: dict[tuple[str, str], Any] = {}  # (consumer, message id) -> Message
consumed: dict[str, list[dict[str, Any]]] = {}
_consumed_lock = threading.Lock()


def _config(cmd: dict[str, Any]) -> ClientConfiguration:
    return ClientConfiguration(
        cmd["endpoints"],
        Credentials(cmd.get("ak", ""), cmd.get("sk", "")),
        request_timeout=cmd.get("request_timeout", 3),
    )


def _subscriptions(cmd: dict[str, Any]) -> dict[str, FilterExpression]:
    expression = FilterExpression(
        cmd.get("expr", "*"), FilterType.SQL if cmd.get("sql") else FilterType.TAG
    )
    return {topic: expression for topic in cmd.get("topics") or [cmd["topic"]]}


def _view(msg: Message) -> dict[str, Any]:
    return {
        "body": msg.body.decode("utf-8", "replace"),
        "topic": msg.topic,
        "tag": msg.tag,
        "keys": sorted(msg.keys or []),
        "props": dict(msg.properties or {}),
        "message_id": msg.message_id,
        "handle": msg.receipt_handle,
        "attempt": msg.delivery_attempt,
        "group": msg.message_group,
        "type": msg.message_type,
        "delivery_ms": msg.delivery_timestamp,
        "corrupted": msg.corrupted,
    }


class _Checker(TransactionChecker):
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.checked: list[str] = []

    def check(self, message: Message) -> TransactionResolution:
        self.checked.append(message.message_id)
        return (
            TransactionResolution.COMMIT
            if self.answer == "commit"
            else TransactionResolution.ROLLBACK
        )


class _Listener(MessageListener):
    def __init__(self, name: str, behaviour: str, delay_s: float) -> None:
        self.name = name
        self.behaviour = behaviour
        self.delay_s = delay_s
        self.seen: set[str] = set()

    def consume(self, message: Message) -> ConsumeResult:
        view = _view(message)
        view["thread"] = threading.current_thread().name
        view["started"] = time.monotonic()
        if self.delay_s:
            time.sleep(self.delay_s)
        view["ended"] = time.monotonic()
        with _consumed_lock:
            consumed.setdefault(self.name, []).append(view)
        failed = self.behaviour == "fail" or (
            self.behaviour == "fail_once" and message.message_id not in self.seen
        )
        self.seen.add(message.message_id)
        return ConsumeResult.FAILURE if failed else ConsumeResult.SUCCESS


def run(cmd: dict[str, Any]) -> Any:
    op = cmd["op"]
    if op == "producer":
        checker = _Checker(cmd["checker"]) if cmd.get("checker") else None
        producer = Producer(
            _config(cmd), cmd.get("topics"), checker=checker, tls_enable=cmd.get("tls", False)
        )
        producer.startup()
        clients[cmd["name"]] = producer
        return None
    if op == "send":
        return _send(cmd)
    if op == "simple":
        consumer = SimpleConsumer(
            _config(cmd), cmd["group"], _subscriptions(cmd), await_duration=cmd.get("await_s", 3)
        )
        consumer.startup()
        clients[cmd["name"]] = consumer
        return None
    if op == "receive":
        messages = clients[cmd["consumer"]].receive(cmd.get("max", 16), cmd.get("invisible_s", 15))
        for msg in messages:
            received[(cmd["consumer"], msg.message_id)] = msg
        return [_view(m) for m in messages]
    if op == "ack":
        clients[cmd["consumer"]].ack(received[(cmd["consumer"], cmd["message_id"])])
        return None
    if op == "change":
        msg = received[(cmd["consumer"], cmd["message_id"])]
        clients[cmd["consumer"]].change_invisible_duration(msg, cmd["invisible_s"])
        return msg.receipt_handle
    if op == "push":
        listener = _Listener(cmd["name"], cmd.get("behaviour", "success"), cmd.get("delay_s", 0))
        consumer = PushConsumer(_config(cmd), cmd["group"], listener, _subscriptions(cmd))
        consumer.startup()
        clients[cmd["name"]] = consumer
        return None
    if op == "consumed":
        with _consumed_lock:
            return list(consumed.get(cmd["name"], []))
    if op == "schema":
        from rocketmq.grpc_protocol import definition_pb2, service_pb2
        from v2_schema import schema_of

        return schema_of([definition_pb2.DESCRIPTOR, service_pb2.DESCRIPTOR])
    if op == "shutdown":
        clients.pop(cmd["name"]).shutdown()
        return None
    raise ValueError(f"unknown op {op!r}")


def _send(cmd: dict[str, Any]) -> dict[str, Any]:
    producer = clients[cmd["producer"]]
    msg = Message()
    msg.topic = cmd["topic"]
    msg.body = cmd["body"].encode()
    if cmd.get("tag"):
        msg.tag = cmd["tag"]
    for key in cmd.get("keys", []):
        msg.keys = key
    for key, value in cmd.get("props", {}).items():
        msg.add_property(key, value)
    if cmd.get("group"):
        msg.message_group = cmd["group"]
    if cmd.get("delivery_ms"):
        msg.delivery_timestamp = cmd["delivery_ms"]
    transaction = None
    if cmd.get("transaction"):
        transaction = producer.begin_transaction()
    receipt = producer.send(msg, transaction)
    if transaction is not None and cmd["transaction"] == "commit":
        transaction.commit()
    elif transaction is not None and cmd["transaction"] == "rollback":
        transaction.rollback()
    return {
        "message_id": receipt.message_id,
        "transaction_id": receipt.transaction_id,
        "offset": receipt.offset,
    }


def main() -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the answer stream
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "exit":
            break
        try:
            answer = {"ok": True, "result": run(cmd)}
        except Exception as exc:
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    for client in list(clients.values()):
        try:
            client.shutdown()
        except Exception as exc:
            print(f"shutdown: {exc!r}", file=sys.stderr)
    out.write(json.dumps({"ok": True, "result": "bye"}) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
