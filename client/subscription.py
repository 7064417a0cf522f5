"""SubscriptionState: what a consumer reads, subscribed topics or queues it was given.

A consumer either subscribes to topics (their queues divided among the group's
members by the rebalance) or is assigned queues (``PullConsumer.assign``:
exactly those, no rebalance, read with one selector given to ``assign``);
the two do not mix. A push consumer in
clustering mode also reads its group's retry topic (``%RETRY%{group}``), every
tag, once it subscribes to anything.

Each subscription is a :class:`~pocketmq.common.filter.MessageSelector`; for a
tag expression the tag set is kept too, since the broker filters by tag hash
codes (which can collide) and the pulled messages are checked again by string.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pocketmq.client.consumer_base import parse_subscription
from pocketmq.client.errors import ClientStateError
from pocketmq.client.model import MessageQueue
from pocketmq.common.filter import MessageSelector
from pocketmq.common.validation import check_topic

__all__ = ["SubscriptionState"]

_ALL = MessageSelector.by_tag("*")


class SubscriptionState:
    """Topics -> selectors (or assigned queues) of one consumer.

    *retry_topic*: the topic read besides the subscriptions (push, clustering).
    ``on_change``, when set, hears of every change (the rebalance wakes up).
    """

    def __init__(self, *, retry_topic: str | None = None) -> None:
        self._retry_topic = retry_topic
        self._selectors: dict[str, MessageSelector] = {}
        self._tag_sets: dict[str, frozenset[str] | None] = {}
        #: assign()ed queues; None while the consumer subscribes (or has done neither)
        self.assigned: set[MessageQueue] | None = None
        # what assign()ed queues are read with (every topic of the assignment)
        self._assigned_selector = _ALL
        self._assigned_tags: frozenset[str] | None = None
        self.on_change: Callable[[], None] | None = None

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        if self.assigned is not None:
            raise ClientStateError(
                "this consumer uses assign(); subscribe() and assign() do not mix"
            )
        problem = check_topic(topic)
        if problem:
            raise ValueError(problem)
        selector, tags = _parse(expression)
        self._tag_sets[topic] = tags
        self._selectors[topic] = selector
        self._changed()

    def unsubscribe(self, topic: str) -> None:
        self._selectors.pop(topic, None)
        self._tag_sets.pop(topic, None)
        self._changed()

    def assign(
        self, queues: Iterable[MessageQueue], expression: str | MessageSelector = "*"
    ) -> None:
        """Read exactly *queues*, the messages *expression* selects (as :meth:`subscribe`
        takes it: tags or a MessageSelector); replaces any earlier assignment."""
        if self._selectors:
            raise ClientStateError(
                "this consumer uses subscribe(); subscribe() and assign() do not mix"
            )
        queues = set(queues)
        selector, tags = _parse(expression)  # checked before anything changes
        self._assigned_selector, self._assigned_tags = selector, tags
        self.assigned = queues
        self._changed()

    @property
    def subscriptions(self) -> dict[str, MessageSelector]:
        """The topics subscribed to, as given (a copy)."""
        return dict(self._selectors)

    def all(self) -> dict[str, MessageSelector]:
        """The subscriptions plus the retry topic (when this consumer reads one)."""
        subs = dict(self._selectors)
        if self._retry_topic is not None and subs:
            subs.setdefault(self._retry_topic, _ALL)
        return subs

    def selector(self, topic: str) -> MessageSelector:
        """What the broker is asked to filter *topic* by: its subscription's selector, the
        assignment's (assigned queues), else every tag."""
        return self._selectors.get(topic) or self._assigned_selector

    def tags(self, topic: str) -> frozenset[str] | None:
        """The tags of *topic*'s tag expression; None: every message passes."""
        if topic in self._tag_sets:
            return self._tag_sets[topic]
        return self._assigned_tags

    @property
    def assigned_selector(self) -> MessageSelector:
        """What assigned queues are read with (every tag unless assign() was given one)."""
        return self._assigned_selector

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


def _parse(expression: str | MessageSelector) -> tuple[MessageSelector, frozenset[str] | None]:
    """(the selector, its tag set: None for every tag or an SQL92 filter); ValueError
    (SqlFilterError for SQL92) when the expression is not one."""
    selector = MessageSelector.of(expression)
    return selector, None if selector.is_sql else parse_subscription(selector.expression)
