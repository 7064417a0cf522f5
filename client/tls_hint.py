"""What to tell a user whose connection failed because client and server disagree on TLS.

gRPC reports both mismatches in its own words: a plaintext client of a TLS server
gets ``UNAVAILABLE ... Socket closed`` (the server hung up on bytes that were not
a TLS handshake), a TLS client of a plaintext server ``Tls handshake failed ...
WRONG_VERSION_NUMBER``, and so does a TLS client without a certificate of a
server that requires one. :func:`tls_mismatch_hint` turns them into advice; which
case it is, a probe tells: a TLS handshake with the address (no certificate
checked, at most ``PROBE_TIMEOUT_S``, on the error path only, remembered per
address).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time

__all__ = [
    "HINT_CLIENT_CERT",
    "HINT_SERVER_PLAINTEXT",
    "HINT_SERVER_SPEAKS_TLS",
    "PROBE_TIMEOUT_S",
    "speaks_tls",
    "tls_mismatch_hint",
]

PROBE_TIMEOUT_S = 1.0
_REMEMBER_S = 30.0
_probed: dict[str, tuple[float, bool]] = {}

HINT_SERVER_SPEAKS_TLS = (
    "the server speaks TLS; pass --tls-ca with the CA of its certificate "
    "(tls_ca_file), and --tls-cert/--tls-key if it requires client "
    "certificates"
)
HINT_SERVER_PLAINTEXT = "the server does not speak TLS; drop --tls-ca (tls_ca_file)"
HINT_CLIENT_CERT = (
    "the server speaks TLS and requires a client certificate; pass --tls-cert "
    "and --tls-key (tls_cert_file, tls_key_file) signed by a CA it trusts"
)


def speaks_tls(addr: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether ``host:port`` answers a TLS ClientHello with a TLS record (a ServerHello or
    an alert). Only the first record's header is read: whether the handshake could go on
    (a client certificate, the CA) does not matter here."""
    now = time.monotonic()
    known = _probed.get(addr)
    if known is not None and now - known[0] < _REMEMBER_S:
        return known[1]
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    answer = False
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as raw:
            raw.sendall(_client_hello(host))
            head = raw.recv(3)
            # TLS record: content type 22 (handshake) or 21 (alert), version major 3.
            answer = len(head) >= 2 and head[0] in (21, 22) and head[1] == 3
    except (OSError, ValueError):
        answer = False
    _probed[addr] = (now, answer)
    return answer


def _client_hello(host: str) -> bytes:
    """The bytes of a ClientHello, made by the ssl module without a socket."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=host or None)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def tls_mismatch_hint(details: str, addr: str) -> str:
    """Advice for a failed call's *details* from *addr*, or ``""``."""
    if "WRONG_VERSION_NUMBER" in details:
        return HINT_CLIENT_CERT if speaks_tls(addr) else HINT_SERVER_PLAINTEXT
    if "Socket closed" in details and speaks_tls(addr):
        return HINT_SERVER_SPEAKS_TLS
    return ""
