"""Table definitions and primary keys: DynamoDB's rules for key schemas, billing and key values.

A table's key schema is a partition (HASH) key and an optional sort (RANGE) key, each a scalar
attribute (S, N or B) declared in AttributeDefinitions. This module holds the rules CreateTable
applies to a definition once its members have the right JSON types and pass their constraints
(the operation's third pass, see `router.requests`), and the rules every item operation applies to
a key: an item must carry each key attribute with the declared type, and a Key parameter must hold
exactly the key attributes. Messages are DynamoDB's own, because SDKs and people match on them.

The key schema is kept in the catalog as `{"hash": [name, type], "range": [name, type] | null}`
(the TABLE descriptor of `rpc.ops`); the helpers here read it from such a descriptor.
Nothing here does IO.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from core import limits
from core.errors import INVALID_PARAMETERS, LimitExceeded, ValidationError
from core.keys import KEY_ATTRIBUTE_TYPES as KEY_ATTRIBUTE_TYPES  # Re-exported for CreateTable.
from core.keys import KeyShape
from core.placement import BILLING_PAY_PER_REQUEST, BILLING_PROVISIONED
from core.values import AttributeValue, Item

KEY_TYPES = ("HASH", "RANGE")
BILLING_MODES = (BILLING_PROVISIONED, BILLING_PAY_PER_REQUEST)

Table = Mapping[str, Any]
KeySchema = dict[str, Any]


# Table names ------------------------------------------------------------------------------------


def check_table_name(name: str | None) -> str:
    """Raise DynamoDB's errors for a missing TableName or one of the wrong length.

    DynamoDB reports these two before any other constraint violation and on their own (the pattern
    [a-zA-Z0-9_.-]+ is an ordinary violation, reported with the rest).
    """
    if name is None:
        raise ValidationError(
            "The parameter 'TableName' is required but was not present in the request"
        )
    if not limits.TABLE_NAME_CHARS_MIN <= len(name) <= limits.TABLE_NAME_CHARS_MAX:
        raise ValidationError(
            f"TableName must be at least {limits.TABLE_NAME_CHARS_MIN} characters long and at "
            f"most {limits.TABLE_NAME_CHARS_MAX} characters long"
        )
    return name


# CreateTable ------------------------------------------------------------------------------------


def build_key_schema(
    attribute_definitions: Sequence[Mapping[str, str]],
    key_schema: Sequence[Mapping[str, str]],
    *,
    indexed: bool = False,
) -> KeySchema:
    """The catalog key schema of a CreateTable request, or DynamoDB's error for a bad one.

    Both lists have passed their constraints (1 or 2 key elements, names and types present, types
    from the enums). The checks run in the order DynamoDB runs them; the last one rejects
    definitions that no key uses, since without secondary indexes only key attributes may be
    declared ("Number of attributes in KeySchema does not exactly match ..."). A table with
    secondary indexes (`indexed`) is checked by `check_definitions_used` instead, once the
    indexes' keys are known.
    """
    definitions: dict[str, str] = {}
    for definition in attribute_definitions:
        # Declaring one name twice, with one type or two, is refused before anything else, naming
        # it (DynamoDB: "Attribute Name is duplicated: x"); a map would keep the last silently.
        if definition["AttributeName"] in definitions:
            raise ValidationError(f"Attribute Name is duplicated: {definition['AttributeName']}")
        definitions[definition["AttributeName"]] = definition["AttributeType"]
    names = [element["AttributeName"] for element in key_schema]
    if len(names) > len(attribute_definitions):
        raise ValidationError("Invalid KeySchema: Some index key attribute have no definition")
    if any(name not in definitions for name in names):
        declared = ", ".join(d["AttributeName"] for d in attribute_definitions)
        raise ValidationError(
            INVALID_PARAMETERS
            + "Some index key attributes are not defined in AttributeDefinitions. "
            f"Keys: [{', '.join(names)}], AttributeDefinitions: [{declared}]"
        )
    if len(names) == 2 and names[0] == names[1]:
        raise ValidationError(
            "Both the Hash Key and the Range Key element in the KeySchema have the same name"
        )
    if key_schema[0]["KeyType"] != "HASH":
        raise ValidationError(
            "Invalid KeySchema: The first KeySchemaElement is not a HASH key type"
        )
    if len(key_schema) == 2 and key_schema[1]["KeyType"] != "RANGE":
        raise ValidationError(
            "Invalid KeySchema: The second KeySchemaElement is not a RANGE key type"
        )
    if not indexed and len(attribute_definitions) != len(names):
        raise ValidationError(
            INVALID_PARAMETERS
            + "Number of attributes in KeySchema does not exactly match number of "
            "attributes defined in AttributeDefinitions"
        )
    hash_name = names[0]
    range_name = names[1] if len(names) == 2 else None
    return {
        "hash": [hash_name, definitions[hash_name]],
        "range": None if range_name is None else [range_name, definitions[range_name]],
    }


def check_definitions_used(
    attribute_definitions: Sequence[Mapping[str, str]], keys_used: Sequence[str]
) -> None:
    """Refuse an AttributeDefinition that neither the table's key nor any secondary index's key
    uses (for a table with indexes; local and global index keys alike are in `keys_used`)."""
    declared = [d["AttributeName"] for d in attribute_definitions]
    used = list(dict.fromkeys(keys_used))
    if any(name not in used for name in declared):
        raise ValidationError(
            INVALID_PARAMETERS + "Some AttributeDefinitions are not used. "
            f"AttributeDefinitions: [{', '.join(declared)}], keys used: [{', '.join(used)}]"
        )


def build_throughput(
    billing_mode: str | None, throughput: Mapping[str, int] | None
) -> dict[str, Any]:
    """The billing mode and the catalog throughput `{"read", "write"}` of a CreateTable request.

    BillingMode defaults to PROVISIONED, which needs both capacity units; PAY_PER_REQUEST takes
    none, and its table reports zeros as DynamoDB does. `throughput` holds the units that passed
    their ">= 1" constraint, keyed ReadCapacityUnits / WriteCapacityUnits.
    """
    mode = BILLING_PROVISIONED if billing_mode is None else billing_mode
    if mode == BILLING_PAY_PER_REQUEST:
        if throughput is not None:
            raise ValidationError(
                INVALID_PARAMETERS
                + "Neither ReadCapacityUnits nor WriteCapacityUnits can be specified "
                "when BillingMode is PAY_PER_REQUEST"
            )
        return {"billing_mode": mode, "throughput": {"read": 0, "write": 0}}
    read = None if throughput is None else throughput.get("ReadCapacityUnits")
    write = None if throughput is None else throughput.get("WriteCapacityUnits")
    if read is None or write is None:
        raise ValidationError(
            INVALID_PARAMETERS
            + "ReadCapacityUnits and WriteCapacityUnits must both be specified when "
            "BillingMode is PROVISIONED"
        )
    for member, units in (("ReadCapacityUnits", read), ("WriteCapacityUnits", write)):
        if units > limits.PROVISIONED_UNITS_VALUE_MAX:
            raise ValidationError(f"Given value {units} for {member} is out of bounds")
    for kind, units in (("read", read), ("write", write)):
        if units > limits.PROVISIONED_UNITS_PER_TABLE_MAX:
            raise LimitExceeded(
                f"Subscriber limit exceeded: Provisioned throughput for a table cannot exceed "
                f"{limits.PROVISIONED_UNITS_PER_TABLE_MAX} {kind} capacity units"
            )
    return {"billing_mode": mode, "throughput": {"read": read, "write": write}}


# Key schema of a table descriptor ---------------------------------------------------------------


def hash_key(table: Table) -> tuple[str, str]:
    """(name, type) of the table's partition key."""
    name, kind = table["key_schema"]["hash"]
    return name, kind


