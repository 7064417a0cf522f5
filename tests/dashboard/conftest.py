"""Fixtures of the dashboard tests: a real cluster with a dashboard (tests/support/dashkit.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from dashkit import DashCluster, started_cluster


@pytest.fixture
async def dash_cluster(tmp_path, eventually) -> AsyncIterator[DashCluster]:
    async with started_cluster(tmp_path) as cluster:
        await eventually(
            lambda: cluster.namesrv.route_table.cluster_info().live_brokers,
            what="the broker registered",
        )
        await cluster.dashboard.history.stop()  # the tests step it with run_once()
        yield cluster


@pytest.fixture
async def acl_cluster(tmp_path, eventually) -> AsyncIterator[DashCluster]:
    async with started_cluster(tmp_path, acl=True) as cluster:
        await eventually(
            lambda: cluster.namesrv.route_table.cluster_info().live_brokers,
            what="the broker registered",
        )
        yield cluster
