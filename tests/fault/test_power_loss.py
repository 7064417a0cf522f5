"""Power loss: what was never synced is gone, in whole pages or past any point.

A store writes a first part and syncs it (the commit log, then a flush round
that writes the checkpoint), writes a second part that is never synced, and is
dropped as a crash would drop it. A copy of its directory is then damaged the
way a power cut leaves files (each case seeded, so it replays):

* cut: the commit log is truncated at a random point past the synced part and
  later segments vanish; each consume-queue file is cut at a random byte past
  what its flush round synced.
* dropped pages: every 4 KiB page past the synced point is lost or kept at
  random, as a disk writes dirty pages back in no particular order.

Recovery must give back exactly the records before the first damaged byte of
the log (a clean prefix, every synced record in it), consume queues and key
index that agree with it, a store ``verify`` finds clean, and appends that
continue from there.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from storekit import crash, open_store, record, small_config

from pocketmq.broker.store import GetStatus
from pocketmq.broker.store.verify import verify_store
from pocketmq.common.message import decode_record

PAGE = 4096
SEGMENT = 64 * 1024
QUEUES = 4
CQ_UNIT = 20
NEVER = 600_000  # ms: no background flush during the test; the test syncs by hand


@dataclass(frozen=True, slots=True)
class Written:
    phys: int
    size: int
    uniq: str
    queue_id: int


def config(data_dir: Path):
    return small_config(
        data_dir,
        commitlog_file_size_bytes=SEGMENT,
        flush_interval_commitlog_ms=NEVER,
        flush_commitlog_thorough_interval_ms=NEVER,
        flush_interval_consume_queue_ms=NEVER,
        consume_queue_units_per_file=64,
    )


def write(store, rng: random.Random, n: int, first: int) -> list[Written]:
    out: list[Written] = []
    i = first
    while i < first + n:
        batch = [(f"U{j:06d}", rng.randrange(QUEUES)) for j in range(i, i + rng.randint(1, 6))]
        blob = b"".join(
            record(body=rng.randbytes(rng.randint(40, 2500)), queue_id=q, uniq=u, keys=f"k{u}")
            for u, q in batch
        )
        result = store.put_batch(blob)
        assert result.ok, result.error
        out += [
            Written(p, s, u, q)
            for p, s, (u, q) in zip(result.phys_offsets, result.sizes, batch, strict=True)
        ]
        i += len(batch)
    return out


def build(data_dir: Path, seed: int) -> tuple[list[Written], int, dict[int, int]]:
    """Written records, the synced commit-log offset, and units synced per queue."""
    rng = random.Random(seed)
    store = open_store(config(data_dir))
    written = write(store, rng, rng.randint(60, 200), 0)
    store.commitlog.queue.flush()
    store.flush_round()
    synced = store.commitlog.queue.flushed_offset
    synced_units = {q: store.max_offset("orders", q) for q in range(QUEUES)}
    written += write(store, rng, rng.randint(150, 400), len(written))
    assert len(store.commitlog.queue.files) >= 3
    crash(store)
    return written, synced, synced_units


def segment_of(data_dir: Path, offset: int) -> Path:
    return data_dir / "commitlog" / f"{offset - offset % SEGMENT:020d}"


def extents(written: list[Written]) -> list[tuple[int, int]]:
    """Byte ranges recovery reads: every record and each segment's BLANK head (8 bytes)."""
    out = [(w.phys, w.phys + w.size) for w in written]
    for before, after in itertools.pairwise(written):
        end = before.phys + before.size
        if end // SEGMENT != after.phys // SEGMENT:
            out.append((end, end + 8))
    return sorted(out)


def first_damaged_byte(written: list[Written], lost: list[tuple[int, int]]) -> int | None:
    hits = [
        max(start, a) for a, b in lost for start, end in extents(written) if start < b and end > a
    ]
    return min(hits, default=None)


def cut_files(
    data_dir: Path,
    written: list[Written],
    synced: int,
    synced_units: dict[int, int],
    rng: random.Random,
) -> list[tuple[int, int]]:
    end = written[-1].phys + written[-1].size
    cut = rng.randint(synced, end)
    seg = segment_of(data_dir, cut)
    for path in (data_dir / "commitlog").iterdir():
        if int(path.name) > int(seg.name):
            path.unlink()
    os.truncate(seg, cut % SEGMENT)
    for queue_dir in (data_dir / "consumequeue" / "orders").iterdir():
        keep = synced_units.get(int(queue_dir.name), 0) * CQ_UNIT
        for path in sorted(queue_dir.iterdir()):
            start = int(path.name) * CQ_UNIT
            size = path.stat().st_size
            if start + size > keep:
                os.truncate(path, max(rng.randint(max(keep - start, 0), size), 0))
    return [(cut, 1 << 62)]


def drop_pages(
    data_dir: Path,
    written: list[Written],
    synced: int,
    synced_units: dict[int, int],
    rng: random.Random,
) -> list[tuple[int, int]]:
    end = written[-1].phys + written[-1].size
    lost = []
    chance = rng.choice((0.05, 0.2, 0.5))
    for page in range(synced // PAGE, -(-end // PAGE)):
        if rng.random() < chance:
            a, b = max(page * PAGE, synced), (page + 1) * PAGE
            with open(segment_of(data_dir, a), "r+b") as f:
                f.seek(a % SEGMENT)
                f.write(bytes(b - a))
            lost.append((a, b))
    return lost


def stored_in_log_order(store) -> list[str]:
    found: list[tuple[int, str, int, int]] = []
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            got = store.get_messages("orders", queue_id, offset, max_count=64)
            if got.status is not GetStatus.FOUND:
                break
            for raw, queue_offset in zip(got.records, got.queue_offsets, strict=True):
                msg = decode_record(raw)
                found.append((msg.phys_offset, msg.uniq_key, queue_id, queue_offset))
            offset = got.next_begin_offset
    for queue_id in range(QUEUES):
        offsets = [o for _p, _u, q, o in found if q == queue_id]
        assert sorted(offsets) == list(range(len(offsets))), f"queue {queue_id} has gaps"
    return [uniq for _phys, uniq, _q, _o in sorted(found)]


@pytest.mark.parametrize("damage", [cut_files, drop_pages], ids=["cut", "dropped-pages"])
@pytest.mark.parametrize("seed", range(5))
def test_power_loss_recovers_a_clean_prefix(tmp_path, seed, damage):
    source, copy = tmp_path / "source", tmp_path / "copy"
    written, synced, synced_units = build(source, seed)
    shutil.copytree(source, copy)
    lost = damage(copy, written, synced, synced_units, random.Random(seed * 7919))
    damaged_at = first_damaged_byte(written, lost)
    survivors = [w for w in written if damaged_at is None or w.phys + w.size <= damaged_at]

    store = open_store(config(copy))
    try:
        assert stored_in_log_order(store) == [w.uniq for w in survivors]
        assert all(w.phys + w.size > synced for w in written[len(survivors) :])
        assert store.commitlog.max_offset == (
            survivors[-1].phys + survivors[-1].size if survivors else 0
        )
        for w in survivors[-1:] + written[len(survivors) : len(survivors) + 1]:
            found = [decode_record(r).uniq_key for r in store.query_by_key("orders", f"k{w.uniq}")]
            assert found == ([w.uniq] if w in survivors else []), w
        next_offsets = {q: sum(1 for w in survivors if w.queue_id == q) for q in range(QUEUES)}
        result = store.put_batch(record(queue_id=2, uniq="after"))
        assert result.queue_offsets == [next_offsets[2]]
    finally:
        store.shutdown()
    report = verify_store(str(copy))
    assert report.ok, report
