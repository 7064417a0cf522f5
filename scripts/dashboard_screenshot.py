"""Regenerate docs/dashboard-cluster.png: the dashboard's Cluster page under a little load.

    .venv/bin/python scripts/dashboard_screenshot.py [--seconds 60] [--out FILE.png]

Starts a nameserver and two brokers in-process (port 0, data in a temporary
directory) and the dashboard beside them, sends and consumes messages at a rate
that rises and falls for ``--seconds``, then has headless chromium (Debian's
``chromium`` and ``chromedriver``, as the browser tests use) screenshot the page.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
import time
from pathlib import Path

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import ConsumeResult, Message, Producer, PushConsumer
from pocketmq.dashboard import Dashboard, DashboardConfig
from pocketmq.nameserver import NameServer, NamesrvConfig

ROOT = Path(__file__).resolve().parents[1]


async def load(namesrv: str, seconds: float) -> None:
    consumer = PushConsumer(group="billing", namesrv=namesrv, consume_from="first")
    consumer.subscribe("orders")

    @consumer.listener
    async def handle(messages: list) -> ConsumeResult:
        return ConsumeResult.CONSUME_SUCCESS

    await consumer.start()
    async with Producer(group="demo-pg", namesrv=namesrv) as producer:
        start = time.monotonic()
        i = 0
        while (elapsed := time.monotonic() - start) < seconds:
            rate = 40 + 35 * math.sin(elapsed / seconds * 2 * math.pi)
            await asyncio.gather(
                *(
                    producer.send(Message(topic="orders", body=b"o" * 200, keys=[f"order-{i + n}"]))
                    for n in range(max(1, int(rate / 5)))
                )
            )
            i += int(rate / 5)
            await asyncio.sleep(0.2)
    await consumer.shutdown()


def screenshot(url: str, out: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(url + "/#/cluster")
        time.sleep(3)  # a script, not a test: let the page draw its first refresh
        driver.save_screenshot(str(out))
    finally:
        driver.quit()


async def main(seconds: float, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="pocketmq-shot-") as tmp:
        namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
        await namesrv.start()
        brokers = []
        for name in ("broker-a", "broker-b"):
            broker = Broker(
                BrokerConfig(
                    broker_name=name,
                    port=0,
                    grpc_v2_port=-1,
                    data_dir=f"{tmp}/{name}",
                    namesrv_addrs=namesrv.address,
                    commitlog_file_size_bytes=16 * 1024 * 1024,
                    index_slots=1024,
                    index_entries=65536,
                )
            )
            await broker.start()
            broker.topics.create(
                BrokerTopicConfig(topic_name="orders", read_queue_nums=4, write_queue_nums=4)
            )
            brokers.append(broker)
        dashboard = Dashboard(DashboardConfig(namesrv=namesrv.address, port=0, interval_s=1.0))
        await dashboard.start()
        try:
            await asyncio.sleep(2)  # registration of the new topic
            await load(namesrv.address, seconds)
            await asyncio.to_thread(screenshot, dashboard.url, out)
        finally:
            await dashboard.stop()
            for broker in brokers:
                await broker.stop(0)
            await namesrv.stop(0)
    print(f"wrote {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard-cluster.png")
    args = parser.parse_args()
    asyncio.run(main(args.seconds, args.out))
