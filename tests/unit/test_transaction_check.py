"""TransactionalMessageCheckService stepped with run_once() on a manual clock over a real
store: when checks go out, to whom, how often, the discard after the last one, progress
across a restart; and ClientManager.send_to_producer choosing a live producer."""

from __future__ import annotations

import pytest
from storekit import open_store, small_config

from pocketmq.broker.client_manager import CheckTransactionStateCommand, ClientManager
from pocketmq.broker.errors import FailedPreconditionError
from pocketmq.broker.store.results import GetStatus
from pocketmq.broker.transaction import EndTransactionRequest, TransactionResolver
from pocketmq.broker.transaction_check import TransactionalMessageCheckService
from pocketmq.broker.transaction_ops import Resolution, rewrite_half_messages
from pocketmq.common.clock import ManualClock
from pocketmq.common.message import SysFlag, decode_record, encode_record, pack_host

STORE_HOST = ("127.0.0.1", 10911)
TIMEOUT_MS, INTERVAL_MS, CHECK_MAX = 6_000, 30_000, 3


def prepared(uniq: str, **extra: str) -> bytes:
    return encode_record(
        topic="TopicA",
        body=b"b",
        queue_id=0,
        properties={"UNIQ_KEY": uniq, "TRAN_MSG": "true", "PGROUP": "pg", **extra},
        sysflag=SysFlag.TRANSACTION_PREPARED,
        born_host=pack_host(("10.0.0.9", 4321)),
    )


class Env:
    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.clock = ManualClock()
        self.sent: list[tuple[str, CheckTransactionStateCommand]] = []
        self.producer: str | None = "producer-1"  # None: no producer connected
        self.store = open_store(small_config(tmp_path / "data"), clock=self.clock)
        self._build()

    def _build(self) -> None:
        self.service = TransactionResolver(
            self.store, str(self.tmp_path / "config"), store_host=STORE_HOST, clock=self.clock
        )
        self.service.load()
        self.checker = TransactionalMessageCheckService(
            self.service,
            self.store,
            send_check=self._send,
            store_host=STORE_HOST,
            timeout_ms=TIMEOUT_MS,
            check_interval_ms=INTERVAL_MS,
            check_max=CHECK_MAX,
            clock=self.clock,
        )

    def _send(self, group: str, command) -> str | None:
        if self.producer is not None:
            self.sent.append((group, command))
        return self.producer

    def restart(self) -> None:
        self.service.persist()
        self.store.shutdown()
        self.store = open_store(small_config(self.tmp_path / "data"), clock=self.clock)
        self._build()

    def send_half(self, uniq: str, **extra: str) -> int:
        blob = rewrite_half_messages(
            prepared(uniq, **extra),
            [SysFlag.TRANSACTION_PREPARED],
            producer_group="",
            store_host=STORE_HOST,
        )
        return self.store.put_batch(blob).phys_offsets[0]

    async def step(self, seconds: float = 0.0):
        self.clock.advance(seconds)
        return await self.checker.run_once()

    def checked(self) -> list[tuple[str, int]]:
        return [(command.msg_id, command.check_times) for _group, command in self.sent]


@pytest.fixture
def env(tmp_path):
    env = Env(tmp_path)
    yield env
    env.store.shutdown()


async def test_a_half_is_first_checked_after_the_timeout_then_every_interval(env):
    offset = env.send_half("A")
    round_ = await env.step(5.999)
    assert env.checked() == []
    assert round_.next_due_ms == env.clock.now_ms() + 1  # exactly at the timeout
    await env.step(0.001)
    assert env.checked() == [("A", 1)]
    group, command = env.sent[0]
    assert group == "pg"
    assert command.commit_log_offset == offset
    assert command.offset_msg_id.endswith(f"{offset:016X}")
    assert decode_record(command.record).properties["REAL_TOPIC"] == "TopicA"
    await env.step(29.9)
    assert env.checked() == [("A", 1)]
    await env.step(0.1)
    assert env.checked() == [("A", 1), ("A", 2)]


