"""Delay levels, the send path's detour through SCHEDULE_TOPIC_XXXX, and the
ScheduleMessageService stepped with run_once() on a manual clock over a real store."""

from __future__ import annotations

import asyncio
import functools
import json
import re

import pytest
import storekit
from storekit import small_config

from pocketmq.broker.delay_levels import (
    DEFAULT_MESSAGE_DELAY_LEVEL,
    DelayLevels,
    parse_delay_levels,
    restore_properties,
    rewrite_delayed,
)
from pocketmq.broker.errors import IllegalArgumentError
from pocketmq.broker.schedule import PUT_RETRY_DELAY_MS, ScheduleMessageService
from pocketmq.broker.store.message_store import DefaultMessageStore
from pocketmq.broker.store.results import PutResult, PutStatus
from pocketmq.common.message import SysFlag, decode_record

SCHEDULE = "SCHEDULE_TOPIC_XXXX"
STORE_HOST = ("127.0.0.1", 10911)
LEVELS = DelayLevels.parse("1s 5s 10s")

record = functools.partial(
    storekit.record,
    topic="TopicA",
    queue_id=2,
    tags="TagA",
    uniq="U1",
    born_timestamp_ms=1_600_000_000_000,
    reconsume_times=4,
)


def positions(*records: bytes) -> list[int]:
    out, pos = [], 0
    for rec in records:
        out.append(pos)
        pos += len(rec)
    return out


def rewrite(*records: bytes, now_ms: int = 1_000, levels: DelayLevels = LEVELS) -> bytes | None:
    return rewrite_delayed(
        b"".join(records), positions(*records), levels, now_ms=now_ms, store_host=STORE_HOST
    )


# -- delay levels -------------------------------------------------------------------------
def test_the_default_levels_are_rocketmqs_eighteen():
    levels = DelayLevels.parse()
    assert levels.max_level == 18
    assert levels.delay_ms(1) == 1_000
    assert levels.delay_ms(3) == 10_000
    assert levels.delay_ms(18) == 2 * 3_600_000
    assert levels.delay_ms(99) == levels.delay_ms(18)  # above the last level: the last
    assert DEFAULT_MESSAGE_DELAY_LEVEL.split()[4] == "1m"


def test_every_unit_parses():
    assert parse_delay_levels("250ms 2s 3m 1h 1d") == (250, 2_000, 180_000, 3_600_000, 86_400_000)


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "is empty"),
        ("1s 0s", "level 2 is '0s'"),
        ("1s 5x", "level 2 is '5x'"),
        ("1.5s", "level 1 is '1.5s'"),
    ],
)
def test_a_bad_level_list_names_the_level(text, words):
    with pytest.raises(ValueError, match=words):
        parse_delay_levels(text)


# -- the send path's rewrite ---------------------------------------------------------------
def test_records_without_delay_are_left_alone():
    assert rewrite(record(), record(uniq="U2", delay=0)) is None


def test_a_delayed_record_moves_to_its_levels_queue_with_the_delivery_time():
    plain, delayed = record(uniq="U0"), record(delay=2, uniq="U1", KEYS="k1")
    blob = rewrite(plain, delayed, now_ms=7_000)
    assert blob[: len(plain)] == plain  # untouched, byte for byte
    msg = decode_record(blob, len(plain))
    assert (msg.topic, msg.queue_id) == (SCHEDULE, 1)
    assert msg.properties == {
        "TAGS": "TagA",
        "UNIQ_KEY": "U1",
        "KEYS": "k1",
        "DELAY": "2",
        "REAL_TOPIC": "TopicA",
        "REAL_QID": "2",
        "TIMER_DELIVER_MS": str(7_000 + 5_000),
    }
    assert (msg.body, msg.born_timestamp_ms, msg.born_host, msg.reconsume_times) == (
        b"hello",
        1_600_000_000_000,
        ("10.0.0.9", 4321),
        4,
    )


