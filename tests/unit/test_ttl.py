"""Time To Live's pure rules: which items expire (`core.ttl`, the T- rules of seed 002) and the
TTL setting's transitions in the catalog (`core.catalog.ttl_updated` / `ttl_settled`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from core import catalog, limits, ttl
from core.catalog import TableDef, TableStatus, Throughput, TtlDef, TtlStatus
from core.errors import ResourceInUse, ValidationError
from core.keys import KeyShape
from core.token_bucket import BillingMode

NOW = 1_700_000_000.0
HOUR = limits.TTL_CHANGE_INTERVAL_SECONDS


def item(value: Any) -> dict[str, Any]:
    return {"pk": {"S": "a"}, "exp": value}


# Expiry rules ----------------------------------------------------------------------------------


def test_t02_an_item_expires_once_its_time_is_less_than_now_not_when_equal() -> None:
    assert ttl.expired(item({"N": str(int(NOW) - 1)}), "exp", NOW)
    assert not ttl.expired(item({"N": str(int(NOW))}), "exp", NOW)
    assert not ttl.expired(item({"N": str(int(NOW) + 1)}), "exp", NOW)
    assert ttl.expired(item({"N": "1699999999.5"}), "exp", NOW)


def test_t11_the_seed_session_expires_after_two_pm() -> None:
    """SessionData's user1 (T-10, T-11): ExpirationTime 1461938400, 2:00 PM UTC on 29 Apr 2016."""
    session = {
        "UserName": {"S": "user1"},
        "SessionId": {"S": "74686572652773"},
        "CreationTime": {"N": "1461931200"},
        "ExpirationTime": {"N": "1461938400"},
    }
    assert not ttl.expired(session, "ExpirationTime", 1461938400)
    assert ttl.expired(session, "ExpirationTime", 1461938400.001)
    assert not ttl.expired(session, "CreationTime", 1461931199)


@pytest.mark.parametrize(
    "value",
    [
        {"S": "1600000000"},  # T-12 [seed gap]: only a Number counts.
        {"NS": ["1600000000"]},
        {"L": [{"N": "1600000000"}]},
        {"M": {"exp": {"N": "1600000000"}}},
        {"BOOL": True},
        {"NULL": True},
        {"B": "AAAA"},
    ],
)
def test_t12_a_ttl_attribute_that_is_not_a_number_never_expires(value: Any) -> None:
    assert ttl.index_seconds(item(value), "exp", NOW) is None
    assert not ttl.expired(item(value), "exp", NOW)


def test_t12_an_item_without_the_attribute_never_expires() -> None:
    assert ttl.index_seconds({"pk": {"S": "a"}}, "exp", NOW) is None
    assert not ttl.expired({"pk": {"S": "a"}}, "exp", NOW)
    assert ttl.index_seconds(None, "exp", NOW) is None


def test_t13_a_time_more_than_five_years_in_the_past_is_never_deleted() -> None:
    """[seed gap] DynamoDB skips items whose TTL is more than five years before now."""
    edge = NOW - limits.TTL_PAST_SECONDS_MAX
    assert ttl.index_seconds(item({"N": str(int(edge))}), "exp", NOW) == int(edge)
    assert ttl.expired(item({"N": str(int(edge))}), "exp", NOW)
    assert ttl.index_seconds(item({"N": str(int(edge) - 1)}), "exp", NOW) is None
    assert not ttl.expired(item({"N": str(int(edge) - 1)}), "exp", NOW)
    assert not ttl.expired(item({"N": "0"}), "exp", NOW)
    assert not ttl.expired(item({"N": "-5"}), "exp", NOW)


def test_the_index_holds_the_floor_of_the_time_and_a_sweep_reads_up_to_this_second() -> None:
    assert ttl.index_seconds(item({"N": "1700000000.9"}), "exp", NOW) == 1_700_000_000
    assert ttl.index_seconds(item({"N": "1E+100"}), "exp", NOW) == ttl.INDEX_SECONDS_MAX
    # A sweep reads the entries up to the current second: those of earlier seconds are all
    # expired, those of this second only once their time is past (the sweeper checks).
    assert ttl.sweep_bound(NOW + 0.5) == 1_700_000_001
    assert ttl.expired(item({"N": "1699999999.99"}), "exp", NOW + 0.5)
    assert ttl.expired(item({"N": "1700000000.4"}), "exp", NOW + 0.5)
    assert not ttl.expired(item({"N": "1700000000.9"}), "exp", NOW + 0.5)


# The TTL setting's transitions -----------------------------------------------------------------


def table(ttl_def: TtlDef | None = None, status: TableStatus = TableStatus.ACTIVE) -> TableDef:
    created = catalog.created(
        name="Sessions",
        table_id="ab" * 16,
        key_shape=KeyShape.from_key_schema({"hash": ["pk", "S"], "range": None}),
        attribute_definitions=[("pk", "S")],
        billing_mode=BillingMode.PAY_PER_REQUEST,
        throughput=Throughput(),
        now=NOW - 10 * HOUR,
        owner=lambda _: "node-1",
    )
    return replace(created, status=status, ttl=ttl_def)


