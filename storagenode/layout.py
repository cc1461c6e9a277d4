"""The byte layout of everything a storage node keeps: column families and their keys. Pure.

One RocksDB database per node holds these column families, so that an item, its change record and
its partition's metadata commit in one atomic, synced write batch:

- `items`: 16-byte table id ‖ storage key (`core.keys.KeyShape.storage_key`) -> the item's size
  (4 bytes, big-endian, as `core.size` measures it) ‖ orjson item. Storing the size lets a read
  count bytes and capacity without measuring the item again (`item_size_of`).
  Because a storage key starts with the partition key's hash and is order-preserving, a partition
  is a contiguous key range and a Query is one iterator range. RocksDB bounds no key's length, so
  every key DynamoDB allows (2048 + 1024 bytes, and index keys that append the table key) fits.
- `change_log`: 16-byte table id ‖ 1-byte length ‖ partition id ‖ 8-byte big-endian seq -> orjson
  `{seq, kind, keys, old, new, by_service}` (an END record also has `children`). The table id and
  the length prefix keep one partition's records contiguous and apart from any other's, whatever
  its id.
- `checkpoints`: the change-log prefix (table id ‖ length ‖ partition id) ‖ consumer name -> orjson
  `{table_id, partition_id, consumer, seq}`: each registered consumer of a partition's change feed
  and the seq it has passed (`changefeed.py`).
- `retired_logs`: the change-log prefix -> orjson `{table_id, partition_id, first_seq, end_seq,
  children}`: the log of a retired partition, kept (END record last) until every registered
  consumer has read to its end.
- `partitions`: 16-byte table id ‖ partition id -> orjson partition metadata (`partition.py`).
- `index_sources`: a global index partition's change-log prefix (index id ‖ length ‖ partition id)
  ‖ source partition id -> the 8-byte seq of the last change of that base partition applied to
  this index partition, written in the same batch as the entries it applied (`index_apply`), so a
  replayed change is recognised and skipped; then the 8-byte highest GSI replicator lease epoch
  seen from that source, which fences a replicator that lost its lease (`core.gsi_leases`).
- `ttl_index`: 16-byte table id ‖ 8-byte big-endian expiry second ‖ storage key -> empty: the
  expiry index of a table's items on this node while its TTL is enabled (`core.ttl`,
  `expiry.py`), so a sweep walks the expired entries in order and nothing else. It is keyed by
  table rather than partition so that a split, which leaves the items where they are, leaves
  their entries valid too; each entry belongs to the partition whose range holds its key.
- `index_entries`: 16-byte table id ‖ 1-byte length ‖ index name ‖ entry storage key (the
  index's `core.indexes.entry_shape`: partition key, index sort key, table sort key for a local
  index) -> the entry's size ‖ orjson entry, as in `items`. An entry key starts with the same
  hash and partition key as its item's, so a partition's entries are the same key range under
  the index's prefix, and a Query on the index is one iterator range.
- `item_collections`: 16-byte table id ‖ the storage key of a partition key value alone ->
  8-byte big-endian size of that item collection (its items plus its local index entries,
  `core.indexes.collection_delta`); kept for tables with local indexes only.
- `transactions`: transaction records, item locks and each node's part of an attempt
  (`storagenode/transactions.py`).

- `raft_log`: Raft group prefix (2-byte big-endian length ‖ group id) ‖ 8-byte big-endian index ->
  the entry: 8-byte term ‖ 1-byte kind ‖ its command (a partition's share of a write group's
  effect, `replication.encode_effect`; for a membership entry, orjson `[voters, learners]`).
  One group's entries are contiguous and in index order (`storagenode/raft_storage.py`).
- `raft_state`: Raft group prefix ‖ one tag byte -> the group's hard state (`h`: term, vote,
  commit), its snapshot (`s`: index, term, membership, the application's data), the point its log
  is compacted to (`t`: index, term), the index its state machine has applied (`a`) and the last
  membership entry it applied (`m`: index, membership).

The cluster catalog is no family of its own: it is a system table (`core.catalog`), stored in
`items` like any other table, on the node that holds its partition.
- the default family: `format` -> the data directory's format version (`FORMAT_VERSION`).
"""

