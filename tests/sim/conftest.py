"""Every test under tests/sim is marked `sim`: seeded in-process clusters (`dynalab.sim`)."""

from __future__ import annotations

from pathlib import Path

import pytest

SIM_DIR = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SIM_DIR in item.path.parents:
            item.add_marker(pytest.mark.sim)
