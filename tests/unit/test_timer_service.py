"""The send path's detour to rmq_sys_wheel_timer, and the TimerService stepped with
run_once() on a manual clock over a real store: times, rolls, restarts, crashes."""

from __future__ import annotations

import functools
import shutil

import pytest
import storekit
from storekit import crash, small_config, start_store

from pocketmq.broker.errors import IllegalArgumentError
from pocketmq.broker.store.message_store import DefaultMessageStore
from pocketmq.broker.store.results import PutResult, PutStatus
from pocketmq.broker.store.timer_store import TimerMessageStore
from pocketmq.broker.timer_messages import (
    TIMER_TOPIC,
    TimerPolicy,
    deliver_time_ms,
    rewrite_timed,
)
from pocketmq.broker.timer_service import PUT_RETRY_DELAY_MS, TimerService
from pocketmq.common.clock import ManualClock
from pocketmq.common.message import SysFlag, decode_record

NOW_MS = 1_700_000_000_000
STORE_HOST = ("127.0.0.1", 10911)
POLICY = TimerPolicy(max_delay_ms=3 * 86_400_000)

record = functools.partial(
    storekit.record,
    topic="TopicA",
    tags="TagA",
    uniq="U1",
    born_timestamp_ms=1_600_000_000_000,
    reconsume_times=2,
)


def park(*records: bytes, now_ms: int = NOW_MS, policy: TimerPolicy = POLICY) -> bytes | None:
    return rewrite_timed(b"".join(records), policy=policy, now_ms=now_ms, store_host=STORE_HOST)


# -- the send path --------------------------------------------------------------------------
def test_records_without_a_delivery_time_are_left_alone():
    assert park(record(), record(uniq="U2")) is None


def test_a_future_delivery_time_parks_the_record_in_the_timer_topic():
    rec = record(queue_id=3, TIMER_DELIVER_MS=str(NOW_MS + 5_000))
    plain = record(uniq="U0")
    out = park(plain, rec)
    assert out is not None and out.startswith(plain)
    msg = decode_record(out, len(plain))
    assert (msg.topic, msg.queue_id, msg.body, msg.reconsume_times) == (TIMER_TOPIC, 0, b"hello", 2)
    assert (msg.born_timestamp_ms, msg.born_host) == (1_600_000_000_000, ("10.0.0.9", 4321))
    assert msg.properties == {
        "TAGS": "TagA",
        "UNIQ_KEY": "U1",
        "REAL_TOPIC": "TopicA",
        "REAL_QID": "3",
        "TIMER_DELIVER_MS": str(NOW_MS + 5_000),
    }


def test_relative_delays_become_an_absolute_time_and_win_over_deliver_ms():
    props = {"TIMER_DELIVER_MS": str(NOW_MS + 1)}
    assert deliver_time_ms({**props, "TIMER_DELAY_MS": "2500"}, NOW_MS) == NOW_MS + 2_500
    assert deliver_time_ms({**props, "TIMER_DELAY_SEC": "3"}, NOW_MS) == NOW_MS + 3_000
    assert deliver_time_ms(props, NOW_MS) == NOW_MS + 1
    assert deliver_time_ms({}, NOW_MS) is None
    msg = decode_record(park(record(TIMER_DELAY_SEC="10")))
    assert msg.properties["TIMER_DELIVER_MS"] == str(NOW_MS + 10_000)
    assert "TIMER_DELAY_SEC" not in msg.properties


def test_a_time_now_or_past_is_stored_as_sent():
    assert park(record(TIMER_DELIVER_MS=str(NOW_MS))) is None
    assert park(record(TIMER_DELIVER_MS="5")) is None
    assert park(record(TIMER_DELAY_MS="0")) is None


def test_a_time_too_far_ahead_is_refused_with_both_numbers():
    with pytest.raises(IllegalArgumentError) as info:
        park(record(TIMER_DELAY_MS=str(3 * 86_400_000 + 1)))
    assert info.value.reason == "WHEEL_TIMER_MSG_ILLEGAL"
    assert "is 259200001 ms ahead" in info.value.message
    assert "at most 259200000 ms ahead (timer_max_delay_ms)" in info.value.message
    assert park(record(TIMER_DELAY_MS=str(3 * 86_400_000))) is not None


@pytest.mark.parametrize(
    "props, expected",
    [
        ({"TIMER_DELIVER_MS": "soon"}, "TIMER_DELIVER_MS is 'soon'; give the delivery time"),
        ({"TIMER_DELAY_MS": "-5"}, "TIMER_DELAY_MS is '-5'; give a whole number of ms"),
        ({"TIMER_DELAY_SEC": "1.5"}, "TIMER_DELAY_SEC is '1.5'; give a whole number of seconds"),
    ],
)
def test_a_malformed_delivery_time_is_refused(props, expected):
    with pytest.raises(IllegalArgumentError, match=expected) as info:
        park(record(uniq="U0"), record(**props))
    assert "record at batch offset" in info.value.message


