"""The router's bytes-in-flight budget and its limits' derivation (router/limits.py)."""

from __future__ import annotations

import asyncio

import pytest

from core import limits, settings
from core.errors import ServiceUnavailable
from router.limits import (
    BODY_ADMISSION_REFUSED,
    BodyBudget,
    RouterLimits,
)
from router.settings import RouterSettings

WAIT_SECONDS = 5.0  # Bound on every wait below; the grants themselves are immediate.


def test_a_request_that_fits_is_granted_at_once_and_counted() -> None:
    async def run() -> None:
        budget = BodyBudget(100)
        assert await budget.acquire(60, 0) == 60
        assert await budget.acquire(40, 0) == 40
        assert budget.in_flight == 100
        budget.release(60)
        budget.release(40)
        assert budget.in_flight == 0

    asyncio.run(run())


def test_a_request_larger_than_the_budget_holds_all_of_it() -> None:
    async def run() -> None:
        budget = BodyBudget(100)
        assert await budget.acquire(250, 0) == 100

    asyncio.run(run())


def test_a_request_that_does_not_fit_waits_for_a_release_and_small_ones_pass_it() -> None:
    async def run() -> None:
        budget = BodyBudget(100)
        await budget.acquire(70, 0)
        large = asyncio.ensure_future(budget.acquire(50, WAIT_SECONDS))
        await asyncio.sleep(0)
        assert not large.done()
        # A small request fits beside the first and does not queue behind the large one.
        assert await budget.acquire(20, 0) == 20
        budget.release(70)
        assert await asyncio.wait_for(large, WAIT_SECONDS) == 50
        assert budget.in_flight == 70

    asyncio.run(run())


def test_a_request_that_waits_past_the_admission_bound_is_unavailable_and_holds_nothing() -> None:
    async def run() -> None:
        budget = BodyBudget(100)
        await budget.acquire(100, 0)
        with pytest.raises(ServiceUnavailable) as refused:
            await budget.acquire(1, 0.01)
        assert refused.value.message == BODY_ADMISSION_REFUSED
        budget.release(100)
        assert budget.in_flight == 0

    asyncio.run(run())


def test_a_cancelled_waiter_holds_nothing() -> None:
    async def run() -> None:
        budget = BodyBudget(100)
        await budget.acquire(100, 0)
        waiter = asyncio.ensure_future(budget.acquire(10, WAIT_SECONDS))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        budget.release(100)
        assert budget.in_flight == 0

    asyncio.run(run())


def test_the_connection_cap_stays_below_the_descriptor_limit() -> None:
    assert RouterLimits.for_process(RouterSettings(), 1024).connections == (
        1024 - limits.ROUTER_RESERVED_DESCRIPTORS_MIN
    )
    assert (
        RouterLimits.for_process(RouterSettings(), 1_048_576).connections
        == limits.ROUTER_CONNECTIONS_MAX
    )


def test_the_environment_overrides_the_defaults() -> None:
    environ = {"DYNALAB_ROUTER_IDLE_SECONDS": "2.5", "DYNALAB_ROUTER_BODY_BYTES_IN_FLIGHT": "1000"}
    read = settings.from_environ(RouterSettings, environ, {})
    router_limits = RouterLimits.for_process(read, 20_000)
    assert router_limits.idle_seconds == 2.5
    assert router_limits.body_bytes_in_flight == 1000
    assert router_limits.body_read_seconds == limits.ROUTER_BODY_READ_SECONDS_MAX