from __future__ import annotations

from enum import StrEnum

from core.errors import ValidationError

TABLE_ID_BYTES = 16
SEQ_BYTES = 8
ITEM_SIZE_PREFIX_BYTES = 4  # Items are at most 400 KB.
PARTITION_ID_BYTES_MAX = 255  # The change-log key gives a partition id's length one byte.
CONSUMER_NAME_BYTES_MAX = 255  # A change-feed consumer's name, as it ends a checkpoint key.
INDEX_NAME_BYTES_MAX = 255  # Index names are ASCII, 3 to 255 characters.
COLLECTION_SIZE_BYTES = 8
FORMAT_KEY = b"format"
# 1: LMDB, keys bounded at 511 bytes (the first stage). 2: RocksDB column families, this layout.
FORMAT_VERSION = 2


class Family(StrEnum):
    """The column families of a node's database, named as RocksDB stores them."""

    ITEMS = "items"
    CHANGE_LOG = "change_log"
    PARTITIONS = "partitions"
    CHECKPOINTS = "checkpoints"
    RETIRED_LOGS = "retired_logs"
    INDEX_SOURCES = "index_sources"
    TTL_INDEX = "ttl_index"
    INDEX_ENTRIES = "index_entries"
    ITEM_COLLECTIONS = "item_collections"
    TRANSACTIONS = "transactions"
    RAFT_LOG = "raft_log"
    RAFT_STATE = "raft_state"


RAFT_GROUP_BYTES_MAX = 0xFFFF  # A group id's length takes two bytes in its keys.
RAFT_INDEX_BYTES = 8


def raft_group_prefix(group: str) -> bytes:
    """The bytes that start every `raft_log` and `raft_state` key of one Raft group. The length
    comes first so that no group's keys fall between another's, whatever the ids."""
    encoded = group.encode()
    if not encoded or len(encoded) > RAFT_GROUP_BYTES_MAX:
        raise ValueError(f"A Raft group id is 1 to {RAFT_GROUP_BYTES_MAX} bytes: {group!r}")
    return len(encoded).to_bytes(2, "big") + encoded


def raft_group_of(key: bytes) -> str:
    """The group id that starts a `raft_log` or `raft_state` key."""
    length = int.from_bytes(key[:2], "big")
    return key[2 : 2 + length].decode()


def table_prefix(table_id: str) -> bytes:
    """The 16 bytes that start every items key of a table (its id is 32 hex characters)."""
    try:
        prefix = bytes.fromhex(table_id)
    except (TypeError, ValueError):
        prefix = b""
    if len(prefix) != TABLE_ID_BYTES:
        raise ValidationError(f"A table id is {2 * TABLE_ID_BYTES} hex characters: {table_id!r}")
    return prefix


def change_log_prefix(table_id: str, partition_id: str) -> bytes:
    """The bytes before the seq in every change-log key of one partition."""
    encoded = partition_id.encode()
    if not encoded or len(encoded) > PARTITION_ID_BYTES_MAX:
        raise ValidationError(f"A partition id is 1 to {PARTITION_ID_BYTES_MAX} bytes")
    return table_prefix(table_id) + bytes([len(encoded)]) + encoded


def index_prefix(table_id: str, index_name: str) -> bytes:
    """The bytes before the entry storage key in every `index_entries` key of one index."""
    encoded = index_name.encode()
    assert 0 < len(encoded) <= INDEX_NAME_BYTES_MAX, "index names are 3 to 255 characters"
    return table_prefix(table_id) + bytes([len(encoded)]) + encoded


def encode_collection_size(size_bytes: int) -> bytes:
    return size_bytes.to_bytes(COLLECTION_SIZE_BYTES, "big")


def collection_size_of(value: bytes | None) -> int:
    return 0 if value is None else int.from_bytes(value, "big")


def encode_item(item_json: bytes, size_bytes: int) -> bytes:
    """An `items` value: the item's DynamoDB size, then its JSON."""
    return size_bytes.to_bytes(ITEM_SIZE_PREFIX_BYTES, "big") + item_json


