"""A replica's check and dispatch of a frame in one call: ``frame_dispatch``.

The compiled ``frame_dispatch`` checks a master's frame as ``scan_frame`` does
and returns the consume-queue runs and index entries the replica writes, or
None for a frame that needs ``scan_frame``'s way (idempotence stamps, the
schedule topic, a queue whose offsets are not one run). Over real logs with
non-ASCII tags and keys, prepared records, several store timestamps and
damaged frames, it must return and raise exactly what ``py_frame_dispatch``
does. (``test_replica_dispatch`` checks that a replica applying frames this way
leaves the files the reference path leaves.)
"""

from __future__ import annotations

import os
import random

import pytest
from storekit import open_store, record, replica_frames, small_config

from pocketmq.broker.store import PutStatus, speedups
from pocketmq.broker.store import replica_frames as rf
from pocketmq.broker.store.batch import BatchError
from pocketmq.common.clock import ManualClock
from pocketmq.common.message import HOST_V4_SIZE, POS_QUEUEOFFSET, SysFlag

needs_native = pytest.mark.skipif(
    speedups.NATIVE is None or not hasattr(speedups.NATIVE, "frame_dispatch"),
    reason="the store's extension is not built",
)


def _stamped(n: int, i: int) -> str:
    """A UNIQ_KEY slot with an idempotent producer's stamp (client/idempotence.py)."""
    return f"s{n}-{i}\x02PMQ_IDEM\x01{7 + n}.0.{i}"


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    """A log of mixed topics, queues, tags and keys (some not ASCII, one outside the
    BMP), prepared records, stamped records and store timestamps."""
    store = open_store(small_config(tmp_path_factory.mktemp("m")), clock=ManualClock())
    rng = random.Random(17)
    for n in range(150):
        kind = rng.random()
        batch = b"".join(
            record(
                topic=rng.choice(["orders", "audit", "payments"]),
                queue_id=rng.randrange(4),
                body=b"%d:" % n + os.urandom(rng.randint(0, 1500)),
                tags=rng.choice(["", "a", "b", "é", "標籤"]),
                keys=rng.choice(["", f"k{n}", f"k{n}  ключ{n}", f"\U0001f511{n}"]),
                uniq=_stamped(n, i) if kind < 0.05 else f"u{n}-{i}",
                sysflag=SysFlag.TRANSACTION_PREPARED if rng.random() < 0.05 else 0,
            )
            for i in range(rng.randint(1, 8))
        )
        assert store.put_batch(batch).status is PutStatus.PUT_OK
        if rng.random() < 0.5:
            store.clock.advance(rng.random() / 50)  # type: ignore[attr-defined]
    yield store
    store.shutdown()


def outcome(dispatch, frame: bytes, base: int, after: int = -1, index: bool = True):
    try:
        return dispatch(frame, base, HOST_V4_SIZE, after, index)
    except BatchError as exc:
        return ("error", exc.kind, str(exc))


@needs_native
def test_frame_dispatch_matches_the_reference_on_a_real_log(master):
    rng = random.Random(3)
    ready = fallback = 0
    for offset, frame in replica_frames(master, 1, 120):
        after = rng.choice([-1, offset + len(frame) // 2, offset + len(frame)])
        index = rng.random() < 0.8
        expected = outcome(rf.py_frame_dispatch, frame, offset, after, index)
        assert outcome(speedups.NATIVE.frame_dispatch, frame, offset, after, index) == expected
        assert expected is None or expected[0] != "error"
        ready += expected is not None
        fallback += expected is None
    assert ready > 40
    assert fallback > 5  # stamped records, a prepared record closing a queue's run


@needs_native
def test_frame_dispatch_refuses_what_scan_frame_refuses(master):
    rng = random.Random(4)
    refused = 0
    for offset, frame in replica_frames(master, 5, 60):
        damaged = bytearray(frame)
        kind = rng.randrange(4)
        if kind == 0:  # a flipped byte anywhere: CRC, framing, topic or properties
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        elif kind == 1:  # cut short
            damaged = damaged[: rng.randrange(1, len(damaged))]
        elif kind == 2:  # bound for another place in the log
            offset += rng.choice([-1, 1, 4096])
        else:  # one record's PHYSICALOFFSET rewritten
            damaged[POS_QUEUEOFFSET + 8 + 7] ^= 0x10
        expected = outcome(rf.py_frame_dispatch, bytes(damaged), offset)
        assert outcome(speedups.NATIVE.frame_dispatch, bytes(damaged), offset) == expected
        try:
            rf.py_scan_frame(bytes(damaged), offset, HOST_V4_SIZE)
        except BatchError as exc:
            assert expected == ("error", exc.kind, str(exc))
            refused += 1
        else:
            assert expected is None or expected[0] != "error"
    assert refused > 40


@needs_native
def test_frame_dispatch_refuses_an_empty_frame_and_a_wrong_host_size():
    for dispatch in (speedups.NATIVE.frame_dispatch, rf.py_frame_dispatch):
        with pytest.raises(BatchError, match="holds no records"):
            dispatch(b"", 0, HOST_V4_SIZE, -1, True)
        with pytest.raises(ValueError, match="STOREHOST is 8 or 20"):
            dispatch(record(), 0, 12, -1, True)
