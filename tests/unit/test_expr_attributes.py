"""ExpressionAttributeNames and ExpressionAttributeValues: checks on the maps and unused keys."""

from __future__ import annotations

from typing import Any

import pytest

from core import expressions
from core.errors import SerializationError, ValidationError


def maps_error(names: Any, values: Any) -> str:
    with pytest.raises(ValidationError) as raised:
        expressions.check_attribute_maps(names, values)
    return raised.value.message


def test_valid_maps_are_returned_normalised() -> None:
    assert expressions.check_attribute_maps(None, None) == {}
    assert expressions.check_attribute_maps({"#a_1": "a"}, {":v": {"N": "1.50"}}) == {
        ":v": {"N": "1.5"}
    }


def test_maps_must_not_be_empty() -> None:
    assert maps_error({}, None) == "ExpressionAttributeNames must not be empty"
    assert maps_error(None, {}) == "ExpressionAttributeValues must not be empty"


@pytest.mark.parametrize("key", ["a", "#", "#a-b", ":a", "# a"])
def test_name_keys_must_be_placeholders(key: str) -> None:
    assert maps_error({key: "a"}, None) == (
        f'ExpressionAttributeNames contains invalid key: Syntax error; key: "{key}"'
    )


@pytest.mark.parametrize("key", ["a", ":", ":a.b", "#a"])
def test_value_keys_must_be_placeholders(key: str) -> None:
    assert maps_error(None, {key: {"S": "x"}}) == (
        f'ExpressionAttributeValues contains invalid key: Syntax error; key: "{key}"'
    )


def test_names_must_be_non_empty_strings() -> None:
    assert maps_error({"#a": ""}, None) == (
        "ExpressionAttributeNames contains invalid value: Empty attribute name for key #a"
    )
    with pytest.raises(SerializationError):
        expressions.check_attribute_maps({"#a": 1}, None)
    with pytest.raises(SerializationError):
        expressions.check_attribute_maps(["#a"], None)


def test_values_are_validated() -> None:
    assert maps_error(None, {":v": {"SS": []}}) == (
        "ExpressionAttributeValues contains invalid value: One or more parameter values were "
        "invalid: An string set  may not be empty for key :v"
    )
    assert maps_error(None, {":v": {"S": "a", "N": "1"}}).startswith(
        "ExpressionAttributeValues contains invalid value: Supplied AttributeValue has more than "
        "one datatypes set"
    )
    with pytest.raises(SerializationError):
        expressions.check_attribute_maps(None, {":v": {"N": 1}})


def test_unused_names_and_values_across_all_expressions() -> None:
    names = {"#a": "a", "#b": "b", "#c": "c"}
    values = {":x": {"S": "x"}, ":y": {"S": "y"}}
    condition = expressions.condition("#a = :x", names, values)
    update = expressions.update("SET #b = :y", names, values)
    with pytest.raises(ValidationError) as raised:
        expressions.check_unused(names, values, condition, update)
    assert raised.value.message == (
        "Value provided in ExpressionAttributeNames unused in expressions: keys: {#c}"
    )
    names.pop("#c")
    expressions.check_unused(names, values, condition, update)
    with pytest.raises(ValidationError) as raised:
        expressions.check_unused(names, values, condition)
    assert raised.value.message == (
        "Value provided in ExpressionAttributeNames unused in expressions: keys: {#b}"
    )
    with pytest.raises(ValidationError) as raised:
        expressions.check_unused(
            None, {":x": {"S": "x"}, ":z": {"S": "z"}, ":w": {"N": "1"}}, condition
        )
    assert raised.value.message == (
        "Value provided in ExpressionAttributeValues unused in expressions: keys: {:z, :w}"
    )


def test_projection_and_key_conditions_count_as_uses() -> None:
    names = {"#p": "p", "#k": "pk"}
    values = {":h": {"S": "h"}}
    projection = expressions.projection("#p", names)
    key = expressions.key_condition("#k = :h", names, values, "pk", None)
    expressions.check_unused(names, values, projection, key)
    expressions.check_unused(None, None)


def test_a_name_key_over_255_bytes_is_too_long() -> None:
    # "The maximum length of any single expression attribute name or expression attribute value
    # is 255 bytes. For example, #name is five bytes" (Developer Guide, "Constraints", expression
    # parameters): the key is measured with its '#'. The words are DynamoDB Local's
    # PARAMETER_MAP_KEY_SIZE_EXCEEDED, with the size DynamoDB appends, as an emulator checked
    # against DynamoDB records them; the size is checked before the key's syntax.
    longest = "#" + "n" * 254
    assert expressions.check_attribute_maps({longest: "a"}, None) == {}
    for key in ("#" + "n" * 255, "#" + "é" * 200):
        assert maps_error({key: "a"}, None) == (
            "ExpressionAttributeNames contains invalid key: The expression attribute map "
            f"contains a key that is too long; size of key: {len(key.encode())}"
        )
