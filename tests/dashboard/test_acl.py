"""The dashboard with the cluster's ACL on: a login per browser, actions signed as that user.

The nameserver and broker run with a real ACL file (tests/support/dashkit.py: an
admin account and an ordinary one that may publish and subscribe everything but
is refused the admin RPCs).
"""

from __future__ import annotations

import pytest
from dashkit import ADMIN_KEYS, READER_KEYS, Web


@pytest.fixture
def web(acl_cluster) -> Web:
    return Web(acl_cluster.url)


async def login(web: Web, keys: tuple[str, str]) -> dict:
    status, body = await web.post("/api/login", {"access_key": keys[0], "secret_key": keys[1]})
    assert status == 200, body
    return body


async def test_the_api_asks_for_a_login_when_the_acl_is_on(web):
    status, body = await web.get("/api/session")
    assert status == 200 and body["acl"] is True and body["logged_in"] is False
    status, body = await web.get("/api/cluster")
    assert status == 401 and "log in" in body["error"]


async def test_wrong_keys_are_refused_with_the_clusters_reason(web):
    status, body = await web.post(
        "/api/login", {"access_key": ADMIN_KEYS[0], "secret_key": "wrong"}
    )
    assert status == 401 and ADMIN_KEYS[0] in body["error"]
    status, body = await web.post("/api/login", {"access_key": "nobody", "secret_key": "x"})
    assert status == 401
    assert (await web.get("/api/cluster"))[0] == 401


async def test_the_session_cookie_is_http_only_and_carries_no_key(web):
    await login(web, ADMIN_KEYS)
    cookie = web.last_headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert ADMIN_KEYS[0] not in cookie and ADMIN_KEYS[1] not in cookie


async def test_an_admin_may_read_and_write_as_itself(web, acl_cluster):
    body = await login(web, ADMIN_KEYS)
    assert body == {"logged_in": True, "user": ADMIN_KEYS[0], "can_write": True}
    status, cluster = await web.get("/api/cluster")
    assert status == 200 and cluster["brokers"][0]["role"] == "ASYNC_MASTER"
    status, _ = await web.post(
        "/api/topics", {"topic": "secured", "read_queue_nums": 1, "write_queue_nums": 1}
    )
    assert status == 200 and acl_cluster.broker.topics.get("secured") is not None


async def test_an_ordinary_user_is_read_only_and_its_writes_are_refused(web, acl_cluster):
    body = await login(web, READER_KEYS)
    assert body["can_write"] is False
    status, session = await web.get("/api/session")
    assert session["user"] == READER_KEYS[0] and session["can_write"] is False
    status, body = await web.post(
        "/api/topics", {"topic": "nope", "read_queue_nums": 1, "write_queue_nums": 1}
    )
    assert status == 403 and "read-only" in body["error"]
    assert acl_cluster.broker.topics.get("nope") is None


async def test_a_broker_refusal_of_a_read_reaches_the_page_as_a_403(web):
    await login(web, READER_KEYS)
    status, body = await web.get("/api/topics/TBW102")  # topicStatus is an admin RPC
    assert status == 403 and body["error"].startswith("refused")


async def test_logout_ends_the_session(web):
    await login(web, ADMIN_KEYS)
    status, _ = await web.post("/api/logout", {})
    assert status == 200
    assert (await web.get("/api/cluster"))[0] == 401


async def test_two_browsers_have_sessions_of_their_own(acl_cluster):
    admin, reader = Web(acl_cluster.url), Web(acl_cluster.url)
    await login(admin, ADMIN_KEYS)
    await login(reader, READER_KEYS)
    assert (await admin.get("/api/session"))[1]["user"] == ADMIN_KEYS[0]
    assert (await reader.get("/api/session"))[1]["user"] == READER_KEYS[0]
    forged = Web(acl_cluster.url)
    forged.cookie = "pocketmq_dashboard=not-a-session"
    assert (await forged.get("/api/cluster"))[0] == 401
