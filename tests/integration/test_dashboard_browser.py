"""The dashboard in headless Chromium, on a real 3-node cluster with throughput enforced: one
table under a steady load, a PROVISIONED 5/5 table whose one hot key is throttled, and one node
killed. The page must show the dead node, every table's partitions and the throttling, as DOM
text, and its charts must have drawn (the throttled series' colour in the screenshot, which is
kept under the test's tmp directory). Skipped where Chromium is not installed."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError
from matplotlib import image

from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table, dynamodb_client

BROWSER_TIMEOUT_S = 90.0
# Virtual time the page may run for: its first fetch, render, and a few refreshes.
PAGE_BUDGET_MS = 6000
BURST_SECONDS = 1.0
SNAPSHOT_WAIT_S = 40.0
POLL_S = 0.5
HTTP_TIMEOUT_S = 10.0
LOAD_PAUSE_S = 0.01  # Between the steady load's writes, so it leaves the machine room.
THROTTLED_RED = np.array([0xD6, 0x27, 0x28]) / 255  # The throttled series' stroke.
DEAD_NODE_PINK = np.array([0xFD, 0xE8, 0xE8]) / 255  # An unreachable node's card.
COLOUR_TOLERANCE = 6 / 255


def browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("Chromium is not installed")


def chromium(url: str, *output: str) -> str:
    command = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    command += ["--window-size=1400,1800", f"--virtual-time-budget={PAGE_BUDGET_MS}"]
    done = subprocess.run(
        [*command, *output, url],
        capture_output=True,
        timeout=BROWSER_TIMEOUT_S,
        check=True,
        text=True,
    )
    return done.stdout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "on")
        environment.setenv("DYNALAB_BURST_SECONDS", str(BURST_SECONDS))
        with LocalCluster(tmp_path_factory.mktemp("browser"), nodes=3, routers=1) as running:
            yield running


def snapshot(cluster: LocalCluster) -> dict[str, Any]:
    with urllib.request.urlopen(f"{cluster.router_url}/admin/cluster", timeout=HTTP_TIMEOUT_S) as r:
        return dict(json.loads(r.read()))


def table_of(document: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in document["tables"] if t["name"] == name)


def pixels_near(pixels: np.ndarray, colour: np.ndarray) -> int:
    return int((np.abs(pixels - colour).max(axis=2) <= COLOUR_TOLERANCE).sum())


class Load:
    """Writers in threads until stopped: a steady load on `steady`, and one hot key on `hot`
    counting its throttled requests. Failures from a dead node are expected and not counted."""

    def __init__(self, url: str, steady: str, hot: str) -> None:
        self.stopping = threading.Event()
        self.throttled = 0
        self.threads = [
            threading.Thread(target=self._steady, args=(dynamodb_client(url), steady)),
            threading.Thread(target=self._hot, args=(dynamodb_client(url), hot)),
        ]

    def _steady(self, client: Any, table: str) -> None:
        i = 0
        while not self.stopping.is_set():
            i += 1
            item = {"pk": {"S": f"k{i % 400}"}, "v": {"S": "x" * 200}}
            with contextlib.suppress(ClientError):  # Its partition's node may be the one killed.
                client.put_item(TableName=table, Item=item)
            self.stopping.wait(LOAD_PAUSE_S)

    def _hot(self, client: Any, table: str) -> None:
        while not self.stopping.is_set():
            try:
                client.put_item(TableName=table, Item={"pk": {"S": "hot"}})
            except ClientError as error:
                if error.response["Error"]["Code"] == "ProvisionedThroughputExceededException":
                    self.throttled += 1

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(HTTP_TIMEOUT_S * 2)


def wait_until(cluster: LocalCluster, check) -> dict[str, Any]:
    deadline = time.monotonic() + SNAPSHOT_WAIT_S
    while True:
        document = snapshot(cluster)
        if check(document):
            return document
        assert time.monotonic() < deadline, "the snapshot never showed what the test waits for"
        time.sleep(POLL_S)


def test_dashboard_shows_the_dead_node_partitions_and_a_throttled_hot_key(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    browser()
    client = dynamodb_client(cluster.router_url)
    steady = create_active_table(client, "orders", throughput=(1000, 1000))
    hot = create_active_table(client, "hot-key", throughput=(5, 5))
    document = snapshot(cluster)
    hot_nodes = {p["node"] for p in table_of(document, hot)["partitions"]}
    catalog = document["catalog"]["node"]
    # The victim holds neither the catalog nor the hot key, so the page can still show both.
    victim = next(n for n in cluster.nodes if n.node_id not in hot_nodes | {catalog})

    def throttling(d: dict[str, Any]) -> bool:
        partitions = table_of(d, hot)["partitions"]
        loaded = table_of(d, steady)["item_count"] > 0
        return loaded and any(p["window"]["write_throttled_requests"] for p in partitions)

    def victim_unreachable(d: dict[str, Any]) -> bool:
        return any(n["id"] == victim.node_id and n["state"] == "unreachable" for n in d["nodes"])

    with Load(cluster.router_url, steady, hot) as load:
        wait_until(cluster, throttling)
        for i in range(3):
            client.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": steady, "Item": {"pk": {"S": f"txn-{i}-{side}"}}}}
                    for side in ("from", "to")
                ]
            )
        victim.kill()
        document = wait_until(cluster, victim_unreachable)
        assert load.throttled > 0
        screenshot = tmp_path / "dashboard.png"
        chromium(f"{cluster.router_url}/dashboard", f"--screenshot={screenshot}")
        dom = chromium(f"{cluster.router_url}/dashboard", "--dump-dom")

    # The page rendered at least one snapshot.
    assert re.search(r'<body data-snapshots="[1-9]', dom), dom[:2000]
    # Nodes: the killed one is unreachable, the others up.
    for node in cluster.nodes:
        state = "unreachable" if node is victim else "up"
        assert f'data-node="{node.node_id}" data-state="{state}"' in dom
    # Every partition of both tables is in its table's key space and in its table of partitions.
    for name in (steady, hot):
        assert f'data-table="{name}"' in dom
        for partition in table_of(document, name)["partitions"]:
            assert dom.count(f'data-partition="{partition["id"]}"') == 2
            if partition["node"] == victim.node_id:
                assert 'class="partition unreachable' in dom
    # The hot key's partition shows its throttled requests in red, and its chart drew points.
    (hot_partition,) = table_of(document, hot)["partitions"]
    row = re.search(rf'<tr data-partition="{hot_partition["id"]}">(.*?)</tr>', dom)
    assert row is not None
    throttled_cell = re.search(r'<td class="throttling">(\d+)</td>', row.group(1))
    assert throttled_cell is not None and int(throttled_cell.group(1)) > 0
    points = re.search(rf'data-chart="{hot}/{hot_partition["id"]}" data-points="(\d+)"', dom)
    assert points is not None and int(points.group(1)) > 0
    assert "<canvas" in dom
    # The router's transactions: counted by outcome, and charted.
    outcomes = re.search(r'data-transactions="outcomes">coordinated: ([^<]*)<', dom)
    assert outcomes is not None, dom[-3000:]
    committed = re.search(r"(\d+) committed", outcomes.group(1))
    assert committed is not None and int(committed.group(1)) >= 3, outcomes.group(1)
    assert re.search(r'data-chart="transactions" data-points="[1-9]', dom)
    # The screenshot shows the dead node's card and the throttled series drawn on the canvas.
    pixels = image.imread(screenshot)[:, :, :3]
    assert pixels_near(pixels, DEAD_NODE_PINK) > 5_000
    assert pixels_near(pixels, THROTTLED_RED) > 100
