"""MemberTable: every member of each broker name, and which one a read goes to.

A broker name is a master (broker id 0) and its replicas (ids 1, 2 ...), each
at its own address, as the nameserver's route lists them
(``BrokerData.broker_addrs``). Writes only ever go to the master. Reads —
pulls, offset queries and commits, min/max offset, search by time, index
queries — go to the master while it is live, otherwise to a replica
(RocketMQ's ``findBrokerAddressInSubscribe`` with ``onlyThisBroker=false``)::

    members of broker-a     suspect?     a read goes to
    {0: A, 1: B}            none         A   (the master)
    {0: A, 1: B}            A            B   (lowest live replica id)
    {1: B}                  -            B   (the master left the route)
    {0: B}                  -            B   (B was promoted)
    {0: A, 1: B}            A and B      A   (nothing better: try the master)

*Suspect*: an address that did not answer (UNAVAILABLE, a deadline, a refused
connection) is avoided for ``suspect_s`` (5 s) from the moment it failed, so
reads move at the next pull rather than after the nameserver's 120 s expiry
(apache/rocketmq#3482, PR #95). When the period ends the master is tried
again; if it answers, reads stay there, else it is suspect once more.

*Master epochs* (controller mode): each broker name's master serves a numbered
term. The table keeps the highest epoch it has seen per name and ignores
members from a route with a lower one (a nameserver that has not heard of the
election yet); a NOT_MASTER answer naming a newer master moves id 0 there at
once (:meth:`MemberTable.redirect`)::

    held epoch  route / redirect epoch     effect
    3           2                          ignored (older news)
    3           3 or 0 (no epoch known)    members taken (a route); nothing (redirect)
    3           4                          taken; held epoch becomes 4

The table is pure: no I/O and an injected clock, so the choice is unit-tested.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pocketmq.common.clock import Clock, SystemClock

__all__ = ["DEFAULT_SUSPECT_S", "MASTER_ID", "MemberTable", "choose"]

MASTER_ID = 0
DEFAULT_SUSPECT_S = 5.0


class MemberTable:
    """Broker name -> {broker id -> address}, with the addresses suspected unreachable."""

    def __init__(self, *, suspect_s: float = DEFAULT_SUSPECT_S, clock: Clock | None = None) -> None:
        if suspect_s < 0:
            raise ValueError(f"suspect_s must be >= 0, got {suspect_s}")
        self.suspect_s = suspect_s
        self._clock = clock or SystemClock()
        self._members: dict[str, dict[int, str]] = {}
        self._suspect_until: dict[str, float] = {}  # address -> monotonic seconds
        self._epochs: dict[str, int] = {}  # broker name -> highest master epoch

    # -- membership -------------------------------------------------------------------
    def update(
        self,
        broker_addrs: Mapping[str, Mapping[int, str]],
        master_epochs: Mapping[str, int] | None = None,
    ) -> list[str]:
        """Take the members a fresh route lists, except for a name whose route carries
        an older master epoch than one seen; names it does not list are kept (other
        topics' routes may still name them). Returns the names ignored as stale."""
        stale = []
        epochs = master_epochs or {}
        for name, members in broker_addrs.items():
            epoch = epochs.get(name, 0)
            held = self._epochs.get(name, 0)
            if epoch and epoch < held:
                stale.append(name)
                continue
            if epoch > held:
                self._epochs[name] = epoch
            self._members[name] = dict(members)
        return stale

    def master_epoch(self, broker_name: str) -> int:
        return self._epochs.get(broker_name, 0)

    def redirect(self, broker_name: str, master_addr: str, master_epoch: int) -> bool:
        """A NOT_MASTER answer named *master_addr* master of *broker_name* in
        *master_epoch*: take it if that epoch is newer than the one held; True if taken."""
        if not master_addr or master_epoch <= self._epochs.get(broker_name, 0):
            return False
        members = {
            i: a
            for i, a in self._members.get(broker_name, {}).items()
            if a != master_addr and i != MASTER_ID
        }
        members[MASTER_ID] = master_addr
        self._members[broker_name] = members
        self._epochs[broker_name] = master_epoch
        self.clear_suspect(master_addr)
        return True

    def members(self, broker_name: str) -> dict[int, str]:
        return dict(self._members.get(broker_name, {}))

    def names(self) -> list[str]:
        return sorted(self._members)

    def names_at(self, addr: str) -> list[str]:
        """The broker names one of whose members is at *addr*."""
        return sorted(n for n, m in self._members.items() if addr in m.values())

    def master(self, broker_name: str) -> str | None:
        return self._members.get(broker_name, {}).get(MASTER_ID)

    def masters(self) -> dict[str, str]:
        return {n: m[MASTER_ID] for n, m in self._members.items() if MASTER_ID in m}

    def all_addrs(self) -> set[str]:
        return {a for m in self._members.values() for a in m.values()}

    # -- suspicion --------------------------------------------------------------------
    def mark_suspect(self, addr: str) -> bool:
        """*addr* did not answer; True when it was not suspect already."""
        now = self._clock.monotonic()
        fresh = not self._suspect(addr, now)
        self._suspect_until[addr] = now + self.suspect_s
        return fresh

    def clear_suspect(self, addr: str) -> None:
        self._suspect_until.pop(addr, None)

    def is_suspect(self, addr: str) -> bool:
        return self._suspect(addr, self._clock.monotonic())

    def _suspect(self, addr: str, now: float) -> bool:
        until = self._suspect_until.get(addr)
        if until is None:
            return False
        if now >= until:
            del self._suspect_until[addr]
            return False
        return True

    def master_usable(self, broker_name: str) -> bool:
        """The route lists a master and it is not suspect (orderly consumers need it)."""
        addr = self.master(broker_name)
        return addr is not None and not self.is_suspect(addr)

    # -- the choice -------------------------------------------------------------------
    def read_addr(self, broker_name: str) -> str | None:
        """Where a read of *broker_name* goes now (see the module docstring)."""
        members = self._members.get(broker_name)
        if not members:
            return None
        return choose(members, self.is_suspect)


def choose(members: Mapping[int, str], suspect: Callable[[str], bool]) -> str:
    """The master unless suspect, else the lowest-id member not suspect, else the
    master (or, without one, the lowest id): a suspect master is the best bet left."""
    ids = sorted(members)
    for broker_id in ids:
        if not suspect(members[broker_id]):
            return members[broker_id]
    return members.get(MASTER_ID, members[ids[0]])
