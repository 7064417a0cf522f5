"""Security from the command line, as a user types it (issue 18, item 11).

``bench`` signs with ``--access-key``/``$POCKETMQ_ACCESS_KEY``; every client command
takes a client certificate (``--tls-cert``/``--tls-key``), so a cluster started with
``--tls-require-client-auth`` is usable; a TLS mismatch gets a hint, not only "Socket
closed"; servers say at start-up whether TLS and the ACL are on; the nameserver's
refusals name the nameserver.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from aclmode import APP_ACL
from clikit import POCKETMQ, CliRun
from clikit import pocketmq as run_pocketmq
from pki import HAVE_OPENSSL, make_pki

from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.nameserver import NameServer, NamesrvConfig

needs_openssl = pytest.mark.skipif(not HAVE_OPENSSL, reason="needs openssl")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POCKETMQ_")}
    return {**env, **extra}


async def pocketmq(*args: str, env: dict[str, str] | None = None) -> CliRun:
    """``.venv/bin/pocketmq ARGS`` with no ``POCKETMQ_*`` variable but those of *env*."""
    return await run_pocketmq(*args, env=env or _env(), timeout_s=120, quiet=False)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    if not HAVE_OPENSSL:
        pytest.skip("needs openssl")
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
async def tls_nameserver(pki):
    server = NameServer(
        NamesrvConfig(
            host="127.0.0.1",
            port=0,
            tls_cert_file=str(pki / "server.pem"),
            tls_key_file=str(pki / "server.key"),
            tls_ca_file=str(pki / "ca.pem"),
            tls_require_client_auth=True,
        )
    )
    await server.start()
    yield server
    await server.stop(0)


@needs_openssl
async def test_client_certificate_flags_reach_a_server_that_requires_them(pki, tls_nameserver):
    tls = ["--tls-ca", str(pki / "ca.pem")]
    cert = ["--tls-cert", str(pki / "client.pem"), "--tls-key", str(pki / "client.key")]
    listed = await pocketmq("cluster", "list", "--namesrv", tls_nameserver.address, *tls, *cert)
    # it got through: the nameserver answered (with no broker, which exits 1 by the rule)
    assert "no live broker is registered" in listed.stderr, listed.stderr
    without = await pocketmq("cluster", "list", "--namesrv", tls_nameserver.address, *tls)
    assert without.returncode == 1
    # gRPC reports it as "Socket closed" or a failed handshake: either way, the hint
    # names the flags that were missing.
    assert "--tls-cert" in without.stderr and "--tls-key" in without.stderr, without.stderr


@needs_openssl
async def test_a_plaintext_client_of_a_tls_server_is_told_to_pass_tls_ca(tls_nameserver):
    result = await pocketmq("cluster", "list", "--namesrv", tls_nameserver.address)
    assert result.returncode == 1
    assert "the server speaks TLS; pass --tls-ca" in result.stderr, result.stderr


@needs_openssl
async def test_a_tls_client_of_a_plaintext_server_is_told_to_drop_tls_ca(pki, nameserver):
    result = await pocketmq(
        "cluster", "list", "--namesrv", nameserver.address, "--tls-ca", str(pki / "ca.pem")
    )
    assert result.returncode == 1
    assert "the server does not speak TLS; drop --tls-ca" in result.stderr, result.stderr


@needs_openssl
async def test_a_nameserver_says_at_start_up_that_tls_and_the_acl_are_on(pki, tmp_path):
    acl = tmp_path / "acl.toml"
    acl.write_text(APP_ACL)
    proc = await asyncio.create_subprocess_exec(
        POCKETMQ,
        "nameserver",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--tls-cert-file",
        str(pki / "server.pem"),
        "--tls-key-file",
        str(pki / "server.key"),
        "--acl-enable",
        "--acl-file",
        str(acl),
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
    )
    try:
        assert proc.stderr is not None
        line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
        while "listening on" not in line and line:
            line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
    finally:
        proc.terminate()
        await proc.wait()
    assert f"TLS on, ACL on ({acl})" in line, line


@pytest.fixture
async def secured(tmp_path, start_broker, eventually):
    acl = tmp_path / "acl.toml"
    acl.write_text(APP_ACL)
    nameserver = NameServer(
        NamesrvConfig(host="127.0.0.1", port=0, acl_enable=True, acl_file=str(acl))
    )
    await nameserver.start()
    broker = await start_broker(
        namesrv_addrs=nameserver.address,
        acl_enable=True,
        acl_file=str(acl),
        access_key="admin",
        secret_key="admin-secret",
    )
    broker.topics.create(
        BrokerTopicConfig(topic_name="orders", read_queue_nums=2, write_queue_nums=2)
    )
    await eventually(
        lambda: nameserver.route_table.get_route("orders") is not None,
        what="the broker registered topic orders",
    )
    yield nameserver, broker
    await broker.stop(0)
    await nameserver.stop(0)


async def test_the_nameserver_refusal_names_the_nameserver(secured):
    nameserver, _ = secured
    result = await pocketmq("cluster", "list", "--namesrv", nameserver.address)
    assert result.returncode == 1
    assert "this nameserver requires signed requests" in result.stderr, result.stderr
    assert "this broker" not in result.stderr


async def test_bench_signs_with_the_access_key_of_the_environment(secured):
    nameserver, _ = secured
    args = (
        "bench",
        "produce",
        "--topic",
        "orders",
        "--count",
        "20",
        "--concurrency",
        "4",
        "--namesrv",
        nameserver.address,
    )
    signed = await pocketmq(
        *args, env=_env(POCKETMQ_ACCESS_KEY="app", POCKETMQ_SECRET_KEY="app-secret")
    )
    assert signed.returncode == 0, signed.stdout + signed.stderr
    summary = json.loads(signed.stdout.splitlines()[-1])
    assert summary["produce"]["acknowledged"] == 20
    unsigned = await pocketmq(*args)
    assert unsigned.returncode == 1


async def test_bench_takes_the_access_key_flags(secured):
    nameserver, _ = secured
    result = await pocketmq(
        "bench",
        "produce",
        "--topic",
        "orders",
        "--count",
        "5",
        "--concurrency",
        "1",
        "--namesrv",
        nameserver.address,
        "--access-key",
        "app",
        "--secret-key",
        "app-secret",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["produce"]["acknowledged"] == 5
