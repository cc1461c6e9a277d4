"""Settings every tier shares, and how pytest-xdist shares the tests out among its workers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings

# Hypothesis fails an example that takes longer than 200 ms by default: a timed assertion, which a
# loaded CI machine trips (seen: 270 ms in tests/unit/test_properties_values.py at load 15).
# Examples are bounded by their size instead; speed is measured by the benchmarks in bench/.
settings.register_profile("dynalab", deadline=None)
settings.load_profile("dynalab")


# The suite runs on pytest-xdist's workers (`-n auto --dist loadfile` in pyproject's addopts), a
# test file at a time, so that a module's cluster (the integration tier's module-scoped
# fixtures) starts once, in one worker. The deploy tier is one unit: its files build and tag the
# same image (`dynalab:test`), which two workers would build twice, at once.
DEPLOY_DIR = "tests/deploy/"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None  # Another --dist asked for on the command line: xdist's own.
    from xdist.scheduler import LoadFileScheduling

    class ByFileDeployTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return DEPLOY_DIR if nodeid.startswith(DEPLOY_DIR) else super()._split_scope(nodeid)

    return ByFileDeployTogether(config, log)
