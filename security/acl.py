"""The access control list: users, their secrets and what each may touch (RocketMQ's plain ACL).

``acl.toml`` (RocketMQ's ``plain_acl.yml``, in TOML like every PocketMQ file)::

    # addresses trusted without a signature (globalWhiteRemoteAddresses)
    global_white_remote_addresses = ["10.0.1.*"]

    [[accounts]]
    access_key = "admin"
    secret_key = "..."              # shared with the client, never sent
    admin = true                    # every topic and group, and the admin RPCs

    [[accounts]]
    access_key = "billing"
    secret_key = "..."
    white_remote_address = "10.0.2.0/24"   # this account only from there (optional)
    default_topic_perm = "DENY"     # for topics not listed (RocketMQ's defaultTopicPerm)
    default_group_perm = "SUB"      # for groups not listed (defaultGroupPerm)
    topic_perms = { orders = "PUB|SUB", payments = "SUB", audit = "DENY" }
    group_perms = { billing = "SUB" }

A permission is ``PUB``, ``SUB``, ``PUB|SUB`` or ``DENY``. Sending needs PUB on
the topic; pulling, offsets and sending back need SUB on the topic and on the
group. A group's retry and dead-letter topics (``%RETRY%g``, ``%DLQ%g``) follow
the group's permission, as in RocketMQ. Addresses are exact (``10.0.0.7``),
wildcards (``10.0.*.*``), CIDR (``10.0.0.0/16``) or ``*``.

One difference from RocketMQ, on purpose: an account's ``white_remote_address``
*restricts* where its key may be used from (RocketMQ lets such requests skip
the signature). The global list keeps RocketMQ's meaning.

:class:`AclStore` rereads the file when its modification time changes (checked
at most once a second, on use); a file that no longer parses keeps the last
good table and logs why.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import time
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field

from pocketmq.common.errors import ConfigError

__all__ = ["DENY", "PUB", "SUB", "Account", "Acl", "AclStore", "address_matches", "parse_perm"]

log = logging.getLogger(__name__)

PUB, SUB, DENY = 1, 2, 0
_PERMS = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}
RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"
RELOAD_CHECK_S = 1.0


def parse_perm(text: object, where: str) -> int:
    perm = _PERMS.get(str(text).strip().upper()) if isinstance(text, str) else None
    if perm is None:
        raise ConfigError(f"{where}: permission {text!r} is not one of PUB, SUB, PUB|SUB, DENY")
    return perm


def address_matches(pattern: str, ip: str) -> bool:
    """*ip* against ``*``, an exact address, ``a.b.*.*`` or CIDR."""
    pattern = pattern.strip()
    if pattern == "*" or pattern == ip:
        return True
    if "*" in pattern:
        want, got = pattern.split("."), ip.split(".")
        return len(want) == len(got) == 4 and all(
            w in ("*", g) for w, g in zip(want, got, strict=True)
        )
    if "/" in pattern:
        try:
            return ipaddress.ip_address(ip) in ipaddress.ip_network(pattern, strict=False)
        except ValueError:
            return False
    return False


def _check_pattern(pattern: object, where: str) -> str:
    if not isinstance(pattern, str) or not pattern.strip():
        raise ConfigError(f"{where}: {pattern!r} is not an address pattern")
    if "/" in pattern:
        try:
            ipaddress.ip_network(pattern, strict=False)
        except ValueError as exc:
            raise ConfigError(f"{where}: {pattern!r} is not a network: {exc}") from None
    return pattern


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    admin: bool = False
    white_remote_address: str = ""
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    topic_perms: dict[str, int] = field(default_factory=dict)
    group_perms: dict[str, int] = field(default_factory=dict)

    def may_connect_from(self, ip: str) -> bool:
        return not self.white_remote_address or address_matches(self.white_remote_address, ip)

    def group_perm(self, group: str) -> int:
        return self.group_perms.get(group, self.default_group_perm)

    def topic_perm(self, topic: str) -> int:
        for prefix in (RETRY_PREFIX, DLQ_PREFIX):
            if topic.startswith(prefix):
                return self.group_perm(topic[len(prefix) :])
        return self.topic_perms.get(topic, self.default_topic_perm)


@dataclass(frozen=True, slots=True)
class Acl:
    accounts: dict[str, Account]
    global_white_remote_addresses: tuple[str, ...] = ()

    def trusted(self, ip: str) -> bool:
        return any(address_matches(p, ip) for p in self.global_white_remote_addresses)

    @classmethod
    def parse(cls, raw: dict[str, object], where: str) -> Acl:
        known = {"global_white_remote_addresses", "accounts"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}; expected {sorted(known)}")
        white = raw.get("global_white_remote_addresses", [])
        if not isinstance(white, list):
            raise ConfigError(f"{where}: global_white_remote_addresses must be a list")
        patterns = tuple(
            _check_pattern(p, f"{where}: global_white_remote_addresses") for p in white
        )
        accounts_raw = raw.get("accounts", [])
        if not isinstance(accounts_raw, list):
            raise ConfigError(f"{where}: accounts must be an array of tables ([[accounts]])")
        accounts: dict[str, Account] = {}
        for i, entry in enumerate(accounts_raw):
            account = _account(entry, f"{where}: accounts[{i}]")
            if account.access_key in accounts:
                raise ConfigError(
                    f"{where}: accounts[{i}]: access_key {account.access_key!r} appears twice"
                )
            accounts[account.access_key] = account
        return cls(accounts, patterns)


_ACCOUNT_KEYS = {
    "access_key",
    "secret_key",
    "admin",
    "white_remote_address",
    "default_topic_perm",
    "default_group_perm",
    "topic_perms",
    "group_perms",
}


def _account(entry: object, where: str) -> Account:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: an account is a table")
    unknown = sorted(set(entry) - _ACCOUNT_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; expected {sorted(_ACCOUNT_KEYS)}")
    for key in ("access_key", "secret_key"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise ConfigError(f"{where}: {key} is missing or empty")
    admin = entry.get("admin", False)
    if not isinstance(admin, bool):
        raise ConfigError(f"{where}: admin must be true or false")
    white = entry.get("white_remote_address", "")
    if white:
        _check_pattern(white, f"{where}: white_remote_address")

    def perms(key: str) -> dict[str, int]:
        table = entry.get(key, {})
        if not isinstance(table, dict):
            raise ConfigError(f'{where}: {key} must be a table of name = "PUB|SUB"')
        return {name: parse_perm(p, f"{where}: {key}.{name}") for name, p in table.items()}

    return Account(
        access_key=entry["access_key"],
        secret_key=entry["secret_key"],
        admin=admin,
        white_remote_address=str(white),
        default_topic_perm=parse_perm(
            entry.get("default_topic_perm", "DENY"), f"{where}: default_topic_perm"
        ),
        default_group_perm=parse_perm(
            entry.get("default_group_perm", "DENY"), f"{where}: default_group_perm"
        ),
        topic_perms=perms("topic_perms"),
        group_perms=perms("group_perms"),
    )


class AclStore:
    """The ACL of a file, reread when the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._mtime_ns = -1
        self._checked_at = 0.0
        self.reloads = 0
        self._acl = self._load()  # a broken file at start is a start error

    def _load(self) -> Acl:
        try:
            with open(self.path, "rb") as f:
                stat = os.fstat(f.fileno())
                raw = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(
                f"acl_file {self.path} does not exist; write one (README, "
                "Security) or turn acl_enable off"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"acl_file {self.path} is not valid TOML: {exc}") from None
        acl = Acl.parse(raw, self.path)
        self._mtime_ns = stat.st_mtime_ns
        return acl

    @property
    def acl(self) -> Acl:
        now = time.monotonic()
        if now - self._checked_at >= RELOAD_CHECK_S:
            self._checked_at = now
            self.reload_if_changed()
        return self._acl

    def reload_if_changed(self) -> bool:
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError as exc:
            log.error("cannot stat acl_file %s (%s); keeping the loaded ACL", self.path, exc)
            return False
        if mtime == self._mtime_ns:
            return False
        try:
            self._acl = self._load()
        except ConfigError as exc:
            self._mtime_ns = mtime  # report a broken edit once, not every second
            log.error("acl_file changed but cannot be used: %s; keeping the previous ACL", exc)
            return False
        self.reloads += 1
        log.info("acl_file %s reloaded: %d accounts", self.path, len(self._acl.accounts))
        return True

    def accounts(self) -> Iterable[Account]:
        return self.acl.accounts.values()
