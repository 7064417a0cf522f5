"""Epoch file and the consistent-point rule a diverged replica is cut by (KIP-101, KIP-279)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.broker.store.epochs import EpochEntry, EpochFile, consistent_point
from pocketmq.common.errors import ConfigError

E = EpochEntry


def test_epoch_file_survives_a_reload_and_forgets_terms_past_a_cut(tmp_path):
    f = EpochFile(str(tmp_path / "epochs"))
    f.load()
    f.begin(1, 0)
    f.begin(3, 500)
    f.begin(4, 900)
    again = EpochFile(f.path)
    assert again.load() == [E(1, 0), E(3, 500), E(4, 900)]
    assert again.truncate(900) == [E(1, 0), E(3, 500)]
    assert EpochFile(f.path).load() == [E(1, 0), E(3, 500)]


def test_a_new_term_that_starts_where_an_empty_one_did_replaces_it(tmp_path):
    f = EpochFile(str(tmp_path / "epochs"))
    f.begin(1, 0)
    f.begin(2, 100)
    f.begin(3, 100)
    assert f.entries == [E(1, 0), E(3, 100)]


def test_an_epoch_that_does_not_grow_is_refused(tmp_path):
    f = EpochFile(str(tmp_path / "epochs"))
    f.begin(2, 0)
    with pytest.raises(ValueError, match="not above"):
        f.begin(2, 10)
    with pytest.raises(ValueError, match="not above"):
        f.begin(1, 10)


def test_a_damaged_epoch_file_names_the_line(tmp_path):
    path = tmp_path / "epochs"
    path.write_text("1 0\n2 x\n")
    with pytest.raises(ConfigError, match=r"epochs:2: '2 x'"):
        EpochFile(str(path)).load()
    path.write_text("3 0\n2 10\n")
    with pytest.raises(ConfigError, match="does not follow"):
        EpochFile(str(path)).load()


def test_empty_replica_starts_at_zero_and_an_unrelated_log_has_no_point():
    assert consistent_point([], 0, [E(1, 0)], 500) == 0
    assert consistent_point([E(7, 0)], 300, [E(1, 0), E(2, 100)], 500) is None
    assert consistent_point([], 300, [E(1, 0)], 500) is None


def test_kip_101_scenario_1_replica_keeps_what_the_leader_also_has():
    # the replica fetched to 200 in epoch 1; the leader of epoch 1 wrote to 150 only
    # before it crashed and lost its tail; it was re-elected as epoch 2 at 150.
    assert consistent_point([E(1, 0)], 200, [E(1, 0), E(2, 150)], 400) == 150


def test_kip_101_scenario_2_diverged_tails_are_cut_at_the_epoch_boundary():
    # both wrote different records after 100 under different epochs
    replica = [E(1, 0), E(2, 100)]  # the old master of epoch 2 wrote [100, 180)
    master = [E(1, 0), E(3, 100)]  # the new master of epoch 3 wrote [100, 260)
    assert consistent_point(replica, 180, master, 260) == 100


def test_kip_279_the_common_epoch_is_the_newest_with_the_same_start():
    # replica saw epoch 2 start at 100 and 3 at 150 (its own term, never copied);
    # the master has epoch 2 up to 170 and then 4
    replica = [E(1, 0), E(2, 100), E(3, 150)]
    master = [E(1, 0), E(2, 100), E(4, 170)]
    assert consistent_point(replica, 190, master, 300) == 150
    # the same epoch number at another start offset is not shared history
    assert consistent_point([E(1, 0), E(2, 120)], 200, master, 300) == 100


def test_a_replica_behind_in_the_same_epoch_keeps_everything():
    assert consistent_point([E(1, 0), E(2, 100)], 130, [E(1, 0), E(2, 100)], 400) == 130


# -- property: the point never keeps a byte the two logs do not share -----------------------


@st.composite
def histories(draw):
    """A shared log, then two diverging tails written under distinct later epochs.

    Returns both epoch lists with their ends and the true length of the shared prefix.
    """
    shared: list[EpochEntry] = []
    offset, epoch = 0, 0
    for _ in range(draw(st.integers(1, 4))):
        epoch += draw(st.integers(1, 3))
        shared.append(E(epoch, offset))
        offset += draw(st.integers(0, 50))
    common_end = offset

    def tail(first_epoch: int) -> tuple[list[EpochEntry], int]:
        entries, off, ep = list(shared), common_end, first_epoch
        for _ in range(draw(st.integers(0, 3))):
            entries.append(E(ep, off))
            off += draw(st.integers(1, 50))
            ep += draw(st.integers(1, 2)) * 2
        return entries, off

    # distinct epochs for the two sides: odd for one, even for the other
    base = epoch + 1
    local, local_end = tail(base if base % 2 else base + 1)
    remote, remote_end = tail(base + 1 if base % 2 else base)
    return local, local_end, remote, remote_end, common_end


@settings(max_examples=300, deadline=None)
@given(histories())
def test_consistent_point_is_exactly_the_shared_prefix_of_diverged_logs(h):
    local, local_end, remote, remote_end, common_end = h
    assert consistent_point(local, local_end, remote, remote_end) == common_end
    assert consistent_point(remote, remote_end, local, local_end) == common_end


@settings(max_examples=300, deadline=None)
@given(histories(), st.data())
def test_a_replica_that_is_a_prefix_of_the_master_keeps_all_of_it(h, data):
    _local, _local_end, remote, remote_end, _common_end = h
    cut = data.draw(st.integers(0, remote_end))
    prefix = [e for e in remote if e.start_offset < cut] or ([] if cut == 0 else remote[:1])
    assert consistent_point(prefix, cut, remote, remote_end) == cut
