"""Settings a storage node reads from its environment (`DYNALAB_*`), for experiments and tests."""

from __future__ import annotations

import os


def positive_int(name: str, default: int, unit: str) -> int:
    """The whole number in environment variable `name`, at least 1 (`unit` names what it counts,
    for the error), or `default` when it is unset or blank. Raises ValueError otherwise."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    value = int(text)
    if value < 1:
        raise ValueError(f"{name} must be at least 1 {unit}, not {value}")
    return value