def test_enabling_records_enabling_then_settles_as_enabled() -> None:
    enabling = catalog.ttl_updated(table(), True, "exp", NOW, HOUR)
    assert enabling.ttl == TtlDef("exp", True, settled=False, changed=NOW, version=1)
    assert enabling.ttl.status == TtlStatus.ENABLING
    assert catalog.ttl_document(enabling) == {"attribute": "exp", "enabled": True, "version": 1}
    enabled = catalog.ttl_settled(enabling, 1)
    assert enabled.ttl is not None and enabled.ttl.status == TtlStatus.ENABLED
    # A late settlement of an older version changes nothing.
    assert catalog.ttl_settled(enabled, 1) is enabled
    assert catalog.ttl_settled(enabling, 0) is enabling


def test_disabling_records_disabling_then_settles_as_disabled() -> None:
    enabled = table(TtlDef("exp", True, changed=NOW - 2 * HOUR, version=1))
    disabling = catalog.ttl_updated(enabled, False, "exp", NOW, HOUR)
    assert disabling.ttl is not None and disabling.ttl.status == TtlStatus.DISABLING
    assert catalog.ttl_document(disabling) == {"attribute": "exp", "enabled": False, "version": 2}
    disabled = catalog.ttl_settled(disabling, 2)
    assert disabled.ttl is not None and disabled.ttl.status == TtlStatus.DISABLED


def test_a_table_that_never_had_ttl_sends_nothing_to_its_nodes() -> None:
    assert catalog.ttl_document(table()) is None


@pytest.mark.parametrize(
    ("current", "enabled", "attribute", "message"),
    [
        (TtlDef("exp", True, version=1), True, "exp", "TimeToLive is already enabled"),
        (TtlDef("exp", True, settled=False, version=1), True, "exp", "already enabled"),
        (
            TtlDef("exp", True, version=1),
            True,
            "other",
            "TimeToLive is active on a different AttributeName: current AttributeName is exp",
        ),
        (
            TtlDef("exp", True, version=1),
            False,
            "other",
            "TimeToLive is active on a different AttributeName: current AttributeName is exp",
        ),
        (None, False, "exp", "TimeToLive is already disabled"),
        (TtlDef("exp", False, version=2), False, "exp", "TimeToLive is already disabled"),
        (TtlDef("exp", False, settled=False, version=2), False, "exp", "already disabled"),
    ],
)
def test_dynamodb_refuses_a_change_that_changes_nothing(
    current: TtlDef | None, enabled: bool, attribute: str, message: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        catalog.ttl_updated(table(current), enabled, attribute, NOW, HOUR)
    assert message in raised.value.message


def test_a_second_change_within_the_interval_is_refused_and_allowed_after_it() -> None:
    enabled = catalog.ttl_settled(catalog.ttl_updated(table(), True, "exp", NOW, HOUR), 1)
    with pytest.raises(ValidationError) as raised:
        catalog.ttl_updated(enabled, False, "exp", NOW + HOUR - 1, HOUR)
    assert raised.value.message == (
        "Time to live has been modified multiple times within a fixed interval"
    )
    disabling = catalog.ttl_updated(enabled, False, "exp", NOW + HOUR, HOUR)
    assert disabling.ttl is not None and disabling.ttl.changed == NOW + HOUR
    # Re-enabling on another attribute is a change like any other: an hour later.
    disabled = catalog.ttl_settled(disabling, 2)
    with pytest.raises(ValidationError):
        catalog.ttl_updated(disabled, True, "other", NOW + HOUR + 5, HOUR)
    again = catalog.ttl_updated(disabled, True, "other", NOW + 2 * HOUR, HOUR)
    assert again.ttl == TtlDef("other", True, settled=False, changed=NOW + 2 * HOUR, version=3)


def test_a_refusal_of_what_changes_nothing_comes_before_the_rate_limit() -> None:
    recent = table(TtlDef("exp", True, changed=NOW - 1, version=1))
    with pytest.raises(ValidationError) as raised:
        catalog.ttl_updated(recent, True, "exp", NOW, HOUR)
    assert raised.value.message == "TimeToLive is already enabled"


@pytest.mark.parametrize("status", [TableStatus.CREATING, TableStatus.DELETING])
def test_a_table_being_created_or_deleted_is_in_use(status: TableStatus) -> None:
    with pytest.raises(ResourceInUse):
        catalog.ttl_updated(table(status=status), True, "exp", NOW, HOUR)


def test_the_ttl_setting_round_trips_through_the_catalog_row() -> None:
    recorded = catalog.ttl_updated(table(), True, "exp", NOW, HOUR)
    assert TableDef.from_json(recorded.to_json()).ttl == recorded.ttl
    # A row written before the setting had a status reads as settled.
    assert TtlDef.from_json({"attribute": "exp", "enabled": True}).status == TtlStatus.ENABLED
