"""The one driver (`rpc.machines.Driver`) on the split machine: an effect tried again under its
`core.retry.RetryPolicy` while it fails with what the effect retries, and a record kept (not
ended) when a step leaves it without an effect."""

from __future__ import annotations

import asyncio

from core import retry
from core.errors import ServiceUnavailable, ValidationError
from core.machines import RESTARTED, Effect, Event
from core.machines import split as m
from core.machines.split import MACHINE, SplitRecord, SplitState
from rpc.machines import Driver, NoCrashPoints

CHILDREN = [{"id": "p1.4a"}, {"id": "p1.4b"}]


def counted() -> SplitRecord:
    return SplitRecord(
        table_id="ab" * 16,
        partition_id="p1",
        table_name="T",
        epoch=3,
        index=False,
        started=0.0,
        state=SplitState.COUNTED,
        key="10",
        parent={"id": "p1"},
        children=tuple(CHILDREN),
    )


def drive(failures: int, error: Exception) -> tuple[SplitRecord, Exception | None, int, list[str]]:
    """Drive a COUNTED record whose install fails `failures` times with `error`; the record,
    the failure, the attempts made and the states persisted."""
    attempts = 0
    persisted: list[str] = []

    async def install(record: SplitRecord, effect: Effect) -> Event:
        nonlocal attempts
        attempts += 1
        if attempts <= failures:
            raise error
        return Event(m.INSTALLED, {"seconds": 0.0})

    async def persist(record: SplitRecord) -> None:
        persisted.append(record.state.value)

    driver: Driver[SplitRecord] = Driver(
        MACHINE, {"install": install}, persist, NoCrashPoints(), lambda: 0.0
    )
    record, failure = asyncio.run(driver.drive(counted(), Event(RESTARTED)))
    return record, failure, attempts, persisted


def test_a_refused_install_is_tried_again_under_its_policy_until_it_commits() -> None:
    record, failure, attempts, persisted = drive(3, ServiceUnavailable("written in this group"))
    assert record.state is SplitState.INSTALLED and failure is None
    assert attempts == 4
    assert persisted == ["COUNTED", "INSTALLED"]


def test_an_install_refused_past_its_attempts_keeps_the_record_for_the_periodic_check() -> None:
    refused = ServiceUnavailable("written in this group")
    record, failure, attempts, persisted = drive(1_000, refused)
    assert attempts == retry.SPLIT_INSTALL.attempts_max
    assert failure is refused
    assert record.state is SplitState.COUNTED and not MACHINE.finished(record)
    assert persisted == ["COUNTED", "COUNTED"]


def test_an_error_the_effect_does_not_retry_is_tried_once() -> None:
    wrong = ValidationError("not a refusal that passes")
    record, failure, attempts, _ = drive(1_000, wrong)
    assert attempts == 1 and failure is wrong and record.state is SplitState.COUNTED
