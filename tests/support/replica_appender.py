"""A replica's store that appends a master's log and stops between append and dispatch.

    python replica_appender.py MASTER_DIR REPLICA_DIR

Copies the master's whole log frame by frame (frames of at most 8 KiB), dispatching
every frame but the last, which is appended without its dispatch (what a replica
has acknowledged before dispatching), prints ``APPENDED <end offset>`` and waits to
be killed: the parent sends SIGKILL with the frame in the log and not in the
consume queues or index.
"""

from __future__ import annotations

import sys
import time

from storekit import small_config

from pocketmq.broker.store.message_store import DefaultMessageStore


def main() -> None:
    master = DefaultMessageStore(small_config(sys.argv[1]))
    master.start()
    replica = DefaultMessageStore(small_config(sys.argv[2]))
    replica.start()
    end = master.commitlog.max_offset
    while replica.commitlog.max_offset < end:
        offset = replica.commitlog.max_offset
        data = master.read_for_replica(offset, 8 * 1024)
        last = offset + len(data) >= end
        replica.append_replicated(offset, data, dispatch=not last)
    master.shutdown()
    assert replica.undispatched is not None, "the last frame was dispatched"
    # the checkpoint written now claims only what was dispatched
    replica.flush_round()
    print(f"APPENDED {replica.commitlog.max_offset} {replica.dispatched_offset}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
