"""Keys at DynamoDB's size limits against a real cluster (three nodes, two routers), through boto3.

DynamoDB permits a partition key of up to 2048 bytes and a sort key of up to 1024, counted as UTF-8
bytes for S and raw bytes for B (an N key is a number of up to 38 digits). These tests define
"every permitted key is stored": items keyed (S), (B), (S,S), (B,B), (S,N), (B,S), (S,B), (N,S) and
(N,B) at exactly the limits, with multi-byte characters and with long shared prefixes whose tails
hold 0x00 and 0xff bytes, go through PutItem, GetItem, UpdateItem, DeleteItem, BatchWriteItem and
BatchGetItem; Query on a long partition key returns its items in DynamoDB's order (S by UTF-8
bytes, B by unsigned bytes) in both directions, with BETWEEN and begins_with on long sort keys and
with Limit pages whose LastEvaluatedKey carries the long keys; Scan pages visit hundreds of
long-keyed items exactly once; and concurrent writers mixing long and ordinary keys all succeed.
One byte past either limit, also through multi-byte characters, is DynamoDB's ValidationException
and stores nothing.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table, error_of, error_summary

PARTITION_KEY_MAX = 2048  # Bytes: UTF-8 bytes of an S value, raw bytes of a B value.
SORT_KEY_MAX = 1024
HASHKEY_TOO_LARGE = (
    "One or more parameter values were invalid: Size of hashkey has exceeded the maximum size "
    "limit of2048 bytes"  # DynamoDB's own message has no space between "of" and the number.
)
RANGEKEY_TOO_LARGE = (
    "One or more parameter values were invalid: Aggregated size of all range keys has exceeded "
    "the size limit of 1024 bytes"
)
CONDITION_FAILED = (400, "ConditionalCheckFailedException", "The conditional request failed")
BATCH_WRITE_MAX = 25
BATCH_GET_MAX = 100
# The largest key LMDB (the store being replaced) holds is 511 bytes: 16 bytes of table id, 8 of
# hash, then the encoded key, whose S or B value ends in a 2-byte terminator. So a table keyed by
# pk alone fits a partition key of up to 485 bytes without 0x00 bytes, and no longer.
OLD_STORE_PARTITION_KEY_MAX = 485
# The concurrent test: WRITERS threads each make WRITES_PER_WRITER writes, all within the timeout.
WRITERS = 8
WRITES_PER_WRITER = 40
CONCURRENT_TIMEOUT_S = 60.0
PAGES_MAX = 10_000  # More pages than any walk here needs: a walk that goes on is a bug.


# Key values of exact sizes -----------------------------------------------------------------------


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def text_of(size: int, tail: str = "", fill: str = "€") -> str:
    """A string of exactly `size` UTF-8 bytes: `fill` repeated, "a"s to make up the size, `tail`."""
    room = size - utf8_len(tail)
    count = room // utf8_len(fill)
    text = fill * count + "a" * (room - count * utf8_len(fill)) + tail
    assert utf8_len(text) == size
    return text


def binary_of(size: int, tail: bytes = b"", fill: bytes = b"\x00\xff") -> bytes:
    """Exactly `size` bytes: the `fill` pattern repeated and cut to length, then `tail`."""
    room = size - len(tail)
    value = (fill * (room // len(fill) + 1))[:room] + tail
    assert len(value) == size
    return value


def size_of(type_: str, value: Any) -> int:
    return utf8_len(value) if type_ == "S" else len(value)


def ordered(type_: str, values: list[Any]) -> list[Any]:
    """`values` in DynamoDB's key order: S by UTF-8 bytes, B by unsigned bytes, N numerically."""
    if type_ == "S":
        return sorted(values, key=lambda text: text.encode("utf-8"))
    if type_ == "N":
        return sorted(values, key=Decimal)
    return sorted(values)


def between(type_: str, low: Any, value: Any, high: Any) -> bool:
    """Whether low <= value <= high in DynamoDB's order of S or B values."""
    as_bytes = (lambda text: text.encode("utf-8")) if type_ == "S" else bytes
    return as_bytes(low) <= as_bytes(value) <= as_bytes(high)


def plain(value: dict[str, Any]) -> Any:
    """The Python value of a key attribute as boto3 returns it: str, bytes or Decimal."""
    ((tag, raw),) = value.items()
    return Decimal(raw) if tag == "N" else raw


def make_key(
    hash_type: str, pk: Any, range_type: str | None = None, sk: Any = None
) -> dict[str, Any]:
    key = {"pk": {hash_type: pk}}
    if range_type is not None:
        key["sk"] = {range_type: sk}
    return key


