"""core.schema: DynamoDB's rules for table names, key schemas, billing and primary keys."""

from __future__ import annotations

from typing import Any

import pytest

from core import limits, schema
from core.errors import LimitExceeded, ValidationError

INVALID = "One or more parameter values were invalid: "


def definitions(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"AttributeName": name, "AttributeType": kind} for name, kind in pairs]


def keys(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"AttributeName": name, "KeyType": kind} for name, kind in pairs]


def table(hash_key: tuple[str, str], range_key: tuple[str, str] | None = None) -> dict[str, Any]:
    return {
        "key_schema": {
            "hash": list(hash_key),
            "range": None if range_key is None else list(range_key),
        }
    }


# Table names ------------------------------------------------------------------------------------


def test_table_name_is_required() -> None:
    with pytest.raises(ValidationError) as raised:
        schema.check_table_name(None)
    assert raised.value.message == (
        "The parameter 'TableName' is required but was not present in the request"
    )


@pytest.mark.parametrize("name", ["", "ab", "a" * (limits.TABLE_NAME_CHARS_MAX + 1)])
def test_table_name_length(name: str) -> None:
    with pytest.raises(ValidationError) as raised:
        schema.check_table_name(name)
    assert raised.value.message == (
        "TableName must be at least 3 characters long and at most 255 characters long"
    )


@pytest.mark.parametrize("name", ["abc", "a" * limits.TABLE_NAME_CHARS_MAX, "My.Table_2-x"])
def test_table_name_accepted(name: str) -> None:
    assert schema.check_table_name(name) == name


# Key schemas ------------------------------------------------------------------------------------


def test_hash_key_only() -> None:
    built = schema.build_key_schema(definitions(("pk", "S")), keys(("pk", "HASH")))
    assert built == {"hash": ["pk", "S"], "range": None}


def test_hash_and_range_keys_take_their_declared_types() -> None:
    built = schema.build_key_schema(
        definitions(("sk", "N"), ("pk", "B")), keys(("pk", "HASH"), ("sk", "RANGE"))
    )
    assert built == {"hash": ["pk", "B"], "range": ["sk", "N"]}