def test_a_broker_with_the_timer_off_refuses_timer_messages():
    with pytest.raises(IllegalArgumentError) as info:
        park(record(TIMER_DELAY_MS="5000"), policy=TimerPolicy(enabled=False))
    assert info.value.reason == "WHEEL_TIMER_NOT_ENABLE"


def test_delay_levels_schedule_records_and_prepared_transactions_are_not_timer_messages():
    later = str(NOW_MS + 60_000)
    assert park(record(DELAY="3", TIMER_DELIVER_MS=later)) is None
    assert (
        park(record(topic="SCHEDULE_TOPIC_XXXX", queue_id=2, DELAY="3", TIMER_DELIVER_MS=later))
        is None
    )
    assert park(record(sysflag=SysFlag.TRANSACTION_PREPARED, TIMER_DELIVER_MS=later)) is None
    assert park(record(DELAY="0", TIMER_DELIVER_MS=later)) is not None


# -- the service ----------------------------------------------------------------------------
class Harness:
    """A store, a timer service on it, and a manual clock; restartable."""

    def __init__(self, path, *, roll_window_s: int = 600) -> None:
        self.path = path
        self.clock = ManualClock(NOW_MS)
        self.roll_window_s = roll_window_s
        self.store: DefaultMessageStore | None = None
        self.service: TimerService | None = None
        self.open()

    def open(self) -> None:
        self.store, report = start_store(
            small_config(self.path, store_host=STORE_HOST), clock=self.clock
        )
        timer = TimerMessageStore(str(self.path), wheel_slots=3_600, log_file_size=64 * 64)
        self.service = TimerService(
            self.store, timer, roll_window_s=self.roll_window_s, clock=self.clock
        )
        self.service.load(clean_shutdown=report.clean_shutdown)

    async def stop(self) -> None:
        await self.service.stop()
        self.store.shutdown()

    def kill(self) -> None:
        """As kill -9: nothing flushed, no checkpoint, the mappings' bytes kept."""
        self.service.timer.close()
        crash(self.store)

    def send(self, *records: bytes) -> None:
        for at in range(0, len(records), 100):  # batches the small store accepts
            blob = b"".join(records[at : at + 100])
            parked = park(blob, now_ms=self.clock.now_ms())
            assert self.store.put_batch(parked if parked is not None else blob).ok

    def at(self, ms_from_start: int) -> int:
        self.clock._now_ms = NOW_MS + ms_from_start
        return self.clock.now_ms()

    async def step(self, ms_from_start: int) -> int | None:
        return await self.service.run_once(self.at(ms_from_start))

    def delivered(self, topic="TopicA", queue_id=0):
        out, offset = [], 0
        while True:
            result = self.store.get_messages(topic, queue_id, offset, max_count=1_000)
            if not result.records:
                return out
            out += [decode_record(r) for r in result.records]
            offset = result.next_begin_offset

    def uniqs(self, topic="TopicA", queue_id=0) -> list[str]:
        return [m.uniq_key for m in self.delivered(topic, queue_id)]


@pytest.fixture
async def harness(tmp_path):
    h = Harness(tmp_path)
    yield h
    if h.store.health.running:
        await h.stop()


async def test_a_message_is_delivered_at_its_time_and_not_before(harness):
    harness.send(record(queue_id=1, TIMER_DELIVER_MS=str(NOW_MS + 2_300)))
    assert await harness.step(0) == NOW_MS + 2_000  # its second's start
    assert await harness.step(2_000) == NOW_MS + 2_300  # inside it: the exact ms
    assert await harness.step(2_299) == NOW_MS + 2_300
    assert harness.uniqs(queue_id=1) == []
    assert await harness.step(2_300) == NOW_MS + 3_000  # the second stays open to its end
    [msg] = harness.delivered(queue_id=1)
    assert msg.store_timestamp_ms == NOW_MS + 2_300
    assert (msg.topic, msg.queue_id, msg.body, msg.reconsume_times) == ("TopicA", 1, b"hello", 2)
    assert msg.properties == {
        "TAGS": "TagA",
        "UNIQ_KEY": "U1",
        "TIMER_DELIVER_MS": str(NOW_MS + 2_300),
    }
    assert await harness.step(3_000) is None
    assert harness.service.pending == 0 and harness.service.delivered_total == 1


