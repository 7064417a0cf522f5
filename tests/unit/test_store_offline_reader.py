"""The store's public offline reader: a data directory's commit log, read-only, no lock."""

from __future__ import annotations

import os

import pytest
from storekit import open_store, record, small_config

from pocketmq.broker.store import (
    CommitLogSegment,
    commitlog_segments,
    is_data_directory,
    open_segment,
)
from pocketmq.common.errors import StoreError
from pocketmq.common.message import BLANK_HEAD, BLANK_MAGIC_CODE, decode_record


def _bodies_of(buf) -> list[bytes]:
    """The bodies of a segment's records, up to the BLANK or zeros that end them."""
    bodies, pos = [], 0
    while pos + BLANK_HEAD.size <= len(buf):
        total, magic = BLANK_HEAD.unpack_from(buf, pos)
        if total <= 0 or magic == BLANK_MAGIC_CODE:
            break
        bodies.append(decode_record(buf, pos).body)
        pos += total
    return bodies


def test_segments_of_a_live_store_read_back_every_record_without_its_lock(tmp_path):
    store = open_store(small_config(tmp_path))  # holds the directory's lock
    try:
        sent = [f"body-{i:03d}".encode() * 300 for i in range(80)]  # 216 KB: 4 segments
        for body in sent:
            assert store.put_batch(record(body=body)).ok
        segments = commitlog_segments(str(tmp_path))
        assert len(segments) >= 3
        assert [s.file_from_offset for s in segments] == [
            i * 64 * 1024 for i in range(len(segments))
        ]
        assert all(s.file_size == 64 * 1024 for s in segments)
        assert os.path.basename(segments[1].path) == f"{64 * 1024:020d}"
        read: list[bytes] = []
        for segment in segments:
            with open_segment(segment) as buf:
                read += _bodies_of(buf)
        assert read == sent
    finally:
        store.shutdown()


def test_a_folder_without_a_commit_log_is_not_a_data_directory(tmp_path):
    assert not is_data_directory(str(tmp_path))
    (tmp_path / "commitlog").mkdir()
    assert is_data_directory(str(tmp_path))
    assert commitlog_segments(str(tmp_path)) == []


def test_a_segment_deleted_after_listing_raises_file_not_found(tmp_path):
    store = open_store(small_config(tmp_path))
    assert store.put_batch(record()).ok
    store.shutdown()
    (segment,) = commitlog_segments(str(tmp_path))
    os.unlink(segment.path)
    with pytest.raises(FileNotFoundError), open_segment(segment):
        pass


def test_a_missing_segment_in_the_middle_is_a_store_error(tmp_path):
    (tmp_path / "commitlog").mkdir()
    for start in (0, 2 * 4096):
        (tmp_path / "commitlog" / f"{start:020d}").write_bytes(bytes(4096))
    with pytest.raises(StoreError, match="not contiguous"):
        commitlog_segments(str(tmp_path))


def test_an_empty_segment_file_reads_as_no_bytes(tmp_path):
    (tmp_path / "commitlog").mkdir()
    path = tmp_path / "commitlog" / f"{0:020d}"
    path.write_bytes(b"")
    segment = CommitLogSegment(path=str(path), file_from_offset=0, file_size=4096)
    with open_segment(segment) as buf:
        assert len(buf) == 0
