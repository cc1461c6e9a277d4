"""Settings every tier shares."""

from __future__ import annotations

from hypothesis import settings

# Hypothesis fails an example that takes longer than 200 ms by default: a timed assertion, which a
# loaded CI machine trips (seen: 270 ms in tests/unit/test_properties_values.py at load 15).
# Examples are bounded by their size instead; speed is measured by the benchmarks in bench/.
settings.register_profile("dynalab", deadline=None)
settings.load_profile("dynalab")
