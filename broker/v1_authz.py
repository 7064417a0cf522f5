"""What a v1 request touches beyond the fields that name it, authorized (RocketMQ's rule).

The ACL interceptor (``security/interceptor.py``) checks the topic and group a
request names in its own fields. This module checks the rest, once the
servicer has read it, for the account being served (``current_account``):

=====================  ====================================================================
request                what else it touches, and what that needs
=====================  ====================================================================
PullMessage,           the topic (each queue's, for PullBatch / LockBatchMQ): SUB, and not
PullBatch, QueryMsg,   a broker system topic (:data:`NOT_ALLOWED_READ_TOPICS`: delayed, timed
ViewMessage,           and uncommitted messages of every topic). System topics are refused to
LockBatchMQ            every caller but an admin account, with or without the ACL
ConsumerSendMsgBack    the record at the offset: its topic and its first topic (RETRY_TOPIC)
                       SUB, and a topic the group subscribes to, has offsets in, or its own
                       retry topic; one refusal for every reason (:func:`send_back_guard`)
EndTransaction         the half's real topic (REAL_TOPIC): PUB
HeartBeat              each producer group: PUB or SUB; each consumer group and subscribed
                       topic: SUB; at most :data:`MAX_HEARTBEAT_GROUPS` groups and
                       :data:`MAX_HEARTBEAT_SUBSCRIPTIONS` subscriptions
CheckTransactionStateCommand  sent only to producers whose key has PUB on the half's real topic
                       (:func:`transaction_check_filter`)
=====================  ====================================================================

Client ids belong to the access key that registered them (``ClientManager``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pocketmq.broker.client_manager import (
    CheckTransactionStateCommand,
    ClientManager,
    ConsumerRegistration,
    ServerCommand,
)
from pocketmq.broker.consumer_offsets import ConsumerOffsetManager
from pocketmq.broker.delay_levels import PROPERTY_REAL_TOPIC
from pocketmq.broker.errors import IllegalArgumentError, NoPermissionError
from pocketmq.broker.send_back import PROPERTY_RETRY_TOPIC, refused_send_back, retry_topic
from pocketmq.broker.topic_config import NOT_ALLOWED_READ_TOPICS
from pocketmq.broker.transaction_ops import PROPERTY_PRODUCER_GROUP
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import StoredMessage, decode_record
from pocketmq.security.acl import PUB, SUB, AclStore
from pocketmq.security.interceptor import (
    ANY,
    AclError,
    authorize_group,
    authorize_publish,
    authorize_subscribe,
    current_account,
)

__all__ = [
    "MAX_HEARTBEAT_GROUPS",
    "MAX_HEARTBEAT_SUBSCRIPTIONS",
    "authorize_end_transaction",
    "authorize_heartbeat",
    "check_readable",
    "check_record_readable",
    "check_subscribe",
    "denied",
    "send_back_guard",
    "transaction_check_filter",
]

MAX_HEARTBEAT_GROUPS = 256  # producer + consumer groups one heartbeat may name
MAX_HEARTBEAT_SUBSCRIPTIONS = 1024  # subscriptions of all its consumer groups together


def denied(exc: AclError) -> NoPermissionError:
    return NoPermissionError(exc.message, reason="ACL")


def check_readable(topic: str) -> None:
    """Refuse a broker system topic to everyone but an admin account."""
    if topic not in NOT_ALLOWED_READ_TOPICS:
        return
    account = current_account.get()
    if account is not None and account.admin:
        return
    raise NoPermissionError(
        f"topic {topic!r} is a broker system topic (it holds the delayed, timed or "
        "uncommitted messages of every topic); no client reads it. An admin account may; "
        "offline, `pocketmq store dump` prints it",
        reason="SYSTEM_TOPIC",
    )


def check_record_readable(record: bytes) -> None:
    """A stored record (ViewMessage) of a system topic is refused like its topic."""
    try:
        topic = decode_record(record, check_crc=False).topic
    except CorruptRecordError:
        return  # the store answered it; there is no topic to hide
    check_readable(topic)


def check_subscribe(*topics: str) -> None:
    """SUB on each topic and none a system topic: NoPermissionError otherwise."""
    for topic in sorted(topics):
        check_readable(topic)
        try:
            authorize_subscribe(topic)
        except AclError as exc:
            raise denied(exc) from None


def send_back_guard(
    group: str, phys_offset: int, clients: ClientManager, offsets: ConsumerOffsetManager
) -> Callable[[StoredMessage], None] | None:
    """What a record handed back by *group* must pass (None: nothing, no ACL or an admin)."""
    account = current_account.get()
    if account is None or account.admin:
        return None

    def check(msg: StoredMessage) -> None:
        consumed = (
            msg.topic == retry_topic(group)
            or msg.topic in clients.subscribed_topics(group)
            or msg.topic in offsets.topics_of_group(group)
        )
        topics = {
            msg.topic,
            msg.properties.get(PROPERTY_RETRY_TOPIC, msg.topic),
            msg.properties.get(PROPERTY_REAL_TOPIC, msg.topic),
        }
        if not consumed or not all(account.topic_perm(t) & SUB for t in topics):
            raise NoPermissionError(
                refused_send_back(phys_offset, group), reason="SEND_BACK_NOT_ALLOWED"
            )

    return check


def authorize_end_transaction(half: StoredMessage | None, producer_group: str) -> None:
    """PUB on the real topic of the caller's own group's half; other halves are refused later
    by the transaction service without naming anything the caller did not name."""
    if half is None or half.properties.get(PROPERTY_PRODUCER_GROUP, "") != producer_group:
        return
    try:
        authorize_publish([half.properties.get(PROPERTY_REAL_TOPIC, "")])
    except AclError as exc:
        raise denied(exc) from None


def authorize_heartbeat(
    producer_groups: Iterable[str], consumers: list[ConsumerRegistration]
) -> None:
    """Bounds first (they hold with or without the ACL), then each group and topic."""
    producer_groups = list(producer_groups)
    groups = len(producer_groups) + len(consumers)
    if groups > MAX_HEARTBEAT_GROUPS:
        raise IllegalArgumentError(
            f"the heartbeat names {groups} groups; at most "
            f"{MAX_HEARTBEAT_GROUPS} are allowed per heartbeat"
        )
    subscriptions = sum(len(c.subscriptions) for c in consumers)
    if subscriptions > MAX_HEARTBEAT_SUBSCRIPTIONS:
        raise IllegalArgumentError(
            f"the heartbeat carries {subscriptions} subscriptions; at "
            f"most {MAX_HEARTBEAT_SUBSCRIPTIONS} are allowed"
        )
    try:
        for group in producer_groups:
            authorize_group(group, ANY)
        for consumer in consumers:
            authorize_group(consumer.group, SUB)
            for topic in consumer.subscriptions:
                authorize_subscribe(topic)
    except AclError as exc:
        raise denied(exc) from None


def transaction_check_filter(acl: AclStore) -> Callable[[str | None, ServerCommand], bool]:
    """ClientManager.command_filter: a transaction check only to a key with PUB on its topic."""

    def may_receive(owner: str | None, command: ServerCommand) -> bool:
        if owner is None or not isinstance(command, CheckTransactionStateCommand):
            return True
        account = acl.acl.accounts.get(owner)
        if account is None:
            return False
        if account.admin:
            return True
        try:
            topic = decode_record(command.record, check_crc=False).properties.get(
                PROPERTY_REAL_TOPIC, ""
            )
        except CorruptRecordError:
            return False
        return bool(topic) and bool(account.topic_perm(topic) & PUB)

    return may_receive
