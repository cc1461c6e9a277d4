"""Dead rows of the GSI replicators' leases table are deleted (`core.gsi_leases.collectable`) on a
real cluster with two replicators and a short grace (DYNALAB_GSI_LEASE_GC_GRACE_SECONDS): the
lease rows of a dropped table go, the member row of a replicator killed with SIGKILL goes, and
the leases of a table still followed stay with their holder, whose index keeps converging.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dynalab import convergence
from dynalab.cluster import LocalCluster, Replicator
from tests.integration.conftest import dynamodb_client
from tests.integration.test_gsi_faults import Writer, create_scores

GRACE_S = 4.0  # Longer than a lease (3 s), as the replicator requires.
GC_TIMEOUT_S = 60.0
CONVERGE_TIMEOUT_S = 90.0
POLL_S = 0.1
METRICS_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three storage nodes, one router and two GSI replicators collecting after GRACE_S."""
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        environment.setenv("DYNALAB_GSI_LEASE_GC_GRACE_SECONDS", str(GRACE_S))
        with LocalCluster(
            tmp_path_factory.mktemp("lease_gc"), nodes=3, routers=1, replicators=2
        ) as running:
            yield running


def metric(replicator: Replicator, name: str) -> float:
    with urllib.request.urlopen(f"{replicator.url}/metrics", timeout=METRICS_TIMEOUT_S) as reply:
        text = reply.read().decode()
    (line,) = (line for line in text.splitlines() if line.startswith(f"{name} "))
    return float(line.split()[1])


def wait_for(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + GC_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(POLL_S)


def held(replicator: Replicator) -> int:
    return int(metric(replicator, "dynalab_gsi_leases_held"))


def test_rows_of_a_dropped_table_and_a_dead_replicator_are_collected(pair: LocalCluster) -> None:
    client: Any = dynamodb_client(pair.router_url)
    first, second = pair.replicators
    create_scores(client, "kept")  # 4 source partitions each, under one consumer.
    create_scores(client, "dropped")
    wait_for("both tables' 8 leases held", lambda: held(first) + held(second) == 8)
    wait_for(  # As its next read of the leases table finds them.
        "8 lease rows and 2 member rows",
        lambda: (
            metric(first, "dynalab_gsi_lease_rows") == 8
            and metric(first, "dynalab_gsi_member_rows") == 2
        ),
    )
    client.delete_table(TableName="dropped")
    wait_for(
        "the dropped table's lease rows to be deleted",
        lambda: metric(first, "dynalab_gsi_lease_rows") == 4,
    )
    collected = metric(first, "dynalab_gsi_leases_collected_total") + metric(
        second, "dynalab_gsi_leases_collected_total"
    )
    assert collected == 4  # Each row deleted once: the loser of a race finds it gone.
    second.kill()  # SIGKILL: its member row stops changing, and its leases expire.
    wait_for("the survivor to take every lease", lambda: held(first) == 4)
    wait_for(
        "the dead replicator's member row to be deleted",
        lambda: metric(first, "dynalab_gsi_member_rows") == 1,
    )
    assert metric(first, "dynalab_gsi_members_collected_total") == 1
    # The kept table's leases were never collected: they stay held, rows and epochs intact, and
    # its index goes on converging.
    assert metric(first, "dynalab_gsi_lease_rows") == 4
    writer = Writer(client, "kept")
    writer.burst(0, 100, 0)
    result = convergence.wait_converged(
        client, "kept", "ByGame", CONVERGE_TIMEOUT_S, writer.history
    )
    assert result.converged
    assert metric(first, "dynalab_gsi_leases_lost_total") == 0
