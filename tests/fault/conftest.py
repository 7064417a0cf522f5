"""Fault-suite fixtures: real server processes (``kit``) and the summary table.

Each fault test reports one row through ``fault_report.add(...)``; after the
session the terminal summary prints them::

    fault                                   acked   lost  promised lost  recovered in
    kill -9 broker, sync flush               1500      0  0              1.20 s
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import aclmode
import pytest
from processkit import ProcessKit


@dataclass(frozen=True, slots=True)
class FaultRow:
    fault: str
    acknowledged: int
    lost: int
    promised: str  # "0" where no acknowledged message may be lost, else what is
    recover_s: float | None


_ROWS: list[FaultRow] = []


class FaultReport:
    def add(
        self,
        fault: str,
        *,
        acknowledged: int,
        lost: int,
        promised: str = "0",
        recover_s: float | None = None,
    ) -> None:
        _ROWS.append(FaultRow(fault, acknowledged, lost, promised, recover_s))


@pytest.fixture(autouse=True)
def _acl_mode(monkeypatch, tmp_path) -> None:
    """POCKETMQ_TEST_ACL=1: servers with the ACL on, clients signing (tests/support/aclmode)."""
    aclmode.install(monkeypatch.setattr, tmp_path)


@pytest.fixture
def fault_report() -> FaultReport:
    return FaultReport()


@pytest.fixture
async def kit(tmp_path) -> AsyncIterator[ProcessKit]:
    """Server processes of one test; whatever is left running is killed at teardown."""
    processes = ProcessKit(tmp_path)
    try:
        yield processes
    finally:
        await processes.close()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if not _ROWS:
        return
    write = terminalreporter.write_line
    terminalreporter.section("fault summary")
    width = max(len(r.fault) for r in _ROWS)
    promised = max(len("promised lost"), *(len(r.promised) for r in _ROWS))
    write(
        f"{'fault':<{width}}  {'acked':>7}  {'lost':>6}  {'promised lost':<{promised}}  "
        "recovered in"
    )
    for r in _ROWS:
        recovered = "-" if r.recover_s is None else f"{r.recover_s:.2f} s"
        write(
            f"{r.fault:<{width}}  {r.acknowledged:>7}  {r.lost:>6}  "
            f"{r.promised:<{promised}}  {recovered}"
        )
