"""Paging PartiQL SELECTs over a table that splits while they are read: every item once.

A cluster whose split size is a few kilobytes is loaded with items; the nodes split its
partitions in the background as it fills, and the test splits the largest partition by hand
between pages as well, so both a full-table SELECT (a Scan) and a key SELECT (a Query of one
large item collection, which splits at sort keys) page across partitions that change under them.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table, dynamodb_client

SPLIT_BYTES = 4096
COLLECTIONS = 20
ITEMS_PER_COLLECTION = 10
BIG_COLLECTION_ITEMS = 150
PAGE_LIMIT = 7
PAGES_MAX = 1000
ADMIN_SECONDS_MAX = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        with LocalCluster(
            tmp_path_factory.mktemp("partiql-splits"), nodes=3, routers=2, split_bytes=SPLIT_BYTES
        ) as running:
            yield running


def admin(cluster: LocalCluster, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else orjson.dumps(body)
    request = urllib.request.Request(
        cluster.router_url + path, data=data, method="GET" if body is None else "POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=ADMIN_SECONDS_MAX) as reply:
            return reply.status, orjson.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, orjson.loads(error.read())


def split_largest(cluster: LocalCluster, table: str) -> bool:
    """Split the table's largest serving partition where it halves its bytes; whether it split."""
    status, listing = admin(cluster, f"/admin/tables/{table}/partitions")
    assert status == 200, listing
    sized = [p for p in listing["partitions"] if p.get("size_bytes")]
    if not sized:
        return False
    largest = max(sized, key=lambda p: p["size_bytes"])
    # A partition that split on its own meanwhile is retired (404): the table split anyway.
    status, _ = admin(cluster, f"/admin/tables/{table}/partitions/{largest['id']}/split", {})
    return status == 200


def page_through(
    client: Any, cluster: LocalCluster, table: str, statement: str
) -> tuple[list[tuple[str, int]], int]:
    """Every (pk, sk) a SELECT pages through, splitting a partition between pages; and how many
    of those splits were made."""
    seen: list[tuple[str, int]] = []
    splits = 0
    request: dict[str, Any] = {"Statement": statement, "Limit": PAGE_LIMIT, "ConsistentRead": True}
    for pages in range(1, PAGES_MAX + 1):
        page = client.execute_statement(**request)
        seen.extend((item["pk"]["S"], int(item["sk"]["N"])) for item in page["Items"])
        if "NextToken" not in page:
            return seen, splits
        request["NextToken"] = page["NextToken"]
        if pages % 3 == 0:
            splits += split_largest(cluster, table)
    raise AssertionError(f"{statement} did not end in {PAGES_MAX} pages")


def test_selects_page_over_splitting_partitions_and_read_every_item_once(
    cluster: LocalCluster, table_name: Any
) -> None:
    client = dynamodb_client(cluster.router_url)
    table = create_active_table(client, table_name(), ("pk", "S"), ("sk", "N"))
    expected: list[tuple[str, int]] = []
    for collection in range(COLLECTIONS):
        for number in range(ITEMS_PER_COLLECTION):
            expected.append((f"c{collection}", number))
    expected.extend(("big", number) for number in range(BIG_COLLECTION_ITEMS))
    for pk, sk in expected:
        client.execute_statement(
            Statement=f"INSERT INTO \"{table}\" VALUE {{'pk': ?, 'sk': ?, 'pad': ?}}",
            Parameters=[{"S": pk}, {"N": str(sk)}, {"S": "x" * 80}],
        )

    scanned, splits = page_through(client, cluster, table, f'SELECT * FROM "{table}"')
    assert sorted(scanned) == sorted(expected)
    assert len(scanned) == len(set(scanned))
    assert splits > 0, "no partition split while the scan paged"

    queried, splits = page_through(
        client, cluster, table, f"SELECT * FROM \"{table}\" WHERE pk = 'big' ORDER BY sk DESC"
    )
    assert queried == [("big", number) for number in reversed(range(BIG_COLLECTION_ITEMS))]
    assert splits > 0, "no partition split while the query paged"

    several, _ = page_through(
        client,
        cluster,
        table,
        f"SELECT * FROM \"{table}\" WHERE pk IN ['c3', 'big', 'c7'] AND sk < 5 ORDER BY pk",
    )
    assert several == [("big", n) for n in range(5)] + [("c3", n) for n in range(5)] + [
        ("c7", n) for n in range(5)
    ]

    status, listing = admin(cluster, f"/admin/tables/{table}/partitions")
    assert status == 200
    assert len(listing["partitions"]) > 4, "the table split while it was read"