async def test_a_resolved_half_is_never_checked_and_progress_moves_past_it(env):
    offset = env.send_half("A")
    env.send_half("B")
    await env.service.end_transaction(
        EndTransactionRequest(
            producer_group="pg", commit_log_offset=offset, resolution=Resolution.COMMIT
        )
    )
    await env.step(6)
    assert env.checked() == [("B", 1)]
    assert env.service.progress.half_offset == 1  # B, pending, holds it
    await env.service.end_transaction(
        EndTransactionRequest(
            producer_group="pg",
            commit_log_offset=env.sent[0][1].commit_log_offset,
            resolution=Resolution.ROLLBACK,
        )
    )
    round_ = await env.step(30)
    assert (env.checked(), round_.pending, round_.next_due_ms) == ([("B", 1)], 0, None)
    assert env.service.progress.half_offset == 2
    assert env.service.progress.op_offset == 2


async def test_after_the_last_check_a_half_is_discarded_as_rolled_back(env, caplog):
    offset = env.send_half("A")
    await env.step(6)
    for _ in range(CHECK_MAX - 1):
        await env.step(30)
    assert [n for _id, n in env.checked()] == [1, 2, 3]
    round_ = await env.step(30)
    assert round_.discarded == 1 and round_.pending == 0
    assert env.checked()[-1] == ("A", 3)
    assert "still unresolved after 3 checks; discarded" in caplog.text
    copy = env.store.get_messages("TRANS_CHECK_MAX_TIME_TOPIC", 0, 0)
    assert decode_record(copy.records[0]).uniq_key == "A"
    with pytest.raises(FailedPreconditionError, match="discarded"):
        await env.service.end_transaction(
            EndTransactionRequest(
                producer_group="pg", commit_log_offset=offset, resolution=Resolution.COMMIT
            )
        )
    late_rollback = await env.service.end_transaction(
        EndTransactionRequest(
            producer_group="pg", commit_log_offset=offset, resolution=Resolution.ROLLBACK
        )
    )
    assert late_rollback.already_resolved
    assert env.store.get_messages("TopicA", 0, 0).status is not GetStatus.FOUND


async def test_checks_with_no_producer_connected_count_and_are_logged(env, caplog):
    env.producer = None
    env.send_half("A")
    round_ = await env.step(6)
    assert (round_.checked, round_.unanswerable) == (0, 1)
    assert "no producer of the group is connected" in caplog.text
    for _ in range(CHECK_MAX):
        round_ = await env.step(30)
    assert round_.discarded == 1


async def test_check_immunity_time_postpones_the_first_check(env):
    env.send_half("A", CHECK_IMMUNITY_TIME_IN_SECONDS="20")
    await env.step(19.9)
    assert env.checked() == []
    await env.step(0.1)
    assert env.checked() == [("A", 1)]


async def test_check_counts_and_progress_survive_a_restart(env):
    env.send_half("A")
    env.send_half("B")
    await env.step(6)
    await env.step(30)
    assert env.checked() == [("A", 1), ("B", 1), ("A", 2), ("B", 2)]
    env.restart()
    env.sent.clear()
    await env.step(0)  # checked before: asked again at once, counting on
    assert env.checked() == [("A", 3), ("B", 3)]
    round_ = await env.step(30)
    assert round_.discarded == 2


async def test_a_new_half_wakes_an_idle_service(env):
    round_ = await env.step(0)
    assert round_.next_due_ms is None
    env.store.add_arrival_listener(env.checker.on_arrival)
    env.send_half("A")
    assert env.checker._wake.is_set()


# -- choosing a producer ----------------------------------------------------------------------
def check_command(n: int = 1) -> CheckTransactionStateCommand:
    return CheckTransactionStateCommand(
        producer_group="pg",
        record=b"",
        commit_log_offset=0,
        offset_msg_id="",
        msg_id="A",
        check_times=n,
    )


def test_checks_go_to_live_producers_of_the_group_in_turn():
    clients = ClientManager(broker_name="broker-a", clock=ManualClock())
    assert clients.send_to_producer("pg", check_command()) is None
    for client_id in ("p1", "p2", "p3"):
        clients.heartbeat(client_id, producer_groups=["pg"])
    clients.heartbeat("other", producer_groups=["other-group"])
    clients.open_channel("other")
    assert clients.send_to_producer("pg", check_command()) is None  # none has a channel
    channels = {cid: clients.open_channel(cid) for cid in ("p1", "p2", "p3")}
    clients.close_channel(channels["p2"])  # p2 died
    chosen = [clients.send_to_producer("pg", check_command()) for _ in range(4)]
    assert chosen == ["p1", "p3", "p1", "p3"]
