"""``pocketmq broker elect BROKER_NAME``: force a master election (controller mode).

::

    pocketmq broker elect broker-a [--broker-id N] [--controller HOST:PORT[,HOST:PORT]]

Asks the active controller (``ElectMaster``; the controller runs in the
nameservers, so ``--controller`` defaults to ``--namesrv``) to elect a master
for the broker name now, for maintenance: without ``--broker-id`` the best
live in-sync replica (highest epoch, then longest log, then priority), with it
that broker, refused unless it is live and in the in-sync replica set. A new
master epoch starts either way; the brokers learn it at once from their watch
stream, and clients from NOT_MASTER redirects and the route.

Prints the controller's view after the election: each member, its address,
whether it is alive and in sync, and the new master and epoch. Exit codes as
every admin command: 0 elected, 1 refused or no controller reached (the rule
and the reason on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pocketmq.cli.table import dump_json, render
from pocketmq.client import AdminClient, ClientError, RemoteError
from pocketmq.client.controller_admin import ControllerView
from pocketmq.client.errors import UnavailableError
from pocketmq.common.configfile import parse_host_port

__all__ = ["add_elect", "render_view"]

COMMAND = "pocketmq broker elect"


def _broker_id(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a broker id >= 1 (the id the "
            "controller assigned; see `pocketmq cluster list`)"
        )
    return int(text)


def add_elect(actions: Any, leaf: Any) -> None:
    """Add ``elect`` to ``pocketmq broker``'s actions (*leaf* as in admin_cmd)."""
    parser = leaf(
        actions,
        "elect",
        _broker_elect,
        "force a master election for a broker name (controller mode)",
    )
    parser.add_argument("broker_name", metavar="BROKER_NAME", help="e.g. broker-a")
    parser.add_argument(
        "--broker-id",
        type=_broker_id,
        default=0,
        metavar="N",
        help="elect this broker (live and in sync), not the best one",
    )
    parser.add_argument(
        "--controller",
        default="",
        metavar="HOST:PORT[,HOST:PORT]",
        help="controller address(es) (default: the nameservers)",
    )


async def _broker_elect(admin: AdminClient, args: argparse.Namespace) -> int:
    controllers = [a.strip() for a in args.controller.split(",") if a.strip()]
    for addr in controllers:
        try:
            parse_host_port(addr)
        except ValueError as exc:
            print(f"{COMMAND}: --controller: {exc}", file=sys.stderr)
            return 2
    if not args.broker_name.strip():
        print(f"{COMMAND}: give a broker name, e.g. broker-a", file=sys.stderr)
        return 2
    try:
        view = await admin.elect_master(
            args.broker_name, broker_id=args.broker_id, controllers=controllers or None
        )
    except UnavailableError as exc:
        print(
            f"{COMMAND}: no active controller answered ({exc}); is a nameserver running "
            "with --controller?",
            file=sys.stderr,
        )
        return 1
    except RemoteError as exc:
        rule = f" ({exc.reason})" if exc.reason else ""
        print(
            f"{COMMAND}: the controller refused to elect a master of "
            f"{args.broker_name}{rule}: {exc}",
            file=sys.stderr,
        )
        return 1
    except ClientError as exc:
        print(f"{COMMAND}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(dump_json(view))
        return 0
    print(render_view(view))
    print(
        f"elected {view.broker_name} id {view.master_id} at {view.master_addr} master in "
        f"epoch {view.master_epoch} (controller {view.controller})"
    )
    return 0


def render_view(view: ControllerView) -> str:
    return render(
        ["BROKER", "ID", "ADDRESS", "ROLE", "IN SYNC", "ALIVE"],
        [
            [
                view.broker_name,
                m.broker_id,
                m.addr,
                "master" if m.broker_id == view.master_id else "replica",
                "yes" if m.in_sync else "no",
                "yes" if m.alive else "no",
            ]
            for m in view.members
        ],
    )
