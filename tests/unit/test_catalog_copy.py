"""router.catalog_copy: the router's copy of the catalog in its state directory."""

from __future__ import annotations

from pathlib import Path

from core import catalog
from core.catalog import TableDef, Throughput
from core.keys import KeyShape
from core.token_bucket import BillingMode
from router import catalog_copy

NOW = 1_700_000_000.0


def table(name: str, table_id: str) -> TableDef:
    return catalog.activated(
        catalog.created(
            name=name,
            table_id=table_id,
            key_shape=KeyShape.table(("pk", "S"), ("sk", "N")),
            attribute_definitions=[("pk", "S"), ("sk", "N")],
            billing_mode=BillingMode.PAY_PER_REQUEST,
            throughput=Throughput(),
            now=NOW,
            owner=lambda _: "node-2",
        )
    )


def test_a_saved_copy_loads_as_the_same_records(tmp_path: Path) -> None:
    records = {"Music": table("Music", "a" * 32), "Books": table("Books", "b" * 32)}
    catalog_copy.save(tmp_path / "state", records)
    assert catalog_copy.load(tmp_path / "state") == records
    # Saving again replaces the copy, leaving no temporary file behind.
    catalog_copy.save(tmp_path / "state", {"Books": records["Books"]})
    assert catalog_copy.load(tmp_path / "state") == {"Books": records["Books"]}
    assert sorted(path.name for path in (tmp_path / "state").iterdir()) == ["catalog.json"]


def test_no_copy_loads_as_none(tmp_path: Path) -> None:
    assert catalog_copy.load(tmp_path) == {}


def test_a_damaged_or_foreign_copy_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / catalog_copy.COPY_FILE_NAME
    catalog_copy.save(tmp_path, {"Music": table("Music", "a" * 32)})
    path.write_bytes(path.read_bytes()[:-20])
    assert catalog_copy.load(tmp_path) == {}
    path.write_bytes(b'{"format": 99, "tables": []}')
    assert catalog_copy.load(tmp_path) == {}
    path.write_bytes(b'{"format": 1, "tables": [{"name": "Music"}]}')
    assert catalog_copy.load(tmp_path) == {}
