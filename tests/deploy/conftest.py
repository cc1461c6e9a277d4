"""Settings the container tests need on any machine, before testcontainers reads its config.

Every container, network and volume these tests make is removed by the tests themselves, so
testcontainers' reaper (Ryuk) is not needed; it is off because starting it pulls its image from a
registry, which fails on a machine with Docker but no internet. Set TESTCONTAINERS_RYUK_DISABLED
to false to have it anyway.
"""

import os

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
