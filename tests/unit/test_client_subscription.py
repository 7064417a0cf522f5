"""SubscriptionState: what a consumer reads (client/subscription.py)."""

from __future__ import annotations

import pytest

from pocketmq.client import ClientStateError, MessageQueue, MessageSelector
from pocketmq.client.subscription import SubscriptionState


def test_a_push_consumer_in_clustering_mode_also_reads_its_retry_topic_once_subscribed():
    state = SubscriptionState(retry_topic="%RETRY%cg")
    assert state.all() == {}
    state.subscribe("orders", "paid || refunded")
    assert set(state.all()) == {"orders", "%RETRY%cg"}
    assert state.selector("%RETRY%cg").expression == "*"
    assert set(state.subscriptions) == {"orders"}


def test_tags_are_kept_for_tag_expressions_and_not_for_sql_filters():
    state = SubscriptionState()
    state.subscribe("orders", "paid || refunded")
    state.subscribe("audit", MessageSelector.by_sql("region = 'eu'"))
    assert state.tags("orders") == {"paid", "refunded"}
    assert state.tags("audit") is None
    assert state.selector("audit").is_sql
    assert state.tags("unsubscribed") is None and state.selector("unsubscribed").expression == "*"


def test_every_change_is_heard_by_the_listener():
    heard: list[str] = []
    state = SubscriptionState()
    state.on_change = lambda: heard.append("changed")
    state.subscribe("orders")
    state.unsubscribe("orders")
    assert heard == ["changed", "changed"]


def test_subscribe_and_assign_do_not_mix():
    subscribed = SubscriptionState()
    subscribed.subscribe("orders")
    with pytest.raises(ClientStateError, match="uses subscribe"):
        subscribed.assign([MessageQueue("orders", "broker-a", 0)])
    assigned = SubscriptionState()
    assigned.assign([MessageQueue("orders", "broker-a", 0)])
    with pytest.raises(ClientStateError, match="uses assign"):
        assigned.subscribe("orders")


def test_a_bad_topic_or_an_empty_tag_list_is_refused():
    state = SubscriptionState()
    with pytest.raises(ValueError):
        state.subscribe("bad topic!")
    with pytest.raises(ValueError, match="names no tags"):
        state.subscribe("orders", "||")
    assert state.all() == {}