def test_a_level_above_the_last_is_the_last():
    msg = decode_record(rewrite(record(delay=40), now_ms=0))
    assert (msg.queue_id, msg.properties["DELAY"], msg.properties["TIMER_DELIVER_MS"]) == (
        2,
        "3",
        "10000",
    )


def test_prepared_transaction_records_are_not_delayed():
    assert rewrite(record(delay=1, sysflag=SysFlag.TRANSACTION_PREPARED)) is None
    committed = rewrite(record(delay=1, sysflag=SysFlag.TRANSACTION_COMMIT))
    assert decode_record(committed).topic == SCHEDULE


def test_a_delay_that_is_not_a_number_is_refused():
    with pytest.raises(
        IllegalArgumentError, match=re.escape("DELAY property is 'soon'; give a delay level 1..3")
    ):
        rewrite(record(), record(delay="soon"))


def test_a_delayed_record_with_a_bad_crc_is_refused_not_re_encoded():
    bad = bytearray(record(delay=1))
    bad[8] ^= 0x01  # BODYCRC
    with pytest.raises(IllegalArgumentError, match="body CRC"):
        rewrite(bytes(bad))


def test_restore_properties_takes_the_detour_off():
    topic, queue_id, props = restore_properties(
        {
            "DELAY": "2",
            "REAL_TOPIC": "TopicA",
            "REAL_QID": "3",
            "TIMER_DELIVER_MS": "5",
            "UNIQ_KEY": "U1",
            "TAGS": "TagA",
        }
    )
    assert (topic, queue_id, props) == ("TopicA", 3, {"UNIQ_KEY": "U1", "TAGS": "TagA"})
    with pytest.raises(ValueError, match="REAL_QID"):
        restore_properties({"REAL_TOPIC": "TopicA", "REAL_QID": "x"})


# -- the service --------------------------------------------------------------------------
@pytest.fixture
def store(tmp_path, manual_clock):
    store = DefaultMessageStore(
        small_config(tmp_path / "data", store_host=STORE_HOST), clock=manual_clock
    )
    store.start()
    yield store
    store.shutdown()


@pytest.fixture
def service(store, tmp_path, manual_clock):
    service = ScheduleMessageService(store, LEVELS, str(tmp_path / "config"), clock=manual_clock)
    service.load()
    store.add_arrival_listener(service.on_arrival)
    return service


def park(store, manual_clock, *records: bytes) -> None:
    """Send *records* the way the send path does."""
    blob = rewrite(*records, now_ms=manual_clock.now_ms()) or b"".join(records)
    assert store.put_batch(blob).ok


def delivered(store, topic="TopicA", queue_id=2):
    result = store.get_messages(topic, queue_id, 0)
    return [decode_record(r) for r in result.records]


async def test_a_message_is_delivered_when_due_and_not_before(store, service, manual_clock):
    sent_ms = manual_clock.now_ms()
    park(store, manual_clock, record(delay=2))
    assert await service.run_once() == sent_ms + 5_000
    manual_clock.advance(4.999)
    assert await service.run_once() == sent_ms + 5_000
    assert delivered(store) == []
    manual_clock.advance(0.001)
    assert await service.run_once() is None
    [msg] = delivered(store)
    assert (msg.topic, msg.queue_id, msg.body, msg.reconsume_times) == ("TopicA", 2, b"hello", 4)
    assert msg.properties == {"TAGS": "TagA", "UNIQ_KEY": "U1"}
    assert msg.born_timestamp_ms == 1_600_000_000_000
    assert service.offsets.get(2) == 1
    assert await service.run_once() is None  # delivered once only
    assert len(delivered(store)) == 1


