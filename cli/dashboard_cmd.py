"""``pocketmq dashboard``: the web dashboard (:mod:`pocketmq.dashboard`) until Ctrl-C.

::

    pocketmq dashboard --namesrv 127.0.0.1:9876 [--port 8080] [--host 127.0.0.1]
                       [--access-key K --secret-key S] [--tls-ca PEM]
                       [--interval 5] [--prometheus-url http://prometheus:9090]

With the cluster's ACL on, every browser logs in with its own keys; the keys
given here only sign the dashboard's own sampling for the charts (give an
admin account's, or the charts stay empty and say why).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from pocketmq.cli import loop_factory
from pocketmq.cli.credentials import add_security_options, security_kwargs
from pocketmq.cli.serve import stop_signals
from pocketmq.client.config import DEFAULT_NAMESRV, NAMESRV_ENV
from pocketmq.common.errors import ConfigError

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dashboard",
        help="serve the web dashboard (cluster, topics, groups, messages)",
        description="Serve PocketMQ's web dashboard: brokers, topics, consumer groups and "
        "their lag, messages, dead letters and traces, with live charts of the "
        "last hour. Stops on SIGTERM/SIGINT.",
    )
    parser.add_argument(
        "--namesrv",
        default=None,
        help=f"nameserver(s) 'host:port;host:port' (default ${NAMESRV_ENV}, "
        f"then {DEFAULT_NAMESRV})",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address the web server listens on (default 127.0.0.1; 0.0.0.0 for every interface)",
    )
    parser.add_argument("--port", type=int, default=8080, help="web port (default 8080)")
    parser.add_argument(
        "--interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="between two samples of the charts (default 5)",
    )
    parser.add_argument(
        "--prometheus-url",
        default="",
        metavar="URL",
        help="a Prometheus server scraping the brokers: the charts link "
        "to it for more than the last hour",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="deadline of each admin call (default 5)",
    )
    add_security_options(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from pocketmq.dashboard import Dashboard, DashboardConfig

    keys = security_kwargs(args)
    try:
        config = DashboardConfig(
            namesrv=args.namesrv or os.environ.get(NAMESRV_ENV, DEFAULT_NAMESRV),
            host=args.host,
            port=args.port,
            access_key=keys["access_key"],
            secret_key=keys["secret_key"],
            tls_ca=keys["tls_ca_file"],
            timeout_s=args.timeout,
            interval_s=args.interval,
            prometheus_url=args.prometheus_url,
        )
    except ConfigError as exc:
        print(f"pocketmq dashboard: {exc}", file=sys.stderr)
        return 2
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(_serve(Dashboard(config)))


async def _serve(dashboard: Any) -> int:
    with stop_signals(asyncio.Event()) as stop:  # from before start: a SIGTERM while
        return await _serve_until(dashboard, stop)  # starting stops it once started


async def _serve_until(dashboard: Any, stop: asyncio.Event) -> int:
    try:
        await dashboard.start()
    except OSError as exc:
        print(f"pocketmq dashboard: {exc}", file=sys.stderr)
        await dashboard.stop()
        return 1
    print(
        f"PocketMQ dashboard on {dashboard.url}/ (nameservers "
        f"{';'.join(dashboard.namesrv)}); Ctrl-C stops it.",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await dashboard.stop()
    return 0
