"""PullRequestHolder: parked pulls wake on arrival, time out, are bounded, are released."""

from __future__ import annotations

import asyncio

import pytest

from pocketmq.broker.errors import SystemBusyError
from pocketmq.broker.long_polling import HoldOutcome, PullRequestHolder


async def parked(hold: PullRequestHolder, count: int) -> None:
    """Yield to the loop until *count* pulls are parked."""
    for _ in range(100):
        if hold.parked_count >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"only {hold.parked_count} of {count} pulls parked")


async def test_an_arrival_past_the_offset_wakes_the_pull():
    hold = PullRequestHolder()
    waiter = asyncio.create_task(hold.wait_for_any([("T", 0, 5)], 30))
    await parked(hold, 1)
    hold.on_arrival("T", 0, 6)
    assert await waiter is HoldOutcome.ARRIVED
    assert hold.parked_count == 0


async def test_arrivals_elsewhere_or_not_past_the_offset_do_not_wake():
    hold = PullRequestHolder()
    waiter = asyncio.create_task(hold.wait_for_any([("T", 0, 5)], 30))
    await parked(hold, 1)
    hold.on_arrival("T", 1, 100)  # another queue
    hold.on_arrival("U", 0, 100)  # another topic
    hold.on_arrival("T", 0, 5)  # max offset 5: offset 5 still not there
    await asyncio.sleep(0)
    assert not waiter.done()
    hold.on_arrival("T", 0, 6)
    assert await waiter is HoldOutcome.ARRIVED


async def test_one_arrival_wakes_every_pull_it_satisfies():
    hold = PullRequestHolder()
    waiters = [asyncio.create_task(hold.wait_for_any([("T", 0, off)], 30)) for off in (3, 3, 9)]
    await parked(hold, 3)
    hold.on_arrival("T", 0, 4)
    assert await waiters[0] is HoldOutcome.ARRIVED
    assert await waiters[1] is HoldOutcome.ARRIVED
    assert not waiters[2].done()
    hold.release_all()
    assert await waiters[2] is HoldOutcome.RELEASED


async def test_a_pull_times_out_at_its_suspend_time():
    hold = PullRequestHolder()
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await hold.wait_for_any([("T", 0, 0)], 0.05) is HoldOutcome.TIMED_OUT
    assert 0.045 <= loop.time() - started < 10  # not before its suspend time; a loaded CI is late
    assert hold.parked_count == 0


async def test_parked_pulls_are_bounded():
    hold = PullRequestHolder(max_parked=2)
    waiters = [asyncio.create_task(hold.wait_for_any([("T", 0, 0)], 30)) for _ in range(2)]
    await parked(hold, 2)
    with pytest.raises(SystemBusyError, match="max_parked_pulls = 2"):
        await hold.wait_for_any([("T", 0, 0)], 30)
    hold.release_all()
    await asyncio.gather(*waiters)


async def test_a_cancelled_pull_leaves_no_entry_behind():
    hold = PullRequestHolder()
    waiter = asyncio.create_task(hold.wait_for_any([("T", 0, 0)], 30))
    await parked(hold, 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert hold.parked_count == 0


async def test_after_release_no_pull_parks():
    hold = PullRequestHolder()
    hold.release_all()
    assert await hold.wait_for_any([("T", 0, 0)], 30) is HoldOutcome.RELEASED
