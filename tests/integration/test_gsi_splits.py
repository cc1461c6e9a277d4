"""A base partition split while an online index copies it, on a real cluster whose replicator
copies in small pages (DYNALAB_GSI_BACKFILL_PAGE_BYTES), so that the split lands in the middle of
the copy. The parent's copy stops at the split; the replicator applies the parent's log from
where the copy began to its END (deletes and key changes of items the copy had already written
included), then copies and follows the children: the index converges exactly
(`dynalab.convergence`).

And a partition split, and its children split again, while the replicator is down: the catalog
keeps the grandparent, whose log still holds changes the replicator has not applied, until the
replicator has read it to its END.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from dynalab import convergence
from dynalab.cluster import LocalCluster
from tests.integration.conftest import dynamodb_client
from tests.integration.test_gsi_faults import Writer, create_scores
from tests.integration.test_gsi_online import (
    add_by_game,
    create_users,
    index_description,
    load,
    wait_index,
)
from tests.integration.test_splits import admin

CONVERGE_TIMEOUT_S = 60.0
METRICS_TIMEOUT_S = 5.0
PAGE_BYTES = 512  # A few small items a page: a partition's copy takes a hundred pages or more.
# The routers' reconcilers prune retired partitions every quarter of the stream retention, at most
# every minute (router/table_lifecycle.py): a retention of 8 s has them look every 2 s instead of
# leaving the test to wait out the minute. No table here has a stream, so nothing else changes.
STREAM_RETENTION_S = 8.0
PRUNE_TIMEOUT_S = 60.0  # Many rounds of the reconciler's lineage pruning, and its start.


@pytest.fixture(scope="module")
def slow_copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        environment.setenv("DYNALAB_GSI_BACKFILL_PAGE_BYTES", str(PAGE_BYTES))
        environment.setenv("DYNALAB_STREAM_RETENTION_SECONDS", str(STREAM_RETENTION_S))
        with LocalCluster(tmp_path_factory.mktemp("slow-copy"), nodes=3) as running:
            yield running


def test_a_base_partition_split_under_its_backfill_and_the_index_converges(
    slow_copy: LocalCluster,
) -> None:
    client = dynamodb_client(slow_copy.router_url)
    name = "split_under_copy"
    create_users(client, name)
    writer = Writer(client, name)
    load(client, name, writer, 3000)
    _, listing = admin(slow_copy, f"/admin/tables/{name}/partitions")
    largest = max(listing["partitions"], key=lambda p: p["size_bytes"])
    add_by_game(client, name)
    wait_index(client, name, "ByGame", lambda i: i is not None and i["Backfilling"])
    # While the copy runs: delete some items and move others to another game, in every
    # partition, the parent's early pages (already copied) among them.
    requests: list[dict[str, Any]] = []
    for user in range(0, 3000, 10):
        requests.append({"DeleteRequest": {"Key": {"UserId": {"S": f"user-{user}"}}}})
        moved = {
            "UserId": {"S": f"user-{user + 1}"},
            "Game": {"S": "game-99"},
            "Score": {"N": "1"},
            "Level": {"N": "1"},
        }
        writer.history.append(moved)
        requests.append({"PutRequest": {"Item": moved}})
    for start in range(0, len(requests), 25):
        pending = {name: requests[start : start + 25]}
        while pending:
            pending = client.batch_write_item(RequestItems=pending)["UnprocessedItems"]
    status, reply = admin(slow_copy, f"/admin/tables/{name}/partitions/{largest['id']}/split", {})
    assert status == 200, reply
    during = index_description(client, name, "ByGame")
    assert during is not None and during["IndexStatus"] == "CREATING", during
    wait_index(client, name, "ByGame", lambda i: i is not None and i["IndexStatus"] == "ACTIVE")
    result = convergence.wait_converged(client, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history)
    assert result.converged
    # The split cut the parent's copy short (else this test would not test it).
    (replicator,) = slow_copy.replicators
    with urllib.request.urlopen(f"{replicator.url}/metrics", timeout=METRICS_TIMEOUT_S) as page:
        metrics = page.read().decode()
    (done,) = (
        line
        for line in metrics.splitlines()
        if line.startswith("dynalab_gsi_backfill_done{") and f'partition="{largest["id"]}"' in line
    )
    assert done.endswith(" 0"), done


def split(cluster: LocalCluster, name: str, partition_id: str) -> list[dict[str, Any]]:
    """Split a partition by hand; the table's partitions listed after."""
    status, reply = admin(cluster, f"/admin/tables/{name}/partitions/{partition_id}/split", {})
    assert status == 200, reply
    status, listing = admin(cluster, f"/admin/tables/{name}/partitions")
    assert status == 200, listing
    partitions: list[dict[str, Any]] = listing["partitions"]
    return partitions


def test_a_partition_split_twice_while_the_replicator_is_down_is_drained_first(
    slow_copy: LocalCluster,
) -> None:
    client = dynamodb_client(slow_copy.router_url)
    name = "split_twice_unfollowed"
    create_scores(client, name)
    writer = Writer(client, name)
    writer.burst(0, 120, 0)
    assert convergence.wait_converged(
        client, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history
    ).converged
    (replicator,) = slow_copy.replicators
    replicator.kill()
    writer.burst(0, 120, 1)  # Deletes and key changes the replicator has not applied.
    _, listing = admin(slow_copy, f"/admin/tables/{name}/partitions")
    parent = max(listing["partitions"], key=lambda p: p["size_bytes"])
    children = [
        p["id"] for p in split(slow_copy, name, parent["id"]) if p["parent"] == parent["id"]
    ]
    assert len(children) == 2
    for child in children:
        listed = split(slow_copy, name, child)
    # No serving partition names the first parent now; its log still holds round 1.
    assert parent["id"] in {p["id"] for p in listed}, listed
    writer.burst(60, 120, 2)
    replicator.start()
    result = convergence.wait_converged(client, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history)
    assert result.converged
    # Drained, the grandparent's log is gone from its node, and a router's reconciler drops it
    # from the catalog (a round every STREAM_RETENTION_S / 4 here).
    deadline = time.monotonic() + PRUNE_TIMEOUT_S
    while parent["id"] in {
        p["id"] for p in admin(slow_copy, f"/admin/tables/{name}/partitions")[1]["partitions"]
    }:
        assert time.monotonic() < deadline, "the drained grandparent stayed in the catalog"
        time.sleep(1.0)