async def test_a_level_delivers_in_order_and_stops_at_the_first_not_due(
    store, service, manual_clock
):
    park(store, manual_clock, record(delay=1, uniq="A"))
    manual_clock.advance(0.5)
    park(store, manual_clock, record(delay=1, uniq="B"))
    manual_clock.advance(0.6)
    assert await service.run_once(1) == manual_clock.now_ms() - 1_100 + 1_500
    assert [m.uniq_key for m in delivered(store)] == ["A"]
    manual_clock.advance(0.4)
    assert await service.run_once(1) is None
    assert [m.uniq_key for m in delivered(store)] == ["A", "B"]


async def test_levels_are_independent(store, service, manual_clock):
    park(store, manual_clock, record(delay=3, uniq="slow"), record(delay=1, uniq="fast"))
    manual_clock.advance(1)
    assert await service.run_once() == manual_clock.now_ms() + 9_000
    assert [m.uniq_key for m in delivered(store)] == ["fast"]


async def test_progress_is_saved_and_loaded(store, service, manual_clock, tmp_path):
    park(store, manual_clock, record(delay=1, uniq="A"), record(delay=2, uniq="B"))
    manual_clock.advance(1)
    await service.run_once()
    service.persist()
    saved = json.loads((tmp_path / "config" / "delayOffset.json").read_text())
    assert saved == {"offsetTable": {"1": 1}}
    again = ScheduleMessageService(store, LEVELS, str(tmp_path / "config"), clock=manual_clock)
    again.load()
    manual_clock.advance(4)
    assert await again.run_once() is None
    assert [m.uniq_key for m in delivered(store)] == ["A", "B"]  # A not delivered twice


async def test_after_a_crash_a_message_re_put_before_it_is_not_re_put_again(
    store, manual_clock, tmp_path
):
    """Progress is saved every few seconds: a crash loses what moved since, and the new
    service would re-put A again. A message due before the start is looked up in the key
    index first; one due after it (B) cannot have gone out and is re-put unchecked."""
    park(store, manual_clock, record(delay=1, uniq="A"), record(delay=2, uniq="B"))
    manual_clock.advance(1)
    crashed = ScheduleMessageService(store, LEVELS, str(tmp_path / "config"), clock=manual_clock)
    crashed.load()
    await crashed.run_once()  # A re-put; the progress never saved: a kill -9
    again = ScheduleMessageService(store, LEVELS, str(tmp_path / "config"), clock=manual_clock)
    again.load()
    again.check_earlier_deliveries()
    manual_clock.advance(4)
    assert await again.run_once() is None
    assert [m.uniq_key for m in delivered(store)] == ["A", "B"]
    assert again.duplicates_skipped_total == 1
    assert again.offsets.get(1) == 1


async def test_without_the_check_a_crash_re_puts_a_message_again(store, manual_clock, tmp_path):
    """What :meth:`check_earlier_deliveries` saves: a clean start does not look up."""
    park(store, manual_clock, record(delay=1, uniq="A"))
    manual_clock.advance(1)
    crashed = ScheduleMessageService(store, LEVELS, str(tmp_path / "config"), clock=manual_clock)
    crashed.load()
    await crashed.run_once()
    again = ScheduleMessageService(store, LEVELS, str(tmp_path / "config"), clock=manual_clock)
    again.load()
    assert await again.run_once() is None
    assert [m.uniq_key for m in delivered(store)] == ["A", "A"]


async def test_a_message_without_a_delivery_time_is_due_a_level_after_its_store_time(
    store, service, manual_clock
):
    stored_ms = manual_clock.now_ms()
    assert store.put_message(
        topic=SCHEDULE,
        queue_id=0,
        body=b"x",
        properties={"REAL_TOPIC": "TopicA", "REAL_QID": "2", "DELAY": "1"},
    ).ok
    assert await service.run_once(1) == stored_ms + 1_000


async def test_a_delivery_time_beyond_now_plus_the_delay_is_corrected(store, service, manual_clock):
    # Written before the clock was set back by an hour: it still waits one delay only.
    assert store.put_message(
        topic=SCHEDULE,
        queue_id=0,
        body=b"x",
        properties={
            "REAL_TOPIC": "TopicA",
            "REAL_QID": "2",
            "TIMER_DELIVER_MS": str(manual_clock.now_ms() + 3_600_000),
        },
    ).ok
    assert await service.run_once(1) == manual_clock.now_ms() + 1_000


