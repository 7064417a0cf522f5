"""The consumer's de-duplication window: bounded by age and count, waits out in-flight ids."""

from __future__ import annotations

import asyncio

import pytest

from pocketmq.client.dedup import DedupWindow, dedup_listener
from pocketmq.client.model import ConsumeResult, MessageExt


def msg(uniq_id: str, offset: int = 0) -> MessageExt:
    return MessageExt(
        topic="t",
        body=uniq_id.encode(),
        tags="",
        keys=[],
        properties={},
        msg_id=uniq_id,
        offset_msg_id="",
        broker_name="b",
        queue_id=0,
        queue_offset=offset,
        store_timestamp_ms=0,
        born_timestamp_ms=0,
        reconsume_times=0,
    )


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_id_is_forgotten_once_older_than_the_window() -> None:
    clock = Clock()
    window = DedupWindow(window_s=10.0, monotonic=clock)
    window.add("a")
    clock.now = 10.0
    assert "a" in window
    clock.now = 10.5
    assert "a" not in window
    assert len(window) == 0


def test_the_oldest_ids_are_forgotten_past_the_count() -> None:
    window = DedupWindow(max_ids=3)
    for uniq_id in "abcd":
        window.add(uniq_id)
    assert "a" not in window
    assert all(u in window for u in "bcd")
    window.add("b")  # seen again: now the newest
    window.add("e")
    assert "c" not in window and "b" in window


def test_sync_listener_sees_each_id_once_and_a_failure_is_not_remembered() -> None:
    window = DedupWindow(max_ids=100)
    handled: list[str] = []
    fail = {"x"}

    def listener(batch: list[MessageExt]) -> ConsumeResult:
        handled.extend(m.msg_id for m in batch)
        if any(m.msg_id in fail for m in batch):
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.CONSUME_SUCCESS

    wrapped = dedup_listener(listener, window)
    assert wrapped([msg("a"), msg("a", 1), msg("b", 2)]) is ConsumeResult.CONSUME_SUCCESS
    assert wrapped([msg("a", 3)]) is ConsumeResult.CONSUME_SUCCESS
    assert wrapped([msg("x", 4)]) is ConsumeResult.RECONSUME_LATER
    fail.clear()
    assert wrapped([msg("x", 5)]) is ConsumeResult.CONSUME_SUCCESS
    assert handled == ["a", "b", "x", "x"]
    assert window.dropped == 2


@pytest.mark.parametrize("first_ok", [True, False])
async def test_a_copy_in_flight_waits_for_the_first_and_is_dropped_if_it_succeeded(
    first_ok: bool,
) -> None:
    window = DedupWindow(window_s=60.0)
    release = asyncio.Event()
    calls: list[str] = []

    async def listener(batch: list[MessageExt]) -> ConsumeResult:
        calls.extend(m.msg_id for m in batch)
        if len(calls) == 1:
            await release.wait()
            return ConsumeResult.CONSUME_SUCCESS if first_ok else ConsumeResult.RECONSUME_LATER
        return ConsumeResult.CONSUME_SUCCESS

    wrapped = dedup_listener(listener, window)
    first = asyncio.create_task(wrapped([msg("a")]))
    await asyncio.sleep(0)
    second = asyncio.create_task(wrapped([msg("a", 1)]))
    await asyncio.sleep(0)
    assert calls == ["a"]
    release.set()
    await asyncio.gather(first, second)
    assert calls == (["a"] if first_ok else ["a", "a"])


async def test_two_batches_sharing_ids_never_wait_on_each_other() -> None:
    window = DedupWindow(max_ids=10)

    async def listener(batch: list[MessageExt]) -> ConsumeResult:
        await asyncio.sleep(0)
        return ConsumeResult.CONSUME_SUCCESS

    wrapped = dedup_listener(listener, window)
    results = await asyncio.wait_for(
        asyncio.gather(wrapped([msg("x"), msg("y")]), wrapped([msg("y"), msg("x")])), timeout=2
    )
    assert results == [ConsumeResult.CONSUME_SUCCESS] * 2
    assert window.dropped == 2
