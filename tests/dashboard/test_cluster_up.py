"""`pocketmq cluster up --dashboard-port P` runs the dashboard beside the cluster, and
docker-compose.yml's dashboard service runs the command `cluster up` would."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import yaml
from processkit import free_port_run

from pocketmq.cli import build_parser
from pocketmq.cli.cluster_cmd import dashboard_command

ROOT = Path(__file__).resolve().parents[2]


async def http_get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


async def test_cluster_up_with_a_dashboard_port_serves_the_dashboard(tmp_path, eventually):
    namesrv, broker, web = free_port_run(1), free_port_run(2), free_port_run(1)
    small = tmp_path / "small.toml"
    small.write_text("commitlog_file_size_bytes = 16777216\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pocketmq",
        "cluster",
        "up",
        "--brokers",
        "1",
        "--data-dir",
        str(tmp_path / "cluster"),
        "--namesrv-port",
        str(namesrv),
        "--broker-port",
        str(broker),
        "--v2-port",
        "-1",
        "--dashboard-port",
        str(web),
        "--config",
        str(small),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "POCKETMQ_LOG_LEVEL": "WARNING"},
    )
    try:
        banner = b""
        while b"Ctrl-C stops the cluster" not in banner:
            line = await asyncio.wait_for(proc.stdout.readline(), 90)
            assert line, f"cluster up ended before its banner:\n{banner.decode()}"
            banner += line
        assert f"dashboard: http://127.0.0.1:{web}/".encode() in banner

        async def broker_listed() -> bool:
            status, body = await http_get(web, "/api/cluster")
            return status == 200 and [b["broker_name"] for b in json.loads(body)["brokers"]] == [
                "broker-a"
            ]

        await eventually(broker_listed, timeout_s=30, what="broker-a on the dashboard")
        status, page = await http_get(web, "/")
        assert status == 200 and b"PocketMQ" in page
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        rest = await asyncio.wait_for(proc.stdout.read(), 90)
        code = await proc.wait()
    assert code == 0, rest.decode()
    assert (tmp_path / "cluster" / "logs" / "dashboard.log").exists()


def test_cluster_up_refuses_a_dashboard_port_out_of_range(tmp_path, capsys):
    from pocketmq.cli import main

    code = main(["cluster", "up", "--data-dir", str(tmp_path), "--dashboard-port", "70000"])
    assert code == 2 and "--dashboard-port" in capsys.readouterr().err


def test_the_compose_dashboard_runs_the_cluster_up_command_on_every_interface():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    dashboard = services["dashboard"]
    command = dashboard["command"]
    args = build_parser().parse_args(command)
    assert command == dashboard_command(namesrv=args.namesrv, host="0.0.0.0", port=args.port)
    assert (
        args.namesrv
        == services["demo-consumer"]["command"][
            services["demo-consumer"]["command"].index("--namesrv") + 1
        ]
    )
    assert dashboard["ports"] == [f"{args.port}:{args.port}"]
    assert set(dashboard["depends_on"]) >= {"broker-a", "broker-b"}
    assert dashboard["environment"]["POCKETMQ_ACCESS_KEY"]  # signs the charts' sampling
