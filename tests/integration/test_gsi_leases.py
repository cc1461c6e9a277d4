"""Two GSI replicators sharing the source partitions through leases (`core.gsi_leases`), on a
real cluster: each holds some of the leases; one killed with SIGKILL mid-stream or mid-backfill
has its partitions taken over by the other once its leases expire, and the index converges
exactly to the projection of its table (`dynalab.convergence`): nothing lost, nothing applied
twice, no stale entry from the dead one's late writes.
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
from tests.integration.test_gsi_online import (
    BackgroundWriter,
    add_by_game,
    create_users,
    load,
    wait_index,
)

CONVERGE_TIMEOUT_S = 90.0
LEASES_TIMEOUT_S = 30.0
POLL_S = 0.1
METRICS_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three storage nodes, one router and two GSI replicators."""
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        with LocalCluster(
            tmp_path_factory.mktemp("pair"), nodes=3, routers=1, replicators=2
        ) as running:
            yield running


@pytest.fixture(scope="module")
def client(pair: LocalCluster) -> Any:
    return dynamodb_client(pair.router_url)


def metric(replicator: Replicator, name: str) -> float:
    with urllib.request.urlopen(f"{replicator.url}/metrics", timeout=METRICS_TIMEOUT_S) as reply:
        text = reply.read().decode()
    (line,) = (line for line in text.splitlines() if line.startswith(f"{name} "))
    return float(line.split()[1])


def wait_for(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + LEASES_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(POLL_S)


def held(replicator: Replicator) -> int:
    return int(metric(replicator, "dynalab_gsi_leases_held"))


def test_two_replicators_share_the_partitions_and_one_killed_mid_stream_is_taken_over(
    pair: LocalCluster, client: Any
) -> None:
    name = "leases_stream"
    create_scores(client, name)  # 4 source partitions, followed under one consumer.
    first, second = pair.replicators
    wait_for("the two replicators to hold 2 leases each", lambda: held(first) == held(second) == 2)
    writer = Writer(client, name)
    writer.burst(0, 150, 0)
    second.kill()  # SIGKILL while it is applying its share of the burst.
    writer.burst(0, 150, 1)
    wait_for("the survivor to hold every lease", lambda: held(first) == 4)
    writer.burst(50, 150, 2)
    result = convergence.wait_converged(client, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history)
    assert result.converged
    assert metric(first, "dynalab_gsi_leases_lost_total") == 0
    # Restarted, it is a new member: the survivor releases half to it, which takes them over.
    second.start()
    wait_for("the leases to be shared again", lambda: held(first) == 2 and held(second) == 2)
    writer.burst(0, 200, 3)
    result = convergence.wait_converged(client, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history)
    assert result.converged
    client.delete_table(TableName=name)
    wait_for("the leases of a deleted table to go", lambda: held(first) + held(second) == 0)


def test_one_of_two_replicators_killed_mid_backfill_the_other_finishes_it(
    pair: LocalCluster, client: Any
) -> None:
    name = "leases_backfill"
    create_users(client, name)
    seeding = Writer(client, name)
    load(client, name, seeding, 3000)
    first, second = pair.replicators
    with BackgroundWriter(pair.router_url, name) as background:
        add_by_game(client, name)
        wait_index(client, name, "ByGame", lambda i: i is not None and i["Backfilling"])
        wait_for("each replicator to copy 2 partitions", lambda: held(first) == held(second) == 2)
        first.kill()
        wait_index(client, name, "ByGame", lambda i: i is not None and i["IndexStatus"] == "ACTIVE")
    assert background.failure is None, background.failure
    history = [*seeding.history, *background.writer.history]
    result = convergence.wait_converged(client, name, "ByGame", CONVERGE_TIMEOUT_S, history)
    assert result.converged
    assert held(second) == 4