async def test_progress_past_the_queue_end_is_corrected(store, service, manual_clock):
    service.offsets.set(1, 50)  # e.g. delayOffset.json newer than a recovered queue
    park(store, manual_clock, record(delay=1))
    manual_clock.advance(1)
    assert await service.run_once(1) is None
    assert service.offsets.get(1) == 1
    assert delivered(store) == []  # the corrected offset is the queue's end


async def test_a_message_without_a_real_topic_is_skipped(store, service, manual_clock):
    assert store.put_message(
        topic=SCHEDULE, queue_id=0, body=b"x", properties={"TIMER_DELIVER_MS": "1"}
    ).ok
    park(store, manual_clock, record(delay=1))
    manual_clock.advance(1)
    assert await service.run_once(1) is None
    assert len(delivered(store)) == 1
    assert service.offsets.get(1) == 2


class RefusingStore:
    """The real store, but puts are refused with *status* while ``refusing`` is set."""

    def __init__(self, store, status=PutStatus.DISK_FULL):
        self._store = store
        self.status = status
        self.refusing = True

    def put_message(self, **kwargs):
        if self.refusing:
            return PutResult(status=self.status, error="refused for the test")
        return self._store.put_message(**kwargs)

    def __getattr__(self, name):
        return getattr(self._store, name)


async def test_a_refused_re_put_is_retried_later_and_not_skipped(store, manual_clock, tmp_path):
    refusing = RefusingStore(store)
    service = ScheduleMessageService(refusing, LEVELS, str(tmp_path / "config"), clock=manual_clock)
    park(store, manual_clock, record(delay=1))
    manual_clock.advance(1)
    assert await service.run_once(1) == manual_clock.now_ms() + PUT_RETRY_DELAY_MS
    assert service.offsets.get(1) == 0
    refusing.refusing = False
    assert await service.run_once(1) is None
    assert len(delivered(store)) == 1


async def test_a_re_put_the_store_can_never_take_is_dropped(store, manual_clock, tmp_path):
    refusing = RefusingStore(store, PutStatus.MESSAGE_ILLEGAL)
    service = ScheduleMessageService(refusing, LEVELS, str(tmp_path / "config"), clock=manual_clock)
    park(store, manual_clock, record(delay=1))
    manual_clock.advance(1)
    assert await service.run_once(1) is None
    assert service.offsets.get(1) == 1


async def test_an_idle_level_is_woken_by_an_arrival(store, service, manual_clock, eventually):
    service.start()
    try:
        await asyncio.sleep(0)  # every level task runs its first round and goes idle
        assert store.put_message(
            topic=SCHEDULE,
            queue_id=0,
            body=b"x",
            properties={
                "REAL_TOPIC": "TopicA",
                "REAL_QID": "2",
                "TIMER_DELIVER_MS": str(manual_clock.now_ms()),
            },
        ).ok
        await eventually(lambda: delivered(store), timeout_s=2, what="the due message")
    finally:
        await service.stop()
    assert service.offsets.dirty is False  # saved at stop


async def test_figures_report_progress(store, service, manual_clock):
    park(store, manual_clock, record(delay=1))
    manual_clock.advance(1)
    await service.run_once()
    assert service.figures() == {
        "schedule_delivered_total": "1",
        "schedule_duplicates_skipped_total": "0",
        "schedule_level_1_offset": "1",
    }


async def test_the_schedule_queue_unit_holds_the_delivery_time_as_its_tag_code(store, manual_clock):
    park(store, manual_clock, record(delay=2))
    _phys, _size, tag_code = store.consume_queues.get(SCHEDULE, 1).get(0)
    assert tag_code == manual_clock.now_ms() + 5_000
