"""`rpc.ratelog.RateLimitedLog`: one line per key per interval, saying what it held back."""

from __future__ import annotations

import logging

import pytest

from rpc.ratelog import RateLimitedLog


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_repeats_within_the_interval_are_held_back_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    log = RateLimitedLog(logging.getLogger("test.ratelog"), interval_s=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="test.ratelog"):
        assert log.warning("node-a", "node a unreachable")
        for _ in range(5):
            clock.now += 1.0
            assert not log.warning("node-a", "node a unreachable")
        assert log.warning("node-b", "node b unreachable"), "another key has its own interval"
        clock.now += 5.0
        assert log.warning("node-a", "node a unreachable")
        clock.now += 10.0
        assert log.warning("node-a", "node a unreachable")
    assert [record.getMessage() for record in caplog.records] == [
        "node a unreachable",
        "node b unreachable",
        "node a unreachable (5 more like it in the last 10 s)",
        "node a unreachable",
    ]


def test_keys_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("core.limits.LOG_REPEAT_KEYS_MAX", 3)
    clock = FakeClock()
    log = RateLimitedLog(logging.getLogger("test.ratelog.keys"), interval_s=10.0, clock=clock)
    for key in ("a", "b", "c", "d"):
        clock.now += 0.1
        assert log.warning(key, key)
    assert len(log._last) == 3
    assert log.warning("a", "a"), "the oldest key was forgotten, so it logs again at once"
