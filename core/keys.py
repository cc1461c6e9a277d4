"""Key shapes: the ordered key attributes of a table, a local index or a global index.

Every key dynalab stores is a `KeyShape`: a tuple of scalar attributes, the leading `hashed` of
which (the partition key attributes) are hashed together to place the key. A table's shape is
(partition key, sort key?); a local secondary index entry's is (partition key, index sort key,
table sort key?) and a global secondary index entry's (index partition key attributes, index sort
key attributes, then the table key attributes not already among them), because index keys are not
unique and the table key makes each entry distinct. A table's and a local index's partition key is
one attribute; a global index's may be up to four and its sort key up to four more (DynamoDB's
multi-attribute keys, November 2025). One class therefore owns, for every kind of key:

- the rules an item must meet to carry the key (`extract`: each attribute present, of its declared
  type, non-empty and within DynamoDB's size limit for its role), with DynamoDB's messages;
- the rules of a `Key` request parameter (`check_key`: exactly the key attributes, each of its
  declared type, else "The provided key element does not match the schema");
- the storage key (`storage_key`): `hash64(enc(p1) ‖ ... ‖ enc(pn)) ‖ enc(p1) ‖ ... ‖ enc(pn) ‖
  enc(s1) ‖ ...` with the order-preserving, self-delimiting encoding of `core.keycodec`, so byte
  order is DynamoDB's key order attribute by attribute, whatever the lengths, and an item
  collection (and, within it, every run of equal leading sort key values) is a key prefix. With one
  partition key attribute this is `hash64(enc(pk)) ‖ enc(pk) ‖ enc(sk)`, the tables' layout.

A missing or mistyped key attribute of an item raises `KeyAttributeError`, a `ValidationError`
with PutItem's message that BatchWriteItem reports as a key/schema mismatch instead, and so does a
Key parameter that does not match the schema (with that mismatch's message); a transaction
reports either as the action's cancellation reason. Callers match on the type, never on the
message. Nothing here does IO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from core.errors import INVALID_PARAMETERS, KEY_MISMATCH, ValidationError
from core.keycodec import HASH_BYTES, encode_key_value, hash64
from core.size import check_key_value
from core.values import AttributeValue, Item, type_of

KeyRole = Literal["partition", "sort"]
KEY_ATTRIBUTE_TYPES = ("B", "N", "S")  # In the order DynamoDB's enum message lists them.


class KeyAttributeError(ValidationError):
    """An item lacks one of its key attributes, or carries it with another type than declared."""


@dataclass(frozen=True, slots=True)
class KeyAttribute:
    """One key attribute: its name, its declared scalar type, and the size limit its role sets."""

    name: str
    type: str  # "S", "N" or "B"
    role: KeyRole

    def __post_init__(self) -> None:
        assert self.type in KEY_ATTRIBUTE_TYPES, f"a key attribute is S, N or B, not {self.type}"


@dataclass(frozen=True, slots=True)
class KeyShape:
    """The ordered key attributes of one kind of key; the leading `hashed` ones are hashed."""

    attributes: tuple[KeyAttribute, ...]
    # How many leading attributes make the partition key, hashed together to place the key: one
    # for a table and a local index, one to four for a global index.
    hashed: int = 1
    # The attributes' names, kept: every projection and key extraction reads them.
    _names: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        assert self.attributes, "a key has at least a partition key"
        assert 1 <= self.hashed <= len(self.attributes), f"{self.hashed} hashed attributes"
        assert all(a.role == "partition" for a in self.attributes[: self.hashed]), (
            "every hashed attribute is a partition key"
        )
        names = tuple(attribute.name for attribute in self.attributes)
        assert len(set(names)) == len(names), f"key attributes repeat a name: {names}"
        object.__setattr__(self, "_names", names)

    @classmethod
    def table(cls, partition: tuple[str, str], sort: tuple[str, str] | None = None) -> KeyShape:
        """A table's primary key from (name, type) of its partition key and of its sort key."""
        attributes = [KeyAttribute(partition[0], partition[1], "partition")]
        if sort is not None:
            attributes.append(KeyAttribute(sort[0], sort[1], "sort"))
        return cls(tuple(attributes))

    @classmethod
    def from_key_schema(cls, key_schema: Mapping[str, Any]) -> KeyShape:
        """A table's primary key from the catalog's `{"hash": [name, type], "range": ...}`."""
        partition = key_schema["hash"]
        sort = key_schema.get("range")
        return cls.table((partition[0], partition[1]), None if sort is None else (sort[0], sort[1]))

    def to_key_schema(self) -> dict[str, Any]:
        """The catalog form of a table's primary key (the inverse of `from_key_schema`)."""
        assert len(self.attributes) <= 2, "only a table's primary key has a catalog key schema"
        partition = self.attributes[0]
        sort = self.sort_key
        return {
            "hash": [partition.name, partition.type],
            "range": None if sort is None else [sort.name, sort.type],
        }

    def to_document(self) -> list[list[str]] | dict[str, Any]:
        """The JSON form of any key shape, as partition metadata and create_partition carry it:
        `[[name, type, role], ...]`, with `{"attributes": [...], "hashed": n}` around it when
        more than one attribute is hashed (a multi-attribute global index's entry key)."""
        attributes = [[a.name, a.type, a.role] for a in self.attributes]
        if self.hashed == 1:
            return attributes
        return {"attributes": attributes, "hashed": self.hashed}

    @classmethod
    def from_document(cls, document: Sequence[Any] | Mapping[str, Any]) -> KeyShape:
        """The key shape of a `to_document` form."""
        if isinstance(document, Mapping):
            attributes, hashed = document["attributes"], int(document["hashed"])
        else:
            attributes, hashed = document, 1
        return cls(tuple(KeyAttribute(name, kind, role) for name, kind, role in attributes), hashed)

    @property
    def partition_key(self) -> KeyAttribute:
        """The first partition key attribute (a table's and a local index's only one)."""
        return self.attributes[0]

    @property
    def partition_attributes(self) -> tuple[KeyAttribute, ...]:
        """The attributes hashed together to place the key."""
        return self.attributes[: self.hashed]

    @property
    def sort_key(self) -> KeyAttribute | None:
        """The attribute after the partition key ones, which orders an item collection first; None
        for a partition key alone."""
        return self.attributes[self.hashed] if len(self.attributes) > self.hashed else None

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    # Validation ---------------------------------------------------------------------------------

    def extract(self, item: Item) -> Item:
        """The key of a whole item, checked as PutItem checks it.

        `item` holds values already validated and normalised by `core.values`. Each key attribute
        must be present with its declared type ("Missing the key ...", "Type mismatch for key
        ..."), non-empty, and within 2048 bytes for a partition key or 1024 for a sort key.
        """
        key: Item = {}
        for attribute in self.attributes:
            value = item.get(attribute.name)
            if value is None:
                raise KeyAttributeError(
                    INVALID_PARAMETERS + f"Missing the key {attribute.name} in the item"
                )
            actual = type_of(value)
            if actual != attribute.type:
                raise KeyAttributeError(
                    INVALID_PARAMETERS + f"Type mismatch for key {attribute.name} expected: "
                    f"{attribute.type} actual: {actual}"
                )
            check_key_value(attribute.name, value, attribute.role)
            key[attribute.name] = value
        return key

    def check_key(self, key: Item) -> Item:
        """A `Key` request parameter (GetItem, DeleteItem, ExclusiveStartKey ...), checked.

        It must hold exactly the key attributes with their declared types; anything else is
        DynamoDB's "The provided key element does not match the schema". Empty and oversized
        values then get their own messages, partition key first.
        """
        if len(key) != len(self.attributes):
            raise KeyAttributeError(KEY_MISMATCH)
        for attribute in self.attributes:
            value = key.get(attribute.name)
            if value is None or type_of(value) != attribute.type:
                raise KeyAttributeError(KEY_MISMATCH)
        for attribute in self.attributes:
            check_key_value(attribute.name, key[attribute.name], attribute.role)
        return {attribute.name: key[attribute.name] for attribute in self.attributes}

    def key_of(self, item: Item) -> Item:
        """The key attributes of an item already known to carry them (a stored item)."""
        return {attribute.name: item[attribute.name] for attribute in self.attributes}

    # Storage keys -------------------------------------------------------------------------------

    def storage_key(self, key: Item) -> bytes:
        """`hash64(enc(p1) ‖ ...) ‖ enc(p1) ‖ ... ‖ enc(s1) ‖ ...` of a key with every attribute."""
        return self.storage_key_of([key[attribute.name] for attribute in self.attributes])

    def storage_key_of(self, values: Sequence[AttributeValue]) -> bytes:
        """The storage key, or a prefix of it, from the leading key values in order.

        The partition key values alone give the prefix every key of that item collection starts
        with; each further value narrows it to the keys that also start with that sort key value.
        """
        assert self.hashed <= len(values) <= len(self.attributes)
        encoded_partition = b"".join(encode_key_value(value) for value in values[: self.hashed])
        parts = [hash64(encoded_partition).to_bytes(HASH_BYTES, "big"), encoded_partition]
        parts.extend(encode_key_value(value) for value in values[self.hashed :])
        return b"".join(parts)

    def placement_hash(self, values: Sequence[AttributeValue]) -> int:
        """The 64-bit hash that places a key whose partition key attributes have `values`."""
        assert len(values) == self.hashed
        return hash64(b"".join(encode_key_value(value) for value in values))