async def test_many_messages_in_one_second_are_each_delivered_once_in_time_order(harness):
    harness.send(
        *[
            record(uniq=f"M{i}", TIMER_DELIVER_MS=str(NOW_MS + 5_000 + (i * 7) % 1000))
            for i in range(3_000)
        ]
    )
    assert await harness.step(0) == NOW_MS  # more parked than one round enqueues
    assert await harness.step(0) == NOW_MS + 5_000
    assert harness.service.pending == 3_000
    while (await harness.step(5_999)) == NOW_MS + 5_999:
        pass  # rounds of MAX_PER_ROUND
    delivered = harness.delivered()
    assert len(delivered) == 3_000 == len({m.uniq_key for m in delivered})
    times = [int(m.properties["TIMER_DELIVER_MS"]) for m in delivered]
    assert times == sorted(times)


async def test_a_message_beyond_the_roll_window_is_re_parked_until_its_time(tmp_path):
    h = Harness(tmp_path, roll_window_s=10)
    try:
        h.send(record(TIMER_DELAY_MS="25500"))
        assert await h.step(0) == NOW_MS + 10_000  # waits at the horizon
        assert await h.step(10_000) == NOW_MS + 10_000  # re-parked: enqueue it now
        assert await h.step(10_000) == NOW_MS + 11_000  # this second ends ...
        assert await h.step(11_000) == NOW_MS + 20_000  # ... then the next horizon
        assert await h.step(20_000) == NOW_MS + 20_000
        assert await h.step(20_000) == NOW_MS + 21_000
        assert await h.step(21_000) == NOW_MS + 25_000  # now within the window
        assert (h.service.rolled_total, h.uniqs()) == (2, [])
        assert [m.properties.get("TIMER_ROLL_TIMES") for m in h.delivered(TIMER_TOPIC)] == [
            None,
            "1",
            "2",
        ]
        await h.step(25_499)
        assert h.uniqs() == []
        await h.step(25_500)
        [msg] = h.delivered()
        assert msg.properties == {
            "TAGS": "TagA",
            "UNIQ_KEY": "U1",
            "TIMER_DELIVER_MS": str(NOW_MS + 25_500),
        }
    finally:
        await h.stop()


async def test_after_downtime_overdue_messages_go_out_at_once(harness):
    harness.send(record(uniq="A", TIMER_DELAY_MS="1500"), record(uniq="B", TIMER_DELAY_MS="7000"))
    await harness.step(0)
    await harness.stop()
    harness.at(3_600_000)
    harness.open()
    assert await harness.step(3_600_000) is None
    assert sorted(harness.uniqs()) == ["A", "B"]


async def test_pending_messages_survive_a_clean_restart_and_go_out_once(harness):
    harness.send(
        *[record(uniq=f"U{i}", TIMER_DELIVER_MS=str(NOW_MS + 1_000 + i * 400)) for i in range(5)]
    )
    await harness.step(1_500)  # U0, U1 out; U2 (at 1800) waits in the same second
    assert harness.uniqs() == ["U0", "U1"]
    await harness.stop()
    harness.open()
    assert harness.service.pending == 5  # the open second is walked again ...
    await harness.step(5_000)
    assert harness.uniqs() == ["U0", "U1", "U2", "U3", "U4"]
    assert harness.service.duplicates_skipped_total == 2  # ... and U0, U1 recognised


async def test_after_kill_9_messages_already_put_are_recognised_and_not_put_again(harness):
    harness.send(
        *[record(uniq=f"U{i}", TIMER_DELIVER_MS=str(NOW_MS + 1_000 + i * 100)) for i in range(30)]
    )
    await harness.step(0)
    await harness.service.checkpoint()  # cursor at NOW_S: nothing delivered yet
    await harness.step(2_450)  # U0..U14 out, in two seconds
    assert len(harness.uniqs()) == 15
    harness.kill()
    harness.open()
    assert not harness.service.recovery.wheel_rebuilt
    await harness.step(5_000)
    uniqs = harness.uniqs()
    assert sorted(uniqs) == sorted(f"U{i}" for i in range(30)) and len(uniqs) == 30
    # NOW_S+1 was finished and its wheel entry cleared: not walked again at all;
    # NOW_S+2 was half done: its first five are looked up and recognised.
    assert harness.service.duplicates_skipped_total == 5


