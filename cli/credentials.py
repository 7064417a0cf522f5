"""``--access-key`` / ``--secret-key`` / ``--tls-ca|cert|key``: how a CLI client proves who it is.

Shared by the client commands (send, produce, consume) and the admin commands.
The keys default to ``$POCKETMQ_ACCESS_KEY`` and ``$POCKETMQ_SECRET_KEY``, so a
secret need not appear in the shell history or the process list.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

__all__ = [
    "ACCESS_KEY_ENV",
    "SECRET_KEY_ENV",
    "add_security_options",
    "broker_name_of",
    "security_kwargs",
]

ACCESS_KEY_ENV = "POCKETMQ_ACCESS_KEY"
SECRET_KEY_ENV = "POCKETMQ_SECRET_KEY"


def add_security_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--access-key",
        default=None,
        help=f"ACL access key (default ${ACCESS_KEY_ENV}); signs every request",
    )
    parser.add_argument(
        "--secret-key", default=None, help=f"its secret key (default ${SECRET_KEY_ENV})"
    )
    parser.add_argument(
        "--tls-ca", default="", metavar="PEM", help="CA certificate of the servers; given = TLS"
    )
    parser.add_argument(
        "--tls-cert",
        default="",
        metavar="PEM",
        help="client certificate, for servers started with "
        "--tls-require-client-auth (with --tls-key)",
    )
    parser.add_argument("--tls-key", default="", metavar="PEM", help="private key of --tls-cert")


def security_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Client keyword arguments from the flags, then the environment."""
    return {
        "access_key": args.access_key or os.environ.get(ACCESS_KEY_ENV, ""),
        "secret_key": args.secret_key or os.environ.get(SECRET_KEY_ENV, ""),
        "tls_ca_file": args.tls_ca,
        "tls_cert_file": args.tls_cert,
        "tls_key_file": args.tls_key,
    }


async def broker_name_of(args: argparse.Namespace) -> str | None:
    """``--broker`` as a broker name: a ``host:port`` is looked up in the nameserver."""
    if args.broker is None or ":" not in args.broker:
        return args.broker
    from pocketmq.client import AdminClient

    async with AdminClient(args.namesrv, **security_kwargs(args)) as admin:
        return (await admin.resolve_broker(args.broker))[0]
