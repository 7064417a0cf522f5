"""Send coalescing: concurrent records to one broker leave in shared SendBatch calls."""

from __future__ import annotations

import asyncio

import pytest

from pocketmq.client.accumulator import BrokerBatcher
from pocketmq.client.errors import InvalidRequestError, SendTimeoutError, UnavailableError
from pocketmq.client.model import SendStatus
from pocketmq.client.remoting import SendReceipt
from pocketmq.common.message import encode_record, iter_records


def record(i: int) -> bytes:
    return encode_record(
        topic="t", body=b"%d" % i, queue_id=i % 4, properties={"UNIQ_KEY": f"U{i}"}
    )


class FakeBroker:
    def __init__(self) -> None:
        self.calls: list[int] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.refuse: str | None = None
        self.fail_all = False

    async def _answer(self, blob: bytes, timeout_s: float = 3.0) -> list[SendReceipt]:
        await self.gate.wait()
        msgs = list(iter_records(blob))
        self.calls.append(len(msgs))
        if self.fail_all:
            raise UnavailableError("broker down", addr="b", code="UNAVAILABLE")
        if self.refuse and any(m.properties["UNIQ_KEY"] == self.refuse for m in msgs):
            raise InvalidRequestError(f"{self.refuse} is malformed", addr="b")
        return [
            SendReceipt(SendStatus.SEND_OK, m.properties["UNIQ_KEY"], "", m.topic, m.queue_id, 0)
            for m in msgs
        ]

    def batcher(self, **kwargs) -> BrokerBatcher:
        return BrokerBatcher("b", self._answer, self._answer, **kwargs)


async def test_records_added_while_a_call_is_busy_leave_together():
    broker = FakeBroker()
    batcher = broker.batcher(max_in_flight=1)
    broker.gate.clear()
    first = batcher.add(record(0))
    await asyncio.sleep(0)  # the first call starts and blocks on the gate
    rest = [batcher.add(record(i)) for i in range(1, 50)]
    broker.gate.set()
    receipts = await asyncio.gather(first, *rest)
    assert [r.msg_id for r in receipts] == [f"U{i}" for i in range(50)]
    assert broker.calls == [1, 49]
    await batcher.close(1)


async def test_batches_respect_the_message_limit():
    broker = FakeBroker()
    batcher = broker.batcher(max_in_flight=1, max_messages=10)
    futures = [batcher.add(record(i)) for i in range(35)]
    await asyncio.gather(*futures)
    assert broker.calls == [10, 10, 10, 5]
    await batcher.close(1)


async def test_linger_waits_to_fill_a_batch():
    broker = FakeBroker()
    batcher = broker.batcher(linger_s=0.05, max_messages=4)
    futures = [batcher.add(record(i)) for i in range(4)]
    await asyncio.gather(*futures)
    assert broker.calls == [4]
    await batcher.close(1)


async def test_a_refused_batch_is_resent_one_by_one_so_only_the_culprit_fails():
    broker = FakeBroker()
    broker.refuse = "U3"
    batcher = broker.batcher(max_in_flight=1)
    broker.gate.clear()
    futures = [batcher.add(record(i)) for i in range(6)]
    broker.gate.set()
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert isinstance(results[3], InvalidRequestError)
    assert [r.msg_id for i, r in enumerate(results) if i != 3] == ["U0", "U1", "U2", "U4", "U5"]
    await batcher.close(1)


async def test_a_retriable_failure_fails_every_caller_of_the_batch():
    broker = FakeBroker()
    broker.fail_all = True
    batcher = broker.batcher()
    futures = [batcher.add(record(i)) for i in range(3)]
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(r, UnavailableError) for r in results)
    await batcher.close(1)


async def test_a_caller_that_gave_up_is_not_sent():
    broker = FakeBroker()
    batcher = broker.batcher(max_in_flight=1)
    broker.gate.clear()
    batcher.add(record(0))
    await asyncio.sleep(0)
    abandoned = batcher.add(record(1))
    kept = batcher.add(record(2))
    abandoned.cancel()
    broker.gate.set()
    assert (await kept).msg_id == "U2"
    assert broker.calls == [1, 1]
    await batcher.close(1)


async def test_a_record_past_its_deadline_fails_with_a_timeout():
    broker = FakeBroker()
    batcher = broker.batcher(max_in_flight=1)
    broker.gate.clear()
    batcher.add(record(0))
    await asyncio.sleep(0)
    late = batcher.add(record(1), deadline=0.0)
    broker.gate.set()
    with pytest.raises(SendTimeoutError, match="deadline"):
        await late
    await batcher.close(1)


async def test_close_sends_what_is_pending_then_refuses_new_records():
    broker = FakeBroker()
    batcher = broker.batcher()
    futures = [batcher.add(record(i)) for i in range(5)]
    await batcher.close(1)
    assert all(f.done() and not f.exception() for f in futures)
    with pytest.raises(Exception, match="shutting down"):
        batcher.add(record(9))


async def test_run_once_sends_pending_records_in_one_call():
    broker = FakeBroker()
    batcher = BrokerBatcher("b", broker._answer, broker._answer)
    batcher._pending.extend(
        (record(i), asyncio.get_running_loop().create_future(), float("inf")) for i in range(3)
    )
    assert await batcher.run_once() == 3
    assert broker.calls == [3]
