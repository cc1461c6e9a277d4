"""Every bound dynalab enforces, in one place, named with its unit last.

Each constant cites where its value comes from (the DynamoDB Developer Guide's "Service, account,
and table quotas" page unless said otherwise). Relations between limits are asserted at import, so
an inconsistent edit fails loudly instead of producing a subtly wrong cluster.
"""

from decimal import Decimal

KIB = 1024
MIB = 1024 * KIB

# Items and attributes.
ITEM_SIZE_BYTES_MAX = 400 * KIB  # "The maximum item size in DynamoDB is 400 KB."
PARTITION_KEY_BYTES_MAX = 2048  # Partition key value: 2048 bytes.
SORT_KEY_BYTES_MAX = 1024  # Sort key value: 1024 bytes.
# "Attribute names must be at least one character long and less than 64 KB in size" (key attributes
# and projected attributes: at most 255).
ATTRIBUTE_NAME_BYTES_MAX = 64 * KIB - 1
KEY_ATTRIBUTE_NAME_BYTES_MAX = 255  # Names of key attributes, secondary index keys and projections.
NESTING_DEPTH_MAX = 32  # "DynamoDB supports nested attributes up to 32 levels deep."

# Numbers: "up to 38 digits of precision ... positive 1E-130 to
# 9.9999999999999999999999999999999999999E+125".
NUMBER_PRECISION_DIGITS_MAX = 38
NUMBER_MAGNITUDE_MIN = Decimal("1E-130")
NUMBER_MAGNITUDE_MAX = Decimal("9.9999999999999999999999999999999999999E+125")

# Item size accounting (Developer Guide, "Item sizes and formats").
SIZE_OVERHEAD_BYTES_PER_ELEMENT = 1  # Each List or Map element adds 1 byte.
SIZE_OVERHEAD_BYTES_PER_CONTAINER = 3  # Each List or Map adds 3 bytes regardless of its contents.
SIZE_BYTES_NULL_OR_BOOL = 1  # Null and Boolean attribute values are 1 byte.

# Expressions.
EXPRESSION_BYTES_MAX = 4 * KIB  # Any one expression string: 4 KB.
EXPRESSION_IN_OPERANDS_MAX = 100  # "The IN comparator ... up to 100 values."
EXPRESSION_OPERATORS_MAX = 300  # Operators or functions in one expression.
EXPRESSION_ATTRIBUTE_NAME_BYTES_MAX = 255  # A single #name placeholder is at most 255 bytes.
# A list index in a document path is a 32-bit signed integer: DynamoDB refuses a larger one as "not
# within the allowable range" (DynamoDB Local's INVALID_LIST_INDEX, checked against int's maximum).
DOCUMENT_PATH_LIST_INDEX_MAX = 2**31 - 1
EXPRESSION_PLACEHOLDERS_BYTES_MAX = 2 * MIB  # ExpressionAttributeNames+Values together.

# Reads, writes and pages.
QUERY_PAGE_BYTES_MAX = 1 * MIB  # Query and Scan read at most 1 MB before filtering.
BATCH_GET_ITEMS_MAX = 100  # BatchGetItem: up to 100 items.
BATCH_GET_BYTES_MAX = 16 * MIB  # BatchGetItem: up to 16 MB returned.
BATCH_WRITE_ITEMS_MAX = 25  # BatchWriteItem: up to 25 put or delete requests.
BATCH_WRITE_BYTES_MAX = 16 * MIB  # BatchWriteItem: up to 16 MB total.
TRANSACT_ITEMS_MAX = 100  # TransactWriteItems / TransactGetItems: up to 100 actions.
TRANSACT_BYTES_MAX = 4 * MIB  # TransactWriteItems: 4 MB in total.
# ClientRequestToken: a finished transaction's token is remembered this long (API Reference).
TRANSACTION_IDEMPOTENCY_SECONDS = 600.0
SCAN_TOTAL_SEGMENTS_MAX = 1_000_000  # Scan TotalSegments: 1 to 1,000,000.
LIST_TABLES_LIMIT_MAX = 100  # ListTables Limit: 1 to 100.
ATTRIBUTES_TO_GET_NAMES_MAX = 255  # AttributesToGet: 1 to 255 names (AttributeNameList).

# Tables and indexes.
TABLE_NAME_CHARS_MIN = 3
TABLE_NAME_CHARS_MAX = 255
# A TableName may be a table ARN instead: the service model's TableArn shape, 1 to 1024 chars.
TABLE_ARN_CHARS_MAX = 1024
GSI_PER_TABLE_MAX = 20
LSI_PER_TABLE_MAX = 5
INDEX_PROJECTED_NON_KEY_ATTRIBUTES_MAX = 100  # INCLUDE attributes across all indexes of a table.
INDEX_NON_KEY_ATTRIBUTES_PER_INDEX_MAX = 20  # NonKeyAttributes of one index (API Reference).
# A global index's key may name up to four partition key (HASH) and up to four sort key (RANGE)
# attributes (Developer Guide, "Multi-attribute keys", November 2025); a table's key and a local
# index's keep one of each.
GSI_PARTITION_KEY_ATTRIBUTES_MAX = 4
GSI_SORT_KEY_ATTRIBUTES_MAX = 4
# "Index item size = base primary key + index key + projected attributes + 100 bytes of overhead".
INDEX_ENTRY_OVERHEAD_BYTES = 100

