"""Transactions in a seeded in-process cluster: the coordinating router, or the participant node
it is calling, killed at every step, and bank transfers under lost, delayed and duplicated calls.
Afterwards another router's resolver runs, and every transaction is all-or-nothing, the total is
unchanged and no item stays locked.

Each test prints its seed; `dynalab.sim.cluster.run(seed, ...)` replays it exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace
from typing import Any

import pytest

from core import limits
from core.catalog import PartitionDef
from core.errors import DynamoError
from core.keycodec import encode_storage_key
from dynalab.sim.cluster import SimCluster, run
from router import items
from router import transactions as coordinator
from rpc import ops
from rpc.local import Faults, LocalNetwork
from rpc.transport import NodeTransport, unanswered
from storagenode import transactions as node_transactions
from storagenode.layout import Family

SEEDS = [3, 11, 2024]
ACCOUNTS = 6
OPENING_BALANCE = 100
# The transaction operations a coordinator sends, in the order it sends them for one transaction:
# begin, a prepare per partition, decide, an apply per node, finish.
TXN_OPS = frozenset({ops.TXN_RECORD, ops.TXN_PREPARE, ops.TXN_APPLY})


class RouterDied(Exception):
    """The coordinating router's process is gone (the sim's kill -9)."""


class Dying:
    """A router's transport on which something dies at the router's `die_at`-th transaction call
    (counted over all its transports), after the call was delivered (`deliver`) or before: the
    router itself (`victim` "router": nothing more leaves it), or the node the call goes to
    (`victim` "node": cut off the network until the test heals it, its answer lost)."""

    def __init__(self, inner: NodeTransport, state: dict[str, Any], network: LocalNetwork) -> None:
        self.inner = inner
        self.state = state
        self.network = network

    @property
    def address(self) -> str:
        return self.inner.address

    async def _maybe_die(self, op: str, send: Any) -> dict[str, Any]:
        if self.state["dead"]:
            raise RouterDied()
        if op in TXN_OPS:
            self.state["count"] += 1
            if self.state["count"] == self.state["die_at"]:
                if self.state["victim"] == "router":
                    self.state["dead"] = True
                    if self.state["deliver"]:
                        await send()
                    raise RouterDied()
                if self.state["deliver"]:
                    await send()
                    self.network.cut(self.address)
                    raise unanswered(op, f"node {self.address} died before answering")
                self.network.cut(self.address)
        result: dict[str, Any] = await send()
        return result

    async def call(
        self, op: str, target: Any, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        return await self._maybe_die(op, lambda: self.inner.call(op, target, payload, timeout))

    async def control(self, op: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        return await self._maybe_die(op, lambda: self.inner.control(op, payload, timeout))

    async def close(self) -> None:
        await self.inner.close()


def account(number: int) -> dict[str, Any]:
    return {"pk": {"S": f"acct{number}"}}


def transfer(source: int, target: int, amount: int) -> dict[str, Any]:
    value = {":a": {"N": str(amount)}}
    return {
        "TransactItems": [
            {
                "Update": {
                    "TableName": "Bank",
                    "Key": account(source),
                    "UpdateExpression": "SET balance = balance - :a",
                    "ConditionExpression": "balance >= :a",
                    "ExpressionAttributeValues": value,
                }
            },
            {
                "Update": {
                    "TableName": "Bank",
                    "Key": account(target),
                    "UpdateExpression": "SET balance = balance + :a",
                    "ExpressionAttributeValues": value,
                }
            },
        ]
    }


async def open_accounts(cluster: SimCluster) -> None:
    await cluster.create_table("Bank", sort=False)
    for number in range(ACCOUNTS):
        await cluster.put("Bank", {**account(number), "balance": {"N": str(OPENING_BALANCE)}})


async def balance(cluster: SimCluster, number: int, router: int = 1) -> int:
    reply = await items.get_item(
        cluster.routers[router],
        {"TableName": "Bank", "Key": account(number), "ConsistentRead": True},
    )
    return int(reply["Item"]["balance"]["N"])


async def balances(cluster: SimCluster) -> list[int]:
    return [await balance(cluster, number) for number in range(ACCOUNTS)]


def locks_left(cluster: SimCluster) -> list[bytes]:
    prefix = node_transactions.LOCK_PREFIX
    return [
        key
        for store in cluster.stores.values()
        for key, _ in store.walk(Family.TRANSACTIONS, prefix, b"M", forward=True)
    ]


async def resolve_everything(cluster: SimCluster, router: int = 1) -> None:
    """Let the resolve time pass, then run the resolver until nothing is left behind."""
    await asyncio.sleep(limits.TRANSACTION_RESOLVE_SECONDS + 1)
    for _ in range(5):
        await coordinator.resolve_once(cluster.routers[router])
        if not locks_left(cluster):
            return
        await asyncio.sleep(limits.TRANSACTION_RESOLVE_SECONDS + 1)


def nodes_of_bank(cluster: SimCluster) -> set[str]:
    table = cluster.routers[0].tables["Bank"]
    return {partition.node for partition in table.partition_defs}


def spread_seed(start: int) -> int:
    """The first seed from `start` whose Bank table has partitions on more than one node (a
    seed decides the table's id, and so where its four partitions are placed)."""

    async def spread(cluster: SimCluster) -> bool:
        await cluster.create_table("Bank", sort=False)
        return len(nodes_of_bank(cluster)) > 1

    return next(seed for seed in range(start, start + 100) if run(seed, spread))


# Steps: begin (1), prepare x2 (2, 3), decide (4), apply x2 or x1 (5, 6), finish (last). Dying
# at each, with the call delivered or not, covers every point a coordinator can be lost at.
@pytest.mark.parametrize("die_at", range(1, 8))
@pytest.mark.parametrize("deliver", [False, True])
@pytest.mark.parametrize("victim", ["router", "node"])
def test_a_router_or_node_killed_at_any_step_leaves_all_or_nothing(
    die_at: int, deliver: bool, victim: str
) -> None:
    seed = spread_seed(100 + 10 * die_at + deliver)

    async def scenario(cluster: SimCluster) -> None:
        await open_accounts(cluster)
        dying = cluster.routers[0]
        state = {"count": 0, "die_at": die_at, "deliver": deliver, "dead": False, "victim": victim}
        dying.clients = {
            node: Dying(client, state, cluster.network) for node, client in dying.clients.items()
        }
        # Accounts on two different nodes.
        table = dying.tables["Bank"]

        def node_of(number: int) -> str:
            storage_key = encode_storage_key(account(number)["pk"], None)
            return table.partitions.lookup(storage_key).node

        source = 0
        target = next(n for n in range(1, 500) if node_of(n) != node_of(source))
        await cluster.put(
            "Bank", {**account(target), "balance": {"N": str(OPENING_BALANCE)}}, router=1
        )
        outcome: str
        try:
            await coordinator.transact_write_items(dying, transfer(source, target, 30))
            outcome = "acknowledged"
        except RouterDied:
            outcome = "died"
        except DynamoError as error:
            outcome = error.type_name
        cluster.network.heal()  # The node comes back, on its data.
        await resolve_everything(cluster)
        moved = (await balance(cluster, source), await balance(cluster, target))
        assert moved in ((100, 100), (70, 130)), f"seed {seed} ({outcome}): half a transfer {moved}"
        if outcome == "acknowledged":
            assert moved == (70, 130), f"seed {seed}: acknowledged and not applied"
        assert locks_left(cluster) == [], f"seed {seed}: items stay locked"
        # The accounts take single-item writes again, through the surviving router.
        await items.put_item(
            cluster.routers[1],
            {"TableName": "Bank", "Item": {**account(source), "balance": {"N": "0"}}},
        )

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_bank_transfers_under_network_faults_keep_the_total(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await open_accounts(cluster)
        cluster.faults(Faults(drop_request=0.03, drop_reply=0.03, delay=0.2, duplicate=0.05))
        rng = cluster.rng
        acknowledged = 0

        async def client(number: int) -> None:
            nonlocal acknowledged
            for _ in range(15):
                source, target = rng.sample(range(ACCOUNTS), 2)
                try:
                    await coordinator.transact_write_items(
                        cluster.routers[number % 2], transfer(source, target, rng.randint(1, 40))
                    )
                    acknowledged += 1
                except DynamoError:
                    pass

        await asyncio.gather(*(client(number) for number in range(4)))
        cluster.faults(None)
        await resolve_everything(cluster)
        found = await balances(cluster)
        assert sum(found) == ACCOUNTS * OPENING_BALANCE, f"seed {seed}: {found}"
        assert all(value >= 0 for value in found), f"seed {seed}: {found}"
        assert locks_left(cluster) == [], f"seed {seed}: items stay locked"
        assert acknowledged > 0, f"seed {seed}: no transfer went through"

    run(seed, scenario)


class PausingAtDecide:
    """A router's transport that holds the coordinator's decide until the test lets it go (or
    kills the router there): the transaction's items are prepared, its record PENDING."""

    def __init__(self, inner: NodeTransport, state: dict[str, Any]) -> None:
        self.inner = inner
        self.state = state

    @property
    def address(self) -> str:
        return self.inner.address

    async def call(
        self, op: str, target: Any, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        if op == ops.TXN_RECORD and payload.get("action") == "decide":
            self.state["reached"].set()
            await self.state["go"].wait()
            if self.state["die"]:
                raise RouterDied()
        result: dict[str, Any] = await self.inner.call(op, target, payload, timeout)
        return result

    async def control(self, op: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        result: dict[str, Any] = await self.inner.control(op, payload, timeout)
        return result

    async def close(self) -> None:
        await self.inner.close()


def partition_ids(cluster: SimCluster, router: int = 1) -> set[str]:
    return {partition.id for partition in cluster.routers[router].tables["Bank"].partition_defs}


@pytest.mark.parametrize("die", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_participant_that_splits_while_prepared(seed: int, die: bool) -> None:
    """Both participants (and the record's partition) split between prepare and decide: the
    locks and the record stay on their node, keyed by item and by record id; the commit applies
    each write through the child now holding the item, or, the coordinator killed there, a
    resolver finds the record through the split's lineage and releases everything."""

    async def scenario(cluster: SimCluster) -> None:
        await open_accounts(cluster)
        coordinating = cluster.routers[0]
        state = {"reached": asyncio.Event(), "go": asyncio.Event(), "die": die}
        coordinating.clients = {
            node: PausingAtDecide(client, state) for node, client in coordinating.clients.items()
        }
        source, target = 1, 4
        running = asyncio.ensure_future(
            coordinator.transact_write_items(coordinating, transfer(source, target, 30))
        )
        await asyncio.wait_for(state["reached"].wait(), 30)
        await cluster.routers[1].refresh()
        before = partition_ids(cluster)
        for number in (source, target):
            key = encode_storage_key(account(number)["pk"], None)
            table = await cluster.routers[1].read_table("Bank")
            assert table is not None
            holder = next(p for p in table.partitions if p.holds(key))
            if bytes.fromhex(holder.start) != key:
                await cluster.split("Bank", key, router=1)
        await cluster.routers[1].refresh()
        assert partition_ids(cluster) != before, f"seed {seed}: nothing split"
        state["go"].set()
        outcome = "acknowledged"
        try:
            await asyncio.wait_for(running, 30)
        except RouterDied:
            outcome = "died"
        await resolve_everything(cluster)
        moved = (await balance(cluster, source), await balance(cluster, target))
        expected = (100, 100) if die else (70, 130)
        assert moved == expected, f"seed {seed} ({outcome}): {moved}"
        assert locks_left(cluster) == [], f"seed {seed}: items stay locked"
        await items.put_item(
            cluster.routers[1],
            {"TableName": "Bank", "Item": {**account(source), "balance": {"N": "0"}}},
        )

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_prepare_sent_to_a_partition_that_split_is_placed_again(seed: int) -> None:
    """A router whose map predates a split sends its prepare to the retired parent: refused as
    stale, the actions are placed on the children and prepared there, and the transfer commits."""

    async def scenario(cluster: SimCluster) -> None:
        await open_accounts(cluster)
        stale = cluster.routers[0]
        assert "Bank" in stale.tables
        for number in range(ACCOUNTS):
            key = encode_storage_key(account(number)["pk"], None)
            table = await cluster.routers[1].read_table("Bank")
            assert table is not None
            holder = next(p for p in table.partitions if p.holds(key))
            if bytes.fromhex(holder.start) != key:
                await cluster.split("Bank", key, router=1)
        await coordinator.transact_write_items(stale, transfer(0, 5, 30))
        assert (await balance(cluster, 0), await balance(cluster, 5)) == (70, 130)
        assert locks_left(cluster) == []

    run(seed, scenario)


def test_the_resolver_finds_a_record_through_the_split_lineage() -> None:
    """A lock names its record's partition as it was at the prepare; after that partition split
    (twice here) a serving descendant addresses the record: the one whose range holds the
    record's key."""

    def partition(partition_id: str, parent: str) -> PartitionDef:
        return PartitionDef(partition_id, "", None, 1, "n1", parent=parent)

    bank = SimpleNamespace(
        id="t1",
        partition_defs=(partition("c", "b"), partition("d", "b")),
        record=SimpleNamespace(retired=(partition("b", "a"),)),
    )
    ctx: Any = SimpleNamespace(tables={"Bank": bank})
    record_id = "t" + "00" * 8 + "f" * 15
    for gone in ("a", "b", "c"):
        home = coordinator._record_home(ctx, "t1", gone, record_id)
        assert home is not None and home.partition.id == "c"
    assert coordinator._record_home(ctx, "t1", "unknown", record_id) is None
    assert coordinator._record_home(ctx, "t2", "a", record_id) is None
    # Of the descendants, the one whose range holds the record's key.
    low = PartitionDef("low", "", "80", 2, "n1", parent="a")
    high = PartitionDef("high", "80", None, 2, "n1", parent="a")
    split: Any = SimpleNamespace(
        id="t3", partition_defs=(low, high), record=SimpleNamespace(retired=())
    )
    ctx = SimpleNamespace(tables={"Split": split})
    for first_byte, child in (("00", "low"), ("c0", "high")):
        found = coordinator._record_home(ctx, "t3", "a", "t" + first_byte * 8 + "0" * 15)
        assert found is not None and found.partition.id == child


@pytest.mark.parametrize("seed", SEEDS)
def test_transact_get_items_sees_whole_transfers_beside_busy_partitions(seed: int) -> None:
    """TransactGetItems of every account while transfers commit and single-item writes keep the
    same partitions busy (delayed calls interleave them): every read it answers adds up to the
    opening total, and writes to other items of its partitions do not cancel it."""

    async def scenario(cluster: SimCluster) -> None:
        await open_accounts(cluster)
        cluster.faults(Faults(delay=0.05))
        rng = cluster.rng
        totals: list[int] = []
        cancelled = 0
        done = asyncio.Event()

        async def transfers(number: int) -> None:
            for _ in range(12):
                source, target = rng.sample(range(ACCOUNTS), 2)
                with contextlib.suppress(DynamoError):
                    await coordinator.transact_write_items(
                        cluster.routers[number % 2], transfer(source, target, rng.randint(1, 40))
                    )

        async def busy() -> None:
            number = 0
            while not done.is_set():
                number += 1
                await cluster.put("Bank", {"pk": {"S": f"other{number % 50}"}}, router=1)

        async def reader() -> None:
            nonlocal cancelled
            request = {
                "TransactItems": [
                    {"Get": {"TableName": "Bank", "Key": account(n)}} for n in range(ACCOUNTS)
                ]
            }
            while not done.is_set():
                try:
                    reply = await coordinator.transact_get_items(cluster.routers[0], request)
                except DynamoError:
                    cancelled += 1
                    continue
                totals.append(sum(int(r["Item"]["balance"]["N"]) for r in reply["Responses"]))

        async def writers() -> None:
            await asyncio.gather(*(transfers(number) for number in range(3)))
            done.set()

        await asyncio.gather(writers(), busy(), reader(), reader())
        cluster.faults(None)
        assert totals, f"seed {seed}: no TransactGetItems was answered ({cancelled} cancelled)"
        assert set(totals) == {ACCOUNTS * OPENING_BALANCE}, f"seed {seed}: {sorted(set(totals))}"

    run(seed, scenario)