def range_key(table: Table) -> tuple[str, str] | None:
    """(name, type) of the table's sort key, or None when it has none."""
    element = table["key_schema"]["range"]
    if element is None:
        return None
    name, kind = element
    return name, kind


def key_names(table: Table) -> tuple[str, ...]:
    """The names of the table's key attributes, partition key first."""
    schema = table["key_schema"]
    if schema["range"] is None:
        return (schema["hash"][0],)
    return (schema["hash"][0], schema["range"][0])


def key_schema_elements(table: Table) -> list[dict[str, str]]:
    """The table's KeySchema in DynamoDB's wire form, as DescribeTable returns it."""
    schema = table["key_schema"]
    elements = [{"AttributeName": schema["hash"][0], "KeyType": "HASH"}]
    if schema["range"] is not None:
        elements.append({"AttributeName": schema["range"][0], "KeyType": "RANGE"})
    return elements


# Keys of items and requests ---------------------------------------------------------------------


def key_shape(table: Table) -> KeyShape:
    """The table's primary key as a `core.keys.KeyShape`, which holds every key rule."""
    key_schema = table["key_schema"]
    sort = key_schema["range"]
    return _table_shape(tuple(key_schema["hash"]), None if sort is None else tuple(sort))


@functools.lru_cache(maxsize=limits.TABLES_PER_REGION_MAX)
def _table_shape(partition: tuple[str, str], sort: tuple[str, str] | None) -> KeyShape:
    # Every item request needs its table's shape: build each distinct one once, not per request.
    return KeyShape.table(partition, sort)


def extract_key(item: Item, shape: KeyShape) -> tuple[Item, AttributeValue, AttributeValue | None]:
    """The primary key of a whole item: (key item, partition key value, sort key value or None).

    The rules are `KeyShape.extract`'s, as PutItem applies them; `shape` is the table's key.
    """
    key = shape.extract(item)
    sort = shape.sort_key
    return key, key[shape.partition_key.name], None if sort is None else key[sort.name]


def validate_key(key: Item, shape: KeyShape) -> tuple[AttributeValue, AttributeValue | None]:
    """(partition key value, sort key value or None) of a Key parameter (GetItem, DeleteItem, ...).

    The rules are `KeyShape.check_key`'s; `shape` is the table's key.
    """
    checked = shape.check_key(key)
    sort = shape.sort_key
    return checked[shape.partition_key.name], None if sort is None else checked[sort.name]
