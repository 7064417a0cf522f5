"""Consume queues mapped only while in use: the store's LRU, unmapping and mapping again."""

from __future__ import annotations

import os
import threading

from pocketmq.broker.store.consume_queue import CQ_UNIT, ConsumeQueue
from pocketmq.broker.store.consume_queue_store import ConsumeQueueStore
from pocketmq.broker.store.io import StoreIO

UNITS = 10  # units a segment


def open_fds_under(root: str) -> int:
    """Descriptors of this process that name a file under *root*."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        count += target.startswith(root + os.sep)
    return count


def mappings_under(root: str) -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if (root + os.sep) in line)


def fill(store: ConsumeQueueStore, queues: int, units: int = 3, *, first: int = 0) -> None:
    for q in range(first, queues):
        cq = store.find_or_create(f"t{q // 8}", q % 8)
        for i in range(units):
            assert cq.append(i, q * 1000 + i * 10, 10, q)


def test_a_mapped_segment_holds_one_descriptor_not_two(tmp_path):
    # CPython's mmap keeps a dup of the descriptor it maps; a segment that kept its
    # own as well cost two descriptors per queue (6,027 for 3,000 busy queues).
    root = str(tmp_path / "cq")
    store = ConsumeQueueStore(root, units_per_file=UNITS)
    fill(store, 40)
    assert mappings_under(root) == 40
    assert open_fds_under(root) == 40
    store.close()
    assert open_fds_under(root) == mappings_under(root) == 0


def test_the_store_keeps_at_most_max_open_files_segments_mapped(tmp_path):
    root = str(tmp_path / "cq")
    store = ConsumeQueueStore(root, units_per_file=UNITS, max_open_files=20)
    fill(store, 300)
    assert store.open_files <= 20
    assert mappings_under(root) <= 20 and open_fds_under(root) <= 20
    assert store.evictions >= 280
    for q in range(300):  # every queue reads back after it was unmapped
        cq = store.get(f"t{q // 8}", q % 8)
        assert cq is not None and (cq.min_offset, cq.max_offset) == (0, 3)
        assert [cq.get(i) for i in range(3)] == [(q * 1000 + i * 10, 10, q) for i in range(3)]
        assert mappings_under(root) <= 20
    store.close()


def test_an_unmapped_queue_maps_again_for_every_operation(tmp_path):
    root = str(tmp_path / "cq")
    store = ConsumeQueueStore(root, units_per_file=UNITS, max_open_files=1)
    a = store.find_or_create("a", 0)
    b = store.find_or_create("b", 0)
    for i in range(25):  # three segments
        a.append(i, 100 + i * 10, 10, 0)
    b.append(0, 5, 1, 0)  # a is unmapped now
    assert a.mapped_count == 0
    assert a.read_units(12, 2) == CQ_UNIT.pack(220, 10, 0) + CQ_UNIT.pack(230, 10, 0)
    b.append(1, 6, 1, 0)
    assert a.append(25, 400, 10, 0) and a.max_offset == 26
    b.append(2, 7, 1, 0)
    assert a.truncate_phys(350) == 1 and a.max_offset == 25
    b.append(3, 8, 1, 0)
    assert a.delete_expired(215) == 1 and a.min_offset == 12
    b.append(4, 9, 1, 0)
    a.flush()
    a.close()
    again = ConsumeQueue("a", 0, a.directory, units_per_file=UNITS)
    again.load()
    again.recover()
    assert (again.min_offset, again.max_offset) == (10, 25)
    assert again.get(24) == (340, 10, 0)
    again.close()
    store.close()


def test_sweeps_skip_queues_with_nothing_to_do_without_mapping_them(tmp_path):
    root = str(tmp_path / "cq")
    store = ConsumeQueueStore(root, units_per_file=UNITS, max_open_files=5)
    fill(store, 50)
    store.delete_expired(0)  # learns each queue's head
    before = store.evictions
    assert store.truncate_phys(10**9) == 0
    assert store.delete_expired(0) == 0
    assert store.evictions == before
    store.close()


def test_units_written_before_an_unmap_are_synced_by_the_next_flush(tmp_path):
    root = str(tmp_path / "cq")
    store = ConsumeQueueStore(root, units_per_file=UNITS, max_open_files=1)
    a = store.find_or_create("a", 0)
    a.append(0, 0, 10, 0)
    store.find_or_create("b", 0).append(0, 10, 10, 0)  # unmaps a, unsynced
    assert a.mapped_count == 0 and a.dirty_bytes == CQ_UNIT.size
    store.flush()
    assert a.dirty_bytes == 0 and a.mapped_count == 0
    store.close()


class _GatedSync(StoreIO):
    """Holds the first sync of a consume-queue file until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fd_valid_after_wait: bool | None = None

    def sync(self, fd: int) -> None:
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(10)
            try:
                os.fstat(fd)
                self.fd_valid_after_wait = True
            except OSError:
                self.fd_valid_after_wait = False
        super().sync(fd)


def test_eviction_while_the_flush_thread_syncs_never_closes_its_descriptor(tmp_path):
    root = str(tmp_path / "cq")
    io = _GatedSync()
    store = ConsumeQueueStore(root, units_per_file=UNITS, io=io, max_open_files=4)
    fill(store, 4, units=2)
    flusher = threading.Thread(target=store.flush)
    flusher.start()
    assert io.entered.wait(10)  # the flush thread is inside a sync now
    fill(store, 60, units=2, first=4)  # evicts every queue it is syncing, on this thread
    assert store.open_files <= 4
    first = store.get("t0", 0)
    assert first is not None and first.mapped_count == 0
    first.append(2, 7, 7, 0)  # mapped again while the sync still waits
    io.release.set()
    flusher.join(10)
    assert not flusher.is_alive() and io.fd_valid_after_wait is True
    store.flush()
    assert store.dirty_bytes == 0
    assert [first.get(i) for i in range(3)] == [(0, 10, 0), (10, 10, 0), (7, 7, 0)]
    store.close()
