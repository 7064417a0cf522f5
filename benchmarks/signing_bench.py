"""What signing the whole request costs: a SendBatch of 512 records of 1 KiB.

    .venv/bin/python benchmarks/signing_bench.py [--records 512] [--body 1024] [--rounds 200]

Prints, per request, the client's signing (``signed_metadata``: deterministic
serialization, SHA-256 of the body, HMAC) and the broker's check (the
interceptor's ``check``: the same digest again, HMAC compare, the replay
table), beside the old scheme that signed only the names (no body digest). Not
a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from benchkit import machine

from pocketmq.common.auth import Credentials, identifying_fields, sign, signed_metadata
from pocketmq.common.message import encode_record, pack_host
from pocketmq.security.acl import AclStore
from pocketmq.security.interceptor import AclInterceptor
from pocketmq.v1 import broker_pb2

METHOD = "/pocketmq.v1.Broker/SendBatch"
USER = Credentials("bench", "bench-secret")


def batch(records: int, body_bytes: int) -> broker_pb2.SendBatchRequest:
    record = encode_record(
        topic="BenchTopic",
        body=os.urandom(body_bytes),
        properties={"UNIQ_KEY": "0" * 32},
        born_host=pack_host(("127.0.0.1", 1)),
        store_host=pack_host(("127.0.0.1", 2)),
    )
    return broker_pb2.SendBatchRequest(records=record * records, producer_group="pg")


def per_call_us(fn, rounds: int) -> tuple[float, float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=512)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    request = batch(args.records, args.body)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "acl.toml")
        with open(path, "w") as f:
            f.write(
                '[[accounts]]\naccess_key = "bench"\nsecret_key = "bench-secret"\n'
                'default_topic_perm = "PUB|SUB"\n'
            )
        interceptor = AclInterceptor(AclStore(path))
        headers = []

        def client() -> None:
            headers.append(dict(signed_metadata(USER, METHOD, request)))

        def broker() -> None:
            interceptor.check(METHOD, request, headers.pop(), "127.0.0.1")

        def names_only() -> None:
            sign(USER.secret_key, METHOD, 1, USER.access_key, identifying_fields(request))

        sign_p50, sign_p99 = per_call_us(client, args.rounds)
        check_p50, check_p99 = per_call_us(broker, args.rounds)
        old_p50, _ = per_call_us(names_only, args.rounds)
    size = request.ByteSize()
    print(f"machine: {machine()}")
    print(f"SendBatch of {args.records} x {args.body} B = {size / 1024:.0f} KiB serialized")
    print(f"client sign (whole body)  p50 {sign_p50:8.1f} us   p99 {sign_p99:8.1f} us")
    print(f"broker check (whole body) p50 {check_p50:8.1f} us   p99 {check_p99:8.1f} us")
    print(f"old scheme (names only)   p50 {old_p50:8.1f} us")
    print(f"digest throughput ~{size / check_p50:.0f} MB/s at the broker")


if __name__ == "__main__":
    main()