# Capacity and partitions.
READ_UNIT_BYTES = 4 * KIB  # One read capacity unit covers an item up to 4 KB (strongly consistent).
WRITE_UNIT_BYTES = 1 * KIB  # One write capacity unit covers an item up to 1 KB.
PARTITION_RCU_MAX = 3000  # Each partition supports at most 3,000 read units per second.
PARTITION_WCU_MAX = 1000  # Each partition supports at most 1,000 write units per second.
BURST_SECONDS_MAX = 300  # "DynamoDB retains up to 300 seconds of unused read and write capacity."
# An on-demand partition serves a moment's burst past its per-second ceiling and no more: it holds
# this many seconds of the ceiling (3,000 write units, 9,000 read units) and refills at the
# ceiling, so one hot key is held to 1,000 WCU / 3,000 RCU sustained. dynalab's value, chosen from
# what DynamoDB serves: a new on-demand table takes 30 quick 100 KB puts (3,000 units) to one key,
# and 50 of them spread over its keys, well within a second (issue 30); AWS publishes no window.
ON_DEMAND_PARTITION_BURST_SECONDS = 3
ON_DEMAND_INITIAL_PARTITIONS = 4  # New on-demand tables serve 4,000 WCU / 12,000 RCU: 4 partitions.
PROVISIONED_UNITS_MIN = 1  # ReadCapacityUnits and WriteCapacityUnits are at least 1.
PROVISIONED_UNITS_PER_TABLE_MAX = 40_000  # Default per-table quota for RCU and for WCU.
PROVISIONED_UNITS_PER_ACCOUNT_MAX = 80_000  # Default per-account (Region) quota for RCU and WCU.
PARTITION_SPLIT_BYTES_DEFAULT = 10 * KIB * MIB  # A partition splits past 10 GB.
# How often a node looks for partitions past their split size (dynalab's choice: a split is a
# background job, and a second of lag on a 10 GB bound is nothing).
SPLIT_CHECK_SECONDS = 1.0
# A split's install is refused while a write to the parent is in the same commit group; it is
# retried this many times, this long apart (dynalab's choice: groups are milliseconds long).
SPLIT_INSTALL_ATTEMPTS_MAX = 50
SPLIT_INSTALL_BACKOFF_SECONDS = 0.01
# A split's plan reads the writes committed since its pin after at most this many rows it walks
# (tens of milliseconds), long before the change log's retention (32 MiB) can trim them
# (dynalab's choice).
SPLIT_FOLLOW_ROWS_MAX = 10_000
# The plan reads values only for their size prefix, holding the GIL while the store reads them:
# after each this many bytes it lets the node's event loop run, so requests wait for at most a
# mebibyte's read (dynalab's choice; see bench/split.py for p99 during a split).
SPLIT_WALK_YIELD_BYTES = MIB
# Split for heat (dynalab's choices; DynamoDB documents the behaviour, not its parameters): a
# partition throttled in at least this share of the checks of a window this long splits, unless
# one key carries at least HOT_KEY_LOAD_SHARE_MAX of its sampled load. The samples are the keys
# of its newest change-log records (writes) or of its newest throttled reads, at most this many.
SPLIT_HEAT_WINDOW_SECONDS = 10.0
HEAT_THROTTLED_SHARE_MIN = 0.8
HOT_KEY_LOAD_SHARE_MAX = 0.8
HEAT_SAMPLE_RECORDS_MAX = 1000
# How long the admin endpoint waits for a node to split a partition: planning reads the partition's
# keys, so a large one takes a while (dynalab's choice).
SPLIT_CALL_SECONDS_MAX = 120.0
ITEM_COLLECTION_BYTES_MAX = 10 * KIB * MIB  # An item collection of a table with an LSI: 10 GB.
# Moving a partition to another node (`storagenode/move.py`; dynalab's choices). The copy goes in
# pages of at most this many bytes or rows (items are at most 400 KB, so a page stays well under
# gRPC's 4 MiB message bound); the catch-up from the change log repeats while more than the lag
# bound of records is left, at most the rounds bound, then the source fences and drains the rest
# (clients are refused for that drain, the catalog switch and the target's activation: about
# four calls). The fence waits for transactions in flight on the node (locks resolve within
# about 5 s) for at most the attempts bound, this long apart, else the move rolls back.
MOVE_PAGE_BYTES_MAX = MIB
MOVE_PAGE_ROWS_MAX = 1_000
MOVE_FENCE_LAG_RECORDS_MAX = 100
MOVE_CATCH_UP_ROUNDS_MAX = 20
MOVE_FENCE_ATTEMPTS_MAX = 60
MOVE_FENCE_BACKOFF_SECONDS = 0.1
# How often a move whose catalog switch failed or went unanswered reads the catalog back before
# its call gives up; its record stays, and the source's periodic check decides it later.
MOVE_SWITCH_READS_MAX = 3
# How often a node settles moves left half-done (a restart, a failed step) and looks at the
# copies moved to it; an INCOMING copy its source has not touched for this long, and that the
# catalog does not name, is dropped (its source rolled back without reaching it).
MOVE_CHECK_SECONDS = 1.0
MOVE_ABANDONED_SECONDS = 60.0
# A router that asked for a split child's move and was refused (its target down, transactions in
# flight) asks for that child again only after this long, and for the others meanwhile.
MOVE_RETRY_SECONDS = 10.0
# How long the admin endpoint waits for a node to move a partition (a copy of its whole data).
MOVE_CALL_SECONDS_MAX = 300.0
# A replicated partition's replica move (`core.machines.replica_move`): its learner is promoted
# once its log matches the leader's to within this many entries; while it catches up (or a step
# is refused for now: a change pending, an election) its driver looks again after a pause from
# _MIN doubling to _MAX.
REPLICA_MOVE_PROMOTE_LAG_ENTRIES = 16
REPLICA_MOVE_PAUSE_SECONDS_MIN = 0.05
REPLICA_MOVE_PAUSE_SECONDS_MAX = 1.0
# The longest a process held at a machine's crash point for a fault test (DYNALAB_HOLD_AT,
# `rpc/machines.py`) waits to be let go.
MACHINE_HOLD_SECONDS_MAX = 60.0

# Free disk space a node keeps: below it, writes that add data are refused (deletes, and what lets
# the change log be trimmed, go on), so RocksDB never meets a full disk, after which its log writer
# refuses every write until the database is reopened. A quarter of it bounds the node's memory
# tables and live write-ahead log, so that a restart's recovery flush always has room. Settable
# with DYNALAB_DISK_RESERVE_BYTES for experiments on small disks.
DISK_RESERVE_BYTES = 256 * MIB
# Below this share of the reserve, deletes too are refused: they also append to the log. Only
# DropTable's partition drops go on.
DISK_DELETE_RESERVE_SHARE_MIN = 0.25

# Placement (dynalab's own choice, not a DynamoDB quota): virtual nodes per storage node on the
# consistent-hash ring. More points spread partitions more evenly; 128 keeps each node's share of
# the ring within 20% of the mean for clusters of up to 20 nodes, and the ring stays small.
RING_VNODES_PER_NODE = 128
# Replicas of a table's partitions when a cluster replicates them (DynamoDB keeps three, in three
# availability zones); a cluster of fewer nodes keeps one per node.
REPLICATION_FACTOR_DEFAULT = 1
REPLICATION_FACTOR_MAX = 5
# A router that finds no leader of a replicated partition (an election under way) pauses this long
# before asking the next replica, doubling up to the most; within the request's deadline. The most
# is what a write waits at worst past the election: at 0.4 s it added up to 0.4 s to failover
# (docs/benchmarks.md); a round of asking costs a refusal from each live replica.
REPLICA_RETRY_PAUSE_SECONDS_MIN = 0.05
REPLICA_RETRY_PAUSE_SECONDS_MAX = 0.1
# A router reads a partition it wrote to this recently from its leader even when the read may be
# eventually consistent: a follower applies a write about a round trip after the leader
# acknowledged it, and a client reading its own write at once would often be faster.
READ_YOUR_WRITES_SECONDS = 1.0

