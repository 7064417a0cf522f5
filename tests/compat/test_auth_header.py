"""The ``authorization`` header of RocketMQ 5 clients (MQv2-HMAC-SHA1), checked by the broker."""

from __future__ import annotations

from typing import Any

import pytest

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.errors import NoPermissionError
from pocketmq.broker.grpc_v2.auth import HeaderAuthenticator, sign
from pocketmq.broker.grpc_v2.convert import V2Error
from pocketmq.rmqv2 import definition_pb2 as d

from .conftest import SMALL, Agent, AgentError

USERS = {"rocketmq2": "12345678"}
DATE = "20261122T053045Z"
DATE_MS = 1795325445000  # DATE as ms since the epoch: the signing client's clock


def authenticator() -> HeaderAuthenticator:
    """Signatures of USERS, checked on a clock that reads DATE."""
    return HeaderAuthenticator(USERS.get, clock_ms=lambda: DATE_MS)


async def signed_send_works_and_guessed_fails(agent: Any, endpoints: str) -> tuple[Agent, Any]:
    """Two official producers of topic Secured, one with the user's secret, one with a
    guess: the first sends (returned with what it sent), the second is refused."""
    good, bad = await agent(), await agent()
    await good.call(
        "producer", name="p", endpoints=endpoints, topics=["Secured"], ak="rocketmq2", sk="12345678"
    )
    await bad.call(
        "producer", name="p", endpoints=endpoints, topics=["Secured"], ak="rocketmq2", sk="guessed"
    )
    sent = await good.call("send", producer="p", topic="Secured", body="signed")
    with pytest.raises(AgentError, match="failed to fetch topic"):
        await bad.call("send", producer="p", topic="Secured", body="unsigned")
    return good, sent


def headers(authorization: str, date_time: str = DATE) -> dict[str, str]:
    return {"authorization": authorization, "x-mq-date-time": date_time}


def test_a_signature_made_with_the_users_secret_names_the_user():
    check = authenticator().check
    signature = sign("12345678", DATE)
    good = (
        f"MQv2-HMAC-SHA1 Credential=rocketmq2, SignedHeaders=x-mq-date-time, Signature={signature}"
    )
    assert check(headers(good)) == "rocketmq2"
    assert check(headers(good.replace(signature, signature.upper()))) == "rocketmq2"
    scoped = good.replace("Credential=rocketmq2", "Credential=rocketmq2/20261122/x")
    assert check(headers(scoped)) == "rocketmq2"


@pytest.mark.parametrize(
    "authorization",
    [
        "",
        "AWS4-HMAC-SHA256 Credential=rocketmq2, SignedHeaders=x-mq-date-time, Signature=00",
        "MQv2-HMAC-SHA1 Credential=nobody, SignedHeaders=x-mq-date-time, Signature="
        + sign("12345678", DATE),
        "MQv2-HMAC-SHA1 Credential=rocketmq2, SignedHeaders=x-mq-date-time, Signature="
        + sign("wrong", DATE),
        "MQv2-HMAC-SHA1 Credential=rocketmq2, SignedHeaders=host, Signature="
        + sign("12345678", DATE),
        "MQv2-HMAC-SHA1 Credential=rocketmq2, SignedHeaders=x-mq-date-time, Signature=\u00e9",
        "MQv2-HMAC-SHA1 SignedHeaders=x-mq-date-time",
    ],
    ids=[
        "missing",
        "other-algorithm",
        "unknown-user",
        "wrong-secret",
        "date-not-signed",
        "non-ascii-signature",
        "no-credential",
    ],
)
def test_anything_else_is_unauthorized_with_the_reason(authorization):
    with pytest.raises(V2Error) as refused:
        authenticator().check(headers(authorization))
    assert refused.value.code == d.UNAUTHORIZED
    assert "sign requests with the access key" in refused.value.message


async def test_the_official_client_works_with_its_credentials_and_not_without(
    tmp_path, nameserver, agent
):
    calls: list[tuple[str, str, str, str]] = []

    def authorize(access_key: str, method: str, topic: str, group: str) -> None:
        calls.append((access_key, method, topic, group))
        if topic == "Closed":
            raise NoPermissionError(f"{access_key} may not use topic {topic}")

    broker = Broker(
        BrokerConfig(**SMALL, data_dir=str(tmp_path / "b"), namesrv_addrs=nameserver.address),
        v2_authenticator=HeaderAuthenticator(USERS.get, authorize=authorize),
    )
    await broker.start()
    try:
        good, sent = await signed_send_works_and_guessed_fails(agent, broker.grpc_v2.address)
        with pytest.raises(AgentError, match="failed to fetch topic:Closed"):
            await good.call("send", producer="p", topic="Closed", body="no entry")
    finally:
        await broker.stop(0)
    assert sent["message_id"]
    assert ("rocketmq2", "QueryRoute", "Secured", "") in calls
    assert ("rocketmq2", "SendMessage", "Secured", "") in calls


async def test_the_official_client_is_held_to_the_brokers_acl_file(tmp_path, nameserver, agent):
    acl = tmp_path / "acl.toml"
    acl.write_text(
        '[[accounts]]\naccess_key = "rocketmq2"\nsecret_key = "12345678"\n'
        'default_topic_perm = "DENY"\ntopic_perms = { Secured = "PUB|SUB" }\n'
    )
    broker = Broker(
        BrokerConfig(
            **SMALL,
            data_dir=str(tmp_path / "b"),
            namesrv_addrs=nameserver.address,
            acl_enable=True,
            acl_file=str(acl),
        )
    )
    await broker.start()
    try:
        good, sent = await signed_send_works_and_guessed_fails(agent, broker.grpc_v2.address)
        before = broker.store.runtime_info()["put_messages_total"]
        with pytest.raises(AgentError):
            await good.call("send", producer="p", topic="Closed", body="no PUB here")
        assert broker.store.runtime_info()["put_messages_total"] == before
    finally:
        await broker.stop(0)
    assert sent["message_id"]
