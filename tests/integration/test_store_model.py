"""The store against an in-memory model: put, batch put, read, restart and crash."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from storekit import crash, open_store, record, small_config

from pocketmq.broker.store import GetStatus
from pocketmq.common.message import decode_record

TOPICS = st.sampled_from(["alpha", "beta"])
QUEUES = st.integers(0, 2)
BODIES = st.binary(min_size=0, max_size=3000)


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pocketmq-model-")
        self.config = small_config(
            self.dir,
            commitlog_file_size_bytes=32 * 1024,
            max_message_size_bytes=8 * 1024,
            max_batch_size_bytes=24 * 1024,
            consume_queue_units_per_file=7,
            index_slots=16,
            index_entries=20,
        )
        self.store = open_store(self.config)
        self.model: dict[tuple[str, int], list[bytes]] = {}

    def teardown(self) -> None:
        self.store.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(topic=TOPICS, queue_id=QUEUES, body=BODIES)
    def put(self, topic, queue_id, body):
        result = self.store.put_batch(record(topic, body, queue_id))
        assert result.ok, result.error
        queue = self.model.setdefault((topic, queue_id), [])
        assert result.queue_offsets == [len(queue)]
        queue.append(body)

    @rule(
        messages=st.lists(
            st.tuples(TOPICS, QUEUES, st.binary(max_size=600)), min_size=1, max_size=12
        )
    )
    def put_batch(self, messages):
        blob = b"".join(record(t, b, q) for t, q, b in messages)
        result = self.store.put_batch(blob)
        assert result.ok, result.error
        for (t, q, b), offset in zip(messages, result.queue_offsets, strict=True):
            queue = self.model.setdefault((t, q), [])
            assert offset == len(queue)
            queue.append(b)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def read(self, data):
        key = data.draw(st.sampled_from(sorted(self.model)))
        expected = self.model[key]
        offset = data.draw(st.integers(0, len(expected) + 1))
        got = self.store.get_messages(*key, offset, max_count=5)
        if offset < len(expected):
            assert got.status is GetStatus.FOUND
            assert [decode_record(r).body for r in got.records] == expected[
                offset : offset + len(got.records)
            ]
            assert got.records
        elif offset == len(expected):
            assert got.status is GetStatus.OFFSET_OVERFLOW_ONE
        else:
            assert got.status is GetStatus.OFFSET_OVERFLOW_BADLY
            assert got.next_begin_offset == len(expected)

    @rule()
    def restart(self):
        self.store.shutdown()
        self.store = open_store(self.config)

    @rule()
    def crash_and_recover(self):
        crash(self.store)
        self.store = open_store(self.config)

    @invariant()
    def queue_ends_match_the_model(self):
        for (topic, queue_id), bodies in self.model.items():
            assert self.store.max_offset(topic, queue_id) == len(bodies)


StoreModel.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_store_matches_its_model = StoreModel.TestCase
