"""The README's supported-operations table is the one `router.operations_table` renders."""

from __future__ import annotations

from router import operations_table, streams
from router.app import load_operations


def test_the_readme_table_is_current() -> None:
    readme = operations_table.README.read_text()
    assert operations_table.section(readme) == operations_table.render(), (
        "README.md's operations table is stale: run `make operations`"
    )


def test_every_served_operation_is_listed_as_supported_and_no_other() -> None:
    rows = operations_table.render().splitlines()
    supported = next(row for row in rows if row.startswith("| supported ("))
    missing = next(row for row in rows if row.startswith("| not yet supported"))
    for name in load_operations():
        assert f"`{name}`" in supported
        assert f"`{name}`" not in missing
    assert "`TransactWriteItems`" in supported + missing
    streams_row = next(row for row in rows if row.startswith("| supported, DynamoDB Streams"))
    for name in streams.OPERATIONS:
        assert f"`{name}`" in streams_row
        assert f"`{name}`" not in missing


def test_rewrite_replaces_only_the_table() -> None:
    text = f"before\n{operations_table.BEGIN}\nold table\n{operations_table.END}\nafter\n"
    rewritten = operations_table.rewrite(text)
    assert rewritten.startswith(f"before\n{operations_table.BEGIN}\n| status | operations |")
    assert rewritten.endswith(f"\n{operations_table.END}\nafter\n")
    assert "old table" not in rewritten
