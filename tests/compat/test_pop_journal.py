"""DATA/pop/popJournal: what a restart replays, torn tails, compaction."""

from __future__ import annotations

import os
from pathlib import Path

from pocketmq.broker.grpc_v2.pop_journal import (
    InFlight,
    PopJournal,
    QueueState,
    encode_delta,
)

KEY = ("g1", "TopicA", 3)
OTHER = ("g2", "TopicA", 0)


async def _write(journal: PopJournal, *records: bytes) -> None:
    for record in records:
        journal.append(record)
    await journal.sync()


async def test_replay_restores_next_offsets_and_in_flight_messages(tmp_path):
    journal = PopJournal(str(tmp_path))
    assert journal.load() == ({}, 0)
    await _write(
        journal,
        encode_delta(
            KEY,
            next_offset=3,
            upserts=[
                (0, InFlight(1, 1, 1000)),
                (1, InFlight(1, 2, 1000)),
                (2, InFlight(1, 3, 1000)),
            ],
        ),
        encode_delta(KEY, removes=[1]),  # acked
        encode_delta(KEY, upserts=[(2, InFlight(1, 4, 5000))]),  # invisible longer
        encode_delta(OTHER, next_offset=7),
    )
    journal.close()

    states, max_serial = PopJournal(str(tmp_path)).load()

    assert states[KEY].next_offset == 3
    assert states[KEY].in_flight == {0: InFlight(1, 1, 1000), 2: InFlight(1, 4, 5000)}
    assert states[KEY].commit_offset() == 0
    assert states[OTHER] == QueueState(next_offset=7)
    assert max_serial == 4


async def test_a_torn_tail_is_cut_and_everything_before_it_replayed(tmp_path):
    journal = PopJournal(str(tmp_path))
    journal.load()
    await _write(
        journal,
        encode_delta(KEY, next_offset=2, upserts=[(0, InFlight(1, 1, 9)), (1, InFlight(1, 2, 9))]),
    )
    journal.close()
    whole = os.path.getsize(journal.path)
    ack = encode_delta(KEY, removes=[0])
    with open(journal.path, "ab") as f:
        f.write(ack[:-3])  # the crash cut the ack's last bytes

    states, _ = PopJournal(str(tmp_path)).load()

    assert set(states[KEY].in_flight) == {0, 1}  # the unanswered ack did not happen
    assert os.path.getsize(journal.path) <= whole  # rewritten without the torn record


async def test_a_record_with_a_flipped_byte_ends_the_replay(tmp_path):
    journal = PopJournal(str(tmp_path))
    journal.load()
    await _write(
        journal,
        encode_delta(KEY, next_offset=1, upserts=[(0, InFlight(1, 1, 9))]),
        encode_delta(KEY, next_offset=5),
    )
    journal.close()
    path = Path(journal.path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))

    states, _ = PopJournal(str(tmp_path)).load()

    assert states[KEY].next_offset == 1


async def test_compaction_keeps_the_state_in_one_snapshot_per_queue(tmp_path):
    journal = PopJournal(str(tmp_path))
    states, _ = journal.load()
    state = states[KEY] = QueueState(next_offset=0)
    for offset in range(200):
        entry = InFlight(1, offset + 1, 10_000)
        state.in_flight[offset] = entry
        state.next_offset = offset + 1
        journal.append(encode_delta(KEY, next_offset=offset + 1, upserts=[(offset, entry)]))
        if offset % 2:
            del state.in_flight[offset]
            journal.append(encode_delta(KEY, removes=[offset]))
    await journal.sync()
    before = journal.size_bytes

    journal.compact(states)
    await _write(journal, encode_delta(KEY, removes=[0]))
    journal.close()

    assert journal.size_bytes < before / 5
    replayed, max_serial = PopJournal(str(tmp_path)).load()
    assert replayed[KEY].next_offset == 200
    assert sorted(replayed[KEY].in_flight) == list(range(2, 200, 2))
    assert max_serial == 199