# Time To Live: items whose expiry is more than five years in the past are not deleted.
TTL_PAST_SECONDS_MAX = 5 * 365 * 24 * 3600
# UpdateTimeToLive: "It can take up to one hour for the change to fully process. Any additional
# UpdateTimeToLive calls for the same table during this one hour duration result in a
# ValidationException." (API Reference). Routers take DYNALAB_TTL_CHANGE_INTERVAL_SECONDS instead,
# for experiments and tests.
TTL_CHANGE_INTERVAL_SECONDS = 3600.0

assert SORT_KEY_BYTES_MAX < PARTITION_KEY_BYTES_MAX < ITEM_SIZE_BYTES_MAX
assert QUERY_PAGE_BYTES_MAX > ITEM_SIZE_BYTES_MAX, "a page must hold at least one whole item"
assert BATCH_WRITE_ITEMS_MAX * ITEM_SIZE_BYTES_MAX <= BATCH_WRITE_BYTES_MAX
assert PARTITION_RCU_MAX * READ_UNIT_BYTES >= PARTITION_WCU_MAX * WRITE_UNIT_BYTES
assert TABLE_NAME_CHARS_MIN <= TABLE_NAME_CHARS_MAX
assert TABLE_NAME_CHARS_MAX < TABLE_ARN_CHARS_MAX

# Storage node and node RPC: dynalab's own bounds, not DynamoDB quotas.
GIB = 1024 * MIB
# The change log keeps at most this many records per partition; a consumer that falls further behind
# must backfill again (DESIGN.md, "Storage on a node").
CHANGE_LOG_RECORDS_MAX = 1_000_000
# ...and at most this many bytes of records (each holds the item's old and new images, so one 100 KB
# item overwritten 275 times kept 56 MB of log for 100 KB of data under the record bound alone).
# 32 MiB is at least 16 s of a partition written at its 1,000 WCU cap (at most 2 MB/s of images);
# a consumer further behind re-snapshots, as past the record bound. The newest record always stays.
CHANGE_LOG_BYTES_MAX = 32 * MIB
# Consumers registered on one partition's change feed: each is read on every trim and holds the log.
CHANGE_FEED_CONSUMERS_PER_PARTITION_MAX = 64
# Records in one batch of a feed: enough to amortise a stream message, few enough that one read
# stays in the millisecond range off the event loop.
CHANGE_FEED_BATCH_RECORDS_MAX = 1000
# A feed batch is cut once its encoded records pass this, so a message holds at most this plus one
# record (two 400 KB images), far below the RPC message bound.
CHANGE_FEED_BATCH_BYTES_TARGET = 4 * MIB
# A node sends an empty batch on an idle feed this often, so that a follower tells a live node from
# a silent failure; a follower gives up on a stream after CHANGE_FEED_IDLE_SECONDS_MAX without one.
CHANGE_FEED_HEARTBEAT_SECONDS = 2.0
CHANGE_FEED_IDLE_SECONDS_MAX = 4 * CHANGE_FEED_HEARTBEAT_SECONDS
# Tables whose global indexes a node keeps parsed from write payloads (`storagenode.partition`
# GlobalIndexCache, a few hundred bytes each); past it the cache starts empty again.
NODE_INDEX_CACHE_TABLES_MAX = 4096
# Writes applied in one group-commit transaction: large enough to amortise an fsync over every write
# that arrives while the previous one syncs, small enough that one transaction stays short.
WRITE_BATCH_OPS_MAX = 1024
# Writes queued behind the committing transaction before the node refuses new ones as unavailable.
WRITE_QUEUE_OPS_MAX = 16 * WRITE_BATCH_OPS_MAX
# Bounds on how long a node lets one group commit run before failing its writes as unavailable.
WRITE_COMMIT_SECONDS_MAX = 30.0
# gRPC messages between routers and nodes; each batch is cut once it passes the target, so a message
# holds at most the target plus one request or reply.
RPC_MESSAGE_BYTES_MAX = 64 * MIB
RPC_BATCH_BYTES_TARGET = 4 * MIB
# A broken node stream is reopened no sooner than this backoff, doubling per failure up to the max.
# The max is short: a call meeting the backoff waits for the next attempt, so it bounds both what a
# request to a dead node costs its client and how soon a restarted node is reached (a refused
# connection on a local network costs the router next to nothing, four times a second).
RPC_RECONNECT_BACKOFF_SECONDS_MIN = 0.05
RPC_RECONNECT_BACKOFF_SECONDS_MAX = 0.25
# HTTP/2 keepalive on node streams: a peer that stops answering pings is declared dead, failing its
# in-flight calls, within ping interval plus timeout.
RPC_KEEPALIVE_SECONDS = 10.0
RPC_KEEPALIVE_TIMEOUT_SECONDS = 5.0
# One message write on a node stream; a peer that stops reading for this long (its connection still
# alive, so keepalive cannot tell) has its stream broken instead of stalling every call behind it.
RPC_SEND_SECONDS_MAX = 10.0
# A stopping node finishes in-flight requests for at most this long before cutting them off.
NODE_SHUTDOWN_GRACE_SECONDS = 5.0

assert WRITE_QUEUE_OPS_MAX >= WRITE_BATCH_OPS_MAX
# The byte bound holds many records of the largest items (two 400 KB images each).
assert CHANGE_LOG_BYTES_MAX >= 32 * 2 * ITEM_SIZE_BYTES_MAX
assert (
    RPC_BATCH_BYTES_TARGET + 4 * (QUERY_PAGE_BYTES_MAX + ITEM_SIZE_BYTES_MAX)
    < RPC_MESSAGE_BYTES_MAX
)
assert RPC_RECONNECT_BACKOFF_SECONDS_MIN < RPC_RECONNECT_BACKOFF_SECONDS_MAX

# The TTL sweeper (dynalab's own bounds; DynamoDB promises deletion "within a few days"). Each node
# looks for expired items every DYNALAB_TTL_SWEEP_SECONDS (`dynalab up --ttl-sweep-seconds`),
# within these bounds.
TTL_SWEEP_SECONDS_DEFAULT = 1.0
TTL_SWEEP_SECONDS_MIN = 0.01
TTL_SWEEP_SECONDS_MAX = 3600.0
# Items one sweep write deletes: about 6 ms of Python on the writer thread (90 us a delete,
# measured), so the client writes committed in the same group wait little longer than their fsync.
TTL_SWEEP_BATCH_ITEMS_MAX = 64
# The sweeper is busy at most this fraction of the time while it deletes a backlog: after each
# sweep write it pauses as long as that write took, leaving the writer thread, and the GIL the
# event loop needs, to client requests. Measured (bench/ttl.py, 20,000 items expiring together,
# two runs each): the foreground p99 during the sweep stayed within the noise of the p99 before
# it both at 0.5 with 64 items a write and at 0.25 with 32, and 0.5 swept twice as fast.
TTL_SWEEP_BUSY_FRACTION_MAX = 0.5
# Items one step of indexing a table that already held items when TTL was enabled reads: the
# step runs as one group-commit write, resumes from a cursor in the partition's metadata, and
# stays about as short as a sweep write.
TTL_BACKFILL_BATCH_ITEMS_MAX = 128

