"""A seeded sweep over the transaction machine's crash points: the coordinating router, or the
node of a participant (the ledger's, or another's), dies between every pair of effects of a
coordination (`rpc.machines` crash points, the states the machine reaches), under concurrent
transactions and single-item writes; and, the router dead, the resolver that takes its
transactions on dies too, between two of its own effects, and a third router ends them.

Each seed picks one case (who dies at which point, and where the resolver dies) and the network's
faults (`tests.sim.sweep`: every case runs from several seeds); a failing seed replays with
`python -m tests.sim.sweep txn SEED`. After every case, read through a live router: every
acknowledged transaction is wholly applied, every cancelled one wholly absent, every one whose
outcome the client never learnt applied all or nothing; a transaction whose condition fails is
never applied; every single-item increment acknowledged is there, and none that failed; no item is
locked, no ledger is left unfinished, and no coordination is left in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from core import limits
from core.errors import DynamoError, TransactionCanceled
from core.keycodec import encode_storage_key, successor
from core.machines.transaction import NAME as TXN
from core.machines.transaction import TxnState
from dynalab.sim.cluster import SimCluster
from router import items
from router import transactions as coordinator
from router.context import RouterContext
from rpc.local import Faults
from rpc.transport import FeedTransport, NodeTransport
from storagenode import transactions as node_transactions
from storagenode.layout import Family
from tests.sim.sweep import Sweep
from tests.sim.test_transactions import locks_left

ACCOUNTS = 6
# The points between two effects of a transaction that commits, and of one that aborts (the
# states before each effect).
COMMIT_PATH = ["beginning", "preparing", "prepared", "committing", "finishing"]
ABORT_PATH = ["beginning", "preparing", "aborting", "releasing", "finishing"]
# Where a resolver taking on a dead router's transactions can die, by where the router died: the
# states the ledger left by the transaction that died there surely leads through (a PENDING
# ledger: abort it, release, finish; a decided one: apply it again, finish). Any transaction of
# the router may be the first to reach the point, so at FINISHING the decision is either; a
# router that died before its begin left nothing to resolve.
BEFORE_DECISION = ["aborting", "releasing", "finishing"]
RESOLVER_POINTS = {
    "beginning": [],
    "preparing": BEFORE_DECISION,
    "prepared": BEFORE_DECISION,
    "aborting": BEFORE_DECISION,
    "committing": ["committing", "finishing"],
    "releasing": ["releasing", "finishing"],
    "finishing": ["finishing"],
}
# (who dies, where, whether the transaction aborts, where the resolver dies or None).
CASES: list[tuple[str, str, bool, str | None]] = [
    *(
        (who, point, aborts, None)
        for who in ("router", "home", "participant")
        for aborts, path in ((False, COMMIT_PATH), (True, ABORT_PATH))
        for point in path
    ),
    *(
        ("router", point, aborts, second)
        for aborts, path in ((False, COMMIT_PATH), (True, ABORT_PATH))
        for point in path
        for second in RESOLVER_POINTS[point]
    ),
]


class RouterDied(BaseException):
    """The router's process is gone (the sim's kill -9): a BaseException, so nothing of the
    driver runs after it."""


class Killable:
    """A router's transport to one node that stops when its router dies: no call leaves it."""

    def __init__(self, inner: NodeTransport, dead: asyncio.Event) -> None:
        self.inner = inner
        self.dead = dead

    @property
    def address(self) -> str:
        return self.inner.address

    async def call(
        self, op: str, target: Any, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        if self.dead.is_set():
            raise RouterDied()
        result: dict[str, Any] = await self.inner.call(op, target, payload, timeout)
        return result

    async def control(self, op: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self.dead.is_set():
            raise RouterDied()
        result: dict[str, Any] = await self.inner.control(op, payload, timeout)
        return result

    def feed(self) -> FeedTransport:
        """The feed is the GSI replicator's and Streams': no transaction reads it."""
        return self.inner.feed()

    async def close(self) -> None:
        await self.inner.close()


def killable(router: RouterContext) -> asyncio.Event:
    """Wrap `router`'s transports; the event kills it."""
    dead = asyncio.Event()
    router.clients = {node: Killable(client, dead) for node, client in router.clients.items()}
    return dead


class Death:
    """A router's crash points (`rpc.machines.CrashPoints`) for one death: the first
    coordination of the router to reach `point` has its process die there (the router's, or, for
    `victim` a node's name, that node's: it restarts on what it committed, cut off the network
    while it does)."""

    def __init__(
        self, cluster: SimCluster, point: str, victim: str, dead: asyncio.Event | None
    ) -> None:
        self.cluster = cluster
        self.point = point
        self.victim = victim
        self.dead = dead
        self.died = False

    async def reached(self, machine: str, point: str) -> None:
        if machine != TXN or point != self.point or self.died:
            return
        self.died = True
        if self.dead is not None:
            self.dead.set()
            raise RouterDied(point)
        address = self.cluster.addresses[self.victim]
        self.cluster.network.cut(address)
        await self.cluster.restart_node(self.victim)
        asyncio.get_running_loop().call_later(0.05, self.cluster.network.heal, address)


def account(number: int) -> dict[str, Any]:
    return {"pk": {"S": f"acct{number}"}}


def node_of(cluster: SimCluster, router: RouterContext, key: dict[str, Any]) -> str:
    """The node of the partition holding `key`: of a replicated partition, its leader now."""
    table = router.tables["Bank"]
    partition = table.partitions.lookup(encode_storage_key(key["pk"], None))
    ref = (table.id, partition.id)
    leaders = [
        name for name, node in cluster.nodes.items() if partition.replicas and node.leads(ref)
    ]
    return leaders[0] if leaders else partition.node


def tagged(number: int, keys: list[dict[str, Any]], failing: dict[str, Any] | None) -> Any:
    """Transaction `number`: add its tag to each item of `keys`; with `failing`, also a
    ConditionCheck that fails on that item (it exists), so the transaction is cancelled."""
    tag = {":t": {"SS": [f"t{number}"]}}
    actions: list[dict[str, Any]] = [
        {
            "Update": {
                "TableName": "Bank",
                "Key": key,
                "UpdateExpression": "ADD txns :t",
                "ExpressionAttributeValues": tag,
            }
        }
        for key in keys
    ]
    if failing is not None:
        actions.append(
            {
                "ConditionCheck": {
                    "TableName": "Bank",
                    "Key": failing,
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
        )
    return {"TransactItems": actions}


class Log:
    """What the clients were told: each transaction's items and outcome, each increment's."""

    def __init__(self) -> None:
        self.transactions: dict[int, tuple[list[str], str]] = {}  # tag -> (items, outcome)
        self.increments: dict[str, list[int]] = {}  # item -> [acknowledged, unknown]
        self.doomed: set[int] = set()  # Transactions whose condition fails.


async def transact(
    log: Log,
    router: RouterContext,
    number: int,
    keys: list[dict[str, Any]],
    failing: dict[str, Any] | None = None,
) -> None:
    names = [key["pk"]["S"] for key in keys]
    if failing is not None:
        log.doomed.add(number)
    try:
        await coordinator.transact_write_items(router, tagged(number, keys, failing))
        outcome = "acknowledged"
    except TransactionCanceled:
        outcome = "cancelled"
    except (DynamoError, RouterDied):
        outcome = "unknown"
    log.transactions[number] = (names, outcome)


async def increment(log: Log, router: RouterContext, key: dict[str, Any]) -> None:
    counts = log.increments.setdefault(key["pk"]["S"], [0, 0])
    try:
        await items.update_item(
            router,
            {
                "TableName": "Bank",
                "Key": key,
                "UpdateExpression": "ADD plain :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}},
            },
        )
        counts[0] += 1
    except DynamoError as error:
        # Refused before it applied (an item a transaction holds), or unknown.
        if error.type_name != "TransactionConflictException":
            counts[1] += 1


async def workload(
    cluster: SimCluster, log: Log, routers: list[RouterContext], stop: asyncio.Event
) -> None:
    """Transactions between random accounts through both routers, and increments, until
    `stop`."""
    rng = cluster.rng
    number = 1000

    async def client(router: RouterContext) -> None:
        nonlocal number
        while not stop.is_set():
            number += 1
            pair = [account(n) for n in rng.sample(range(ACCOUNTS), 2)]
            failing = account(rng.randrange(ACCOUNTS)) if rng.random() < 0.2 else None
            if failing is not None and failing in pair:
                failing = None
            await transact(log, router, number, pair, failing)
            await increment(log, routers[-1], account(rng.randrange(ACCOUNTS)))
            await asyncio.sleep(rng.uniform(0, 0.01))

    await asyncio.gather(*(client(router) for router in routers))


def ledgers_left(cluster: SimCluster) -> list[bytes]:
    """The records left on any node: kept by a node, or by a replicated partition (on each
    of its replicas). No transaction here has a token, so a finished one is forgotten."""
    return [
        key
        for store in cluster.stores.values()
        for prefix in (node_transactions.RECORD_PREFIX, node_transactions.GROUP_RECORD_PREFIX)
        for key, _ in store.walk(Family.TRANSACTIONS, prefix, successor(prefix), forward=True)
    ]


async def settle(cluster: SimCluster, router: int) -> None:
    """Let the resolve time pass, then run router `router`'s resolver until no lock and no
    unfinished ledger is left (a bounded number of rounds)."""
    for _ in range(6):
        await asyncio.sleep(limits.TRANSACTION_RESOLVE_SECONDS + 1)
        await coordinator.resolve_once(cluster.routers[router])
        await asyncio.sleep(0.5)  # (The followers of a replicated partition apply it too.)
        if not locks_left(cluster) and not ledgers_left(cluster):
            return


async def check(cluster: SimCluster, log: Log, reader: int, label: str) -> None:
    found: dict[str, dict[str, Any]] = {}
    touched = {name for names, _ in log.transactions.values() for name in names}
    for name in sorted(touched | set(log.increments)):
        reply = await items.get_item(
            cluster.routers[reader],
            {"TableName": "Bank", "Key": {"pk": {"S": name}}, "ConsistentRead": True},
        )
        found[name] = reply.get("Item", {})
    for number, (names, outcome) in sorted(log.transactions.items()):
        tag = f"t{number}"
        holding = [name for name in names if tag in found[name].get("txns", {}).get("SS", [])]
        where = f"{label}: transaction {number} ({outcome}) applied on {holding} of {names}"
        if outcome == "acknowledged":
            assert holding == names, where
        elif outcome == "cancelled" or number in log.doomed:
            assert holding == [], where
        else:
            assert holding in ([], names), where
    for name, (acknowledged, unknown) in log.increments.items():
        value = int(found[name].get("plain", {}).get("N", "0"))
        assert acknowledged <= value <= acknowledged + unknown, (
            f"{label}: {name} counts {value}, {acknowledged} acknowledged, {unknown} unknown"
        )
    assert locks_left(cluster) == [], f"{label}: items stay locked"
    assert ledgers_left(cluster) == [], f"{label}: ledgers left unfinished"
    assert not coordinator.COUNTERS.running, f"{label}: {coordinator.COUNTERS.running}"


async def scenario(
    cluster: SimCluster, case: tuple[str, str, bool, str | None], label: str
) -> None:
    who, point, aborts, second = case
    coordinating, resolving, _ = cluster.routers
    await cluster.create_table("Bank", sort=False)
    for number in range(ACCOUNTS):
        await cluster.put("Bank", {**account(number), "balance": {"N": "100"}})
    # The swept transaction's own items, on two nodes when the placement allows.
    first = {"pk": {"S": "swept0"}}
    other = next(
        (
            {"pk": {"S": f"swept{n}"}}
            for n in range(1, 200)
            if node_of(cluster, coordinating, {"pk": {"S": f"swept{n}"}})
            != node_of(cluster, coordinating, first)
        ),
        {"pk": {"S": "swept1"}},
    )
    if who == "router":
        dead: asyncio.Event | None = killable(coordinating)  # Its transactions die with it.
        victim = ""
    else:
        dead = None
        victim = node_of(cluster, coordinating, first if who == "home" else other)
    death = Death(cluster, point, victim, dead)
    coordinating.crash_points = death
    log = Log()
    cluster.faults(Faults(delay=0.3, delay_seconds_max=0.003))
    stop = asyncio.Event()
    clients = asyncio.ensure_future(workload(cluster, log, [coordinating, resolving], stop))
    await asyncio.sleep(0.02)
    failing = account(0) if aborts else None
    await transact(log, coordinating, 1, [first, other], failing)
    stop.set()
    await clients
    assert death.died, f"{label}: no coordination reached {point}"
    cluster.faults(None)
    cluster.network.heal()
    if second is not None:
        resolver_died = killable(resolving)
        resolving.crash_points = Death(cluster, second, "", resolver_died)
        with contextlib.suppress(RouterDied):
            await settle(cluster, router=1)
        assert resolving.crash_points.died, f"{label}: the resolver never reached {second}"
    await settle(cluster, router=2)
    await check(cluster, log, 2, label)


SWEEP = Sweep("txn", CASES, scenario, options={"routers": 3})


@pytest.mark.parametrize("seed", SWEEP.seeds())
def test_a_transaction_killed_between_any_two_effects(seed: int) -> None:
    SWEEP.run(seed)


def test_the_sweep_covers_every_state_with_an_effect() -> None:
    """Every state of the transaction machine that has an effect is a point some case dies at,
    for the coordinator and for a resolver."""
    first = {point for _, point, _, _ in CASES}
    second = {point for *_, point in CASES if point is not None}
    with_effects = {
        state.value.lower() for state in TxnState if state not in (TxnState.DONE, TxnState.LEFT)
    }
    assert with_effects <= first, with_effects - first
    # A resolver starts from the ledger: never BEGINNING, PREPARING or PREPARED.
    assert with_effects - {"beginning", "preparing", "prepared"} <= second
