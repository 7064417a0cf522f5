"""CPU per MB of a gRPC stream shaped like replication's, with and without the HA window.

    .venv/bin/python benchmarks/ha_stream_bench.py [--rounds 4] [--messages 600]

A server process streams 640 KiB messages (a replication frame under load) to
this process over loopback, on grpc.aio as the brokers do; both report the CPU
(user + system, /proc) they spent per MB. Each round runs gRPC's default flow
control and then ``broker/ha/role.py``'s STREAM_WINDOW on both ends, so the two
see the same neighbours; the medians are printed last. Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

import grpc
from benchkit import free_port, machine, wait_port

from pocketmq.broker.ha.role import STREAM_WINDOW

SERVICE = "bench.Stream"
MESSAGE = os.urandom(640 << 10)


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def serve(port: int, options: list[tuple[str, int]], count: int) -> None:
    server = grpc.aio.server(options=[("grpc.max_send_message_length", -1), *options])

    async def stream(request: bytes, context: grpc.aio.ServicerContext) -> object:
        for _ in range(count):
            yield MESSAGE

    handler = grpc.unary_stream_rpc_method_handler(
        stream, request_deserializer=bytes, response_serializer=bytes
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, {"Go": handler}),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def receive(
    port: int, options: list[tuple[str, int]], server_pid: int
) -> tuple[float, float]:
    """(receiver, sender) CPU ms per MB of one whole stream."""
    target = f"127.0.0.1:{port}"
    async with grpc.aio.insecure_channel(
        target, options=[("grpc.max_receive_message_length", 64 << 20), *options]
    ) as channel:
        go = channel.unary_stream(
            f"/{SERVICE}/Go", request_serializer=bytes, response_deserializer=bytes
        )
        await channel.channel_ready()
        sender0, receiver0 = cpu_s(server_pid), time.process_time()
        received = 0
        call = go(b"")
        while (message := await call.read()) is not grpc.aio.EOF:
            received += len(message)
        receiver, sender = time.process_time() - receiver0, cpu_s(server_pid) - sender0
    mb = received / 1e6
    return receiver * 1e3 / mb, sender * 1e3 / mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)  # PORT OPTIONS_JSON
    args = parser.parse_args()
    if args.serve:
        port, options = int(args.serve[0]), [tuple(o) for o in json.loads(args.serve[1])]
        asyncio.run(serve(port, options, args.messages))
        return
    print(f"machine: {machine()} · load average {os.getloadavg()[0]:.1f}")
    figures: dict[str, list[tuple[float, float]]] = {"default": [], "STREAM_WINDOW": []}
    for _ in range(args.rounds):
        for name, options in (("default", []), ("STREAM_WINDOW", [STREAM_WINDOW])):
            port = free_port()
            server = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--messages",
                    str(args.messages),
                    "--serve",
                    str(port),
                    json.dumps(options),
                ]
            )
            try:
                wait_port(port)
                figures[name].append(asyncio.run(receive(port, options, server.pid)))
            finally:
                server.kill()
                server.wait()
            rx, tx = figures[name][-1]
            print(f"{name:>13}: receiver {rx:.3f} ms/MB  sender {tx:.3f} ms/MB")
    for name, rows in figures.items():
        print(
            f"median {name:>13}: receiver {statistics.median(r for r, _ in rows):.3f} ms/MB  "
            f"sender {statistics.median(t for _, t in rows):.3f} ms/MB"
        )


if __name__ == "__main__":
    main()