assert TTL_SWEEP_SECONDS_MIN <= TTL_SWEEP_SECONDS_DEFAULT <= TTL_SWEEP_SECONDS_MAX
assert 0 < TTL_SWEEP_BUSY_FRACTION_MAX <= 1
assert TTL_SWEEP_BATCH_ITEMS_MAX <= WRITE_BATCH_OPS_MAX

# Tables and the router: DynamoDB quotas first, then dynalab's own bounds.
TABLES_PER_REGION_MAX = 2500  # Default quota: 2,500 tables per account per Region.
# CreateTable rejects capacity units above this as "out of bounds" before any quota applies.
PROVISIONED_UNITS_VALUE_MAX = 1_000_000_000_000
# DynamoDB answers 413 to an HTTP request body over 16 MB (BatchWriteItem's own limit is 16 MB).
HTTP_REQUEST_BYTES_MAX = 16 * MIB
# DynamoDB compresses a response body of at least 4 KB for a client that accepts gzip or deflate,
# and sends smaller ones as they are (what its endpoints answer; ScyllaDB's tests pin it).
HTTP_RESPONSE_COMPRESSION_BYTES_MIN = 4 * KIB
# How long a browser may cache the answer to a CORS preflight (Access-Control-Max-Age): the two
# days DynamoDB's endpoints answer.
CORS_PREFLIGHT_MAX_AGE_SECONDS = 172_800
# Deadline of one router-to-node data-plane call. The node refuses a request it would start past
# it; a read not answered by then fails as ServiceUnavailable, a write as OutcomeUnknown.
NODE_CALL_SECONDS_MAX = 10.0
# How long past a call's deadline its caller still waits for the answer: the node checks the
# deadline on its own clock just before it plans the write, so the caller allows for clocks that
# disagree by this much (NTP keeps hosts within milliseconds) and for a commit begun in time.
RPC_DEADLINE_GRACE_SECONDS = 1.0
# Deadline of one catalog or partition-lifecycle call (a catalog row, create_partition, ...).
CONTROL_CALL_SECONDS_MAX = 10.0
# DescribeTable waits this long for the nodes' item counts and sizes before answering without them.
TABLE_STATS_SECONDS_MAX = 2.0
# A request refused for a stale epoch is retried on a refreshed catalog at most this many times,
# with a backoff doubling from the minimum while the catalog has not caught up (a split committing,
# or a move's fence: its drain, catalog switch and activation, a few calls): about 1.3 s in all.
STALE_EPOCH_ATTEMPTS_MAX = 8
STALE_EPOCH_BACKOFF_SECONDS_MIN = 0.01
# Compare-and-set attempts of one catalog change before giving up as unavailable; a conflict is
# retried after a random pause up to the backoff, so racing routers do not collide in lockstep.
CATALOG_CAS_ATTEMPTS_MAX = 20
CATALOG_CAS_BACKOFF_SECONDS_MAX = 0.05
# No further compare-and-set attempt of one catalog change starts this long after the first
# (dynalab's choice): contention costs milliseconds, so this only cuts off a catalog node that
# answers each call just before its deadline; the caller gets ServiceUnavailable and retries.
CATALOG_CHANGE_SECONDS_MAX = 60.0
# Locating the catalog: rounds of reading every node's bootstrap record (and writing it where it
# is missing) before giving up as unavailable; a round that finds nodes disagreeing (two routers
# bootstrapping at once, one still correcting its own first writes) waits up to the backoff.
CATALOG_LOCATE_ATTEMPTS_MAX = 10
CATALOG_LOCATE_BACKOFF_SECONDS_MAX = 0.2
# No round read again after a disagreement starts this long after the first (dynalab's choice): a
# round calls each node, and ten rounds of calls running to their deadlines would take minutes.
CATALOG_LOCATE_SECONDS_MAX = 60.0
# Routers re-read the catalog this often, so tables created or deleted through another router
# appear and disappear within about this long even without a cache miss.
CATALOG_REFRESH_SECONDS = 1.0
# Every node other than the catalog's asks the catalog's node this often whether the catalog
# changed (one call), and copies it when it did (`storagenode.catalog_copy`): a router starting
# while the catalog's node is down learns the tables from a copy at most about this old.
CATALOG_COPY_SECONDS = 1.0
# A router reading the nodes' copies (the catalog's node not answering) waits this long for each,
# so a paused node costs the request this, not a whole node call's deadline.
CATALOG_COPY_READ_SECONDS_MAX = 2.0
# Every node compares the partitions it holds with where the catalog places them this often
# (`storagenode.placement`): replicas created or dropped without it while it was down are made
# or dropped within about this long of it coming back.
PLACEMENT_RECONCILE_SECONDS = 5.0
# A replicated partition held by a node and served by the catalog no longer (a split's parent
# whose split the node never applied: it was behind when the parent's group went) is retired
# there after this long, far past any split's install; its children are then copied to it.
PLACEMENT_RETIRE_GRACE_SECONDS = 30.0
# A node no other node has heard from for this long (its Raft keepalives, sent every tick) is
# lost: each replicated partition it held moves that replica to a node that is up, driven by
# the partition's leader (`rpc.placement.heals`). 0 turns healing off. A node's placement
# round starts at most HEAL_MOVES_PER_ROUND_MAX of these moves, so a lost node's replicas are
# copied a few at a time rather than all at once.
HEAL_SECONDS_DEFAULT = 60.0
HEAL_SECONDS_MAX = 7 * 24 * 3600.0
HEAL_MOVES_PER_ROUND_MAX = 4

