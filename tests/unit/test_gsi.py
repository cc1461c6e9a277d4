"""The GSI projector core: a change into index writes (seed 001 G-08, G-31, G-32), writes routed to
index partitions, and the order in which split partitions' logs may be followed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from core import catalog, gsi
from core.catalog import IndexDef, PartitionDef, TableDef, Throughput
from core.keys import KeyAttribute, KeyShape
from core.token_bucket import BillingMode

TABLE_SHAPE = KeyShape.table(("UserId", "S"), ("GameTitle", "S"))


def index(name: str, projection: Any = "KEYS_ONLY", non_key: tuple[str, ...] = ()) -> IndexDef:
    return catalog.global_index(
        name=name,
        key_shape=KeyShape(
            (KeyAttribute("GameTitle", "S", "partition"), KeyAttribute("TopScore", "N", "sort"))
        ),
        projection=projection,
        non_key_attributes=non_key,
        index_id=("a" if name == "GameTitleIndex" else "b") * 32,
        billing_mode=BillingMode.PAY_PER_REQUEST,
        throughput=Throughput(),
        owner=lambda partition_id: "node-1",
    )


KEYS = index("GameTitleIndex")
WINS = index("WinsIndex", "INCLUDE", ("Wins",))


def score(user: str, title: str, top: int | None, **more: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"UserId": {"S": user}, "GameTitle": {"S": title}, **more}
    if top is not None:
        item["TopScore"] = {"N": str(top)}
    return item


def project(old: Any, new: Any, indexes: tuple[IndexDef, ...] = (KEYS,)) -> list[gsi.IndexWrite]:
    return gsi.project_change(7, old, new, indexes, TABLE_SHAPE)


def test_a_new_item_with_the_index_keys_is_one_put_of_its_projection() -> None:
    new = score("101", "Comet Quest", 5, Wins={"N": "3"}, Losses={"N": "1"})
    (write,) = project(None, new)
    assert write == gsi.IndexWrite("GameTitleIndex", 7, None, score("101", "Comet Quest", 5))
    assert write.writes == 1
    (include,) = project(None, new, (WINS,))
    assert include.put == score("101", "Comet Quest", 5, Wins={"N": "3"})


def test_an_item_without_an_index_key_attribute_writes_nothing() -> None:
    # G-08: {UserId: 400, GameTitle: "Comet Quest"} without TopScore is not in the index.
    assert project(None, score("400", "Comet Quest", None)) == []
    assert project(score("400", "Comet Quest", None), score("400", "Comet Quest", None, W={})) == []


def test_a_changed_index_key_is_a_delete_and_a_put() -> None:
    (write,) = project(score("101", "Comet Quest", 5), score("101", "Comet Quest", 9))
    assert write.delete == score("101", "Comet Quest", 5)
    assert write.put == score("101", "Comet Quest", 9)
    assert write.writes == 2


def test_removing_an_index_key_attribute_or_the_item_deletes_the_entry() -> None:
    for new in (score("101", "Comet Quest", None), None):
        (write,) = project(score("101", "Comet Quest", 5), new)
        assert (write.delete, write.put) == (score("101", "Comet Quest", 5), None)


def test_only_a_change_to_a_projected_attribute_rewrites_the_entry() -> None:
    old = score("101", "Comet Quest", 5, Wins={"N": "1"}, Losses={"N": "1"})
    assert project(old, {**old, "Losses": {"N": "2"}}, (WINS,)) == []
    (write,) = project(old, {**old, "Wins": {"N": "2"}}, (WINS,))
    assert (write.delete, write.put, write.writes) == (
        None,
        {**score("101", "Comet Quest", 5), "Wins": {"N": "2"}},
        1,
    )


def test_each_global_index_gets_its_own_write_and_local_indexes_none() -> None:
    local = replace(KEYS, name="Local", local=True, table_id=None, partitions=())
    writes = project(None, score("101", "Comet Quest", 5, Wins={"N": "1"}), (KEYS, WINS, local))
    assert [write.index for write in writes] == ["GameTitleIndex", "WinsIndex"]


def table_of(*indexes: IndexDef) -> TableDef:
    table = catalog.created(
        name="GameScores",
        table_id="c" * 32,
        key_shape=TABLE_SHAPE,
        attribute_definitions=[("UserId", "S"), ("GameTitle", "S"), ("TopScore", "N")],
        billing_mode=BillingMode.PAY_PER_REQUEST,
        throughput=Throughput(),
        now=0.0,
        owner=lambda partition_id: "node-1",
    )
    for one in indexes:
        table = catalog.index_added(table, one)
    return catalog.activated(table)


def test_writes_are_routed_to_the_partition_of_each_entry_key_in_seq_order() -> None:
    table = table_of(KEYS)
    writes = [
        *gsi.project_change(1, None, score("1", "Comet Quest", 5), table.indexes, TABLE_SHAPE),
        *gsi.project_change(2, None, score("2", "Galaxy Invaders", 5), table.indexes, TABLE_SHAPE),
        *gsi.project_change(
            3,
            score("1", "Comet Quest", 5),
            score("1", "Comet Quest", 6),
            table.indexes,
            TABLE_SHAPE,
        ),
    ]
    routed = gsi.route(writes, table)
    shape = KeyShape((*KEYS.key_shape.attributes, KeyAttribute("UserId", "S", "partition")))
    changes = [change for batch in routed.values() for change in batch]
    assert sorted(change["seq"] for change in changes) == [1, 2, 3]
    for (index_id, partition_id, epoch, node), batch in routed.items():
        partition = next(p for p in KEYS.partitions if p.id == partition_id)
        assert (index_id, epoch, node) == (KEYS.table_id, 1, "node-1")
        seqs = [change["seq"] for change in batch]
        assert seqs == sorted(seqs)
        for change in batch:
            for entry in (change.get("delete"), change.get("put")):
                if entry is not None:
                    assert partition.holds(shape.storage_key(shape.key_of(entry)))


def test_a_delete_and_a_put_in_different_partitions_travel_apart_with_one_seq() -> None:
    table = table_of(KEYS)
    titles = [f"title-{n}" for n in range(40)]
    shape = KeyShape((*KEYS.key_shape.attributes, KeyAttribute("UserId", "S", "partition")))

    def home(title: str) -> str:
        key = shape.key_of(score("1", title, 1))
        return next(p.id for p in KEYS.partitions if p.holds(shape.storage_key(key)))

    first = titles[0]
    other = next(title for title in titles if home(title) != home(first))
    # The table key holds GameTitle: a new title is a new item, so the entry key changes with it.
    writes = [gsi.IndexWrite("GameTitleIndex", 4, score("1", first, 1), score("1", other, 1))]
    routed = gsi.route(writes, table)
    assert {target[1]: batch for target, batch in routed.items()} == {
        home(first): [{"seq": 4, "delete": score("1", first, 1)}],
        home(other): [{"seq": 4, "put": score("1", other, 1)}],
    }
    # A write for an index no longer in the table is dropped.
    assert gsi.route([replace(writes[0], index="Gone")], table) == {}


def test_split_children_wait_until_their_parent_is_drained() -> None:
    table = table_of(KEYS)
    parent = table.partitions[0]
    split, _, _ = catalog.split(
        table, parent.id, bytes.fromhex(parent.start) + b"\x01", "low", "high", now=1_700_000_000.0
    )
    ready = {partition.id for partition in gsi.followable(split, set())}
    assert parent.id in ready and not {"low", "high"} & ready
    after = {partition.id for partition in gsi.followable(split, {parent.id})}
    assert {"low", "high"} <= after and parent.id not in after
    assert all(isinstance(p, PartitionDef) for p in gsi.followable(split, set()))


def test_an_image_violating_the_index_key_has_no_entry() -> None:
    # Written before an online index existed, with TopScore a string: left out (seed 004 O-23).
    wrong = score("101", "Comet Quest", None, TopScore={"S": "high"})
    assert gsi.key_violation(wrong, KEYS) is not None
    assert project(None, wrong) == []
    right = score("101", "Comet Quest", 5)
    (fixed,) = project(wrong, right)
    assert (fixed.delete, fixed.put) == (None, right)
    assert gsi.expected_entries([wrong, right], KEYS, TABLE_SHAPE) == [right]
    empty = score("102", "", 5)
    assert gsi.key_violation(empty, KEYS) is not None


def test_an_online_index_is_followed_under_a_consumer_of_its_own() -> None:
    online = replace(WINS, online=True, status=catalog.IndexStatus.ACTIVE)
    table = replace(table_of(KEYS), indexes=(*table_of(KEYS).indexes, online))
    keys = table.indexes[0]
    groups = gsi.followed_groups(table)
    assert groups == {gsi.REPLICATOR_CONSUMER: (keys,), f"gsi_replicator/{'b' * 32}": (online,)}
    deleting = replace(online, status=catalog.IndexStatus.DELETING)
    assert gsi.followed_groups(replace(table, indexes=(keys, deleting))) == {
        gsi.REPLICATOR_CONSUMER: (keys,)
    }


def test_a_backfill_page_is_one_put_per_item_in_the_index() -> None:
    items = [score("1", "A", 1), score("2", "B", None), score("3", "C", 3, Wins={"N": "2"})]
    writes = gsi.backfill_writes(items, WINS, TABLE_SHAPE)
    assert [(w.delete, w.put) for w in writes] == [
        (None, score("1", "A", 1)),
        (None, score("3", "C", 3, Wins={"N": "2"})),
    ]


def test_the_violation_detector_names_each_violating_key_attribute() -> None:
    # Seed 004 O-22: a wrong type, an empty string, a value too large for an index key.
    wrong = score("101", "Comet Quest", None, TopScore={"S": "high"})
    (violation,) = gsi.violations(wrong, KEYS, TABLE_SHAPE)
    assert violation.key == {"UserId": {"S": "101"}, "GameTitle": {"S": "Comet Quest"}}
    assert (violation.attribute, violation.role, violation.kind) == (
        "TopScore",
        "sort",
        gsi.TYPE_VIOLATION,
    )
    assert violation.description == (
        "One or more parameter values were invalid: Type mismatch for Index Key TopScore "
        "Expected: N Actual: S IndexName: GameTitleIndex"
    )
    both = score("102", "", None, TopScore={"S": "x"})  # An empty hash key, a wrong range key.
    kinds = [(v.attribute, v.kind) for v in gsi.violations(both, KEYS, TABLE_SHAPE)]
    assert kinds == [("GameTitle", gsi.SIZE_VIOLATION), ("TopScore", gsi.TYPE_VIOLATION)]
    large = score("103", "x" * 2049, 1)
    (too_large,) = gsi.violations(large, KEYS, TABLE_SHAPE)
    assert (too_large.attribute, too_large.kind) == ("GameTitle", gsi.SIZE_VIOLATION)
    assert gsi.violations(score("104", "Comet Quest", 3), KEYS, TABLE_SHAPE) == []
    assert gsi.violations(score("105", "Comet Quest", None), KEYS, TABLE_SHAPE) == []
