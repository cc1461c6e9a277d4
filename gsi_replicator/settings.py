"""A GSI replicator's settings, read once at start (`core.settings`).

Both exist for experiments and tests: small backfill pages make an online index's copy long
enough to watch or interrupt, and a short grace lets dead lease rows go within a test.
`python -m gsi_replicator --help` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from core import limits
from core.settings import at_least, seconds_within, setting


@dataclass(frozen=True, slots=True)
class ReplicatorSettings:
    backfill_page_bytes: int = setting(
        limits.GSI_BACKFILL_PAGE_BYTES,
        "DYNALAB_GSI_BACKFILL_PAGE_BYTES",
        at_least(1, "byte"),
        "bytes of a base partition one page of an online index's copy reads",
    )
    lease_gc_grace_seconds: float = setting(
        limits.GSI_LEASE_GC_GRACE_SECONDS,
        "DYNALAB_GSI_LEASE_GC_GRACE_SECONDS",
        # Longer than a lease: a live holder always rewrites its row within one.
        seconds_within(limits.GSI_LEASE_SECONDS, 7 * 24 * 3600.0, open_below=True),
        "how long a dead lease or member row is seen unchanged before it is deleted",
    )