# The GSI replicator (dynalab's own bounds). It re-reads the catalog this often to find tables with
# global indexes and their partitions; writes made meanwhile wait in the change logs, which hold
# them for the replicator's consumer from each partition's creation.
GSI_CATALOG_POLL_SECONDS = 0.5
# A follower whose feed or index writes failed (a node down, a stream cut) starts again from its
# checkpoint after a backoff growing from the min to the max; it never skips a change.
GSI_RETRY_BACKOFF_SECONDS_MIN = 0.05
GSI_RETRY_BACKOFF_SECONDS_MAX = 2.0
# One run of index_apply calls for one feed batch tries each call at most this many times before
# the follower starts again from its checkpoint (a replay applies nothing twice).
GSI_APPLY_ATTEMPTS_MAX = 5
# An index partition that refuses index_apply as stale was split (or the catalog names children
# its node has not installed yet, for milliseconds): the replicator re-reads the table's catalog
# row and routes the writes again, at most this many times per batch, with the backoff above,
# before the follower starts again from its checkpoint.
GSI_REROUTE_ATTEMPTS_MAX = 8
# Back-pressure: a base partition whose GSI replicator consumer is more than this many change
# records behind refuses the writes that would change one of its global indexes
# (ProvisionedThroughputExceededException, as DynamoDB throttles base writes for an index that
# cannot keep up) until the replicator catches up; writes that touch no index go on. Well below
# CHANGE_LOG_RECORDS_MAX, so a replicator held back never loses the log it must read. dynalab's
# own bound (DynamoDB publishes none); DYNALAB_GSI_LAG_RECORDS_MAX on a node for experiments.
GSI_LAG_RECORDS_MAX = 100_000
# The bytes of one page of a base partition an online index's backfill reads (the 1 MB page of a
# Scan): each page's entries go to the index partitions as one index_apply each.
# DYNALAB_GSI_BACKFILL_PAGE_BYTES on a replicator for experiments (small pages, a long copy).
GSI_BACKFILL_PAGE_BYTES = 1024 * 1024
# A replicator's lease on a source partition (`core.gsi_leases`) lasts this long from its last
# renewal; a crashed replicator's partitions are taken over within about this long. Renewed every
# catalog poll once half of it is gone, so it must be several polls long.
GSI_LEASE_SECONDS = 3.0
# A lease row whose key the catalog no longer has (a dropped table or index) and a replicator's
# member row are deleted once a replicator has seen them unchanged this long
# (`core.gsi_leases.collectable`): far longer than a catalog poll and a lease, so a live row is
# always rewritten within it. DYNALAB_GSI_LEASE_GC_GRACE_SECONDS on a replicator for tests.
GSI_LEASE_GC_GRACE_SECONDS = 60.0
# Feed batches a follower reads ahead while it applies the previous run; the batches waiting when a
# run starts join it (one index_apply per index partition for all of them), so a run holds at most
# this plus one batch, each cut near CHANGE_FEED_BATCH_BYTES_TARGET: within one RPC message.
GSI_FEED_BATCHES_QUEUED_MAX = 8
# A follower checkpoints its source's feed at most once per this (after the previous write has
# answered): the index partitions store each source's seq with its entries, so the checkpoint only
# lets the log be trimmed and tells a restarted follower where to start (it replays at most this
# much, which the index partitions skip). A busy follower would otherwise write one per round trip.
GSI_CHECKPOINT_INTERVAL_SECONDS = 0.1
# Back-pressure from an index's own capacity (`core.index_pressure`): an index partition that
# refuses index_apply for throughput is retried at a pause doubling from the backoff's min to this
# cap, within the deadline below (then the follower starts again from its checkpoint); while it
# refuses, the replicator notes it on the base partition's node, which refuses the base writes
# that would change that partition. A note holds this long unless renewed (the replicator renews
# it at refused attempts, so a dead replicator holds writes back at most this long), and is
# renewed only once it is the renewal age old, so a throttled index costs a few notes a second.
# dynalab's own bounds (DynamoDB publishes none).
GSI_THROTTLED_APPLY_PAUSE_SECONDS_MAX = 0.25
GSI_THROTTLED_APPLY_SECONDS_MAX = 30.0
GSI_THROTTLED_APPLY_ATTEMPTS_MAX = 100
GSI_INDEX_PRESSURE_SECONDS = 1.0
GSI_INDEX_PRESSURE_RENEW_SECONDS = 0.5
assert GSI_RETRY_BACKOFF_SECONDS_MIN < GSI_RETRY_BACKOFF_SECONDS_MAX
assert GSI_RETRY_BACKOFF_SECONDS_MIN <= GSI_THROTTLED_APPLY_PAUSE_SECONDS_MAX
# A note is renewed at the first refused attempt past its renewal age, before it expires.
assert GSI_INDEX_PRESSURE_RENEW_SECONDS + GSI_THROTTLED_APPLY_PAUSE_SECONDS_MAX < (
    GSI_INDEX_PRESSURE_SECONDS
)
assert GSI_LEASE_SECONDS >= 4 * GSI_CATALOG_POLL_SECONDS
assert GSI_LEASE_GC_GRACE_SECONDS >= 10 * GSI_LEASE_SECONDS
assert (GSI_FEED_BATCHES_QUEUED_MAX + 1) * (
    CHANGE_FEED_BATCH_BYTES_TARGET + 2 * ITEM_SIZE_BYTES_MAX
) < RPC_MESSAGE_BYTES_MAX
# The parts of many followers waiting for one index partition go as one index_apply, cut once
# their encoded changes pass this: a call holds at most this plus one run's projection.
GSI_INDEX_APPLY_BYTES_TARGET = 4 * MIB
assert (
    GSI_INDEX_APPLY_BYTES_TARGET
    + (GSI_FEED_BATCHES_QUEUED_MAX + 1) * (CHANGE_FEED_BATCH_BYTES_TARGET + 2 * ITEM_SIZE_BYTES_MAX)
    < RPC_MESSAGE_BYTES_MAX
)

# The dashboard (`/admin/cluster`, `/dashboard`, `dynalab status`; dynalab's own bounds). The router
# samples every node's token-bucket counters this often and keeps the samples of the last window:
# "the last few minutes" of consumed and allowed units, in a ring of a fixed number of samples.
DASHBOARD_SAMPLE_SECONDS = 2.0
DASHBOARD_WINDOW_SECONDS = 300.0
DASHBOARD_SAMPLES_MAX = int(DASHBOARD_WINDOW_SECONDS / DASHBOARD_SAMPLE_SECONDS) + 1
assert TABLE_STATS_SECONDS_MAX <= DASHBOARD_SAMPLE_SECONDS

