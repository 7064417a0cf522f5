"""The ACL file: parsing with errors that name the key, permissions, addresses, reload."""

from __future__ import annotations

import os

import pytest

from pocketmq.common.errors import ConfigError
from pocketmq.security.acl import PUB, SUB, AclStore, address_matches


def write(path, text, *, mtime_ns=None):
    path.write_text(text)
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[[accounts]]\naccess_key = 'a'\n", "accounts[0]: secret_key is missing"),
        (
            "[[accounts]]\naccess_key='a'\nsecret_key='s'\ntopic_perms={t='WRITE'}\n",
            "topic_perms.t: permission 'WRITE' is not one of PUB, SUB, PUB|SUB, DENY",
        ),
        ("[[accounts]]\naccess_key='a'\nsecret_key='s'\nadmn=true\n", "unknown key(s) ['admn']"),
        (
            "[[accounts]]\naccess_key='a'\nsecret_key='s'\n[[accounts]]\naccess_key='a'\n"
            "secret_key='t'\n",
            "access_key 'a' appears twice",
        ),
        ("global_white_remote_addresses = ['10.0.0.0/33']\n", "is not a network"),
        ("accounts = 3\n", "accounts must be an array of tables"),
    ],
)
def test_a_bad_acl_file_is_refused_naming_the_key(tmp_path, text, words):
    path = tmp_path / "acl.toml"
    write(path, text)
    with pytest.raises(ConfigError, match=None) as refused:
        AclStore(str(path))
    assert words in str(refused.value) and str(path) in str(refused.value)


def test_a_missing_acl_file_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        AclStore(str(tmp_path / "nope.toml"))


def test_retry_and_dead_letter_topics_follow_the_group(tmp_path):
    path = tmp_path / "acl.toml"
    write(
        path,
        "[[accounts]]\naccess_key='a'\nsecret_key='s'\ndefault_topic_perm='PUB'\n"
        "group_perms={g='SUB'}\n",
    )
    account = AclStore(str(path)).acl.accounts["a"]
    assert account.topic_perm("any") == PUB
    assert account.topic_perm("%RETRY%g") == SUB == account.topic_perm("%DLQ%g")
    assert account.topic_perm("%RETRY%other") == 0


@pytest.mark.parametrize(
    ("pattern", "ip", "match"),
    [
        ("*", "1.2.3.4", True),
        ("10.0.0.7", "10.0.0.7", True),
        ("10.0.0.7", "10.0.0.8", False),
        ("10.0.*.*", "10.0.9.9", True),
        ("10.0.*.*", "10.1.0.1", False),
        ("10.0.0.0/16", "10.0.200.1", True),
        ("10.0.0.0/16", "10.1.0.1", False),
        ("::1/128", "::1", True),
    ],
)
def test_address_patterns(pattern, ip, match):
    assert address_matches(pattern, ip) is match


def test_an_edited_file_is_reloaded_and_a_broken_edit_keeps_the_last_good_table(tmp_path):
    path = tmp_path / "acl.toml"
    write(path, "[[accounts]]\naccess_key='a'\nsecret_key='s'\n", mtime_ns=1_000_000_000)
    store = AclStore(str(path))
    write(path, "[[accounts]]\naccess_key='b'\nsecret_key='s'\n", mtime_ns=2_000_000_000)
    assert store.reload_if_changed()
    assert set(store.acl.accounts) == {"b"}
    write(path, "[[accounts]\n", mtime_ns=3_000_000_000)
    assert not store.reload_if_changed()
    assert set(store.acl.accounts) == {"b"}