@pytest.mark.parametrize(
    ("attribute_definitions", "key_schema", "message"),
    [
        (
            [],
            keys(("a", "HASH")),
            "Invalid KeySchema: Some index key attribute have no definition",
        ),
        (
            definitions(("b", "S")),
            keys(("a", "HASH"), ("b", "RANGE")),
            "Invalid KeySchema: Some index key attribute have no definition",
        ),
        (
            definitions(("b", "S")),
            keys(("a", "HASH")),
            INVALID + "Some index key attributes are not defined in AttributeDefinitions. "
            "Keys: [a], AttributeDefinitions: [b]",
        ),
        (
            definitions(("a", "S"), ("b", "S")),
            keys(("a", "HASH"), ("a", "RANGE")),
            "Both the Hash Key and the Range Key element in the KeySchema have the same name",
        ),
        (
            definitions(("a", "S"), ("b", "S")),
            keys(("a", "RANGE"), ("b", "HASH")),
            "Invalid KeySchema: The first KeySchemaElement is not a HASH key type",
        ),
        (
            definitions(("a", "S")),
            keys(("a", "RANGE")),
            "Invalid KeySchema: The first KeySchemaElement is not a HASH key type",
        ),
        (
            definitions(("a", "S"), ("b", "S")),
            keys(("a", "HASH"), ("b", "HASH")),
            "Invalid KeySchema: The second KeySchemaElement is not a RANGE key type",
        ),
        (
            definitions(("a", "S"), ("b", "S")),
            keys(("a", "HASH")),
            INVALID + "Number of attributes in KeySchema does not exactly match number of "
            "attributes defined in AttributeDefinitions",
        ),
        (
            definitions(("a", "S"), ("c", "S"), ("b", "S")),
            keys(("a", "HASH"), ("b", "RANGE")),
            INVALID + "Number of attributes in KeySchema does not exactly match number of "
            "attributes defined in AttributeDefinitions",
        ),
        (
            definitions(("a", "S"), ("a", "N")),
            keys(("a", "HASH")),
            "Attribute Name is duplicated: a",
        ),
        (
            definitions(("a", "S"), ("b", "S"), ("b", "S")),
            keys(("a", "HASH"), ("b", "RANGE")),
            "Attribute Name is duplicated: b",
        ),
    ],
)
def test_bad_key_schemas(
    attribute_definitions: list[dict[str, str]], key_schema: list[dict[str, str]], message: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        schema.build_key_schema(attribute_definitions, key_schema)
    assert raised.value.message == message


# Billing ----------------------------------------------------------------------------------------


def test_billing_defaults_to_provisioned() -> None:
    built = schema.build_throughput(None, {"ReadCapacityUnits": 5, "WriteCapacityUnits": 7})
    assert built == {"billing_mode": "PROVISIONED", "throughput": {"read": 5, "write": 7}}


def test_pay_per_request_reports_zero_units() -> None:
    built = schema.build_throughput("PAY_PER_REQUEST", None)
    assert built == {"billing_mode": "PAY_PER_REQUEST", "throughput": {"read": 0, "write": 0}}


def test_pay_per_request_refuses_provisioned_throughput() -> None:
    with pytest.raises(ValidationError) as raised:
        schema.build_throughput(
            "PAY_PER_REQUEST", {"ReadCapacityUnits": 1, "WriteCapacityUnits": 1}
        )
    assert raised.value.message == (
        INVALID + "Neither ReadCapacityUnits nor WriteCapacityUnits can be specified when "
        "BillingMode is PAY_PER_REQUEST"
    )


@pytest.mark.parametrize(
    ("mode", "throughput"),
    [(None, None), ("PROVISIONED", None), ("PROVISIONED", {"ReadCapacityUnits": 1})],
)
def test_provisioned_needs_both_units(mode: str | None, throughput: dict[str, int] | None) -> None:
    with pytest.raises(ValidationError) as raised:
        schema.build_throughput(mode, throughput)
    assert raised.value.message == (
        INVALID + "ReadCapacityUnits and WriteCapacityUnits must both be specified when "
        "BillingMode is PROVISIONED"
    )


def test_units_out_of_bounds() -> None:
    too_many = limits.PROVISIONED_UNITS_VALUE_MAX + 1
    with pytest.raises(ValidationError) as raised:
        schema.build_throughput(None, {"ReadCapacityUnits": 1, "WriteCapacityUnits": too_many})
    assert raised.value.message == f"Given value {too_many} for WriteCapacityUnits is out of bounds"


def test_units_past_the_table_quota() -> None:
    units = limits.PROVISIONED_UNITS_PER_TABLE_MAX + 1
    with pytest.raises(LimitExceeded):
        schema.build_throughput(None, {"ReadCapacityUnits": units, "WriteCapacityUnits": 1})


# Key schema of a descriptor ---------------------------------------------------------------------


def test_key_helpers_of_a_composite_key() -> None:
    described = table(("pk", "S"), ("sk", "N"))
    assert schema.hash_key(described) == ("pk", "S")
    assert schema.range_key(described) == ("sk", "N")
    assert schema.key_names(described) == ("pk", "sk")
    assert schema.key_schema_elements(described) == keys(("pk", "HASH"), ("sk", "RANGE"))


def test_key_helpers_of_a_simple_key() -> None:
    described = table(("pk", "B"))
    assert schema.range_key(described) is None
    assert schema.key_names(described) == ("pk",)
    assert schema.key_schema_elements(described) == keys(("pk", "HASH"))


# Keys of items ----------------------------------------------------------------------------------


def test_extract_key_of_an_item() -> None:
    item = {"pk": {"S": "a"}, "sk": {"N": "1"}, "other": {"BOOL": True}}
    key, partition_key, sort_key = schema.extract_key(
        item, schema.key_shape(table(("pk", "S"), ("sk", "N")))
    )
    assert key == {"pk": {"S": "a"}, "sk": {"N": "1"}}
    assert partition_key == {"S": "a"}
    assert sort_key == {"N": "1"}


def test_extract_key_without_sort_key() -> None:
    key, partition_key, sort_key = schema.extract_key(
        {"pk": {"N": "5"}}, schema.key_shape(table(("pk", "N")))
    )
    assert (key, partition_key, sort_key) == ({"pk": {"N": "5"}}, {"N": "5"}, None)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"sk": {"N": "1"}}, INVALID + "Missing the key pk in the item"),
        ({"pk": {"S": "a"}}, INVALID + "Missing the key sk in the item"),
        (
            {"pk": {"N": "1"}, "sk": {"N": "1"}},
            INVALID + "Type mismatch for key pk expected: S actual: N",
        ),
        (
            {"pk": {"S": "a"}, "sk": {"S": "1"}},
            INVALID + "Type mismatch for key sk expected: N actual: S",
        ),
        (
            {"pk": {"S": ""}, "sk": {"N": "1"}},
            "One or more parameter values are not valid. The AttributeValue for a key attribute "
            "cannot contain an empty string value. Key: pk",
        ),
        (
            {"pk": {"S": "x" * (limits.PARTITION_KEY_BYTES_MAX + 1)}, "sk": {"N": "1"}},
            INVALID + "Size of hashkey has exceeded the maximum size limit of2048 bytes",
        ),
    ],
)
def test_extract_key_errors(item: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        schema.extract_key(item, schema.key_shape(table(("pk", "S"), ("sk", "N"))))
    assert raised.value.message == message


def test_validate_key() -> None:
    described = table(("pk", "S"), ("sk", "B"))
    assert schema.validate_key(
        {"sk": {"B": "AA=="}, "pk": {"S": "a"}}, schema.key_shape(described)
    ) == (
        {"S": "a"},
        {"B": "AA=="},
    )
    assert schema.validate_key({"pk": {"S": "a"}}, schema.key_shape(table(("pk", "S")))) == (
        {"S": "a"},
        None,
    )


@pytest.mark.parametrize(
    "key",
    [
        {},
        {"pk": {"S": "a"}},
        {"sk": {"N": "1"}},
        {"pk": {"N": "1"}, "sk": {"N": "1"}},
        {"pk": {"S": "a"}, "sk": {"S": "1"}},
        {"pk": {"S": "a"}, "other": {"N": "1"}},
        {"pk": {"S": "a"}, "sk": {"N": "1"}, "other": {"N": "1"}},
    ],
)
def test_validate_key_that_does_not_match_the_schema(key: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as raised:
        schema.validate_key(key, schema.key_shape(table(("pk", "S"), ("sk", "N"))))
    assert raised.value.message == "The provided key element does not match the schema"


def test_validate_key_with_an_oversized_sort_key() -> None:
    key = {"pk": {"S": "a"}, "sk": {"S": "x" * (limits.SORT_KEY_BYTES_MAX + 1)}}
    with pytest.raises(ValidationError) as raised:
        schema.validate_key(key, schema.key_shape(table(("pk", "S"), ("sk", "S"))))
    assert raised.value.message == (
        INVALID + "Aggregated size of all range keys has exceeded the size limit of 1024 bytes"
    )
