"""The client's SendStream against a scripted server of the method (real gRPC on port 0):
deadlines, late answers, a stream that breaks, and the next send's new stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import pytest

from pocketmq.client.config import Transport
from pocketmq.client.errors import UnavailableError
from pocketmq.client.remoting import Remoting
from pocketmq.v1 import broker_pb2 as pb


@dataclass
class Script:
    """What the server does: hold requests whose records are b"hold", end the stream
    UNAVAILABLE on b"break", answer the rest at once."""

    streams: int = 0
    held: list[int] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)


def answer(request_id: int) -> bytes:
    return pb.SendStreamResponse(
        request_id=request_id,
        response=pb.SendMessageResponse(
            status=pb.SEND_OK, msg_ids=[""], queue_ids=[0], queue_offsets=[7], phys_offsets=[0]
        ),
    ).SerializeToString()


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[str, Script]]:
    script = Script()

    async def send_stream(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext):
        script.streams += 1
        writes: list[asyncio.Task[None]] = []
        one_write = asyncio.Lock()  # a held answer and a prompt one must not write at once

        async def write(request_id: int) -> None:
            async with one_write:
                await context.write(answer(request_id))

        async for raw in requests:
            request = pb.SendStreamRequest.FromString(raw)
            if request.batch.records == b"break":
                await context.abort(grpc.StatusCode.UNAVAILABLE, "scripted break")
            if request.batch.records == b"hold":
                script.held.append(request.request_id)

                async def later(request_id: int = request.request_id) -> None:
                    await script.release.wait()
                    await write(request_id)

                writes.append(asyncio.create_task(later()))
                continue
            await write(request.request_id)
        await asyncio.gather(*writes)

    handler = grpc.stream_stream_rpc_method_handler(send_stream)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("pocketmq.v1.Broker", {"SendStream": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}", script
    finally:
        await server.stop(0)


async def test_a_request_past_its_timeout_fails_deadline_exceeded_and_its_late_answer_is_dropped(
    scripted,
) -> None:
    addr, script = scripted
    remoting = Remoting(Transport(send_stream=True))
    client = remoting.broker(addr)
    try:
        with pytest.raises(UnavailableError) as late:
            await client.send_batch(b"hold", timeout_s=0.2)
        assert late.value.code == "DEADLINE_EXCEEDED" and late.value.retriable
        script.release.set()  # its answer now arrives, for no one
        receipts = await client.send_batch(b"fine")
    finally:
        await remoting.close()
    assert [r.queue_offset for r in receipts] == [7]
    assert script.held == [1] and script.streams == 1


async def test_a_broken_stream_fails_its_pending_sends_retriably_and_the_next_send_reopens(
    scripted,
) -> None:
    addr, script = scripted
    remoting = Remoting(Transport(send_stream=True))
    client = remoting.broker(addr)
    try:
        pending = asyncio.create_task(client.send_batch(b"hold", timeout_s=30))
        await asyncio.sleep(0)  # its envelope is queued first
        with pytest.raises(UnavailableError) as broke:
            await client.send_batch(b"break", timeout_s=30)
        with pytest.raises(UnavailableError) as also:
            await pending
        receipts = await client.send_batch(b"fine")
    finally:
        await remoting.close()
    assert broke.value.retriable and also.value.retriable
    assert "scripted break" in str(also.value)
    assert [r.queue_offset for r in receipts] == [7]
    assert script.streams == 2
