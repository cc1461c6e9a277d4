"""An online index's backfill resumed from its cursor on a real cluster: a GSI replicator copying a
table of a few thousand items into an index added by UpdateTable is held by its backfill driver
at a page past the first (DYNALAB_HOLD_AT=backfill:copying) and killed there with SIGKILL;
another replicator takes its leases over and finishes each partition from the cursor the
catalog row records. The index converges exactly, no partition is copied twice (the items each
copy counts, from the row and its own pages, are exactly the partition's), and
OnlineIndexPercentageProgress, read from the router's admin snapshot as the index is built, only
rises, then the index is ACTIVE (100); part of the way the snapshot shows the copy's rate and the
time it has left.
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from dynalab import convergence
from dynalab.cluster import LocalCluster
from tests.integration.conftest import dynamodb_client
from tests.integration.crash_points import held_at, held_file, hold_environment, let_go
from tests.integration.test_gsi_faults import Writer
from tests.integration.test_gsi_online import add_by_game, create_users, load, wait_index

ITEMS = 3000
PAGE_BYTES = 512  # A few small items a page: each partition's copy takes dozens of pages.
KILL_AT_PERCENT = 30  # How far the first replicator copies before it is held and killed.
CONVERGE_TIMEOUT_S = 60.0
PROGRESS_TIMEOUT_S = 120.0
POLL_S = 0.05
HTTP_TIMEOUT_S = 30.0
MACHINE = "backfill"
POINT = "copying"


@pytest.fixture(scope="module")
def two_replicators(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        environment.setenv("DYNALAB_GSI_BACKFILL_PAGE_BYTES", str(PAGE_BYTES))
        with LocalCluster(tmp_path_factory.mktemp("resume"), nodes=3, replicators=2) as running:
            yield running


def snapshot_table(cluster: LocalCluster, name: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{cluster.router_url}/admin/cluster", timeout=HTTP_TIMEOUT_S) as r:
        document = orjson.loads(r.read())
    return next(table for table in document["tables"] if table["name"] == name)


def backfill_of(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    """The index's backfill in the admin snapshot while it is built (None once it is not)."""
    index = next(i for i in snapshot_table(cluster, name)["indexes"] if i["name"] == "ByGame")
    backfill: dict[str, Any] | None = index.get("backfill")
    return backfill


def percentage(cluster: LocalCluster, name: str) -> int | None:
    """The index's OnlineIndexPercentageProgress while it is built (None once it is not)."""
    backfill = backfill_of(cluster, name)
    return None if backfill is None else backfill["percentage"]


def backfill_metrics(url: str, name: str, family: str) -> dict[str, int]:
    """A replicator's `dynalab_gsi_<family>` for table `name`, by partition."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=HTTP_TIMEOUT_S) as page:
        text = page.read().decode()
    pattern = re.compile(
        rf'^dynalab_gsi_{family}{{table="{name}",partition="([^"]+)",consumer="[^"]+"}} (\S+)$',
        re.MULTILINE,
    )
    return {partition: int(float(value)) for partition, value in pattern.findall(text)}


def test_a_replicator_killed_mid_backfill_and_another_finishes_from_the_cursor(
    two_replicators: LocalCluster, tmp_path: Path
) -> None:
    cluster = two_replicators
    client = dynamodb_client(cluster.router_url)
    name = "resumed_copy"
    create_users(client, name)
    writer = Writer(client, name)
    load(client, name, writer, ITEMS)
    held, finisher = cluster.replicators
    finisher.stop()  # Gracefully: the held replicator takes every partition's lease.
    held.stop()
    with pytest.MonkeyPatch.context() as environment:
        for variable, value in hold_environment(tmp_path, POINT, machine=MACHINE).items():
            environment.setenv(variable, value)
        held.start()
    percentages: list[int] = []
    go = tmp_path / f"{MACHINE}-{POINT}.go"
    try:
        add_by_game(client, name)
        held_at(tmp_path, POINT, machine=MACHINE)  # Its first page.
        let_go(tmp_path, POINT, machine=MACHINE)
        deadline = time.monotonic() + PROGRESS_TIMEOUT_S
        while (percent := percentage(cluster, name)) is None or percent < KILL_AT_PERCENT:
            if percent is not None:
                percentages.append(percent)
            assert time.monotonic() < deadline, f"the copy is still at {percent}%"
            time.sleep(POLL_S)
        percentages.append(percent)
        # Part of the way: a rate since the copy began, and time left for the rest of it.
        partway = backfill_of(cluster, name)
        assert partway is not None and partway["items_per_second"] > 0, partway
        assert partway["items_copied"] < partway["items_estimate"], partway
        assert partway["seconds_left"] > 0, partway
        # Hold it at its next page, then kill it there.
        go.unlink()
        held_file(tmp_path, POINT, machine=MACHINE).unlink()
        held_at(tmp_path, POINT, machine=MACHINE)
        pages_before = backfill_metrics(held.url, name, "backfill_pages_total")
        done_before = backfill_metrics(held.url, name, "backfill_done")
        held.kill()
    finally:
        held.kill()  # (Killed already, unless the test failed before.)
    finisher.start()
    deadline = time.monotonic() + PROGRESS_TIMEOUT_S
    while (percent := percentage(cluster, name)) is not None:
        percentages.append(percent)
        assert time.monotonic() < deadline, f"the index is still built, at {percent}%"
        time.sleep(POLL_S)
    described = wait_index(
        client, name, "ByGame", lambda i: i is not None and i["IndexStatus"] == "ACTIVE"
    )
    assert described is not None and described["Backfilling"] is False
    assert percentages == sorted(percentages), percentages
    assert KILL_AT_PERCENT <= percentages[-1] < 100, percentages
    result = convergence.wait_converged(client, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history)
    assert result.converged
    # Each partition's copy counts the items the row recorded when the finisher took it over and
    # those it read itself from the cursor: exactly the partition's items (no writes meanwhile),
    # where a copy started again from the beginning would count the recorded ones twice.
    copied = backfill_metrics(finisher.url, name, "backfill_items_total")
    counts = {p["id"]: p["item_count"] for p in snapshot_table(cluster, name)["partitions"]}
    resumed = [p for p, pages in pages_before.items() if pages >= 2 and not done_before[p]]
    assert resumed and all(copied[p] == counts[p] for p in resumed), (copied, counts)
