"""MappedFile.is_zero_from: a sparse segment's holes are zeros without being read."""

from __future__ import annotations

import os

from pocketmq.broker.store.io import StoreIO
from pocketmq.broker.store.mapped_file import MappedFile

SIZE = 1024 * 1024


def segment(tmp_path) -> MappedFile:
    return MappedFile(str(tmp_path / f"{0:020d}"), SIZE, io=StoreIO(), create=True, sparse=True)


def test_a_sparse_segment_reads_as_zero_past_its_data_without_faulting_its_holes(tmp_path):
    mf = segment(tmp_path)
    mf.buffer[0:20] = b"\x01" * 20
    mf.buffer.flush()
    assert not mf.is_zero_from(0)
    assert mf.is_zero_from(20)
    assert os.stat(mf.path).st_blocks * 512 < SIZE // 4  # still sparse afterwards
    mf.close()


def test_a_stray_byte_far_past_the_end_is_found(tmp_path):
    mf = segment(tmp_path)
    mf.buffer[0:20] = b"\x01" * 20
    mf.buffer[SIZE - 5] = 7  # stale data a crash left behind
    mf.buffer.flush()
    assert not mf.is_zero_from(20)
    assert mf.is_zero_from(SIZE - 4)
    mf.close()
