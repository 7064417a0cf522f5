"""``pocketmq broker promote HOST:PORT``: manual failover of a broker name.

::

    pocketmq broker promote 127.0.0.1:10913 [--epoch N] [--role SYNC_MASTER|ASYNC_MASTER]
                                            [--force]

Makes the replica at HOST:PORT the master of its broker name
(:meth:`~pocketmq.client.AdminClient.promote`, ``PromoteToMaster``) and prints
the new master epoch, the commit-log offset the epoch starts at, and the role.
Before that it reads the runtime info of the target and of the other members
of its broker name (from the nameserver's cluster info, when the nameserver
answers) and refuses, unless ``--force``, when a live member's log goes further
(a higher epoch, then a larger commit-log max offset), saying which and by how
much. Exit codes as every admin command: 0 promoted, 1 refused or unreachable
(the reason on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pocketmq.cli.table import dump_json, render
from pocketmq.client import AdminClient, ClientError
from pocketmq.client.admin import MASTER_ROLES, PromotionRefusedError
from pocketmq.client.admin_model import PromoteResult, ReplicaPosition
from pocketmq.common.configfile import parse_host_port

__all__ = ["add_promote"]

COMMAND = "pocketmq broker promote"


def _epoch(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a master epoch >= 1, or 0 for one "
            "above every epoch the broker has seen"
        )
    return int(text)


def add_promote(actions: Any, leaf: Any) -> None:
    """Add ``promote`` to ``pocketmq broker``'s actions (*leaf* as in admin_cmd)."""
    parser = leaf(
        actions,
        "promote",
        _broker_promote,
        "make a replica the master of its broker name (manual failover)",
    )
    parser.add_argument("addr", metavar="HOST:PORT", help="the replica to promote")
    parser.add_argument(
        "--epoch",
        type=_epoch,
        default=0,
        help="the new master epoch (default: one above every epoch the broker has seen)",
    )
    parser.add_argument(
        "--role",
        choices=MASTER_ROLES,
        default="",
        help="role of the new master (default: the broker's configured "
        "master role, else ASYNC_MASTER)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="promote even when another live member's log goes further "
        "(what only that one holds is then cut when it rejoins)",
    )


async def _broker_promote(admin: AdminClient, args: argparse.Namespace) -> int:
    try:
        parse_host_port(args.addr)
    except ValueError as exc:
        print(f"{COMMAND}: {exc}", file=sys.stderr)
        return 2
    try:
        result = await admin.promote(args.addr, epoch=args.epoch, role=args.role, force=args.force)
    except PromotionRefusedError as exc:
        print(_positions([exc.target, *exc.ahead], target=exc.target.addr), file=sys.stderr)
        print(f"{COMMAND}: {exc}; or give --force to promote it anyway", file=sys.stderr)
        return 1
    except ClientError as exc:  # unreachable, or refused by the broker itself
        print(f"{COMMAND}: cannot promote {args.addr}: {exc}", file=sys.stderr)
        return 1
    _notes(result)
    if args.json:
        print(dump_json(result))
        return 0
    print(_positions([result.previous, *result.members], target=result.addr))
    forced = " (forced)" if result.forced else ""
    print(
        f"promoted {result.broker_name} at {result.addr} to {result.role}{forced}: "
        f"master epoch {result.epoch}, starting at commit-log offset {result.start_offset}"
    )
    return 0


def _notes(result: PromoteResult) -> None:
    """What could not be compared, on stderr."""
    if result.namesrv_error:
        print(
            f"{COMMAND}: note: the nameserver could not list the other members of "
            f"{result.broker_name} ({result.namesrv_error}); only the target was read",
            file=sys.stderr,
        )
    for member in result.members:
        if not member.reachable:
            print(f"{COMMAND}: note: not compared: {member.describe()}", file=sys.stderr)


def _positions(members: list[ReplicaPosition], *, target: str) -> str:
    return render(
        ["BROKER", "ID", "ADDRESS", "ROLE", "EPOCH", "MAX OFFSET", ""],
        [
            [
                m.broker_name,
                m.broker_id,
                m.addr,
                m.role or None,
                m.master_epoch if m.reachable else None,
                m.max_offset if m.reachable else None,
                "<- promote"
                if m.addr == target
                else ("fenced" if m.fenced else "unreachable" if not m.reachable else ""),
            ]
            for m in members
        ],
    )