# A stopping router finishes in-flight requests for at most this long before cutting them off.
ROUTER_SHUTDOWN_GRACE_SECONDS = 5.0
# A router's own resources (dynalab's bounds; see router/limits.py). Request bodies being read or
# handled hold at most this many bytes at once: four maximal requests; a request that does not fit
# waits up to the admission bound, its body unread in the socket, then gets 503 ServiceUnavailable.
ROUTER_BODY_BYTES_IN_FLIGHT_MAX = 4 * HTTP_REQUEST_BYTES_MAX
ROUTER_BODY_ADMISSION_SECONDS_MAX = 5.0
# A body must arrive within this long of its headers (16 MB at 280 KB/s) or its connection closes.
ROUTER_BODY_READ_SECONDS_MAX = 60.0
# A connection with no request in progress is closed after this long: an idle keep-alive, a silent
# new connection, or headers still incomplete (slowloris). SDKs reconnect for the next request.
ROUTER_IDLE_SECONDS_MAX = 60.0
# Open client connections at most, and never more than the descriptor limit less a reserve for the
# node channels, the event loop and logs (a router holds about 30 with three nodes). At the cap a
# new connection displaces the longest-idle one; with none idle it is answered 503 and closed.
ROUTER_CONNECTIONS_MAX = 10_000
ROUTER_RESERVED_DESCRIPTORS_MIN = 128

# Expected failures (a node down) are logged once per key per this interval (`rpc.ratelog`): a
# router with a node down for 90 s writes a few dozen lines, not a traceback per request. Keys are
# node addresses; the bound only guards against a caller that keys by something unbounded.
LOG_REPEAT_SECONDS_MIN = 10.0
LOG_REPEAT_KEYS_MAX = 1024

# Tags (API Reference, "Tag"; Developer Guide, "Tagging restrictions"): up to 50 user tags per
# table, keys of 1 to 128 characters and values of up to 256, unique per table and case-sensitive.
TAGS_PER_TABLE_MAX = 50
TAG_KEY_CHARS_MAX = 128
TAG_VALUE_CHARS_MAX = 256

# Every router looks at the catalog this often for a CreateTable or DeleteTable that a dead router
# left half done, and finishes one seen unchanged for the stall bound (router/tables.py,
# TableReconciler): a live router creates or deletes a table in well under a second.
TABLE_RECONCILE_SECONDS = 1.0
TABLE_TRANSITION_STALL_SECONDS = 3.0
# A table whose WarmThroughput was raised has its partitions split by the routers' reconcilers, at
# most this many per table a round (dynalab's bound: a split of a small partition takes tens of
# milliseconds, so a pre-warm to the per-table quota, 40 partitions, takes a few rounds).
PREWARM_SPLITS_PER_ROUND_MAX = 8
# A CreateTable still CREATING this long after it began can no longer finish (its router died
# half-way), so DeleteTable may remove it; DynamoDB refuses to delete a table while it is created.
TABLE_CREATION_SECONDS_MAX = 600.0

assert BATCH_WRITE_BYTES_MAX <= HTTP_REQUEST_BYTES_MAX
# One maximal request always fits in the router's in-flight bound.
assert HTTP_REQUEST_BYTES_MAX <= ROUTER_BODY_BYTES_IN_FLIGHT_MAX
# A maximal compressed request and the 16 MB it may inflate to fit in it too.
assert 2 * HTTP_REQUEST_BYTES_MAX <= ROUTER_BODY_BYTES_IN_FLIGHT_MAX
# Creation is bounded by one round of create_partition calls and one catalog change after it (a
# change's last attempt may start just before its deadline: a read, a write and a read-back).
assert TABLE_CREATION_SECONDS_MAX > CONTROL_CALL_SECONDS_MAX + CATALOG_CAS_ATTEMPTS_MAX * (
    2 * CONTROL_CALL_SECONDS_MAX + CATALOG_CAS_BACKOFF_SECONDS_MAX
)
assert TABLE_CREATION_SECONDS_MAX > (
    CONTROL_CALL_SECONDS_MAX + CATALOG_CHANGE_SECONDS_MAX + 3 * NODE_CALL_SECONDS_MAX
)
assert PROVISIONED_UNITS_PER_TABLE_MAX <= PROVISIONED_UNITS_PER_ACCOUNT_MAX
assert 1 <= ON_DEMAND_PARTITION_BURST_SECONDS <= BURST_SECONDS_MAX
assert PROVISIONED_UNITS_PER_TABLE_MAX <= PROVISIONED_UNITS_VALUE_MAX
assert TABLE_STATS_SECONDS_MAX <= CONTROL_CALL_SECONDS_MAX

# Expression parsing (dynalab's own bounds, not DynamoDB quotas). Distinct expression texts whose
# parse is cached per process: applications reuse a few hundred texts at most, each cached parse of
# an everyday expression takes a few kilobytes, and even 1024 maximal 4 KB expressions (about
# 120 KB of trees each) stay near 125 MB.
EXPRESSION_PARSE_CACHE_ENTRIES = 1024

# PartiQL (the API Reference's constraints on ExecuteStatement, BatchExecuteStatement and
# ExecuteTransaction). A statement is 1 to 8192 characters, a NextToken 1 to 32768, a batch 1 to
# 25 statements; a transaction holds 1 to TRANSACT_ITEMS_MAX statements.
PARTIQL_STATEMENT_CHARS_MAX = 8192
PARTIQL_NEXT_TOKEN_CHARS_MAX = 32768
PARTIQL_BATCH_STATEMENTS_MAX = 25
# ExecuteTransaction's (and TransactWriteItems') ClientRequestToken: 1 to 36 characters.
CLIENT_REQUEST_TOKEN_CHARS_MAX = 36
# Distinct statement texts whose parse is cached per process (dynalab's own bound, as for
# expressions: a statement's tree is a few kilobytes, and applications reuse few texts).
PARTIQL_PARSE_CACHE_ENTRIES = 1024
# NOTs, parentheses and list, map and set literals open at once in a statement (dynalab's own
# bound): the parser and planner recurse once or a few times a level, and 100 levels keep them
# far inside Python's recursion limit. A condition that deep is past the expression language's
# 300 operators anyway, and a document literal past its 32 levels (NESTING_DEPTH_MAX).
PARTIQL_NESTING_DEPTH_MAX = 100
# Canonical texts of ExpressionAttributeValues numbers remembered per process (dynalab's own bound):
# exact decimal normalisation is the costliest step of binding a request's values, and the same
# short constants (":one", ":zero", versions) recur. Only texts up to 64 characters (38 digits plus
# sign, point and exponent) are remembered, so the memo stays under a megabyte.
EXPRESSION_NUMBER_CACHE_ENTRIES = 4096
EXPRESSION_NUMBER_CACHE_TEXT_CHARS_MAX = 64

