"""AddressRing: one call tried on each nameserver in turn (common/failover.py)."""

from __future__ import annotations

import pytest

from pocketmq.common.failover import AddressRing


class Down(Exception):
    pass


class Refused(Exception):
    pass


def server(answers: dict[str, BaseException | str], asked: list[str]):  # type: ignore[no-untyped-def]
    async def ask(addr: str) -> str:
        asked.append(addr)
        answer = answers[addr]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return ask


def is_down(exc: Exception) -> bool:
    return isinstance(exc, Down)


async def test_the_first_address_that_answers_gives_the_answer():
    asked: list[str] = []
    ring = AddressRing(["a", "b", "c"])
    ask = server({"a": Down("a"), "b": "from b", "c": "from c"}, asked)
    assert await ring.first_answer(ask, retry=is_down) == "from b"
    assert asked == ["a", "b"]


async def test_the_address_that_answered_last_is_asked_first_next_time():
    asked: list[str] = []
    ring = AddressRing(["a", "b", "c"])
    await ring.first_answer(server({"a": Down("a"), "b": "ok", "c": "ok"}, asked), retry=is_down)
    asked.clear()
    await ring.first_answer(server({"a": "ok", "b": Down("b"), "c": "ok"}, asked), retry=is_down)
    assert asked == ["b", "c"]
    assert ring.in_turn() == ["c", "a", "b"]


async def test_a_ring_that_is_not_sticky_always_starts_at_the_first_address():
    asked: list[str] = []
    ring = AddressRing(["a", "b"], sticky=False)
    ask = server({"a": Down("a"), "b": "ok"}, asked)
    await ring.first_answer(ask, retry=is_down)
    await ring.first_answer(ask, retry=is_down)
    assert asked == ["a", "b", "a", "b"]


async def test_an_error_that_is_not_retried_propagates_at_once():
    asked: list[str] = []
    ring = AddressRing(["a", "b"])
    with pytest.raises(Refused):
        await ring.first_answer(server({"a": Refused("no"), "b": "ok"}, asked), retry=is_down)
    assert asked == ["a"]


async def test_when_every_address_fails_the_last_error_is_raised():
    ring = AddressRing(["a", "b"])
    with pytest.raises(Down, match="b is down"):
        await ring.first_answer(
            server({"a": Down("a is down"), "b": Down("b is down")}, []), retry=is_down
        )


async def test_a_ring_without_addresses_says_so():
    with pytest.raises(ValueError, match="no server address"):
        await AddressRing([]).first_answer(server({}, []), retry=is_down)
