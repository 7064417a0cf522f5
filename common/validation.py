"""Names and limits checked before anything reaches the store.

RocketMQ's rules (``TopicValidator``): a topic is 1..127 characters of
``[%|a-zA-Z0-9_-]``; a consumer or producer group is 1..120 of the same set.
Each check returns ``None`` when the value is fine, else a sentence a person
can act on, so that a servicer turns it into a gRPC status unchanged.
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_GROUP_LENGTH",
    "MAX_TOPIC_LENGTH",
    "check_group",
    "check_topic",
    "check_topic_like",
]

MAX_TOPIC_LENGTH = 127
MAX_GROUP_LENGTH = 120
_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def _check_name(kind: str, name: str, limit: int) -> str | None:
    if not name:
        return f"{kind} name is empty"
    if len(name) > limit:
        return f"{kind} name is {len(name)} characters; at most {limit} are allowed"
    if not _NAME.match(name):
        bad = sorted({c for c in name if not _NAME.match(c)})
        return (
            f"{kind} name {name!r} contains {''.join(bad)!r}; only letters, digits "
            f"and %|_- are allowed"
        )
    return None


def check_topic(topic: str) -> str | None:
    return _check_name("topic", topic, MAX_TOPIC_LENGTH)


def check_group(group: str) -> str | None:
    return _check_name("group", group, MAX_GROUP_LENGTH)


def check_topic_like(kind: str, name: str) -> str | None:
    """A name RocketMQ also uses as a topic (a broker's or a cluster's): the topic rules,
    with *kind* ("broker", "cluster") naming it in the sentence."""
    return _check_name(kind, name, MAX_TOPIC_LENGTH)