async def test_a_timer_started_on_a_log_another_timer_delivered_from_puts_nothing_twice(
    harness,
):
    """A promoted replica: empty timer files, and a log holding the parked records and
    the previous master's re-puts of those due. Its cursor starts at now and may move on
    before the backlog is enqueued (here 2 s): the check goes by delivery time, not by
    the second a unit is linked into, so A and B are recognised, and C goes out once."""
    harness.send(
        record(uniq="A", TIMER_DELAY_MS="1000"),
        record(uniq="B", TIMER_DELAY_MS="1500"),
        record(uniq="C", TIMER_DELAY_MS="9000"),
    )
    await harness.step(2_000)  # the previous master: A and B out
    assert harness.uniqs() == ["A", "B"]
    await harness.stop()
    for name in ("timerlog", "timerwheel", "timercheck"):  # a replica's: never written
        path = harness.path / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    harness.at(3_000)
    harness.open()
    assert harness.service.recovery.fresh
    harness.service.check_for_a_previous_master()  # promoted at 3 s
    await harness.step(5_000)
    await harness.step(9_000)
    assert harness.uniqs() == ["A", "B", "C"]
    assert harness.service.duplicates_skipped_total == 2


async def test_after_kill_9_a_second_finished_since_the_checkpoint_is_not_put_again(harness):
    harness.send(record(uniq="A", TIMER_DELAY_MS="60000"))
    await harness.step(0)
    await harness.service.checkpoint()  # knows A's unit, not B's
    harness.send(record(uniq="B", TIMER_DELAY_MS="1500"))
    await harness.step(1_500)
    await harness.step(2_100)  # B's second finished, its entry cleared
    assert harness.uniqs() == ["B"]
    harness.kill()
    harness.open()
    assert harness.service.recovery.replayed_units == 1  # B's unit, linked again
    await harness.step(2_200)
    assert harness.uniqs() == ["B"] and harness.service.duplicates_skipped_total == 1
    await harness.step(60_000)
    assert harness.uniqs() == ["B", "A"]


async def test_a_message_sent_without_uniq_key_gets_one_and_goes_out_once_after_kill_9(harness):
    assert decode_record(park(record(uniq="", TIMER_DELAY_MS="5"))).uniq_key
    harness.send(
        *[
            record(uniq="", body=b"%d" % i, TIMER_DELIVER_MS=str(NOW_MS + 1_000 + i))
            for i in range(10)
        ]
    )
    await harness.step(0)
    await harness.service.checkpoint()
    await harness.step(1_004)  # bodies 0..4 out
    harness.kill()
    harness.open()
    await harness.step(5_000)
    bodies = [m.body for m in harness.delivered()]
    assert sorted(bodies) == sorted(b"%d" % i for i in range(10))
    assert harness.service.duplicates_skipped_total == 5


async def test_after_kill_9_a_roll_already_made_is_not_made_again(tmp_path):
    h = Harness(tmp_path, roll_window_s=10)
    h.send(record(TIMER_DELAY_MS="15000"))
    await h.step(0)
    await h.service.checkpoint()
    await h.step(10_000)  # re-parked once
    h.kill()
    h.open()
    try:
        await h.step(12_000)
        assert h.service.duplicates_skipped_total == 1
        assert len(h.delivered(TIMER_TOPIC)) == 2  # the original and one re-park
        await h.step(15_000)
        assert h.uniqs() == ["U1"]
    finally:
        await h.stop()


async def test_a_refused_re_put_is_retried_later(harness, monkeypatch):
    harness.send(record(TIMER_DELAY_MS="1000"))
    await harness.step(0)
    put = harness.store.put_message
    monkeypatch.setattr(
        harness.store,
        "put_message",
        lambda **kw: PutResult(status=PutStatus.DISK_FULL, error="disk full"),
    )
    assert await harness.step(1_000) == NOW_MS + 1_000 + PUT_RETRY_DELAY_MS
    monkeypatch.setattr(harness.store, "put_message", put)
    await harness.step(2_000)
    assert harness.uniqs() == ["U1"]


async def test_a_parked_record_that_is_gone_is_logged_and_skipped(harness, caplog):
    harness.send(record(TIMER_DELAY_MS="1000"))
    await harness.step(0)
    harness.store.read_record = lambda phys: None
    await harness.step(1_000)
    assert harness.service.dropped_total == 1 and harness.uniqs() == []
    assert "is no longer in the commit log; it is lost" in caplog.text


async def test_the_checkpoint_records_the_cursor_and_the_enqueued_offset(harness):
    harness.send(record(uniq="A", TIMER_DELAY_MS="1000"), record(uniq="B", TIMER_DELAY_MS="9000"))
    await harness.step(3_000)
    await harness.service.checkpoint()
    cp = harness.service.timer.checkpoint_file.read()
    assert (cp.cursor_second, cp.enqueue_queue_offset, cp.timerlog_flushed_pos) == (
        NOW_MS // 1000 + 3,
        2,
        128,
    )
    assert harness.service.figures()["timer_pending"] == "1"
