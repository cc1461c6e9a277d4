"""Limits are named with their unit and hold the values the DynamoDB quotas page gives."""

from core import limits


def test_headline_limits() -> None:
    assert limits.ITEM_SIZE_BYTES_MAX == 409_600
    assert limits.PARTITION_KEY_BYTES_MAX == 2048
    assert limits.SORT_KEY_BYTES_MAX == 1024
    assert limits.NESTING_DEPTH_MAX == 32
    assert limits.PARTITION_RCU_MAX == 3000
    assert limits.PARTITION_WCU_MAX == 1000
    assert limits.BURST_SECONDS_MAX == 300
    assert limits.QUERY_PAGE_BYTES_MAX == 1_048_576


def test_every_limit_is_named_with_a_unit() -> None:
    units = (
        "_MAX",
        "_MIN",
        "_BYTES",
        "_DIGITS",
        "_SECONDS",
        "_PARTITIONS",
        "_DEFAULT",
        "_ENTRIES",
        "_PER_NODE",
    )
    names = [n for n in vars(limits) if n.isupper() and n not in ("KIB", "MIB", "GIB")]
    unnamed = [n for n in names if not any(u in n for u in units) and not n.startswith("SIZE_")]
    assert not unnamed, f"limits without a unit or bound in their name: {unnamed}"
