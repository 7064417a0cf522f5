"""Model-based: random appends, partial copies, promotions and rejoins over real stores.

Two in-process stores of one broker name take turns as master. Each step is
one of: the master appends a batch (SYNC: acknowledged only once the other
store holds it; ASYNC: at once), the replica copies a few frames, the
replica drops its session, or a failover (the replica is promoted with a new
epoch, the old master rejoins as its replica through the handshake: cut by
epoch, wiped when nothing is shared). The handshake and apply steps are the
ones ``HaClient`` runs (``ReplicationMaster.handshake``, ``truncate_to`` /
``wipe``, the master's epochs up to the start, then ``append_replicated``).

After every step:
* the replica's log, once its session is up, is a byte prefix of the master's;
* every record acknowledged under SYNC is in the master's log;
* every epoch file is ordered and ends at or before its log's end.
"""

from __future__ import annotations

import random

import pytest
from storekit import open_store, record, small_config

from pocketmq.broker.ha.master import HandshakeRefusedError, ReplicationMaster, _epoch_at
from pocketmq.broker.store import PutStatus
from pocketmq.broker.store.epochs import EpochEntry


def log_bytes(store) -> bytes:
    out = bytearray()
    for mf in store.commitlog.queue.files:
        out += mf.read(0, mf.wrote_position)
    return bytes(out)


class Node:
    def __init__(self, path, name):
        self.store = open_store(small_config(path / name))
        self.name = name
        self.service = ReplicationMaster(
            self.store,
            broker_name="b",
            batch_bytes=6000,
            heartbeat_s=1,
            housekeeping_s=60,
            fallbehind_max_bytes=1 << 30,
            min_sync_replicas=1,
            is_master=lambda: True,
        )


def join(master: Node, replica: Node, seen: int) -> bool:
    """The handshake as HaClient runs it; False when refused."""
    store = replica.store
    try:
        welcome = master.service.handshake(
            broker_name="b",
            replica_id=1,
            max_offset=store.commitlog.max_offset,
            epochs=list(store.epochs.entries),
            highest_epoch_seen=seen,
        )
    except HandshakeRefusedError:
        return False
    if welcome.truncate_to == -1:
        store.wipe()
    elif welcome.truncate_to < store.commitlog.max_offset:
        store.truncate_to(welcome.truncate_to)
    shared = [e for e in welcome.epochs if e.start_offset <= welcome.start_offset]
    if shared != store.epochs.entries:
        store.epochs.replace(shared)
    return True


def copy(master: Node, replica: Node, frames: int) -> None:
    src, dst = master.store, replica.store
    for _ in range(frames):
        offset = dst.commitlog.max_offset
        epoch, start, stop = _epoch_at(list(src.epochs.entries), offset)
        data = src.read_for_replica(offset, 6000, stop)
        if not data:
            return
        if epoch > dst.epochs.last_epoch:
            dst.epochs.begin(epoch, start)
        dst.append_replicated(offset, data)


@pytest.mark.parametrize("sync", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_no_sync_ack_is_lost_and_replicas_hold_prefixes(tmp_path, seed, sync):
    rng = random.Random(seed)
    master, replica = Node(tmp_path, "a"), Node(tmp_path, "b")
    master.store.epochs.begin(1, 0)
    session = join(master, replica, 0)
    acked: dict[str, bytes] = {}
    n = 0
    try:
        for _step in range(60):
            op = rng.random()
            if op < 0.45:
                uniq = [f"u{n + i}" for i in range(rng.randint(1, 6))]
                n += len(uniq)
                blob = b"".join(
                    record(body=u.encode() * rng.randint(1, 300), uniq=u, queue_id=rng.randrange(2))
                    for u in uniq
                )
                assert master.store.put_batch(blob).status is PutStatus.PUT_OK
                if sync and session and rng.random() < 0.7:
                    copy(master, replica, 1000)  # the replica acks: SEND_OK
                    acked.update((u, blob) for u in uniq)
                elif not sync:
                    acked.update((u, blob) for u in uniq)
            elif op < 0.7 and session:
                copy(master, replica, rng.randint(1, 4))
            elif op < 0.8:
                session = False
            elif op < 0.9 and not session:
                session = join(master, replica, master.store.epochs.last_epoch)
            else:
                # failover: promote the replica (after what it holds), the old master rejoins
                if not session:
                    session = join(master, replica, master.store.epochs.last_epoch)
                    if not session:
                        continue
                old_epoch = master.store.epochs.last_epoch
                replica.store.epochs.begin(old_epoch + 1, replica.store.commitlog.max_offset)
                master, replica = replica, master
                if not sync:  # ASYNC: what the old master wrote alone was never safe
                    keep = log_bytes(master.store)
                    acked = {u: b for u, b in acked.items() if u.encode() in keep}
                session = join(master, replica, old_epoch + 1)
                assert session
            mine, theirs = log_bytes(replica.store), log_bytes(master.store)
            if session:
                assert theirs.startswith(mine), f"step {_step}: the replica's log diverged"
            for u in acked:
                assert u.encode() in theirs, f"step {_step}: acknowledged {u} lost"
            for node in (master, replica):
                entries = node.store.epochs.entries
                assert entries == sorted(entries)
                assert all(e.start_offset <= node.store.commitlog.max_offset for e in entries)
        # at the end the replica catches up whole
        if not session:
            assert join(master, replica, master.store.epochs.last_epoch)
        copy(master, replica, 10_000)
        assert log_bytes(replica.store) == log_bytes(master.store)
        assert (
            replica.store.epochs.entries[-1] == EpochEntry(*master.store.epochs.entries[-1])
            or replica.store.commitlog.max_offset == master.store.epochs.entries[-1].start_offset
        )
    finally:
        master.store.shutdown()
        replica.store.shutdown()