# DynamoDB Streams (API Reference, DynamoDB Streams; Developer Guide, "Change data capture for
# DynamoDB Streams").
STREAM_RETENTION_SECONDS = 24 * 3600  # "Stream records ... are removed after 24 hours."
SHARD_ITERATOR_SECONDS_MAX = 15 * 60  # "A shard iterator expires 15 minutes after it is retrieved."
GET_RECORDS_LIMIT_MAX = 1000  # GetRecords Limit: 1 to 1000 records.
GET_RECORDS_BYTES_MAX = 1 * MIB  # "...or up to 1 MB of data, whichever comes first."
LIST_STREAMS_LIMIT_MAX = 100  # ListStreams Limit: 1 to 100.
DESCRIBE_STREAM_LIMIT_MAX = 100  # DescribeStream Limit: 1 to 100 shards.
SHARD_ITERATOR_CHARS_MAX = 2048  # ShardIterator: 1 to 2048 characters (service model).
# How often a node moves its stream consumers past expired records with no reader (at most; a
# shorter retention for tests makes it more often: a quarter of it).
STREAM_RETENTION_ROUND_SECONDS_MAX = 60.0
# Pages of GET_RECORDS_LIMIT_MAX records one round passes per consumer at most; the rest waits.
STREAM_RETENTION_ROUND_PAGES_MAX = 10
# Times UpdateTable reads the ends of a stream's shards to disable it when splits keep changing
# the partitions in between; past that it answers ServiceUnavailable (the client retries).
STREAM_DISABLE_ATTEMPTS_MAX = 3
assert GET_RECORDS_LIMIT_MAX <= CHANGE_FEED_BATCH_RECORDS_MAX

# Transactions (dynalab's own bounds). A prepare carries this deadline: no node takes a lock for
# it later, so once the deadline and its grace have passed a lock's prepare is over, and a
# resolver may ask the lock's record what became of it.
TRANSACTION_PREPARE_SECONDS = 2.0
# A PENDING record this old is aborted by a resolver (`core.transactions.resolution`): its
# coordinator has had its prepares' deadline and grace, and a second to decide, so it died or
# stalled. A decided record left unfinished this long is applied again by a resolver.
TRANSACTION_RESOLVE_SECONDS = 4.0
# How often each router asks every node for transactions left behind (`router/transactions.py`):
# a lock outlives a dead coordinator by at most about RESOLVE + INTERVAL seconds.
TRANSACTION_RESOLVE_INTERVAL_SECONDS = 1.0
# Transactions left behind one node reports per sweep; the next sweep reports the rest.
TRANSACTION_SWEEP_ITEMS_MAX = 256
# TransactGetItems reads every item, then checks that none was written or locked meanwhile: this
# many times (waiting 10, 20, 40... ms between) before it gives up with TransactionConflict.
TRANSACT_GET_ATTEMPTS_MAX = 5
# A transaction's record step (decide, finish, resolve) on a node that does not answer, or a commit
# or release of its locks on one node, is tried this many times (waiting 10, 20 ms between) before
# the coordinator leaves it to a resolver.
TRANSACTION_RECORD_ATTEMPTS_MAX = 3
# A round of TransactGetItems looks through at most this many change-log records of a partition
# for writes to its items since the last round; more count as a change (`storagenode/transactions`).
TRANSACT_GET_LOG_RECORDS_MAX = 10_000

assert TRANSACTION_RESOLVE_SECONDS > TRANSACTION_PREPARE_SECONDS + RPC_DEADLINE_GRACE_SECONDS
assert TRANSACTION_PREPARE_SECONDS <= NODE_CALL_SECONDS_MAX
assert TRANSACTION_RESOLVE_INTERVAL_SECONDS < TRANSACTION_RESOLVE_SECONDS

# Retry policies (`core.retry`; dynalab's own bounds). No loop retries more often than this, and
# no pause between two attempts is longer: a longer wait is a poll, not a retry.
RETRY_ATTEMPTS_MAX = 100
RETRY_PAUSE_SECONDS_MAX = 10.0
assert CATALOG_CAS_ATTEMPTS_MAX <= RETRY_ATTEMPTS_MAX
assert MOVE_FENCE_ATTEMPTS_MAX <= RETRY_ATTEMPTS_MAX
assert SPLIT_INSTALL_ATTEMPTS_MAX <= RETRY_ATTEMPTS_MAX
assert CATALOG_LOCATE_ATTEMPTS_MAX <= RETRY_ATTEMPTS_MAX
assert TRANSACTION_RECORD_ATTEMPTS_MAX <= RETRY_ATTEMPTS_MAX
assert TRANSACT_GET_ATTEMPTS_MAX <= RETRY_ATTEMPTS_MAX
assert GSI_APPLY_ATTEMPTS_MAX <= RETRY_ATTEMPTS_MAX
assert GSI_THROTTLED_APPLY_ATTEMPTS_MAX <= RETRY_ATTEMPTS_MAX
assert GSI_REROUTE_ATTEMPTS_MAX <= RETRY_ATTEMPTS_MAX
assert GSI_RETRY_BACKOFF_SECONDS_MAX <= RETRY_PAUSE_SECONDS_MAX

# Raft (`core.raft`; dynalab's own defaults, in the spirit of etcd's raft). Time is counted in
# ticks, whatever the caller makes a tick; the node's loop is meant to tick every 100 ms or so.
# A follower that hears no leader for a randomized 10 to 15 ticks starts an election. The spread
# (etcd and the paper draw from [T, 2T)) need only be well above a round of vote messages, a few
# milliseconds between processes on one network, so that two followers rarely time out within
# one round of each other; half a timeout is that many times over, and failover is shorter for
# it (p99 about 1.5-2.6 s over 20 kills, against 2.3 s with [T, 2T): docs/benchmarks.md).
RAFT_ELECTION_TIMEOUT_TICKS_DEFAULT = 10
RAFT_ELECTION_SPREAD_TICKS_DEFAULT = 5
# A leader sends heartbeats every tick: followers learn the commit index and the lease renews.
RAFT_HEARTBEAT_INTERVAL_TICKS_DEFAULT = 1
# The most two nodes' clocks may disagree about the length of one election timeout: a leader's
# lease ends this many ticks before an election timeout after the heartbeat that granted it.
RAFT_CLOCK_DRIFT_TICKS_MAX = 2
# One append message carries at most this many entries and (beyond its first entry) bytes.
RAFT_APPEND_ENTRIES_MAX = 64
RAFT_APPEND_BYTES_MAX = 1 * MIB
# A leader keeps at most this many append messages in flight to one follower before it waits.
RAFT_INFLIGHT_APPENDS_MAX = 256
# One Ready hands the application at most this many bytes of committed entries beyond the first
# (a follower that catches up a long log applies it in bounded steps, not in one huge batch).
RAFT_APPLY_BYTES_MAX = 4 * MIB

