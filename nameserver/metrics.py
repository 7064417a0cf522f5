"""The nameserver's Prometheus metrics, read from the route table at scrape time.

Served on ``metrics_port`` by :class:`~pocketmq.common.metrics_http.MetricsHttpServer`
from the nameserver's event loop, from a registry of its own::

    pocketmq_nameserver_info{address,version}          1
    pocketmq_registered_brokers{cluster}               live broker addresses (masters
                                                       and slaves) of each cluster
    pocketmq_nameserver_topics                         topics with a route
    pocketmq_nameserver_registrations_total            RegisterBroker calls accepted
    pocketmq_nameserver_unregistrations_total          brokers removed by UnregisterBroker
    pocketmq_nameserver_expirations_total              brokers dropped for silence

plus the ``process_*`` metrics of prometheus-client's process collector.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)

from pocketmq import __version__
from pocketmq.common.metrics_http import MetricsHttpServer

if TYPE_CHECKING:
    from pocketmq.nameserver.server import NameServer

__all__ = ["NameServerCollector", "start_nameserver_metrics"]


class NameServerCollector:
    def __init__(self, nameserver: NameServer) -> None:
        self._nameserver = nameserver

    def collect(self) -> Iterator[Metric]:
        table = self._nameserver.route_table
        yield InfoMetricFamily(
            "pocketmq_nameserver",
            "the nameserver's address and version",
            value={"address": self._nameserver.address, "version": __version__},
        )
        brokers = GaugeMetricFamily(
            "pocketmq_registered_brokers",
            "live broker addresses (masters and slaves) per cluster",
            labels=["cluster"],
        )
        live = Counter(info.broker.cluster for info in table.cluster_info().live_brokers)
        for cluster, count in sorted(live.items()):
            brokers.add_metric([cluster], count)
        yield brokers
        yield GaugeMetricFamily(
            "pocketmq_nameserver_topics", "topics with a route", value=len(table.topics())
        )
        counters = table.counters
        for name, text, value in (
            ("registrations", "RegisterBroker calls accepted", counters.registrations),
            ("unregistrations", "brokers removed by UnregisterBroker", counters.unregistrations),
            ("expirations", "brokers dropped after their heartbeat expired", counters.expirations),
        ):
            yield CounterMetricFamily(f"pocketmq_nameserver_{name}", text, value=value)


async def start_nameserver_metrics(nameserver: NameServer, port: int) -> MetricsHttpServer:
    """Serve *nameserver*'s registry on its host and *port* (0 = any free port)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NameServerCollector(nameserver))
    ProcessCollector(registry=registry)
    server = MetricsHttpServer(registry, host=nameserver.config.host, port=port, name="nameserver")
    await server.start()
    return server
