"""Request signatures (common/auth.py) and their check (security/interceptor.py)."""

from __future__ import annotations

import grpc
import pytest

from pocketmq.common.auth import (
    ACCESS_KEY_HEADER,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Credentials,
    canonical_string,
    signed_metadata,
)
from pocketmq.security.acl import Acl, AclStore
from pocketmq.security.interceptor import AclError, AclInterceptor
from pocketmq.v1 import broker_pb2 as pb

NOW = 1_763_800_000_000
PULL = "/pocketmq.v1.Broker/PullMessage"
ACL = """
global_white_remote_addresses = ["10.9.*.*"]
[[accounts]]
access_key = "app"
secret_key = "app-secret"
default_topic_perm = "DENY"
default_group_perm = "DENY"
topic_perms = { orders = "PUB|SUB" }
group_perms = { billing = "SUB" }
"""


@pytest.fixture
def interceptor(tmp_path):
    path = tmp_path / "acl.toml"
    path.write_text(ACL)
    return AclInterceptor(AclStore(str(path)), clock_ms=lambda: NOW)


def pull(topic="orders", group="billing"):
    return pb.PullMessageRequest(topic=topic, consumer_group=group)


APP = Credentials("app", "app-secret")


def headers(request, method=PULL, now=NOW):
    return dict(signed_metadata(APP, method, request, now_ms=now))


def test_the_canonical_string_names_method_time_user_and_resources():
    assert canonical_string(PULL, NOW, "app", ["orders", "billing"]) == (
        f"{PULL}\n{NOW}\napp\norders\nbilling".encode()
    )


def test_a_signed_request_is_admitted_with_its_account(interceptor):
    account = interceptor.check(PULL, pull(), headers(pull()), "127.0.0.1")
    assert account is not None and account.access_key == "app"


@pytest.mark.parametrize(
    ("tamper", "code", "words"),
    [
        (
            lambda h: {**h, SIGNATURE_HEADER: "AAAA"},
            grpc.StatusCode.UNAUTHENTICATED,
            "does not match",
        ),
        (
            lambda h: {k: v for k, v in h.items() if k != ACCESS_KEY_HEADER},
            grpc.StatusCode.UNAUTHENTICATED,
            "carries no x-pocketmq-access-key",
        ),
        (
            lambda h: {**h, ACCESS_KEY_HEADER: "nobody"},
            grpc.StatusCode.UNAUTHENTICATED,
            "'nobody' is unknown",
        ),
        (
            lambda h: {**h, TIMESTAMP_HEADER: "soon"},
            grpc.StatusCode.UNAUTHENTICATED,
            "not milliseconds",
        ),
    ],
)
def test_a_tampered_request_is_refused(interceptor, tamper, code, words):
    with pytest.raises(AclError) as refused:
        interceptor.check(PULL, pull(), tamper(headers(pull())), "127.0.0.1")
    assert refused.value.code is code and words in refused.value.message


def test_a_signature_does_not_carry_over_to_another_topic(interceptor):
    with pytest.raises(AclError, match="does not match"):
        interceptor.check(PULL, pull(topic="payments"), headers(pull()), "127.0.0.1")


@pytest.mark.parametrize("skew_s", [-301, 301])
def test_a_request_outside_the_replay_window_is_refused_saying_by_how_much(interceptor, skew_s):
    old = headers(pull(), now=NOW + skew_s * 1000)
    with pytest.raises(AclError, match=f"signed {abs(skew_s)} s"):
        interceptor.check(PULL, pull(), old, "127.0.0.1")


def test_permissions_follow_topic_and_group_tables(interceptor):
    for request, words in (
        (pull(topic="payments"), "no SUB permission on topic 'payments'"),
        (pull(group="other"), "no SUB permission on group 'other'"),
    ):
        with pytest.raises(AclError, match=words) as refused:
            interceptor.check(PULL, request, headers(request), "127.0.0.1")
        assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED


def test_admin_requests_need_an_admin(interceptor):
    method = "/pocketmq.v1.Broker/CreateTopic"
    request = pb.CreateTopicRequest()
    with pytest.raises(AclError, match="CreateTopic is an admin request"):
        interceptor.check(method, request, headers(request, method), "127.0.0.1")


def test_a_trusted_address_needs_no_signature(interceptor):
    assert interceptor.check(PULL, pull(), {}, "10.9.1.2") is None


def test_the_secret_never_shows_in_a_repr():
    assert "app-secret" not in repr(Credentials("app", "app-secret"))
    assert "app-secret" not in repr(
        Acl.parse({"accounts": [{"access_key": "app", "secret_key": "app-secret"}]}, "acl.toml")
    )


def test_rocketmq5_signatures_and_permissions_come_from_the_same_acl(tmp_path):
    from pocketmq.broker.errors import NoPermissionError
    from pocketmq.broker.grpc_v2.auth import acl_authenticator, sign

    path = tmp_path / "acl.toml"
    path.write_text(ACL)
    auth = acl_authenticator(AclStore(str(path)), clock_ms=lambda: 1795325445000)  # = date
    date = "20261122T053045Z"
    headers = {
        "x-mq-date-time": date,
        "authorization": f"MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time, "
        f"Signature={sign('app-secret', date)}",
    }
    assert auth.check(headers) == "app"
    auth._authorize("app", "SendMessage", "orders", "")
    auth._authorize("app", "ReceiveMessage", "orders", "billing")
    with pytest.raises(NoPermissionError, match="no PUB permission on topic 'payments'"):
        auth._authorize("app", "SendMessage", "payments", "")
    with pytest.raises(NoPermissionError, match="no SUB permission on group 'other'"):
        auth._authorize("app", "AckMessage", "orders", "other")


def test_the_signature_covers_every_field_of_the_body(interceptor):
    signed = pb.PullMessageRequest(topic="orders", consumer_group="billing", queue_offset=5)
    altered = pb.PullMessageRequest(topic="orders", consumer_group="billing", queue_offset=6)
    with pytest.raises(AclError, match="does not match"):
        interceptor.check(PULL, altered, headers(signed), "127.0.0.1")


def test_the_same_signed_request_twice_is_a_refused_replay(interceptor):
    once = headers(pull())
    interceptor.check(PULL, pull(), once, "127.0.0.1")
    with pytest.raises(AclError, match="a replay is refused") as refused:
        interceptor.check(PULL, pull(), once, "127.0.0.1")
    assert refused.value.code is grpc.StatusCode.UNAUTHENTICATED
    interceptor.check(PULL, pull(), headers(pull()), "127.0.0.1")  # signed anew: fine


def test_a_request_without_a_nonce_is_refused_as_an_older_scheme(interceptor):
    old = {k: v for k, v in headers(pull()).items() if k != NONCE_HEADER}
    with pytest.raises(AclError, match="older scheme"):
        interceptor.check(PULL, pull(), old, "127.0.0.1")
