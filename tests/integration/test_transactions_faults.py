"""Transactions through kill -9 of real processes: bank transfers between accounts on different
nodes run through both routers while the coordinating router and then a participant node are
killed and restarted. Afterwards (once the resolvers have had their time) the total is what it
was, every account takes single-item writes again (no lock is left), and TransactGetItems sees a
whole bank at every step."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from core import limits
from core.machines.transaction import NAME as TXN
from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table, dynamodb_client
from tests.integration.crash_points import KillAt, hold_environment

ACCOUNTS = 8
OPENING_BALANCE = 100
CLIENTS_PER_ROUTER = 2
PHASE_SECONDS = 3.0
# The resolvers end what a dead process left within the resolve time and a sweep; the restarted
# processes need a few seconds more.
SETTLE_SECONDS_MAX = (
    limits.TRANSACTION_RESOLVE_SECONDS + 4 * limits.TRANSACTION_RESOLVE_INTERVAL_SECONDS + 15.0
)
POLL_SECONDS = 1.0
# What a client may see during the faults: cancelled (a lock held by an interrupted transaction,
# or a failed condition), unavailable (a dead node), unknown (a dead node or router mid-call).
EXPECTED_ERRORS = {
    "TransactionCanceledException",
    "ServiceUnavailable",
    "InternalServerError",
    "TransactionInProgressException",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        with LocalCluster(tmp_path_factory.mktemp("txn-faults"), nodes=3, routers=2) as running:
            yield running


def account(number: int) -> dict[str, Any]:
    return {"pk": {"S": f"acct{number}"}}


def transfer_items(table: str, source: int, target: int, amount: int) -> list[dict[str, Any]]:
    value = {":a": {"N": str(amount)}}
    return [
        {
            "Update": {
                "TableName": table,
                "Key": account(source),
                "UpdateExpression": "SET balance = balance - :a",
                "ConditionExpression": "balance >= :a",
                "ExpressionAttributeValues": value,
            }
        },
        {
            "Update": {
                "TableName": table,
                "Key": account(target),
                "UpdateExpression": "SET balance = balance + :a",
                "ExpressionAttributeValues": value,
            }
        },
    ]


def read_bank(client: Any, table: str) -> list[int]:
    reply = client.transact_get_items(
        TransactItems=[{"Get": {"TableName": table, "Key": account(n)}} for n in range(ACCOUNTS)]
    )
    return [int(r["Item"]["balance"]["N"]) for r in reply["Responses"]]


class Teller(threading.Thread):
    """Transfers through one router until stopped, reading the whole bank now and then."""

    def __init__(self, url: str, table: str, seed: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.client = dynamodb_client(url)
        self.table = table
        self.rng = random.Random(seed)
        self.stop_event = stop
        self.committed = 0
        self.errors: dict[str, int] = {}
        self.totals: list[int] = []

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                if self.rng.random() < 0.2:
                    self.totals.append(sum(read_bank(self.client, self.table)))
                    continue
                source, target = self.rng.sample(range(ACCOUNTS), 2)
                self.client.transact_write_items(
                    TransactItems=transfer_items(
                        self.table, source, target, self.rng.randint(1, 40)
                    )
                )
                self.committed += 1
            except ClientError as error:
                code = error.response["Error"]["Code"]
                self.errors[code] = self.errors.get(code, 0) + 1
                time.sleep(0.05)
            except BotoCoreError:  # A router killed mid-request: the connection breaks.
                self.errors["Connection"] = self.errors.get("Connection", 0) + 1
                time.sleep(0.05)


def test_transfers_survive_kill_9_of_the_router_and_a_node(
    cluster: LocalCluster, table_name: Any
) -> None:
    victim_router = cluster.routers[0]
    victim_node = cluster.nodes[-1]

    def faults() -> None:
        time.sleep(PHASE_SECONDS)
        victim_router.kill()
        time.sleep(PHASE_SECONDS)
        victim_router.start()
        time.sleep(PHASE_SECONDS)
        victim_node.kill()
        time.sleep(PHASE_SECONDS)
        victim_node.start()
        time.sleep(PHASE_SECONDS)

    _bank_through(cluster, table_name(), faults)


def test_replicated_transfers_survive_kill_9_of_each_node_in_turn(
    tmp_path: Path, table_name: Any
) -> None:
    """Every partition a Raft group of three (the bank's, the catalog's): the records, parts and
    locks of transactions are in the groups, so with each node killed in turn (the leaders of
    some partitions among them) transfers go on at the new leaders, and once the resolvers have
    run the bank is whole and unlocked."""
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        with LocalCluster(
            tmp_path / "cluster", nodes=3, routers=2, replication_factor=3
        ) as replicated:

            def faults() -> None:
                time.sleep(PHASE_SECONDS)
                for node in replicated.nodes:
                    node.kill()
                    time.sleep(PHASE_SECONDS)
                    node.start()
                    time.sleep(PHASE_SECONDS)

            _bank_through(replicated, table_name(), faults)


def _bank_through(cluster: LocalCluster, name: str, faults: Callable[[], None]) -> None:
    """Transfers through every router while `faults` runs; then every read of the whole bank
    saw it whole, and once the resolvers have run nothing is locked and the total is what it
    was."""
    client = dynamodb_client(cluster.routers[1].url)
    table = create_active_table(client, name)
    for number in range(ACCOUNTS):
        client.put_item(
            TableName=table, Item={**account(number), "balance": {"N": str(OPENING_BALANCE)}}
        )
    stop = threading.Event()
    tellers = [
        Teller(router.url, table, seed, stop)
        for seed, router in enumerate(cluster.routers * CLIENTS_PER_ROUTER)
    ]
    for teller in tellers:
        teller.start()
    try:
        faults()
    finally:
        stop.set()
        for teller in tellers:
            teller.join(timeout=60)
    assert not any(teller.is_alive() for teller in tellers), "a teller is stuck in a request"
    assert sum(teller.committed for teller in tellers) > 0, "no transfer committed"
    # Every read of the whole bank during the faults saw it whole.
    totals = {total for teller in tellers for total in teller.totals}
    assert totals <= {ACCOUNTS * OPENING_BALANCE}, f"a read saw half a transfer: {totals}"
    errors = {code for teller in tellers for code in teller.errors}
    assert errors <= EXPECTED_ERRORS | {"Connection"}, errors

    # Once the resolvers have run, nothing is locked and the total is unchanged.
    deadline = time.monotonic() + SETTLE_SECONDS_MAX
    while True:
        try:
            balances = read_bank(client, table)
            for number, balance in enumerate(balances):
                client.put_item(
                    TableName=table,
                    Item={**account(number), "balance": {"N": str(balance)}},
                    ConditionExpression="balance = :b",
                    ExpressionAttributeValues={":b": {"N": str(balance)}},
                )
            break
        except ClientError as error:
            assert time.monotonic() < deadline, f"still locked or unavailable: {error}"
            time.sleep(POLL_SECONDS)
    assert sum(balances) == ACCOUNTS * OPENING_BALANCE, balances
    assert all(balance >= 0 for balance in balances), balances


# A lock left by a dead coordinator is released within RESOLVE + INTERVAL seconds of the record
# becoming resolvable; the margin is for a loaded machine (the router's restart is not needed).
RELEASE_SECONDS_MAX = (
    limits.TRANSACTION_RESOLVE_SECONDS + 2 * limits.TRANSACTION_RESOLVE_INTERVAL_SECONDS + 3.0
)
SPREAD_ACTIONS = 10


def spread_items(table: str, rng: random.Random) -> list[dict[str, Any]]:
    """A 10-action transaction adding 0 to ten accounts: it changes no balance, and holds ten
    locks across the nodes while it runs."""
    return [
        {
            "Update": {
                "TableName": table,
                "Key": account(number),
                "UpdateExpression": "SET touched = :t",
                "ExpressionAttributeValues": {":t": {"N": str(rng.randint(0, 1000))}},
            }
        }
        for number in rng.sample(range(ACCOUNTS * 2), SPREAD_ACTIONS)
    ]


def _locked_accounts(client: Any, table: str, numbers: Iterable[int]) -> set[int]:
    """The accounts whose single-item write is refused as locked by a transaction (the others
    are written, unchanged in balance)."""
    locked = set()
    for number in numbers:
        try:
            client.put_item(TableName=table, Item={**account(number), "balance": {"N": "1"}})
        except ClientError as error:
            assert error.response["Error"]["Code"] == "TransactionConflictException", error
            locked.add(number)
    return locked


def test_items_are_writable_again_seconds_after_the_router_dies(
    cluster: LocalCluster, table_name: Any
) -> None:
    """kill -9 of the router while transactions it coordinates hold locks: the router is frozen
    (SIGSTOP) until another router's single-item write meets a lock, then killed. The locked
    items are writable through the other router within RELEASE_SECONDS_MAX, not the half-minute
    it used to take."""
    victim = cluster.routers[0]
    assert victim.process is not None
    client = dynamodb_client(cluster.routers[1].url)
    table = create_active_table(client, table_name())
    for number in range(ACCOUNTS * 2):
        client.put_item(TableName=table, Item={**account(number), "balance": {"N": "1"}})
    stop = threading.Event()
    counts = {"committed": 0}

    def coordinate(seed: int) -> None:
        writer = dynamodb_client(victim.url)
        rng = random.Random(seed)
        while not stop.is_set():
            try:
                writer.transact_write_items(TransactItems=spread_items(table, rng))
                counts["committed"] += 1
            except (ClientError, BotoCoreError):
                if stop.is_set():
                    return
                time.sleep(0.05)

    threads = [threading.Thread(target=coordinate, args=(seed,), daemon=True) for seed in range(4)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 60.0
        while counts["committed"] < 5:
            assert time.monotonic() < deadline, "no transaction committed before the kill"
            time.sleep(0.05)
        locked: set[int] = set()
        while not locked:
            assert time.monotonic() < deadline, "never caught the router holding a lock"
            victim.process.send_signal(signal.SIGSTOP)
            locked = _locked_accounts(client, table, range(ACCOUNTS * 2))
            if not locked:
                victim.process.send_signal(signal.SIGCONT)
                time.sleep(0.1)
        victim.kill()
        killed_at = time.monotonic()
        stop.set()
        while locked:
            elapsed = time.monotonic() - killed_at
            assert elapsed < RELEASE_SECONDS_MAX, (
                f"accounts {sorted(locked)} still locked {elapsed:.1f} s after the kill"
            )
            time.sleep(0.2)
            locked = _locked_accounts(client, table, sorted(locked))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        victim.start()
    assert not any(thread.is_alive() for thread in threads)


# The points of the transaction machine a real router is killed at: before its decision is
# durable (every item locked, the ledger PENDING), and after (the ledger COMMITTED, nothing
# applied yet).
KILL_POINTS = {"prepared": False, "committing": True}
EXIT_WAIT_SECONDS = 30.0


@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_a_router_killed_at_a_point_of_the_transaction_machine(
    cluster: LocalCluster, table_name: Any, point: str, tmp_path: Path
) -> None:
    """The coordinating router is held by its driver at `point` (DYNALAB_HOLD_AT, the one hook of
    every machine) and killed there with SIGKILL; the other router's resolver ends the
    transaction from its ledger: aborted and released before the decision, applied after."""
    victim, survivor = cluster.routers
    client = dynamodb_client(survivor.url)
    table = create_active_table(client, table_name())
    for number in range(2):
        client.put_item(
            TableName=table, Item={**account(number), "balance": {"N": str(OPENING_BALANCE)}}
        )
    victim.stop()
    with pytest.MonkeyPatch.context() as environment:
        for name, value in hold_environment(tmp_path, point, machine=TXN).items():
            environment.setenv(name, value)
        victim.start()
    try:
        with KillAt(victim, tmp_path, point, machine=TXN) as kill, pytest.raises(BotoCoreError):
            dynamodb_client(victim.url).transact_write_items(
                TransactItems=transfer_items(table, 0, 1, 30)
            )
        assert kill.killed and victim.process is not None
        assert victim.process.wait(EXIT_WAIT_SECONDS) == -9
        expected = [70, 130] if KILL_POINTS[point] else [OPENING_BALANCE] * 2
        deadline = time.monotonic() + SETTLE_SECONDS_MAX
        while _locked_accounts_unchanged(client, table) is None:
            assert time.monotonic() < deadline, f"accounts still locked after the kill at {point}"
            time.sleep(POLL_SECONDS)
        assert _locked_accounts_unchanged(client, table) == expected
    finally:
        victim.kill()  # If it was not (a failure before the kill), with its hold set.
        victim.start()


def _locked_accounts_unchanged(client: Any, table: str) -> list[int] | None:
    """The two accounts' balances once both take a single-item write (written back unchanged);
    None while either is locked by a transaction."""
    balances = []
    for number in range(2):
        item = client.get_item(TableName=table, Key=account(number), ConsistentRead=True)["Item"]
        balance = item["balance"]["N"]
        try:
            client.put_item(
                TableName=table,
                Item={**account(number), "balance": {"N": balance}},
                ConditionExpression="balance = :b",
                ExpressionAttributeValues={":b": {"N": balance}},
            )
        except ClientError as error:
            assert error.response["Error"]["Code"] == "TransactionConflictException", error
            return None
        balances.append(int(balance))
    return balances
