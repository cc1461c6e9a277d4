"""router.items._fan_out, the calls of a BatchWriteItem or BatchGetItem: a request its node
could not take (unreachable, throttled) comes back for UnprocessedItems/Keys; one its leader
took and lost track of (`WriteOutcomeUnknown`) fails the batch, since it may yet apply."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.errors import ServiceUnavailable, ThroughputExceeded, WriteOutcomeUnknown
from router import items


class Payload:
    def to_json(self) -> dict[str, Any]:
        return {}


class Context:
    """Answers each call_key with the next of `answers` (raised if an exception)."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)

    async def call_key(self, *args: Any, **kwargs: Any) -> Any:
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def fan_out(ctx: Context, count: int) -> list[Any]:
    calls = [items._Call(None, {}, None, "put", Payload()) for _ in range(count)]
    return asyncio.run(items._fan_out(ctx, calls))


def test_requests_not_taken_come_back_to_be_listed_unprocessed() -> None:
    down, throttled = ServiceUnavailable("unreachable"), ThroughputExceeded()
    assert fan_out(Context({"ok": 1}, down, throttled), 3) == [{"ok": 1}, down, throttled]


def test_a_write_its_leader_lost_track_of_fails_the_batch() -> None:
    lost = WriteOutcomeUnknown("lost track of it; the write may or may not apply")
    with pytest.raises(WriteOutcomeUnknown) as raised:
        fan_out(Context({"ok": 1}, lost, ServiceUnavailable("unreachable")), 3)
    assert raised.value.http_status == 500
