"""core.writes: the pure write planner, `plan(request, old item, key shape) -> WriteEffect`.

For PutItem, UpdateItem and DeleteItem: the change kind (INSERT, MODIFY, REMOVE, or None for a
write that changes nothing), both item sizes and the write units (the larger item, one unit per
started KB, at least one), ReturnValues, a failed condition (charged by the existing item, carrying
it for ReturnValuesOnConditionCheckFailure=ALL_OLD), an update creating a missing item from its key,
updates of key attributes and items over 400 KB refused with DynamoDB's messages, and the `old`
item never modified by planning.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from core import expressions, limits
from core.errors import ConditionalCheckFailed, ValidationError
from core.keys import KeyShape
from core.size import item_size_bytes
from core.values import AttributeValue, Item
from core.writes import (
    ChangeKind,
    DeleteRequest,
    PutRequest,
    UpdateRequest,
    WriteEffect,
    WriteRequest,
    plan,
)

INVALID = "One or more parameter values were invalid: "

TABLE = KeyShape.table(("pk", "S"), ("sk", "N"))
HASH_ONLY = KeyShape.table(("id", "S"))


def s(text: str) -> AttributeValue:
    return {"S": text}


def n(number: int) -> AttributeValue:
    return {"N": str(number)}


KEY: Item = {"pk": s("a"), "sk": n(1)}  # "pk" + "a" = 3 bytes, "sk" + 1 = 4 bytes: 7 bytes.
KEY_BYTES = 7


def item(**attributes: AttributeValue) -> Item:
    return {**KEY, **attributes}


RED = item(color=s("red"))  # 7 + "color" + "red" = 15 bytes
BLUE = item(color=s("blue"))  # 16 bytes


def sized(total_bytes: int) -> Item:
    """An item of the table with exactly `total_bytes` bytes."""
    return item(data=s("x" * (total_bytes - KEY_BYTES - len("data"))))


def condition(text: str, values: dict[str, Any] | None = None) -> expressions.Condition:
    return expressions.condition(text, None, values)


def update(
    text: str, values: dict[str, Any] | None = None, names: dict[str, str] | None = None
) -> expressions.Update:
    return expressions.update(text, names, values)


EXISTS = condition("attribute_exists(pk)")
NOT_EXISTS = condition("attribute_not_exists(pk)")
IS_RED = condition("color = :c", {":c": s("red")})


def planned(request: WriteRequest, old: Item | None, shape: KeyShape = TABLE) -> WriteEffect:
    """`plan`, checking that it leaves the item passed in exactly as it was."""
    before = copy.deepcopy(old)
    effect = plan(request, old, shape)
    assert old == before
    assert effect.old == before
    return effect


def test_sizes_of_the_test_items() -> None:
    assert item_size_bytes(KEY) == KEY_BYTES
    assert item_size_bytes(RED) == 15
    assert item_size_bytes(BLUE) == 16
    assert item_size_bytes(sized(2560)) == 2560
    assert item_size_bytes(sized(limits.ITEM_SIZE_BYTES_MAX)) == limits.ITEM_SIZE_BYTES_MAX


# PutItem ----------------------------------------------------------------------------------------


def test_put_new_item() -> None:
    effect = planned(PutRequest(RED), None)
    assert effect.kind == ChangeKind.INSERT
    assert effect.key == KEY
    assert effect.old is None
    assert effect.new == RED
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (0, 15, 1.0)
    assert effect.attributes is None
    assert not effect.condition_failed
    assert effect.reply() == {"attributes": None, "old_bytes": 0, "new_bytes": 15}


def test_put_replaces_item() -> None:
    effect = planned(PutRequest(BLUE), RED)
    assert effect.kind == ChangeKind.MODIFY
    assert effect.new == BLUE
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (15, 16, 1.0)
    assert effect.reply() == {"attributes": None, "old_bytes": 15, "new_bytes": 16}


def test_put_of_identical_item_is_no_change_but_is_charged() -> None:
    effect = planned(PutRequest(copy.deepcopy(RED)), RED)
    assert effect.kind is None
    assert not effect.condition_failed
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (15, 15, 1.0)
    assert effect.reply() == {"attributes": None, "old_bytes": 15, "new_bytes": 15}


def test_put_key_is_in_shape_order() -> None:
    effect = planned(PutRequest({"color": s("red"), "sk": n(1), "pk": s("a")}), None)
    assert list(effect.key) == ["pk", "sk"]
    assert effect.key == KEY


@pytest.mark.parametrize(
    ("return_values", "old", "attributes"),
    [
        ("NONE", RED, None),
        ("ALL_OLD", RED, RED),
        ("NONE", None, None),
        ("ALL_OLD", None, None),
    ],
)
def test_put_return_values(return_values: str, old: Item | None, attributes: Item | None) -> None:
    effect = planned(PutRequest(BLUE, return_values=return_values), old)
    assert effect.attributes == attributes
    assert effect.reply() == {
        "attributes": attributes,
        "old_bytes": 0 if old is None else 15,
        "new_bytes": 16,
    }


def test_put_hash_only_table() -> None:
    effect = planned(PutRequest({"id": s("h"), "v": n(1)}), None, HASH_ONLY)
    assert effect.kind == ChangeKind.INSERT
    assert effect.key == {"id": s("h")}
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (0, 6, 1.0)


@pytest.mark.parametrize(
    ("size", "units"),
    [(12, 1.0), (1024, 1.0), (1025, 2.0), (2048, 2.0), (2560, 3.0), (3072, 3.0), (3073, 4.0)],
)
def test_put_units_per_started_kb(size: int, units: float) -> None:
    effect = planned(PutRequest(sized(size)), None)
    assert (effect.new_bytes, effect.units) == (size, units)


def test_put_small_over_big_charges_the_big_item() -> None:
    effect = planned(PutRequest(RED), sized(3000))
    assert effect.kind == ChangeKind.MODIFY
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (3000, 15, 3.0)


def test_put_big_over_small_charges_the_big_item() -> None:
    effect = planned(PutRequest(sized(2560)), RED)
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (15, 2560, 3.0)


def test_put_at_item_size_limit() -> None:
    effect = planned(PutRequest(sized(limits.ITEM_SIZE_BYTES_MAX)), None)
    assert effect.new_bytes == limits.ITEM_SIZE_BYTES_MAX
    assert effect.units == 400.0


def test_put_over_item_size_limit() -> None:
    with pytest.raises(ValidationError) as raised:
        planned(PutRequest(sized(limits.ITEM_SIZE_BYTES_MAX + 1)), RED)
    assert raised.value.message == "Item size has exceeded the maximum allowed size"


# UpdateItem -------------------------------------------------------------------------------------


def test_update_modifies_item() -> None:
    effect = planned(UpdateRequest(KEY, update("SET color = :c", {":c": s("blue")})), RED)
    assert effect.kind == ChangeKind.MODIFY
    assert effect.key == KEY
    assert effect.new == BLUE
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (15, 16, 1.0)
    assert effect.attributes is None
    assert effect.reply() == {"attributes": None, "old_bytes": 15, "new_bytes": 16}


def test_update_of_missing_item_creates_it_from_its_key() -> None:
    effect = planned(UpdateRequest(KEY, update("SET color = :c", {":c": s("red")})), None)
    assert effect.kind == ChangeKind.INSERT
    assert effect.old is None
    assert effect.new == RED
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (0, 15, 1.0)


def test_update_without_expression_creates_missing_item_from_its_key() -> None:
    effect = planned(UpdateRequest(KEY), None)
    assert effect.kind == ChangeKind.INSERT
    assert effect.new == KEY
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (0, KEY_BYTES, 1.0)


def test_update_without_expression_leaves_existing_item() -> None:
    effect = planned(UpdateRequest(KEY), RED)
    assert effect.kind is None
    assert effect.new == RED
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (15, 15, 1.0)


def test_update_to_same_value_is_no_change_but_is_charged() -> None:
    effect = planned(UpdateRequest(KEY, update("SET color = :c", {":c": s("red")})), RED)
    assert effect.kind is None
    assert not effect.condition_failed
    assert effect.new == RED
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (15, 15, 1.0)


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("REMOVE color", None),
        ("REMOVE a.b[2].c, d[0]", None),  # A nested path of a missing item is no invalid path.
        ("DELETE tags :t", {":t": {"SS": ["x"]}}),
        ("REMOVE color DELETE tags :t", {":t": {"SS": ["x"]}}),
    ],
)
@pytest.mark.parametrize(
    "return_values", ["NONE", "ALL_OLD", "UPDATED_OLD", "ALL_NEW", "UPDATED_NEW"]
)
def test_an_update_that_only_removes_does_not_create_a_missing_item(
    text: str, values: dict[str, Any] | None, return_values: str
) -> None:
    request = UpdateRequest(KEY, update(text, values), return_values=return_values)
    effect = planned(request, None)
    assert (effect.kind, effect.old, effect.new, effect.attributes) == (None, None, None, None)
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (0, 0, 1.0)
    assert effect.reply() == {"attributes": None, "old_bytes": 0, "new_bytes": 0}


def test_an_update_that_also_sets_creates_the_missing_item() -> None:
    effect = planned(
        UpdateRequest(KEY, update("SET color = :c REMOVE shade", {":c": s("red")})), None
    )
    assert (effect.kind, effect.new) == (ChangeKind.INSERT, RED)


def test_update_removing_a_missing_attribute_is_no_change() -> None:
    effect = planned(UpdateRequest(KEY, update("REMOVE shade")), RED)
    assert effect.kind is None
    assert effect.new == RED


def test_update_hash_only_table() -> None:
    key = {"id": s("h")}
    effect = planned(UpdateRequest(key, update("SET v = :v", {":v": n(1)})), None, HASH_ONLY)
    assert effect.kind == ChangeKind.INSERT
    assert effect.new == {"id": s("h"), "v": n(1)}
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (0, 6, 1.0)


# RED plus a number: 15 + "qty" + 2 = 20 bytes. The update changes one attribute, adds one and
# removes one, so UPDATED_OLD and UPDATED_NEW differ from each other and from the whole images.
RED_3 = item(color=s("red"), qty=n(3))
RETURN_UPDATE = "SET color = :c, shade = :d REMOVE qty"
RETURN_UPDATE_VALUES = {":c": s("blue"), ":d": s("dark")}
BLUE_DARK = item(color=s("blue"), shade=s("dark"))  # 7 + 9 + 9 = 25 bytes


@pytest.mark.parametrize(
    ("return_values", "attributes"),
    [
        ("NONE", None),
        ("ALL_OLD", RED_3),
        ("UPDATED_OLD", {"color": s("red"), "qty": n(3)}),
        ("ALL_NEW", BLUE_DARK),
        ("UPDATED_NEW", {"color": s("blue"), "shade": s("dark")}),
    ],
)
def test_update_return_values(return_values: str, attributes: Item | None) -> None:
    request = UpdateRequest(
        KEY, update(RETURN_UPDATE, RETURN_UPDATE_VALUES), return_values=return_values
    )
    effect = planned(request, RED_3)
    assert effect.new == BLUE_DARK
    assert effect.attributes == attributes
    assert effect.reply() == {"attributes": attributes, "old_bytes": 20, "new_bytes": 25}


@pytest.mark.parametrize(
    ("return_values", "attributes"),
    [
        ("NONE", None),
        ("ALL_OLD", None),
        ("UPDATED_OLD", None),
        ("ALL_NEW", BLUE_DARK),
        ("UPDATED_NEW", {"color": s("blue"), "shade": s("dark")}),
    ],
)
def test_update_return_values_of_created_item(return_values: str, attributes: Item | None) -> None:
    request = UpdateRequest(
        KEY, update(RETURN_UPDATE, RETURN_UPDATE_VALUES), return_values=return_values
    )
    effect = planned(request, None)
    assert effect.kind == ChangeKind.INSERT
    assert effect.attributes == attributes
    assert effect.reply() == {"attributes": attributes, "old_bytes": 0, "new_bytes": 25}


@pytest.mark.parametrize(
    ("return_values", "attributes"),
    [
        ("NONE", None),
        ("ALL_OLD", RED_3),
        ("UPDATED_OLD", None),
        ("ALL_NEW", RED_3),
        ("UPDATED_NEW", None),
    ],
)
def test_update_return_values_without_expression(
    return_values: str, attributes: Item | None
) -> None:
    effect = planned(UpdateRequest(KEY, return_values=return_values), RED_3)
    assert effect.kind is None
    assert effect.attributes == attributes


@pytest.mark.parametrize(
    ("return_values", "attributes"),
    [
        ("NONE", None),
        ("ALL_OLD", None),
        ("UPDATED_OLD", None),
        ("ALL_NEW", KEY),
        ("UPDATED_NEW", None),
    ],
)
def test_update_return_values_without_expression_of_created_item(
    return_values: str, attributes: Item | None
) -> None:
    effect = planned(UpdateRequest(KEY, return_values=return_values), None)
    assert effect.kind == ChangeKind.INSERT
    assert effect.attributes == attributes


def test_update_updated_old_of_only_new_attributes_is_nothing() -> None:
    request = UpdateRequest(
        KEY, update("SET shade = :d", {":d": s("dark")}), return_values="UPDATED_OLD"
    )
    assert planned(request, RED).attributes is None


def test_update_updated_new_of_only_removed_attributes_is_nothing() -> None:
    request = UpdateRequest(KEY, update("REMOVE color"), return_values="UPDATED_NEW")
    effect = planned(request, RED)
    assert effect.new == KEY
    assert effect.attributes is None


def test_update_returns_updated_nested_paths_only() -> None:
    old = item(m={"M": {"b": n(0), "c": s("x")}})
    request = UpdateRequest(KEY, update("SET m.b = :v", {":v": n(1)}), return_values="UPDATED_NEW")
    effect = planned(request, old)
    assert effect.new == item(m={"M": {"b": n(1), "c": s("x")}})
    assert effect.attributes == {"m": {"M": {"b": n(1)}}}


def test_update_big_to_small_charges_the_big_item() -> None:
    effect = planned(UpdateRequest(KEY, update("REMOVE #d", names={"#d": "data"})), sized(3000))
    assert effect.kind == ChangeKind.MODIFY
    assert effect.new == KEY
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (3000, KEY_BYTES, 3.0)


def test_update_small_to_big_charges_the_big_item() -> None:
    data = sized(2560)["data"]
    effect = planned(UpdateRequest(KEY, update("SET #d = :d", {":d": data}, {"#d": "data"})), None)
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (0, 2560, 3.0)


def test_update_result_at_item_size_limit() -> None:
    old = sized(limits.ITEM_SIZE_BYTES_MAX - 10)
    effect = planned(UpdateRequest(KEY, update("SET e = :v", {":v": s("x" * 9)})), old)
    assert effect.new_bytes == limits.ITEM_SIZE_BYTES_MAX
    assert effect.units == 400.0


def test_update_result_over_item_size_limit() -> None:
    old = sized(limits.ITEM_SIZE_BYTES_MAX - 10)
    with pytest.raises(ValidationError) as raised:
        planned(UpdateRequest(KEY, update("SET e = :v", {":v": s("x" * 10)})), old)
    assert raised.value.message == "Item size to update has exceeded the maximum allowed size"


def test_update_creating_item_over_item_size_limit() -> None:
    data = s("x" * limits.ITEM_SIZE_BYTES_MAX)
    with pytest.raises(ValidationError) as raised:
        planned(UpdateRequest(KEY, update("SET #d = :d", {":d": data}, {"#d": "data"})), None)
    assert raised.value.message == "Item size to update has exceeded the maximum allowed size"


KEY_UPDATES = [
    ("SET pk = :s", {":s": s("b")}, None, "pk"),
    ("REMOVE pk", None, None, "pk"),
    ("SET sk = :n", {":n": n(2)}, None, "sk"),
    ("REMOVE sk", None, None, "sk"),
    ("SET color = :s, #k = :s", {":s": s("b")}, {"#k": "pk"}, "pk"),
    ("ADD sk :n", {":n": n(1)}, None, "sk"),
    ("SET sk = sk + :n", {":n": n(1)}, None, "sk"),
]


@pytest.mark.parametrize(("text", "values", "names", "attribute"), KEY_UPDATES)
@pytest.mark.parametrize("old", [RED, None])
def test_update_of_key_attribute_is_refused(
    text: str,
    values: dict[str, Any] | None,
    names: dict[str, str] | None,
    attribute: str,
    old: Item | None,
) -> None:
    with pytest.raises(ValidationError) as raised:
        planned(UpdateRequest(KEY, update(text, values, names)), old)
    assert raised.value.message == (
        INVALID + f"Cannot update attribute {attribute}. This attribute is part of the key"
    )


def test_update_of_key_attribute_is_refused_before_the_condition() -> None:
    request = UpdateRequest(KEY, update("REMOVE sk"), condition=EXISTS, return_on_failure=True)
    with pytest.raises(ValidationError) as raised:
        planned(request, None)
    assert raised.value.message == (
        INVALID + "Cannot update attribute sk. This attribute is part of the key"
    )


def test_update_of_hash_only_key_attribute_is_refused() -> None:
    request = UpdateRequest({"id": s("h")}, update("SET id = :v", {":v": s("g")}))
    with pytest.raises(ValidationError) as raised:
        planned(request, {"id": s("h")}, HASH_ONLY)
    assert raised.value.message == (
        INVALID + "Cannot update attribute id. This attribute is part of the key"
    )


def test_update_may_write_an_attribute_named_like_a_key_of_another_shape() -> None:
    # "sk" is a key attribute of TABLE, not of HASH_ONLY.
    key = {"id": s("h")}
    effect = planned(UpdateRequest(key, update("SET sk = :n", {":n": n(2)})), None, HASH_ONLY)
    assert effect.new == {"id": s("h"), "sk": n(2)}


# DeleteItem -------------------------------------------------------------------------------------


def test_delete_existing_item() -> None:
    effect = planned(DeleteRequest(KEY), RED)
    assert effect.kind == ChangeKind.REMOVE
    assert effect.key == KEY
    assert effect.old == RED
    assert effect.new is None
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (15, 0, 1.0)
    assert effect.attributes is None
    assert effect.reply() == {"attributes": None, "old_bytes": 15, "new_bytes": 0}


def test_delete_of_missing_item_is_no_change_but_is_charged() -> None:
    effect = planned(DeleteRequest(KEY), None)
    assert effect.kind is None
    assert not effect.condition_failed
    assert effect.old is None
    assert effect.new is None
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (0, 0, 1.0)
    assert effect.reply() == {"attributes": None, "old_bytes": 0, "new_bytes": 0}


@pytest.mark.parametrize(
    ("return_values", "old", "attributes"),
    [
        ("NONE", RED, None),
        ("ALL_OLD", RED, RED),
        ("NONE", None, None),
        ("ALL_OLD", None, None),
    ],
)
def test_delete_return_values(
    return_values: str, old: Item | None, attributes: Item | None
) -> None:
    effect = planned(DeleteRequest(KEY, return_values=return_values), old)
    assert effect.attributes == attributes
    assert effect.reply() == {
        "attributes": attributes,
        "old_bytes": 0 if old is None else 15,
        "new_bytes": 0,
    }


def test_delete_charges_the_deleted_item() -> None:
    effect = planned(DeleteRequest(KEY), sized(2560))
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (2560, 0, 3.0)


def test_delete_hash_only_table() -> None:
    effect = planned(DeleteRequest({"id": s("h")}), {"id": s("h"), "v": n(1)}, HASH_ONLY)
    assert effect.kind == ChangeKind.REMOVE
    assert effect.key == {"id": s("h")}
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (6, 0, 1.0)


# Conditions, for every kind of write -------------------------------------------------------------

RequestFactory = Callable[..., WriteRequest]


def put_blue(**options: Any) -> WriteRequest:
    return PutRequest(BLUE, **options)


def update_blue(**options: Any) -> WriteRequest:
    return UpdateRequest(KEY, update("SET color = :c", {":c": s("blue")}), **options)


def delete(**options: Any) -> WriteRequest:
    return DeleteRequest(KEY, **options)


WRITES = pytest.mark.parametrize("request_of", [put_blue, update_blue, delete])


@pytest.mark.parametrize(
    ("request_of", "kind", "new_bytes"),
    [
        (put_blue, ChangeKind.MODIFY, 16),
        (update_blue, ChangeKind.MODIFY, 16),
        (delete, ChangeKind.REMOVE, 0),
    ],
)
def test_condition_holds(request_of: RequestFactory, kind: ChangeKind, new_bytes: int) -> None:
    effect = planned(request_of(condition=IS_RED, return_on_failure=True), RED)
    assert not effect.condition_failed
    assert effect.kind == kind
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (15, new_bytes, 1.0)


@pytest.mark.parametrize(
    ("request_of", "kind", "new"),
    [
        (put_blue, ChangeKind.INSERT, BLUE),
        (update_blue, ChangeKind.INSERT, BLUE),
        (delete, None, None),
    ],
)
def test_condition_holds_on_missing_item(
    request_of: RequestFactory, kind: ChangeKind | None, new: Item | None
) -> None:
    effect = planned(request_of(condition=NOT_EXISTS), None)
    assert not effect.condition_failed
    assert effect.kind == kind
    assert effect.new == new


@WRITES
@pytest.mark.parametrize("return_on_failure", [False, True])
def test_condition_fails_on_existing_item(
    request_of: RequestFactory, return_on_failure: bool
) -> None:
    request = request_of(
        condition=NOT_EXISTS, return_values="ALL_OLD", return_on_failure=return_on_failure
    )
    effect = planned(request, RED)
    assert effect.condition_failed
    assert effect.kind is None
    assert effect.key == KEY
    assert effect.old == RED
    assert effect.new == RED
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (15, 15, 1.0)
    assert effect.attributes is None
    failure = effect.failure()
    assert type(failure) is ConditionalCheckFailed
    assert failure.message == "The conditional request failed"
    if return_on_failure:
        assert failure.item == RED
        assert failure.extra_fields() == {"Item": RED}
    else:
        assert failure.item is None
        assert failure.extra_fields() == {}
    with pytest.raises(AssertionError):
        effect.reply()


@WRITES
@pytest.mark.parametrize("return_on_failure", [False, True])
def test_condition_fails_on_missing_item(
    request_of: RequestFactory, return_on_failure: bool
) -> None:
    effect = planned(request_of(condition=EXISTS, return_on_failure=return_on_failure), None)
    assert effect.condition_failed
    assert effect.kind is None
    assert effect.old is None
    assert effect.new is None
    # A failed condition on a missing item still consumes the minimum of one unit.
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (0, 0, 1.0)
    assert effect.failure().item is None


@WRITES
def test_failed_condition_is_charged_by_the_existing_item(request_of: RequestFactory) -> None:
    old = sized(2560)
    effect = planned(request_of(condition=IS_RED, return_on_failure=True), old)
    assert effect.condition_failed
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (2560, 2560, 3.0)
    assert effect.failure().item == old


def test_failed_condition_ignores_the_size_of_the_new_item() -> None:
    effect = planned(PutRequest(sized(2560), condition=IS_RED), BLUE)
    assert effect.condition_failed
    assert (effect.old_bytes, effect.new_bytes, effect.units) == (16, 16, 1.0)
    effect = planned(PutRequest(sized(2560), condition=EXISTS), None)
    assert effect.condition_failed
    assert effect.units == 1.0


def test_condition_is_evaluated_against_the_item_before_the_update() -> None:
    request = UpdateRequest(
        KEY,
        update("SET color = :c", {":c": s("red")}),
        condition=condition("color = :c", {":c": s("blue")}),
    )
    effect = planned(request, BLUE)
    assert not effect.condition_failed
    assert effect.new == RED


# Planning never modifies the item it is given ----------------------------------------------------

NESTED = item(
    m={"M": {"b": n(0), "c": s("x"), "deep": {"M": {"z": n(1)}}}},
    l={"L": [n(1), s("two"), {"M": {"k": s("v")}}]},
    tags={"SS": ["x", "y"]},
    nums={"NS": ["1", "2"]},
    count=n(5),
)


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("SET m.b = :v", {":v": n(1)}),
        ("SET m.deep.z = :v", {":v": n(2)}),
        ("SET m.deep.added = :v", {":v": n(2)}),
        ("REMOVE m.c", None),
        ("REMOVE m.deep.z", None),
        ("SET l[0] = :v", {":v": n(9)}),
        ("SET l[2].k = :v", {":v": s("w")}),
        ("REMOVE l[1]", None),
        ("SET l = list_append(l, :v)", {":v": {"L": [n(4)]}}),
        ("ADD tags :v", {":v": {"SS": ["z"]}}),
        ("DELETE tags :v", {":v": {"SS": ["x"]}}),
        ("ADD nums :v", {":v": {"NS": ["3"]}}),
        ("ADD #c :v", {":v": n(1)}),
        ("SET #c = #c - :v", {":v": n(1)}),
        ("REMOVE m, l, tags", None),
    ],
)
def test_update_does_not_modify_the_old_item(text: str, values: dict[str, Any] | None) -> None:
    names = {"#c": "count"} if "#c" in text else None
    old = copy.deepcopy(NESTED)
    effect = planned(UpdateRequest(KEY, update(text, values, names), return_values="ALL_OLD"), old)
    assert effect.kind == ChangeKind.MODIFY
    assert effect.new != NESTED
    assert effect.attributes == NESTED


@pytest.mark.parametrize("request_of", [put_blue, update_blue, delete])
@pytest.mark.parametrize("write_condition", [None, IS_RED, NOT_EXISTS])
def test_writes_do_not_modify_the_old_item(
    request_of: RequestFactory, write_condition: expressions.Condition | None
) -> None:
    planned(request_of(condition=write_condition, return_values="ALL_OLD"), copy.deepcopy(NESTED))
    planned(request_of(condition=write_condition, return_values="ALL_OLD"), copy.deepcopy(RED))


def test_a_write_that_only_reorders_a_set_changes_nothing() -> None:
    """Sets have no order in DynamoDB: rewriting one in another order is no change, so no change
    record is written for it (as DynamoDB Streams writes none)."""
    key = {"pk": s("a"), "sk": n(1)}
    old = {**key, "tags": {"SS": ["x", "y"]}}
    assert plan(PutRequest({**key, "tags": {"SS": ["y", "x"]}}), old, TABLE).kind is None
    update = expressions.update("SET tags = :t", None, {":t": {"SS": ["y", "x"]}})
    assert plan(UpdateRequest(key, update), old, TABLE).kind is None
    assert plan(PutRequest({**key, "tags": {"SS": ["y"]}}), old, TABLE).kind is ChangeKind.MODIFY


def test_an_oversized_put_is_refused_before_its_condition_is_evaluated() -> None:
    key = {"pk": s("a"), "sk": n(1)}
    condition = expressions.condition("attribute_not_exists(pk)", None, None)
    big = PutRequest({**key, "blob": s("x" * 410_000)}, condition)
    with pytest.raises(ValidationError, match="Item size has exceeded the maximum allowed size"):
        plan(big, key, TABLE)