# The multi-raft host on a node (`storagenode/raft_host.py`, `raft_storage.py`). Each group keeps
# the newest entries of its log in memory (as well as on disk), so that a leader sending appends
# and a follower matching them read no RocksDB for the recent log.
RAFT_LOG_CACHE_ENTRIES = 256
# A node's write loop ticks its groups this often, on the monotonic clock (`storagenode/commit.py`):
# with RAFT_ELECTION_TIMEOUT_TICKS_DEFAULT, a dead leader is replaced 1 to 1.5 s after it went
# quiet.
RAFT_TICK_SECONDS = 0.1
# The ticks one round delivers at most after the loop was held up or the process paused: beyond a
# few election timeouts, more ticks change nothing a tick decides.
RAFT_TICKS_CATCH_UP_MAX = 5 * RAFT_ELECTION_TIMEOUT_TICKS_DEFAULT
# A group snapshots its state machine and compacts its log once this many applied entries are in
# it, keeping the newest RAFT_LOG_KEPT_ENTRIES of them for followers a little behind.
RAFT_LOG_COMPACT_ENTRIES = 10_000
RAFT_LOG_KEPT_ENTRIES = 1_000
# ... or once the entries appended since it last compacted hold this many bytes (a log of a
# partition's writes repeats their bytes; ten thousand large write groups would be gigabytes).
# A group of one voter has no follower to keep entries for: it keeps none.
RAFT_LOG_COMPACT_BYTES = 64 * MIB
# A member behind its leader's compacted log copies its partition's rows from another member in
# pages of about this many bytes, one page in flight (`storagenode/snapshots.py`), each page
# asked for within this long.
RAFT_SNAPSHOT_PAGE_BYTES = 1 * MIB
RAFT_SNAPSHOT_PAGE_SECONDS_MAX = 10.0
# A host sends every peer node something at least this often (a batch, or an empty one), so a
# sleeping (hibernating) group's followers can tell a quiet leader from a dead one.
RAFT_KEEPALIVE_TICKS_MAX = 1
# A split's parent's group stays on a member this many ticks after the member applied the split
# (10 s), so that the members behind learn the split's commit from it (`storagenode.replication`).
RAFT_RETIRED_GROUP_TICKS_MIN = 10 * RAFT_ELECTION_TIMEOUT_TICKS_DEFAULT
# A peer node heard from not for this many ticks is taken as maybe gone: the sleeping groups it
# leads here wake (`raft_host`). A few keepalive intervals, well under an election timeout.
RAFT_PEER_SILENT_TICKS_MIN = 3
# How often a node renews the report of its replicated groups (role, leader, term, commit and
# applied index, each follower's lag) that /admin, /metrics, the dashboard and `dynalab status`
# read: the writer loop builds it at most this often, so a scrape never walks the live groups.
RAFT_STATUS_SECONDS = 1.0
# A follower woken by a message from someone other than its leader (a vote request, say) stays
# awake at least this many election timeouts, long enough to vote and see an election through.
RAFT_WAKE_ELECTION_TIMEOUTS_MIN = 2

assert 0 < RAFT_HEARTBEAT_INTERVAL_TICKS_DEFAULT < RAFT_ELECTION_TIMEOUT_TICKS_DEFAULT
assert 1 <= RAFT_ELECTION_SPREAD_TICKS_DEFAULT <= RAFT_ELECTION_TIMEOUT_TICKS_DEFAULT
assert RAFT_KEEPALIVE_TICKS_MAX < RAFT_ELECTION_TIMEOUT_TICKS_DEFAULT
assert RAFT_KEEPALIVE_TICKS_MAX < RAFT_PEER_SILENT_TICKS_MIN < RAFT_ELECTION_TIMEOUT_TICKS_DEFAULT
assert 0 < RAFT_LOG_KEPT_ENTRIES < RAFT_LOG_COMPACT_ENTRIES
assert 1 <= RAFT_CLOCK_DRIFT_TICKS_MAX < RAFT_ELECTION_TIMEOUT_TICKS_DEFAULT
assert RAFT_APPEND_BYTES_MAX >= ITEM_SIZE_BYTES_MAX, "one append carries any one write"
assert RAFT_APPLY_BYTES_MAX >= RAFT_APPEND_BYTES_MAX, "one Ready applies what one append carried"

# Raft messages between nodes (`rpc.raft_transport`). Each peer node has a queue of messages not
# yet written to its stream; past either bound the oldest are dropped, since Raft resends what
# matters (heartbeats every tick, appends from the follower's progress) and a peer that is down
# or slow must not make a node hold its messages without bound.
RAFT_TRANSPORT_QUEUE_MESSAGES_MAX = 4096
RAFT_TRANSPORT_QUEUE_BYTES_MAX = 64 * MIB
# Everything queued for a peer in one turn of the event loop goes out as one stream message, cut
# once it passes this many bytes (as the node stream's batches are).
RAFT_TRANSPORT_BATCH_BYTES_TARGET = 4 * MIB
# A single message larger than this is dropped rather than sent: with a batch's target it must
# fit one gRPC message. Only a snapshot can be that large; large ones need a streamed install.
RAFT_TRANSPORT_MESSAGE_BYTES_MAX = RPC_MESSAGE_BYTES_MAX // 2
# Opening a stream to a peer (connection and HTTP/2 handshake), and one write on it: a peer that
# stops reading for this long has its stream broken and opened again.
RAFT_TRANSPORT_CONNECT_SECONDS_MAX = 1.0
RAFT_TRANSPORT_WRITE_SECONDS_MAX = 2.0
# Reconnecting to a peer after a failed attempt: from 50 ms doubling to 1 s, for at most 30
# attempts or 10 s; then the queue is dropped, and the next message sent starts a new round.
RAFT_TRANSPORT_RECONNECT_ATTEMPTS_MAX = 30
RAFT_TRANSPORT_RECONNECT_BACKOFF_SECONDS_MIN = 0.05
RAFT_TRANSPORT_RECONNECT_BACKOFF_SECONDS_MAX = 1.0
RAFT_TRANSPORT_RECONNECT_SECONDS_MAX = 10.0

assert RAFT_TRANSPORT_MESSAGE_BYTES_MAX <= RAFT_TRANSPORT_QUEUE_BYTES_MAX
assert RAFT_TRANSPORT_BATCH_BYTES_TARGET + RAFT_TRANSPORT_MESSAGE_BYTES_MAX <= RPC_MESSAGE_BYTES_MAX
assert RAFT_APPEND_BYTES_MAX < RAFT_TRANSPORT_MESSAGE_BYTES_MAX, "any append can be sent"
assert RAFT_TRANSPORT_RECONNECT_ATTEMPTS_MAX <= RETRY_ATTEMPTS_MAX
assert RAFT_TRANSPORT_RECONNECT_BACKOFF_SECONDS_MAX <= RETRY_PAUSE_SECONDS_MAX
