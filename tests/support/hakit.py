"""Master and replica broker processes of one broker name, for replication fault tests.

``HaGroup`` starts a nameserver-registered master (broker id 0) and replicas
(SLAVE, ids above 0) of one broker name as real processes, each with its own
data directory and fixed ports (so a test restarts a broker in place), and
offers what the tests check with: runtime info, promotion over the
``PromoteToMaster`` RPC, waiting until a replica holds its master's whole
log, byte comparison of two commit logs, and fast bulk writes over raw
``SendBatch``::

    group = HaGroup(kit, "SYNC_MASTER")
    await group.start_namesrv()
    master = await group.start("m")                       # broker id 0
    replica = await group.start("r", broker_id=1)          # SLAVE
    await group.wait_caught_up(master, replica)
    assert_same_logs(group.dir("m"), group.dir("r"))
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path
from typing import Any

import grpc
from processkit import MiB, ProcessKit, ServerProcess, free_port

from pocketmq.common.message import encode_record, pack_host
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

__all__ = [
    "HaGroup",
    "assert_same_logs",
    "bulk_write",
    "pair_configs",
    "promote",
    "runtime_info",
    "send_raw",
]

# Short timers, so that a replica notices a dead master (and the other way round) fast.
HA_FAST: dict[str, Any] = dict(
    ha_heartbeat_interval_ms=200,
    ha_housekeeping_interval_ms=3000,
    slave_timeout_ms=1500,
    register_interval_seconds=1,
    grpc_v2_port=-1,
)


def pair_configs(
    broker_config: Any,
    namesrv: str,
    role: str = "SYNC_MASTER",
    *,
    replica: dict[str, Any] | None = None,
    **common: Any,
) -> tuple[Any, Any]:
    """(master config, replica config) of broker name broker-a for in-process brokers
    (the integration tests' ``broker_config`` factory): a master of *role* (broker id 0)
    and its SLAVE (id 1), data in ``master``/``replica``, ports 0, registering with
    *namesrv* every 0.2 s; *common* settings go to both, *replica* ones to the replica."""
    both = dict(
        broker_name="broker-a",
        port=0,
        ha_port=0,
        namesrv_addrs=namesrv,
        grpc_v2_port=-1,
        register_interval_seconds=0.2,
        **common,
    )
    return (
        broker_config("master", broker_role=role, broker_id=0, **both),
        broker_config("replica", broker_role="SLAVE", broker_id=1, **{**both, **(replica or {})}),
    )


async def runtime_info(addr: str) -> dict[str, str]:
    async with grpc.aio.insecure_channel(addr) as channel:
        reply = await broker_pb2_grpc.BrokerStub(channel).GetBrokerRuntimeInfo(
            pb.GetBrokerRuntimeInfoRequest(), timeout=10
        )
    return dict(reply.table)


async def promote(addr: str, *, role: str = "", epoch: int = 0) -> pb.PromoteToMasterResponse:
    async with grpc.aio.insecure_channel(addr) as channel:
        return await broker_pb2_grpc.BrokerStub(channel).PromoteToMaster(
            pb.PromoteToMasterRequest(role=role, epoch=epoch), timeout=30
        )


def _record(topic: str, queue_id: int, body: bytes, uniq: str) -> bytes:
    return encode_record(
        topic=topic,
        body=body,
        queue_id=queue_id,
        properties={"UNIQ_KEY": uniq, "WAIT": "true"},
        born_timestamp_ms=1,
        born_host=pack_host(("127.0.0.1", 1)),
    )


async def send_raw(
    addr: str, topic: str, queue_id: int, bodies: list[bytes], *, uniq_prefix: str
) -> pb.SendMessageResponse:
    """One SendBatch of *bodies* to one queue, over plain gRPC."""
    blob = b"".join(
        _record(topic, queue_id, body, f"{uniq_prefix}-{i}") for i, body in enumerate(bodies)
    )
    async with grpc.aio.insecure_channel(addr) as channel:
        return await broker_pb2_grpc.BrokerStub(channel).SendBatch(
            pb.SendBatchRequest(producer_group="ha-bulk", records=blob), timeout=30
        )


async def bulk_write(
    addr: str,
    topic: str,
    *,
    total_bytes: int,
    queues: int = 4,
    batch_bytes: int = 2 * MiB,
    body_bytes: int = 1024,
    senders: int = 4,
) -> int:
    """Write about *total_bytes* of records with concurrent SendBatch calls; returns the
    messages written. Each sender resends one prepared batch (the broker gives every
    copy its own offsets), so the client costs little CPU."""
    per_batch = max(1, batch_bytes // (body_bytes + 200))
    blobs = [
        b"".join(
            _record(topic, q, b"%08d" % i + b"b" * (body_bytes - 8), f"bulk{q}-{i}")
            for i in range(per_batch)
        )
        for q in range(queues)
    ]
    batch_size = len(blobs[0])
    batches = max(1, total_bytes // batch_size)
    next_batch = iter(range(batches))
    written = 0

    async def sender(stub: broker_pb2_grpc.BrokerStub) -> None:
        nonlocal written
        for n in next_batch:
            reply = await stub.SendBatch(
                pb.SendBatchRequest(producer_group="ha-bulk", records=blobs[n % queues]), timeout=60
            )
            assert reply.status == pb.SEND_OK, pb.SendStatus.Name(reply.status)
            written += per_batch

    async with grpc.aio.insecure_channel(
        addr, options=[("grpc.max_send_message_length", 64 * MiB)]
    ) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await asyncio.gather(*(sender(stub) for _ in range(senders)))
    return written


def _segments(data_dir: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted((data_dir / "commitlog").iterdir()) if p.is_file()}


def _digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(8 * MiB):
            h.update(chunk)
    return h.hexdigest()


def assert_same_logs(a: Path, b: Path) -> int:
    """The two data directories hold byte-identical commit-log segment files (same
    names, same bytes); returns the number of segments compared."""
    sa, sb = _segments(a), _segments(b)
    assert sorted(sa) == sorted(sb), f"segment files differ: {sorted(sa)} vs {sorted(sb)}"
    for name in sa:
        da, db = _digest(sa[name]), _digest(sb[name])
        assert da == db, f"segment {name} differs between {a} and {b}"
    return len(sa)


class HaGroup:
    """Brokers of one broker name as processes; ports and data directories fixed per name."""

    def __init__(
        self,
        kit: ProcessKit,
        master_role: str = "SYNC_MASTER",
        *,
        broker_name: str = "broker-a",
        **options: Any,
    ) -> None:
        self.kit = kit
        self.master_role = master_role
        self.broker_name = broker_name
        self.options = {**HA_FAST, **options}
        self.namesrv: ServerProcess | None = None
        self.ports: dict[str, tuple[int, int]] = {}

    async def start_namesrv(self) -> ServerProcess:
        self.namesrv = await self.kit.nameserver()
        return self.namesrv

    def dir(self, name: str) -> Path:
        return self.kit.work_dir / name

    def ha_addr(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name][1]}"

    async def start(
        self, name: str, *, broker_id: int = 0, role: str = "", **options: Any
    ) -> ServerProcess:
        """Broker *name* (its data directory and ports); id 0 is a master of
        ``master_role`` unless *role* says otherwise, other ids are SLAVEs."""
        if name not in self.ports:
            self.ports[name] = (free_port(), free_port())
        port, ha_port = self.ports[name]
        assert self.namesrv is not None
        role = role or (self.master_role if broker_id == 0 else "SLAVE")
        return await self.kit.broker(
            self.broker_name,
            namesrv=self.namesrv.addr,
            port=port,
            data_dir=self.dir(name),
            broker_role=role,
            broker_id=broker_id,
            ha_port=ha_port,
            **{**self.options, **options},
        )

    async def wait_caught_up(
        self, master: ServerProcess, replica: ServerProcess, *, timeout_s: float = 30.0
    ) -> float:
        """Until *replica* is connected and holds *master*'s whole log (idle master);
        returns the seconds it took."""
        started = time.monotonic()
        while True:
            mine, theirs = await asyncio.gather(
                runtime_info(replica.addr), runtime_info(master.addr)
            )
            if (
                mine.get("ha_connected") == "true"
                and mine["commitlog_max_offset"] == theirs["commitlog_max_offset"]
            ):
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                raise AssertionError(
                    f"replica at {mine['commitlog_max_offset']} of master's "
                    f"{theirs['commitlog_max_offset']} after {timeout_s} s "
                    f"(connected {mine.get('ha_connected')}, last error "
                    f"{mine.get('ha_last_error', '-')})"
                )
            await asyncio.sleep(0.05)