def key_id(item: dict[str, Any]) -> tuple[Any, ...]:
    """A hashable identity of an item's key: (pk,) or (pk, sk) as plain values."""
    return tuple(plain(item[name]) for name in ("pk", "sk") if name in item)


# Reading and writing helpers ---------------------------------------------------------------------


def fill(dynamodb: Any, name: str, items: list[dict[str, Any]]) -> None:
    for start in range(0, len(items), BATCH_WRITE_MAX):
        chunk = items[start : start + BATCH_WRITE_MAX]
        reply = dynamodb.batch_write_item(
            RequestItems={name: [{"PutRequest": {"Item": item}} for item in chunk]}
        )
        assert reply["UnprocessedItems"] == {}


def batch_get(dynamodb: Any, name: str, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every item BatchGetItem finds for `keys` (consistent reads); none may be left unprocessed."""
    found: list[dict[str, Any]] = []
    for start in range(0, len(keys), BATCH_GET_MAX):
        reply = dynamodb.batch_get_item(
            RequestItems={
                name: {"Keys": keys[start : start + BATCH_GET_MAX], "ConsistentRead": True}
            }
        )
        assert reply["UnprocessedKeys"] == {}
        found.extend(reply["Responses"][name])
    return found


def pages(call: Callable[..., dict[str, Any]], **request: Any) -> Iterator[dict[str, Any]]:
    """Every page of a Query or Scan, following LastEvaluatedKey."""
    for _ in range(PAGES_MAX):
        page = call(**request)
        yield page
        if "LastEvaluatedKey" not in page:
            return
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    pytest.fail("the pages never ended")


def check_pages(read: list[dict[str, Any]], limit: int, key_names: tuple[str, ...]) -> None:
    """Each page holds at most `limit` items, and a full page names its last item's key."""
    for page in read:
        assert page["Count"] == len(page["Items"]) <= limit
        if page["Count"] == limit:
            last = page["Items"][-1]
            assert page["LastEvaluatedKey"] == {name: last[name] for name in key_names}


def exactly_once(found: list[tuple[Any, ...]], expected: set[tuple[Any, ...]]) -> None:
    repeated = [key for key, times in Counter(found).items() if times > 1]
    assert not repeated, f"{len(repeated)} items read twice"
    missing = expected - set(found)
    assert not missing, f"{len(missing)} of {len(expected)} items never read"
    assert set(found) == expected


# Single items at the limits ----------------------------------------------------------------------

# (hash type, range type, partition key, sort key): every key at exactly its limit.
AT_THE_LIMITS = [
    pytest.param("S", None, "k" * 2048, None, id="S-ascii"),
    pytest.param("S", None, "𝄞" * 512, None, id="S-4-byte-chars"),
    pytest.param("S", None, "€" * 682 + "é", None, id="S-3-and-2-byte-chars"),
    pytest.param("B", None, bytes(range(256)) * 8, None, id="B"),
    pytest.param("S", "S", "k" * 2048, "s" * 1024, id="S,S-ascii"),
    pytest.param("S", "S", "é" * 1024, "𝄞" * 256, id="S,S-multi-byte"),
    pytest.param("S", "S", "𝄞" * 512, "€" * 341 + "a", id="S,S-mixed"),
    pytest.param("B", "B", bytes(range(256)) * 8, bytes(range(255, -1, -1)) * 4, id="B,B"),
    pytest.param("B", "B", b"\x00" * 2048, b"\xff" * 1024, id="B,B-zeros-and-ff"),
    pytest.param("B", "B", b"\xff" * 2048, b"\x00" * 1024, id="B,B-ff-and-zeros"),
    pytest.param("S", "N", "€" * 682 + "é", "-1234567890.1234567890123456789012345678", id="S,N"),
    pytest.param("B", "S", binary_of(2048), "€" * 341 + "a", id="B,S"),
    pytest.param("S", "B", "a" * 2048, binary_of(1024, fill=b"\xff\x00"), id="S,B"),
    pytest.param("N", "S", "12345678901234567890123456789012345678", "é" * 512, id="N,S"),
    pytest.param("N", "B", "-0.5", bytes(range(256)) * 4, id="N,B"),
]


def check_sizes(hash_type: str, range_type: str | None, pk: Any, sk: Any) -> None:
    """The parameters really are at the limits (N values have no byte limit of their own)."""
    if hash_type != "N":
        assert size_of(hash_type, pk) == PARTITION_KEY_MAX
    if range_type is not None and range_type != "N":
        assert size_of(range_type, sk) == SORT_KEY_MAX


@pytest.mark.parametrize(("hash_type", "range_type", "pk", "sk"), AT_THE_LIMITS)
def test_item_operations_at_the_key_size_limits(
    dynamodb: Any,
    table_name: Callable[[], str],
    hash_type: str,
    range_type: str | None,
    pk: Any,
    sk: Any,
) -> None:
    check_sizes(hash_type, range_type, pk, sk)
    name = create_active_table(
        dynamodb,
        table_name(),
        hash_key=("pk", hash_type),
        range_key=None if range_type is None else ("sk", range_type),
    )
    key = make_key(hash_type, pk, range_type, sk)
    # A neighbour with a short key: the same partition key when there is a sort key.
    short = {"S": "n", "B": b"n", "N": "7"}
    neighbour = {
        **(
            make_key(hash_type, short[hash_type])
            if range_type is None
            else make_key(hash_type, pk, range_type, short[range_type])
        ),
        "v": {"S": "neighbour"},
    }
    dynamodb.put_item(TableName=name, Item=neighbour)

    # UpdateItem creates the item, then updates it in place.
    created = dynamodb.update_item(
        TableName=name,
        Key=key,
        UpdateExpression="SET v = :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
        ReturnValues="ALL_NEW",
    )
    assert created["Attributes"] == {**key, "v": {"N": "1"}}
    updated = dynamodb.update_item(
        TableName=name,
        Key=key,
        UpdateExpression="SET v = v + :one",
        ConditionExpression="attribute_exists(pk)",
        ExpressionAttributeValues={":one": {"N": "1"}},
        ReturnValues="UPDATED_NEW",
    )
    assert updated["Attributes"] == {"v": {"N": "2"}}

    # PutItem replaces it and returns the old one; a put that must create it fails.
    item = {**key, "w": {"S": "put"}, "b": {"B": b"\x00\xff"}}
    replaced = dynamodb.put_item(TableName=name, Item=item, ReturnValues="ALL_OLD")
    assert replaced["Attributes"] == {**key, "v": {"N": "2"}}
    assert (
        error_of(
            lambda: dynamodb.put_item(
                TableName=name, Item=key, ConditionExpression="attribute_not_exists(pk)"
            )
        )
        == CONDITION_FAILED
    )
    assert dynamodb.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"] == item
    assert dynamodb.get_item(TableName=name, Key=key)["Item"] == item

    # DeleteItem returns it; afterwards it is gone and a conditional delete finds nothing.
    deleted = dynamodb.delete_item(
        TableName=name,
        Key=key,
        ConditionExpression="attribute_exists(pk)",
        ReturnValues="ALL_OLD",
    )
    assert deleted["Attributes"] == item
    assert "Item" not in dynamodb.get_item(TableName=name, Key=key, ConsistentRead=True)
    assert (
        error_of(
            lambda: dynamodb.delete_item(
                TableName=name, Key=key, ConditionExpression="attribute_exists(pk)"
            )
        )
        == CONDITION_FAILED
    )
    neighbour_key = {attr: neighbour[attr] for attr in key}
    assert (
        dynamodb.get_item(TableName=name, Key=neighbour_key, ConsistentRead=True)["Item"]
        == neighbour
    )


def variant(type_: str, value: Any, i: int) -> Any:
    """A value of the same type and byte size as `value` that differs from it for each `i` < 100."""
    if type_ == "N":
        with localcontext() as context:
            context.prec = 60  # Room for every digit of a 38-digit number plus i.
            return format(Decimal(value) + i, "f")
    if type_ == "B":
        return value[:-1] + bytes([(value[-1] + 37 * i) % 256])
    head = value
    while utf8_len(value) - utf8_len(head) < 2:
        head = head[:-1]
    room = utf8_len(value) - utf8_len(head)
    return head + f"{i:0{room}d}"


@pytest.mark.parametrize(("hash_type", "range_type", "pk", "sk"), AT_THE_LIMITS)
def test_batches_at_the_key_size_limits(
    dynamodb: Any,
    table_name: Callable[[], str],
    hash_type: str,
    range_type: str | None,
    pk: Any,
    sk: Any,
) -> None:
    name = create_active_table(
        dynamodb,
        table_name(),
        hash_key=("pk", hash_type),
        range_key=None if range_type is None else ("sk", range_type),
    )
    # 25 keys: 5 partition keys with 5 sort keys each, or 25 partition keys.
    keys = [
        make_key(hash_type, variant(hash_type, pk, i), range_type, None)
        if range_type is None
        else make_key(
            hash_type,
            variant(hash_type, pk, i // 5),
            range_type,
            variant(range_type, sk, i % 5),
        )
        for i in range(BATCH_WRITE_MAX)
    ]
    assert len({key_id(key) for key in keys}) == BATCH_WRITE_MAX
    for key in keys:
        check_sizes(hash_type, range_type, key["pk"][hash_type], key.get("sk", {}).get(range_type))
    items = [{**key, "n": {"N": str(i)}} for i, key in enumerate(keys)]

    fill(dynamodb, name, items)
    assert sorted(batch_get(dynamodb, name, keys), key=repr) == sorted(items, key=repr)
    # Deletes at the limits too: the first ten go, the others stay.
    reply = dynamodb.batch_write_item(
        RequestItems={name: [{"DeleteRequest": {"Key": key}} for key in keys[:10]]}
    )
    assert reply["UnprocessedItems"] == {}
    assert sorted(batch_get(dynamodb, name, keys), key=repr) == sorted(items[10:], key=repr)


@pytest.mark.parametrize(
    "size", [1, OLD_STORE_PARTITION_KEY_MAX, OLD_STORE_PARTITION_KEY_MAX + 1, 1024, 2047, 2048]
)
@pytest.mark.parametrize("hash_type", ["S", "B"])
def test_partition_key_sizes_up_to_the_limit(
    dynamodb: Any, table_name: Callable[[], str], hash_type: str, size: int
) -> None:
    # 485 bytes is the most the old store takes; every size up to 2048 must work the same.
    name = create_active_table(dynamodb, table_name(), hash_key=("pk", hash_type))
    pk = "k" * size if hash_type == "S" else b"\x01" * size
    key = make_key(hash_type, pk)
    item = {**key, "v": {"N": str(size)}}
    dynamodb.put_item(TableName=name, Item=item)
    assert dynamodb.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"] == item
    reply = dynamodb.query(
        TableName=name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {hash_type: pk}},
    )
    assert reply["Items"] == [item]
    dynamodb.delete_item(TableName=name, Key=key)
    assert "Item" not in dynamodb.get_item(TableName=name, Key=key, ConsistentRead=True)


# One byte over the limits ------------------------------------------------------------------------

# (hash type, range type, a key with one value one byte over its limit, DynamoDB's message).
ONE_BYTE_OVER = [
    pytest.param("S", None, {"pk": {"S": "k" * 2049}}, HASHKEY_TOO_LARGE, id="S-pk-ascii"),
    pytest.param("S", None, {"pk": {"S": "€" * 683}}, HASHKEY_TOO_LARGE, id="S-pk-683-euros"),
    pytest.param(
        "S",
        "S",
        {"pk": {"S": "𝄞" * 512 + "a"}, "sk": {"S": "s"}},
        HASHKEY_TOO_LARGE,
        id="S,S-pk-4-byte-chars",
    ),
    pytest.param("B", None, {"pk": {"B": b"\xff" * 2049}}, HASHKEY_TOO_LARGE, id="B-pk"),
    pytest.param(
        "B",
        "B",
        {"pk": {"B": b"\x00" * 2049}, "sk": {"B": b"\x00"}},
        HASHKEY_TOO_LARGE,
        id="B,B-pk-zeros",
    ),
    pytest.param(
        "S",
        "S",
        {"pk": {"S": "k" * 2048}, "sk": {"S": "s" * 1025}},
        RANGEKEY_TOO_LARGE,
        id="S,S-sk-ascii",
    ),
    pytest.param(
        "S",
        "S",
        {"pk": {"S": "p"}, "sk": {"S": "€" * 341 + "é"}},
        RANGEKEY_TOO_LARGE,
        id="S,S-sk-multi-byte",
    ),
    pytest.param(
        "S",
        "S",
        {"pk": {"S": "p"}, "sk": {"S": "𝄞" * 256 + "a"}},
        RANGEKEY_TOO_LARGE,
        id="S,S-sk-4-byte-chars",
    ),
    pytest.param(
        "B",
        "B",
        {"pk": {"B": b"\xff" * 2048}, "sk": {"B": b"\xff" * 1025}},
        RANGEKEY_TOO_LARGE,
        id="B,B-sk",
    ),
    pytest.param(
        "N",
        "B",
        {"pk": {"N": "1"}, "sk": {"B": b"\x00" * 1025}},
        RANGEKEY_TOO_LARGE,
        id="N,B-sk-zeros",
    ),
]


@pytest.mark.parametrize(("hash_type", "range_type", "key", "message"), ONE_BYTE_OVER)
def test_one_byte_over_a_key_limit_is_refused(
    dynamodb: Any,
    table_name: Callable[[], str],
    hash_type: str,
    range_type: str | None,
    key: dict[str, Any],
    message: str,
) -> None:
    name = create_active_table(
        dynamodb,
        table_name(),
        hash_key=("pk", hash_type),
        range_key=None if range_type is None else ("sk", range_type),
    )
    over = {attr: size_of(*next(iter(value.items()))) for attr, value in key.items()}
    assert over.get("pk") == PARTITION_KEY_MAX + 1 or over.get("sk") == SORT_KEY_MAX + 1
    item = {**key, "v": {"S": "never stored"}}
    calls: dict[str, Callable[[], Any]] = {
        "PutItem": lambda: dynamodb.put_item(TableName=name, Item=item),
        "UpdateItem": lambda: dynamodb.update_item(
            TableName=name,
            Key=key,
            UpdateExpression="SET v = :v",
            ExpressionAttributeValues={":v": {"S": "never stored"}},
        ),
        "DeleteItem": lambda: dynamodb.delete_item(TableName=name, Key=key),
        "GetItem": lambda: dynamodb.get_item(TableName=name, Key=key),
        "BatchWriteItem put": lambda: dynamodb.batch_write_item(
            RequestItems={name: [{"PutRequest": {"Item": item}}]}
        ),
        "BatchWriteItem delete": lambda: dynamodb.batch_write_item(
            RequestItems={name: [{"DeleteRequest": {"Key": key}}]}
        ),
        "BatchGetItem": lambda: dynamodb.batch_get_item(RequestItems={name: {"Keys": [key]}}),
    }
    if message == HASHKEY_TOO_LARGE:
        calls["Query"] = lambda: dynamodb.query(
            TableName=name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": key["pk"]},
        )
    results = {operation: error_of(call) for operation, call in calls.items()}
    assert results == {operation: (400, "ValidationException", message) for operation in calls}
    reply = dynamodb.scan(TableName=name, ConsistentRead=True)
    assert (reply["Items"], reply["Count"]) == ([], 0)


# Query over long keys ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Collection:
    """An item collection under a 2048-byte partition key, keyed pk and sk of one type (S or B).

    Its sort keys share a 1000-byte prefix and differ in short tails, up to the full 1024 bytes.
    Beside it are items under neighbouring partition keys, sharing its first 2000 bytes (one is
    a prefix of it), which no Query on it may return.
    """

    table: str
    type: str
    pk: Any
    sort_prefix: Any
    sort_keys: list[Any]  # In DynamoDB order.

    def key(self, sk: Any) -> dict[str, Any]:
        return make_key(self.type, self.pk, self.type, sk)

    def query(self, condition: str = "", **request: Any) -> dict[str, Any]:
        """A Query request on the collection, with `condition` on its sort key if given."""
        values = request.pop("ExpressionAttributeValues", {})
        return dict(
            TableName=self.table,
            KeyConditionExpression="pk = :pk" + (f" AND {condition}" if condition else ""),
            ExpressionAttributeValues={":pk": {self.type: self.pk}, **values},
            **request,
        )


S_PK_PREFIX = text_of(2000, fill="€")
S_PK = S_PK_PREFIX + "x" * 48
S_PK_NEIGHBOURS = [
    S_PK_PREFIX + "x" * 47,
    S_PK_PREFIX + "x" * 47 + "\x00",
    S_PK_PREFIX + "x" * 47 + "w",
    S_PK_PREFIX + "x" * 47 + "y",
]
S_SORT_PREFIX = "é" * 500
# Ordered differently by UTF-8 bytes than by UTF-16 code units: "｡" (U+FF61) before "𝄞".
S_SORT_TAILS = [
    "",
    "\x00",
    "\x00\x00",
    "\x00a",
    "\x7f",
    "a",
    "ab",
    "a" * 24,
    "z",
    "é",
    "ÿ",
    "€",
    "｡",
    "𝄞",
    "𝄞" * 6,
]
B_PK_PREFIX = binary_of(2000, fill=b"\x00\xff")
B_PK = B_PK_PREFIX + b"\x00" * 47 + b"\x01"
B_PK_NEIGHBOURS = [
    B_PK_PREFIX + b"\x00" * 47,
    B_PK_PREFIX + b"\x00" * 48,
    B_PK_PREFIX + b"\x00" * 47 + b"\xff",
    B_PK_PREFIX + b"\x00" * 46 + b"\x01",
]
B_SORT_PREFIX = binary_of(1000, fill=b"\xff\x00")
B_SORT_TAILS = [
    b"",
    b"\x00",
    b"\x00\x00",
    b"\x00\x01",
    b"\x00\xff",
    b"\x00\xff\x00",
    b"\x00" * 24,
    b"\x01",
    b"\x7f",
    b"\x80",
    b"\xfe",
    b"\xff",
    b"\xff\x00",
    b"\xff\xff",
    b"\xff" * 24,
]
# BETWEEN bounds as sort key tails: present and absent keys, one range holding nothing.
BETWEEN_TAILS: dict[str, list[tuple[Any, Any]]] = {
    "S": [
        ("", ""),
        ("\x00", "a"),
        ("\x00\x01", "ÿ"),
        ("a", "𝄞" * 6),
        ("é", "｡"),
        ("€", "𝄞"),
        ("b", "y"),
    ],
    "B": [
        (b"", b""),
        (b"\x00", b"\x00\xff"),
        (b"\x00\x00\x00", b"\x7f"),
        (b"\x01", b"\xff"),
        (b"\xff", b"\xff" * 24),
        (b"\x02", b"\x7e"),
    ],
}
# begins_with arguments as sort key tails (after the whole shared prefix).
BEGINS_WITH_TAILS: dict[str, list[Any]] = {
    "S": ["", "\x00", "\x00\x00", "a", "é", "𝄞", "𝄞" * 6, "q"],
    "B": [b"", b"\x00", b"\x00\xff", b"\xff", b"\xff\xff", b"\xff" * 24, b"\x42"],
}


@pytest.fixture(scope="module", params=["S", "B"])
def collection(request: pytest.FixtureRequest, dynamodb: Any) -> Collection:
    type_ = request.param
    chosen: tuple[Any, list[Any], Any, list[Any]] = (
        (S_PK, S_PK_NEIGHBOURS, S_SORT_PREFIX, S_SORT_TAILS)
        if type_ == "S"
        else (B_PK, B_PK_NEIGHBOURS, B_SORT_PREFIX, B_SORT_TAILS)
    )
    pk, neighbours, prefix, tails = chosen
    assert size_of(type_, pk) == PARTITION_KEY_MAX
    sort_keys = [prefix + tail for tail in tails]
    assert max(size_of(type_, sk) for sk in sort_keys) == SORT_KEY_MAX
    name = create_active_table(
        dynamodb, f"long-keys-collection-{type_}", hash_key=("pk", type_), range_key=("sk", type_)
    )
    items = [make_key(type_, pk, type_, sk) for sk in sort_keys]
    for other in neighbours:
        items += [make_key(type_, other, type_, sk) for sk in (sort_keys[0], sort_keys[-1])]
    fill(dynamodb, name, items)
    return Collection(name, type_, pk, prefix, ordered(type_, sort_keys))


def sort_keys_of(collection: Collection, items: list[dict[str, Any]]) -> list[Any]:
    """The sort keys of `items`, checking that each belongs to the collection."""
    assert all(plain(item["pk"]) == collection.pk for item in items), "another partition key"
    return [plain(item["sk"]) for item in items]


@pytest.mark.parametrize("forward", [True, False])
def test_query_returns_a_long_collection_in_key_order(
    dynamodb: Any, collection: Collection, forward: bool
) -> None:
    reply = dynamodb.query(**collection.query(ScanIndexForward=forward))
    expected = collection.sort_keys if forward else collection.sort_keys[::-1]
    assert sort_keys_of(collection, reply["Items"]) == expected
    assert (reply["Count"], reply["ScannedCount"]) == (len(expected), len(expected))
    assert "LastEvaluatedKey" not in reply


@pytest.mark.parametrize("forward", [True, False])
def test_query_between_on_long_sort_keys(
    dynamodb: Any, collection: Collection, forward: bool
) -> None:
    for low_tail, high_tail in BETWEEN_TAILS[collection.type]:
        low, high = collection.sort_prefix + low_tail, collection.sort_prefix + high_tail
        expected = [sk for sk in collection.sort_keys if between(collection.type, low, sk, high)]
        reply = dynamodb.query(
            **collection.query(
                "sk BETWEEN :low AND :high",
                ExpressionAttributeValues={
                    ":low": {collection.type: low},
                    ":high": {collection.type: high},
                },
                ScanIndexForward=forward,
            )
        )
        found = sort_keys_of(collection, reply["Items"])
        assert found == (expected if forward else expected[::-1]), (low_tail, high_tail)


@pytest.mark.parametrize("forward", [True, False])
def test_query_begins_with_on_long_sort_keys(
    dynamodb: Any, collection: Collection, forward: bool
) -> None:
    # Also a short argument: the first character or byte of the shared prefix.
    arguments = [collection.sort_prefix[:1]] + [
        collection.sort_prefix + tail for tail in BEGINS_WITH_TAILS[collection.type]
    ]
    for argument in arguments:
        expected = [sk for sk in collection.sort_keys if sk.startswith(argument)]
        reply = dynamodb.query(
            **collection.query(
                "begins_with(sk, :start)",
                ExpressionAttributeValues={":start": {collection.type: argument}},
                ScanIndexForward=forward,
            )
        )
        found = sort_keys_of(collection, reply["Items"])
        assert found == (expected if forward else expected[::-1]), argument[-30:]


@pytest.mark.parametrize("forward", [True, False])
@pytest.mark.parametrize("limit", [1, 2, 3])
def test_query_pages_over_long_keys_visit_each_item_once_in_order(
    dynamodb: Any, collection: Collection, limit: int, forward: bool
) -> None:
    low, high = (collection.sort_prefix + tail for tail in BETWEEN_TAILS[collection.type][3])
    ranged = [sk for sk in collection.sort_keys if between(collection.type, low, sk, high)]
    assert len(ranged) >= 4
    for condition, values, expected in (
        ("", {}, collection.sort_keys),
        (
            "sk BETWEEN :low AND :high",
            {":low": {collection.type: low}, ":high": {collection.type: high}},
            ranged,
        ),
    ):
        request = collection.query(
            condition,
            ExpressionAttributeValues=values,
            ScanIndexForward=forward,
            Limit=limit,
        )
        read = list(pages(dynamodb.query, **request))
        check_pages(read, limit, ("pk", "sk"))
        found = [sk for page in read for sk in sort_keys_of(collection, page["Items"])]
        assert found == (expected if forward else expected[::-1])
        assert len(read) >= len(expected) // limit


@pytest.mark.parametrize("forward", [True, False])
def test_query_number_sort_keys_under_a_long_partition_key(
    dynamodb: Any, table_name: Callable[[], str], forward: bool
) -> None:
    name = create_active_table(dynamodb, table_name(), range_key=("sk", "N"))
    pk = text_of(PARTITION_KEY_MAX, fill="𝄞")
    numbers = [
        "-9.9999999999999999999999999999999999999E+125",
        "-12345678901234567890123456789012345678",
        "-1.5",
        "-1",
        "-1E-130",
        "0",
        "1E-130",
        "0.12345678901234567890123456789012345678",
        "0.5",
        "1",
        "10",
        "12345678901234567890123456789012345678",
        "9.9999999999999999999999999999999999999E+125",
    ]
    fill(dynamodb, name, [make_key("S", pk, "N", number) for number in numbers])
    fill(dynamodb, name, [make_key("S", pk[:-1] + "a", "N", number) for number in numbers[:3]])
    expected = ordered("N", [Decimal(number) for number in numbers])
    if not forward:
        expected.reverse()
    reply = dynamodb.query(
        TableName=name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": pk}},
        ScanIndexForward=forward,
    )
    assert [plain(item["sk"]) for item in reply["Items"]] == expected
    read = list(
        pages(
            dynamodb.query,
            TableName=name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": pk}},
            ScanIndexForward=forward,
            Limit=2,
        )
    )
    check_pages(read, 2, ("pk", "sk"))
    assert all(plain(item["pk"]) == pk for page in read for item in page["Items"])
    assert [plain(item["sk"]) for page in read for item in page["Items"]] == expected


# Scan over long keys -----------------------------------------------------------------------------

SCAN_PARTITION_KEYS = 100
SCAN_SORT_KEYS = 3  # 300 items of about 3 KB each, under 100 partition keys spread over the table.


@pytest.fixture(scope="module", params=["S", "B"])
def scanned(request: pytest.FixtureRequest, dynamodb: Any) -> tuple[str, set[tuple[Any, ...]]]:
    """A table of 300 items with keys at the limits, sharing long prefixes, keyed (S,S) or (B,B)."""
    type_ = request.param

    def value(size: int, i: int) -> Any:
        if type_ == "S":
            return text_of(size, tail=f"{i:03d}", fill="€" if size == PARTITION_KEY_MAX else "𝄞")
        return binary_of(size, tail=bytes([0, i, 0xFF]), fill=b"\xff\x00")

    name = create_active_table(
        dynamodb, f"long-keys-scan-{type_}", hash_key=("pk", type_), range_key=("sk", type_)
    )
    items = [
        {
            **make_key(type_, value(PARTITION_KEY_MAX, i), type_, value(SORT_KEY_MAX, j)),
            "n": {"N": str(i * SCAN_SORT_KEYS + j)},
        }
        for i in range(SCAN_PARTITION_KEYS)
        for j in range(SCAN_SORT_KEYS)
    ]
    fill(dynamodb, name, items)
    return name, {key_id(item) for item in items}


@pytest.mark.parametrize("limit", [1, 7])
def test_scan_pages_over_long_keys_visit_each_item_once(
    dynamodb: Any, scanned: tuple[str, set[tuple[Any, ...]]], limit: int
) -> None:
    name, expected = scanned
    read = list(pages(dynamodb.scan, TableName=name, Limit=limit))
    check_pages(read, limit, ("pk", "sk"))
    assert all(page["ScannedCount"] <= limit for page in read)
    exactly_once([key_id(item) for page in read for item in page["Items"]], expected)


def test_parallel_scan_over_long_keys_visits_each_item_once(
    dynamodb: Any, scanned: tuple[str, set[tuple[Any, ...]]]
) -> None:
    name, expected = scanned
    found: list[tuple[Any, ...]] = []
    for segment in range(4):
        read = list(
            pages(dynamodb.scan, TableName=name, Segment=segment, TotalSegments=4, Limit=10)
        )
        check_pages(read, 10, ("pk", "sk"))
        found.extend(key_id(item) for page in read for item in page["Items"])
    exactly_once(found, expected)


# Concurrent writers ------------------------------------------------------------------------------


def concurrent_item(writer: int, seq: int) -> dict[str, Any]:
    """Write `seq` of writer `writer`: short and max-length keys in turn, in all four mixes."""
    shape = seq % 4
    long_pk = shape in (1, 3)
    long_sk = shape in (1, 2)
    pk = text_of(PARTITION_KEY_MAX, tail=f"w{writer}") if long_pk else f"w{writer}"
    sk = text_of(SORT_KEY_MAX, tail=f"{seq:03d}", fill="𝄞") if long_sk else f"{seq:03d}"
    return {**make_key("S", pk, "S", sk), "writer": {"N": str(writer)}, "seq": {"N": str(seq)}}


def test_concurrent_writers_mixing_long_and_short_keys_all_succeed(
    cluster: LocalCluster,
    dynamodb: Any,
    dynamodb_for: Callable[[str], Any],
    table_name: Callable[[], str],
) -> None:
    name = create_active_table(dynamodb, table_name(), range_key=("sk", "S"))
    clients = [
        dynamodb_for(cluster.router_urls[w % len(cluster.router_urls)]) for w in range(WRITERS)
    ]
    start = threading.Barrier(WRITERS, timeout=CONCURRENT_TIMEOUT_S)

    def write_all(writer: int) -> list[tuple[int, int, tuple[int, str, str]]]:
        failures: list[tuple[int, int, tuple[int, str, str]]] = []
        start.wait()
        for seq in range(WRITES_PER_WRITER):
            try:
                clients[writer].put_item(TableName=name, Item=concurrent_item(writer, seq))
            except ClientError as error:
                failures.append((writer, seq, error_summary(dict(error.response))))
        return failures

    executor = ThreadPoolExecutor(max_workers=WRITERS)
    try:
        futures = [executor.submit(write_all, writer) for writer in range(WRITERS)]
        done, not_done = wait(futures, timeout=CONCURRENT_TIMEOUT_S)
        assert not not_done, f"{len(not_done)} writers still writing after {CONCURRENT_TIMEOUT_S} s"
        failures = [failure for future in done for failure in future.result()]
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
    assert failures == [], f"{len(failures)} of {WRITERS * WRITES_PER_WRITER} writes failed"

    items = [
        concurrent_item(writer, seq)
        for writer in range(WRITERS)
        for seq in range(WRITES_PER_WRITER)
    ]
    keys = [{"pk": item["pk"], "sk": item["sk"]} for item in items]
    assert sorted(batch_get(dynamodb, name, keys), key=repr) == sorted(items, key=repr)
    # One writer's long partition key holds its long- and short-sorted items, in order.
    long_pk = concurrent_item(0, 1)["pk"]
    reply = dynamodb.query(
        TableName=name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": long_pk},
        ConsistentRead=True,
    )
    expected = ordered("S", [item["sk"]["S"] for item in items if item["pk"] == long_pk])
    assert len(expected) == WRITES_PER_WRITER // 2
    assert [item["sk"]["S"] for item in reply["Items"]] == expected
