"""What moving bytes between two Python processes costs on this machine, before any
broker work: the floor under every data path that crosses the wire (a pull reply,
a Spark partition's read, a replication frame).

    .venv/bin/python benchmarks/wire_floor.py [--size 1048576] [--mib 1024] [--repeat 3]

Each mode moves ``--mib`` MiB from a server process to a client process on
127.0.0.1 in messages of ``--size`` bytes and prints the CPU both processes spent
(``/proc``, exact) per KiB moved::

    mode                      MB/s   server us/KiB   client us/KiB   both us/KiB
    grpc unary reply          ...    ...             ...             ...
    grpc server stream        ...
    grpc bidi stream + ack    ...
    raw socket (uvloop)       ...

- **grpc unary reply**: the client asks with an empty request, the server answers
  one message of ``--size`` bytes; 4 calls in flight (a Spark partition's PullBatch).
- **grpc server stream**: one call, the server writes every message (a long poll
  turned stream).
- **grpc bidi stream + ack**: the server writes a message, the client answers a
  16-byte ack per message on the same stream (a replication session: frames one
  way, acknowledgements the other).
- **raw socket**: an uvloop stream, the server writes, the client reads into a
  buffer of its own (the kernel's copies and the event loop, no framing at all).

Every gRPC mode uses identity serializers (no protobuf) and the options the
broker's server uses for big messages, so what is printed is grpc.aio itself. A
path's figure per row is at least ``both us/KiB`` x the record's KiB plus what
the path does with the bytes; on a machine of N cores no path built on that
wire moves more than ``N / (both us/KiB x KiB per row)`` rows a second, whatever
its own code costs. Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

import grpc
import uvloop

sys.path.insert(0, os.path.dirname(__file__))
from benchkit import free_port, machine, process_cpu_s, wait_port

from pocketmq.common.runtime import tune_malloc

SERVICE = "floor.Wire"
OPTIONS = [
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.max_receive_message_length", 64 << 20),
]
ACK = bytes(16)


# -- the server process -------------------------------------------------------------------------


async def serve(grpc_port: int, raw_port: int, size: int, count: int) -> None:
    payload = os.urandom(size)

    async def unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return payload

    async def server_stream(request: bytes, context: grpc.aio.ServicerContext):  # type: ignore[no-untyped-def]
        for _ in range(int(request)):
            yield payload

    async def bidi(requests, context: grpc.aio.ServicerContext):  # type: ignore[no-untyped-def]
        n = int(await requests.__anext__())
        acks = 0

        async def read_acks() -> None:
            nonlocal acks
            async for _ack in requests:
                acks += 1

        reader = asyncio.create_task(read_acks())
        for _ in range(n):
            yield payload
        await reader
        assert acks == n, f"{acks} acks for {n} messages"

    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
    }
    server = grpc.aio.server(options=OPTIONS)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    await server.start()

    async def raw(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).strip()
        for _ in range(int(line or 0)):  # wait_port's probe sends nothing
            writer.write(payload)
            await writer.drain()
        writer.close()

    raw_server = await asyncio.start_server(raw, "127.0.0.1", raw_port)
    async with raw_server:
        await server.wait_for_termination()


# -- the client ---------------------------------------------------------------------------------


class _Sink(asyncio.BufferedProtocol):
    """Reads straight into one buffer of its own (the kernel's copy, nothing more)."""

    def __init__(self, want: int, size: int) -> None:
        self.want = want
        self.received = 0
        self.buffer = memoryview(bytearray(size))
        self.done = asyncio.get_running_loop().create_future()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.received += nbytes
        if self.received >= self.want and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def run_mode(mode: str, grpc_port: int, raw_port: int, size: int, count: int) -> int:
    """Move *count* messages in *mode*; return the bytes received."""
    received = 0
    if mode == "raw socket (uvloop)":
        loop = asyncio.get_running_loop()
        sink = _Sink(count * size, size)
        transport, _ = await loop.create_connection(lambda: sink, "127.0.0.1", raw_port)
        transport.write(f"{count}\n".encode())
        await sink.done
        transport.close()
        return sink.received
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}", options=OPTIONS) as channel:
        if mode == "grpc unary reply":
            call = channel.unary_unary(f"/{SERVICE}/Unary")
            left = count

            async def worker() -> int:
                nonlocal left
                got = 0
                while left > 0:
                    left -= 1
                    got += len(await call(b""))
                return got

            return sum(await asyncio.gather(*(worker() for _ in range(4))))
        if mode == "grpc server stream":
            async for message in channel.unary_stream(f"/{SERVICE}/ServerStream")(
                str(count).encode()
            ):
                received += len(message)
            return received
        stream = channel.stream_stream(f"/{SERVICE}/Bidi")()
        await stream.write(str(count).encode())
        for _ in range(count):
            message = await stream.read()
            received += len(message)
            await stream.write(ACK)
        await stream.done_writing()
        await stream.read()  # the end of the call
        return received


MODES = ("grpc unary reply", "grpc server stream", "grpc bidi stream + ack", "raw socket (uvloop)")


def measure(mode: str, server_pid: int, grpc_port: int, raw_port: int, size: int, count: int):  # type: ignore[no-untyped-def]
    uvloop.run(run_mode(mode, grpc_port, raw_port, size, max(count // 10, 2)))  # warm-up
    s0, c0, t0 = process_cpu_s(server_pid), time.process_time(), time.perf_counter()
    got = uvloop.run(run_mode(mode, grpc_port, raw_port, size, count))
    elapsed = time.perf_counter() - t0
    server, client = process_cpu_s(server_pid) - s0, time.process_time() - c0
    if got != size * count:
        raise SystemExit(f"{mode}: received {got} bytes, expected {size * count}")
    kib = got / 1024
    return got / elapsed / 1e6, server / kib * 1e6, client / kib * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1 << 20, help="bytes per message")
    parser.add_argument("--mib", type=int, default=1024, help="MiB moved per mode and run")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    tune_malloc()
    count = max(args.mib * (1 << 20) // args.size, 1)
    grpc_port, raw_port = free_port(), free_port()
    print(machine())
    print(f"{args.mib} MiB per mode and run in messages of {args.size} bytes, {args.repeat} runs\n")
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", f"{grpc_port},{raw_port},{args.size},{count}"]
    )
    try:
        wait_port(grpc_port)
        wait_port(raw_port)
        results: dict[str, list[tuple[float, float, float]]] = {m: [] for m in MODES}
        for _ in range(args.repeat):
            for mode in MODES:  # interleaved: a slow minute of the host hits every mode
                run = measure(mode, server.pid, grpc_port, raw_port, args.size, count)
                results[mode].append(run)
        print(
            f"{'mode':<26}{'MB/s':>8}{'server us/KiB':>16}{'client us/KiB':>16}{'both us/KiB':>14}"
        )
        for mode in MODES:
            runs = sorted(results[mode], key=lambda r: r[1] + r[2])
            mbps, srv, cli = runs[len(runs) // 2]  # the median run by CPU
            low = runs[0][1] + runs[0][2]
            high = runs[-1][1] + runs[-1][2]
            print(
                f"{mode:<26}{mbps:8.0f}{srv:16.2f}{cli:16.2f}{srv + cli:8.2f} "
                f"({low:.2f}-{high:.2f})"
            )
    finally:
        server.kill()
        server.wait()


def _serve_main(spec: str) -> None:
    tune_malloc()  # as the broker and the client do
    grpc_port, raw_port, size, count = (int(x) for x in spec.split(","))
    uvloop.run(serve(grpc_port, raw_port, size, count))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        _serve_main(sys.argv[2])
    else:
        main()
