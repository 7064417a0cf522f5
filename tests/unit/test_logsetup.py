"""How loud the ``pocketmq`` command is (common/logsetup.py), and the TLS mismatch hints."""

from __future__ import annotations

import logging
import socket

import pytest

from pocketmq.client.tls_hint import (
    HINT_SERVER_PLAINTEXT,
    speaks_tls,
    tls_mismatch_hint,
)
from pocketmq.common.logsetup import level_from_argv, resolve_level, security_summary


@pytest.mark.parametrize(
    ("flag", "verbose", "server", "env", "level"),
    [
        (None, 0, False, "", logging.WARNING),  # a client: its result, warnings, errors
        (None, 0, True, "", logging.INFO),  # a server: its log is its record
        (None, 1, False, "", logging.INFO),
        (None, 2, True, "", logging.DEBUG),
        ("ERROR", 2, True, "", logging.ERROR),  # --log-level wins over -v
        (None, 0, False, "debug", logging.DEBUG),  # then $POCKETMQ_LOG_LEVEL
        (None, 1, False, "error", logging.INFO),  # -v wins over the env
        (None, 0, True, "nonsense", logging.INFO),  # an unknown env value is ignored
    ],
)
def test_the_level_comes_from_flag_then_v_then_env_then_the_kind_of_command(
    flag, verbose, server, env, level
):
    assert resolve_level(flag=flag, verbose=verbose, server=server, env=env) == level


def test_the_raw_command_line_tells_whether_debug_is_asked_before_parsing(monkeypatch):
    monkeypatch.delenv("POCKETMQ_LOG_LEVEL", raising=False)
    assert level_from_argv(["-vv", "send", "t", "b"]) == logging.DEBUG
    assert level_from_argv(["--log-level", "debug", "nameserver"]) == logging.DEBUG
    assert level_from_argv(["--log-level=DEBUG", "nameserver"]) == logging.DEBUG
    assert level_from_argv(["-v", "send"]) == logging.INFO
    assert level_from_argv(["send", "t", "-vanilla"]) == logging.INFO


def test_the_start_up_line_says_how_a_server_admits_clients():
    assert security_summary(tls=False, client_auth=False, acl_file=None) == "TLS off, ACL off"
    assert security_summary(tls=True, client_auth=True, acl_file="/etc/acl.toml") == (
        "TLS on (client certificates required), ACL on (/etc/acl.toml)"
    )


def test_a_handshake_failure_from_an_address_without_tls_says_drop_tls_ca():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: refused
    assert not speaks_tls(addr)
    assert tls_mismatch_hint("... WRONG_VERSION_NUMBER ...", addr) == HINT_SERVER_PLAINTEXT
    assert tls_mismatch_hint("Socket closed", addr) == ""
    assert tls_mismatch_hint("Deadline Exceeded", addr) == ""
