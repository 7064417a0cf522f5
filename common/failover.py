"""One call, tried on each of several equal servers in turn (the nameservers).

A cluster lists several nameservers, each holding the whole route table; any
one that answers will do. Every reader of them (the client SDK, the broker's
route resolver for RocketMQ 5 clients, the Spark planner) asks the same way::

    ring = AddressRing(["ns1:9876", "ns2:9876"])
    route = await ring.first_answer(ask, retry=lambda exc: isinstance(exc, Unreachable))

``ask(addr)`` is awaited on each address, starting at the one that answered
last, until one returns: that value is the answer and that address is asked
first next time. An error for which ``retry(exc)`` is false propagates at once
(a nameserver that answered "no such topic" has said all there is to say);
when every address failed, the last error is raised.

Pure asyncio, no transport: the caller's ``ask`` makes the call and raises its
own errors, so the store-side packages can import this without gRPC.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

__all__ = ["AddressRing"]

T = TypeVar("T")


class AddressRing:
    """Addresses of equal servers, asked in turn from the one that answered last.

    *sticky* False always starts at the first address (a caller whose list is in
    order of preference).
    """

    def __init__(self, addrs: Sequence[str], *, sticky: bool = True) -> None:
        self.addrs: tuple[str, ...] = tuple(addrs)
        self._sticky = sticky
        self._current = 0

    def __len__(self) -> int:
        return len(self.addrs)

    def in_turn(self) -> list[str]:
        """The addresses in the order the next call tries them."""
        n = len(self.addrs)
        return [self.addrs[(self._current + i) % n] for i in range(n)]

    async def first_answer(
        self,
        ask: Callable[[str], Awaitable[T]],
        *,
        retry: Callable[[Exception], bool],
    ) -> T:
        """``await ask(addr)`` of the first address that answers (see the module doc).

        ValueError when there is no address to ask.
        """
        if not self.addrs:
            raise ValueError("no server address to ask")
        last: Exception | None = None
        for addr in self.in_turn():
            try:
                answer = await ask(addr)
            except Exception as exc:
                if not retry(exc):
                    raise
                last = exc
                continue
            if self._sticky:
                self._current = self.addrs.index(addr)
            return answer
        assert last is not None
        raise last
