"""Reading a broker's Prometheus ``/metrics`` (broker/metrics.py) as the charts need it.

A broker with a ``metrics_port`` counts messages per topic
(``pocketmq_put_messages_total{topic}``, ``pocketmq_get_messages_total{topic}``),
which its runtime info does not: one scrape gives every topic's totals at once,
so the dashboard charts get TPS per topic from it. The scrape is one bounded
HTTP GET (``MAX_SCRAPE_BYTES``, ``timeout_s``) parsed by prometheus-client's own
text parser.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from pocketmq.dashboard.errors import DashboardError

__all__ = ["MAX_SCRAPE_BYTES", "ScrapeError", "topic_totals"]

MAX_SCRAPE_BYTES = 16 * 1024 * 1024
_COUNTERS = {"pocketmq_put_messages_total": "put", "pocketmq_get_messages_total": "get"}


class ScrapeError(DashboardError):
    """The broker's /metrics did not answer, or not in the text format."""


async def _get(host: str, port: int, timeout_s: float) -> str:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    try:
        writer.write(
            f"GET /metrics HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Accept: text/plain\r\nConnection: close\r\n\r\n".encode("latin-1")
        )
        await writer.drain()
        data = await asyncio.wait_for(reader.read(MAX_SCRAPE_BYTES + 1), timeout_s)
    finally:
        writer.close()
    if len(data) > MAX_SCRAPE_BYTES:
        raise ScrapeError(f"/metrics of {host}:{port} is over {MAX_SCRAPE_BYTES} bytes")
    head, _, body = data.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    if not status_line.startswith("HTTP/1.1 200"):
        raise ScrapeError(f"/metrics of {host}:{port} answered {status_line!r}")
    return body.decode("utf-8", "replace")


async def topic_totals(
    host: str,
    port: int,
    *,
    timeout_s: float = 3.0,
) -> dict[str, dict[str, float]]:
    """``{"put": {topic: messages}, "get": {topic: messages}}`` from one broker."""
    try:
        text = await _get(host, port, timeout_s)
    except (OSError, TimeoutError) as exc:
        raise ScrapeError(f"/metrics of {host}:{port}: {exc}") from None
    totals: dict[str, dict[str, float]] = defaultdict(dict)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                kind = _COUNTERS.get(sample.name)
                if kind is not None and "topic" in sample.labels:
                    totals[kind][sample.labels["topic"]] = sample.value
    except ValueError as exc:
        raise ScrapeError(f"/metrics of {host}:{port} does not parse: {exc}") from None
    return dict(totals)