def item_size_of(value: bytes) -> int:
    """The DynamoDB size of the item an `items` value holds, read without decoding it."""
    return int.from_bytes(value[:ITEM_SIZE_PREFIX_BYTES], "big")


def item_json_of(value: bytes) -> memoryview:
    """The JSON of the item an `items` value holds (a view: nothing is copied)."""
    return memoryview(value)[ITEM_SIZE_PREFIX_BYTES:]


def seq_bytes(seq: int) -> bytes:
    """A change-log seq as the 8 big-endian bytes that end its key, so keys sort by seq."""
    return seq.to_bytes(SEQ_BYTES, "big")


EXPIRY_SECONDS_BYTES = 8


def ttl_index_key(table_id_prefix: bytes, seconds: int, storage_key: bytes) -> bytes:
    """An expiry-index key: the table's 16 bytes, the expiry second, the item's storage key."""
    return table_id_prefix + seconds.to_bytes(EXPIRY_SECONDS_BYTES, "big") + storage_key


def ttl_index_entry(key: bytes) -> tuple[int, bytes]:
    """(expiry second, storage key) of an expiry-index key."""
    seconds_end = TABLE_ID_BYTES + EXPIRY_SECONDS_BYTES
    return int.from_bytes(key[TABLE_ID_BYTES:seconds_end], "big"), key[seconds_end:]


def partition_meta_key(table_id: str, partition_id: str) -> bytes:
    return table_prefix(table_id) + partition_id.encode()


def partition_of_meta_key(key: bytes) -> tuple[str, str]:
    """(table id, partition id) of a `partitions` key."""
    return key[:TABLE_ID_BYTES].hex(), key[TABLE_ID_BYTES:].decode()


def partition_of_log_key(key: bytes) -> tuple[str, str]:
    """(table id, partition id) of a key that starts with a change-log prefix: a `change_log`,
    `checkpoints` or `retired_logs` key."""
    return split_log_key(key)[0]


def split_log_key(key: bytes) -> tuple[tuple[str, str], bytes]:
    """The partition a change-log-prefixed key names, and the bytes after its prefix (a seq,
    a consumer's name, nothing)."""
    length = key[TABLE_ID_BYTES]
    end = TABLE_ID_BYTES + 1 + length
    return (key[:TABLE_ID_BYTES].hex(), key[TABLE_ID_BYTES + 1 : end].decode()), key[end:]


def checkpoint_key(table_id: str, partition_id: str, consumer: str) -> bytes:
    """The key of one consumer's checkpoint on one partition's change feed."""
    encoded = consumer.encode()
    if not encoded or len(encoded) > CONSUMER_NAME_BYTES_MAX:
        raise ValidationError(
            f"A change-feed consumer's name is 1 to {CONSUMER_NAME_BYTES_MAX} bytes"
        )
    return change_log_prefix(table_id, partition_id) + encoded


def index_source_bytes(seq: int, lease_epoch: int) -> bytes:
    """The value under `index_source_key`: the source's last applied seq, then the highest GSI
    replicator lease epoch seen from that source (`core.gsi_leases`), 8 big-endian bytes each."""
    return seq_bytes(seq) + lease_epoch.to_bytes(SEQ_BYTES, "big")


def index_source_of(value: bytes) -> tuple[int, int]:
    """(seq, lease epoch) from an `index_source_bytes` value; a value written before leases
    existed holds the seq alone (epoch 0)."""
    seq = int.from_bytes(value[:SEQ_BYTES], "big")
    return seq, int.from_bytes(value[SEQ_BYTES:], "big") if len(value) > SEQ_BYTES else 0


def index_source_key(index_id: str, partition_id: str, source_partition_id: str) -> bytes:
    """The key of the last applied seq of one base partition on one global index partition."""
    encoded = source_partition_id.encode()
    if not encoded or len(encoded) > PARTITION_ID_BYTES_MAX:
        raise ValidationError(f"A partition id is 1 to {PARTITION_ID_BYTES_MAX} bytes")
    return change_log_prefix(index_id, partition_id) + encoded
