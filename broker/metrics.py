"""The broker's Prometheus metrics: a collector that reads live values at scrape time.

Served on ``metrics_port`` by :class:`~pocketmq.common.metrics_http.MetricsHttpServer`
from the broker's own event loop, from a registry of its own (several brokers
may share a process). Nothing is updated in the background: each scrape reads
:class:`~pocketmq.broker.stats.BrokerStatsManager`, the store's figures and
flush timings, the long-polling service and the consumer offsets. Names and
units, RocketMQ's dashboard figures in Prometheus' conventions::

    pocketmq_broker_info{broker_name,cluster,broker_id,address,version}   1
    pocketmq_put_messages_total{topic}      messages stored for producers
    pocketmq_put_bytes_total{topic}         their record bytes
    pocketmq_get_messages_total{topic}      messages returned by pulls
    pocketmq_get_bytes_total{topic}
    pocketmq_put_latency_seconds            histogram: send received -> acknowledged
    pocketmq_flush_latency_seconds{kind}    histogram: one sync of the commit log
                                            (group commit or the flush service) or
                                            of the consume queues and index
    pocketmq_store_size_bytes               commit-log bytes held (max - min offset)
    pocketmq_store_disk_used_ratio          of the filesystem holding the data directory
    pocketmq_flush_lag_bytes                commit-log bytes written, not yet synced
    pocketmq_dispatch_lag_bytes             commit-log bytes not yet in consume queues
    pocketmq_parked_pulls                   long polls waiting for a message
    pocketmq_requests_in_flight             requests being served (flow control's count)
    pocketmq_requests_refused_busy_total    requests answered SYSTEM_BUSY (over the limits)
    pocketmq_consumer_lag_messages{group,topic}   unconsumed messages (broker max
                                            offset - committed offset, over the
                                            topic's read queues)

plus the ``process_*`` metrics of prometheus-client's process collector.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from pocketmq import __version__
from pocketmq.broker.store.flush import DurationHistogram
from pocketmq.broker.store.io import StoreIO
from pocketmq.common.metrics_http import MetricsHttpServer

if TYPE_CHECKING:
    from pocketmq.broker.broker import Broker

__all__ = ["BrokerCollector", "histogram_buckets", "start_broker_metrics"]


def histogram_buckets(histogram: DurationHistogram) -> list[tuple[str, float]]:
    """Prometheus' cumulative ``(le, count)`` pairs of a DurationHistogram."""
    return [
        ("+Inf" if bound == float("inf") else repr(bound), count)
        for bound, count in histogram.cumulative()
    ]


def _disk_used_ratio(path: str) -> float:
    try:
        return StoreIO().disk_used_ratio(path)
    except OSError:
        return float("nan")


class BrokerCollector:
    """Reads one broker's figures when Prometheus scrapes (after ``Broker.start``)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def collect(self) -> Iterator[Metric]:
        broker = self._broker
        cfg = broker.config
        yield InfoMetricFamily(
            "pocketmq_broker",
            "the broker's identity and version",
            value={
                "broker_name": cfg.broker_name,
                "cluster": cfg.cluster_name,
                "broker_id": str(cfg.broker_id),
                "address": broker.address,
                "version": __version__,
            },
        )
        yield from self._traffic()
        yield from self._store()
        if broker.hold is not None:
            yield GaugeMetricFamily(
                "pocketmq_parked_pulls",
                "long polls waiting for a message (max_parked_pulls)",
                value=broker.hold.parked_count,
            )
        if broker.flow_control is not None:
            flow = broker.flow_control
            yield GaugeMetricFamily(
                "pocketmq_requests_in_flight",
                "requests being served now (max_in_flight_requests)",
                value=flow.in_flight,
            )
            yield CounterMetricFamily(
                "pocketmq_requests_refused_busy",
                "requests refused with SYSTEM_BUSY over the in-flight limits",
                value=flow.refused_total,
            )
        yield self._consumer_lag()

    def _traffic(self) -> Iterator[Metric]:
        stats = self._broker.stats
        families = {
            name: CounterMetricFamily(f"pocketmq_{name}", text, labels=["topic"])
            for name, text in (
                ("put_messages", "messages stored for producers"),
                ("put_bytes", "record bytes stored for producers"),
                ("get_messages", "messages returned to pulling consumers"),
                ("get_bytes", "record bytes returned to pulling consumers"),
            )
        }
        for topic, t in sorted(stats.topics.items()):
            for name, value in (
                ("put_messages", t.put_messages),
                ("put_bytes", t.put_bytes),
                ("get_messages", t.get_messages),
                ("get_bytes", t.get_bytes),
            ):
                families[name].add_metric([topic], value)
        yield from families.values()
        latency = stats.put_latency
        yield HistogramMetricFamily(
            "pocketmq_put_latency_seconds",
            "time from a send's arrival to its acknowledgement (sync flush included)",
            buckets=histogram_buckets(latency),
            sum_value=latency.sum_s,
        )

    def _store(self) -> Iterator[Metric]:
        store = self._broker.store
        if store is None:
            return
        flush = HistogramMetricFamily(
            "pocketmq_flush_latency_seconds",
            "duration of one sync: kind=commitlog (group commit or the flush service), "
            "kind=consume_queue (consume queues, index and checkpoint)",
            labels=["kind"],
        )
        for kind, histogram in sorted(store.flush_durations.items()):
            flush.add_metric([kind], histogram_buckets(histogram), histogram.sum_s)
        yield flush
        info = store.runtime_info()
        max_offset = int(info["commitlog_max_offset"])
        for name, text, value in (
            (
                "store_size_bytes",
                "commit-log bytes held (max offset - min offset)",
                max_offset - int(info["commitlog_min_offset"]),
            ),
            (
                "store_disk_used_ratio",
                "used share of the filesystem holding the data directory",
                _disk_used_ratio(self._broker.config.data_dir),
            ),
            (
                "flush_lag_bytes",
                "commit-log bytes written but not yet synced to disk",
                max_offset - int(info["commitlog_flushed_offset"]),
            ),
            (
                "dispatch_lag_bytes",
                "commit-log bytes not yet dispatched to consume queues and index (reput)",
                max_offset - int(info["dispatched_offset"]),
            ),
        ):
            yield GaugeMetricFamily(f"pocketmq_{name}", text, value=value)

    def _consumer_lag(self) -> Metric:
        """Per group and topic with stored offsets: broker max offset - consumer offset,
        summed over the topic's read queues (a queue without an offset counts whole),
        as ``pocketmq group progress`` shows it."""
        family = GaugeMetricFamily(
            "pocketmq_consumer_lag_messages",
            "messages not yet consumed by the group",
            labels=["group", "topic"],
        )
        broker = self._broker
        store, offsets, topics = broker.store, broker.offsets, broker.topics
        if store is None or offsets is None or topics is None:
            return family
        for group, group_topics in sorted(offsets.group_topics().items()):
            for topic in group_topics:
                config = topics.get(topic)
                if config is None:
                    continue
                lag = 0
                for queue_id in range(config.read_queue_nums):
                    committed = offsets.query(group, topic, queue_id) or 0
                    lag += max(0, store.max_offset(topic, queue_id) - committed)
                family.add_metric([group, topic], lag)
        return family


async def start_broker_metrics(broker: Broker, port: int) -> MetricsHttpServer:
    """Serve *broker*'s registry on its host and *port* (0 = any free port)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker))
    ProcessCollector(registry=registry)
    server = MetricsHttpServer(
        registry, host=broker.config.host, port=port, name=f"broker {broker.config.broker_name}"
    )
    await server.start()
    return server
