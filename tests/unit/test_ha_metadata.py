"""broker/ha/metadata.py: a snapshot in parts, and back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.broker.ha.metadata import Assembler, MetadataTooLargeError, split
from pocketmq.v1 import common_pb2, ha_pb2

names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40)


def head() -> ha_pb2.MetadataSnapshot:
    snapshot = ha_pb2.MetadataSnapshot(
        data_version=common_pb2.DataVersion(timestamp_ms=7, counter=3),
        master_epoch=2,
        log_end_offset=4096,
    )
    snapshot.delay_offsets[1] = 5
    return snapshot


@given(
    topics=st.lists(names, max_size=60),
    offsets=st.lists(
        st.tuples(names, names, st.integers(0, 7), st.integers(0, 2**40)), max_size=60
    ),
    part_bytes=st.integers(1, 600),
)
def test_the_parts_merged_in_order_are_the_snapshot_and_each_fits_its_bound(
    topics, offsets, part_bytes
):
    configs = [common_pb2.TopicConfig(topic_name=t, read_queue_nums=8) for t in topics]
    entries = [ha_pb2.OffsetEntry(group=g, topic=t, queue_id=q, offset=o) for g, t, q, o in offsets]
    whole = head()
    whole.topic_configs.extend(configs)
    whole.consumer_offsets.extend(entries)
    parts = list(split(head(), configs, entries, part_bytes))
    assembler = Assembler(1 << 30)
    for part in parts:
        assembler.add(part)
        # a part over the bound holds one entry that is larger by itself
        assert (
            part.ByteSize() <= part_bytes
            or len(part.topic_configs) + len(part.consumer_offsets) <= 1
            or part is parts[0]
        )
    assert assembler.snapshot == whole
    assert parts[0].log_end_offset == 4096 and parts[0].master_epoch == 2


def test_a_snapshot_past_the_bound_is_refused_with_the_setting_to_raise():
    entries = [ha_pb2.OffsetEntry(group="g", topic=f"t{i}", offset=i) for i in range(1000)]
    assembler = Assembler(4096)
    with pytest.raises(MetadataTooLargeError, match=r"passes 4096 bytes \(ha_max_metadata_bytes\)"):
        for part in split(head(), [], entries, 1024):
            assembler.add(part)
