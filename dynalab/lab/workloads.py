"""The lab's workloads: clients that issue DynamoDB requests against a router one at a time and
record each as an `Operation` of the history.

Three kinds of keys, each in its own table, every written value unique so a read says which write
it saw:
- registers (`lab-registers`, attribute `v`): PutItem, GetItem with ConsistentRead, PutItem
  conditional on the value the client last saw; a third of the writes go as one BatchWriteItem of
  several keys, recorded as one write per key;
- counters (`lab-counters`, attribute `n`): UpdateItem `ADD n :d`;
- lists (`lab-lists`, attribute `l`): UpdateItem `SET l = list_append(if_not_exists(l, :empty),
  :e)`;
- indexed items (`lab-indexed`, with a global secondary index; see `indexed`): PutItem, and
  Query of the index;
- bank accounts (`lab-bank`, attribute `balance`, each opened with `OPENING_BALANCE`):
  TransactWriteItems moving an amount between two accounts (on different partitions and nodes),
  conditional on the source holding it, and TransactGetItems of every account, whose balances
  must always add up to the same total.
After the faults, `final_reads` reads every key back with strong reads, which the counter and list
checkers compare against, and scans the indexed table and its index until they agree.

Nothing is retried: a retried ADD that was applied once already would be applied twice, which is
the very thing a checker looks for. What a failure means is decided by `outcome_of_exception` and
`history.classify`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from dynalab.bench import DynamoDBClient, DynamoDBError, SigV4Signer, error_type, host_header
from dynalab.lab import indexed, timeline
from dynalab.lab.history import (
    ADD,
    APPEND,
    BALANCES,
    CAS,
    INDEX_READ,
    INDEX_WRITE,
    OPENING_BALANCE,
    READ,
    TRANSFER,
    WRITE,
    Operation,
    Outcome,
    classify,
)

REGISTERS, COUNTERS, LISTS, BANK = "lab-registers", "lab-counters", "lab-lists", "lab-bank"
TABLES = (REGISTERS, COUNTERS, LISTS, BANK)
TRANSFER_AMOUNT_MAX = 30
CLIENT_TIMEOUT_S = 2.0  # A request unanswered this long is abandoned; a write's outcome is unknown.
CONNECT_TIMEOUT_S = 1.0
FAILURE_PAUSE_S = 0.05  # A client's pause after a failure, so a dead router is not spun against.
BATCH_KEYS_MAX = 3  # Keys of one BatchWriteItem of the register workload.
FINAL_READ_TIMEOUT_S = 60.0  # How long the final reads may keep retrying a key.
FINAL_READ_PAUSE_S = 0.2
TABLE_ACTIVE_TIMEOUT_S = 60.0  # Creating the tables, retries included, before a run gives up.
SETUP_PAUSE_S = 0.2
# What a cluster under load or still starting may answer to table setup, to be asked again.
SETUP_RETRYABLE = frozenset(
    {"ServiceUnavailable", "InternalServerError", "ThrottlingException", "LimitExceededException"}
)


def outcome_of_exception(exc: BaseException) -> tuple[Outcome, str]:
    """What a request that got no HTTP reply means: refused before it was sent is failed; a
    timeout or a connection broken after sending leaves it unknown."""
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectionRefusedError):
        return Outcome.FAILED, "ConnectionRefused"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return Outcome.FAILED, "ConnectTimeout"
    if isinstance(exc, TimeoutError):
        return Outcome.UNKNOWN, "ClientTimeout"
    return Outcome.UNKNOWN, type(exc).__name__


@dataclass
class Recorder:
    """Appends operations to the history with times relative to `start`, on `clock`
    (time.monotonic; the simulation's virtual clock in `dynalab.lab.simulated`)."""

    start: float
    history: list[Operation] = field(default_factory=list)
    clock: Callable[[], float] = time.monotonic

    def now(self) -> float:
        return self.clock() - self.start


@dataclass(frozen=True)
class Keys:
    registers: list[str]
    counters: list[str]
    lists: list[str]
    indexed: list[str] = field(default_factory=list)
    accounts: list[str] = field(default_factory=list)

    @classmethod
    def make(
        cls, registers: int, counters: int, lists: int, indexed: int = 0, accounts: int = 0
    ) -> Keys:
        return cls(
            [f"r{i}" for i in range(registers)],
            [f"c{i}" for i in range(counters)],
            [f"l{i}" for i in range(lists)],
            [f"i{i}" for i in range(indexed)],
            [f"a{i}" for i in range(accounts)],
        )

    def tables(self) -> list[tuple[str, list[str]]]:
        return [(REGISTERS, self.registers), (COUNTERS, self.counters), (LISTS, self.lists)]


class Client:
    """One client: a process id, its own random source, and the values it has seen."""

    def __init__(self, process: int, api: DynamoDBClient, recorder: Recorder, seed: str) -> None:
        self.process = process
        self.api = api
        self.recorder = recorder
        self.rng = random.Random(f"{seed}/client-{process}")
        self.counter = 0
        self.last_seen: dict[str, str] = {}

    def unique(self) -> str:
        self.counter += 1
        return f"p{self.process}-{self.counter}"

    async def _call(
        self, operation: str, request: dict[str, Any]
    ) -> tuple[Outcome, str | None, dict[str, Any]]:
        try:
            status, body = await self.api.call(operation, request)
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            outcome, error = outcome_of_exception(exc)
            return outcome, error, {}
        if status == 200:
            reply: dict[str, Any] = orjson.loads(body)
            return Outcome.OK, None, reply
        return classify(status), error_type(status, body), {}

    async def _record(
        self,
        op: str,
        key: str,
        value: Any,
        operation: str,
        request: dict[str, Any],
        read: Callable[[dict[str, Any]], Any] | None = None,
        final: bool = False,
    ) -> Operation:
        invoke = self.recorder.now()
        with timeline.serving(self.process, op, [key]):
            outcome, error, reply = await self._call(operation, request)
        if read is not None:
            value = read(reply) if outcome is Outcome.OK else None
        recorded = Operation(
            self.process, op, key, value, invoke, self.recorder.now(), outcome, error, final
        )
        self.recorder.history.append(recorded)
        return recorded

    async def register_read(self, key: str, final: bool = False) -> Operation:
        request = {"TableName": REGISTERS, "Key": {"k": {"S": key}}, "ConsistentRead": True}
        done = await self._record(READ, key, None, "GetItem", request, _register_value, final)
        if done.ok and done.value is not None:
            self.last_seen[key] = done.value
        return done

    async def register_write(self, key: str) -> None:
        value = self.unique()
        item = {"k": {"S": key}, "v": {"S": value}}
        done = await self._record(
            WRITE, key, value, "PutItem", {"TableName": REGISTERS, "Item": item}
        )
        if done.ok:
            self.last_seen[key] = value

    async def register_batch_write(self, keys: list[str]) -> None:
        """One BatchWriteItem of several keys, recorded as one write per key with the batch's
        times: a key handed back in UnprocessedItems was not applied."""
        values = {key: self.unique() for key in keys}
        request = {
            "RequestItems": {
                REGISTERS: [
                    {"PutRequest": {"Item": {"k": {"S": k}, "v": {"S": v}}}}
                    for k, v in values.items()
                ]
            }
        }
        invoke = self.recorder.now()
        with timeline.serving(self.process, WRITE, keys):
            outcome, error, reply = await self._call("BatchWriteItem", request)
        complete = self.recorder.now()
        unprocessed = {
            entry["PutRequest"]["Item"]["k"]["S"]
            for entry in reply.get("UnprocessedItems", {}).get(REGISTERS, [])
        }
        for key, value in values.items():
            key_outcome, key_error = outcome, error
            if key in unprocessed:
                key_outcome, key_error = Outcome.FAILED, "UnprocessedItems"
            self.recorder.history.append(
                Operation(self.process, WRITE, key, value, invoke, complete, key_outcome, key_error)
            )
            if key_outcome is Outcome.OK:
                self.last_seen[key] = value

    async def register_cas(self, key: str) -> None:
        expected = self.last_seen[key]
        value = self.unique()
        request = {
            "TableName": REGISTERS,
            "Item": {"k": {"S": key}, "v": {"S": value}},
            "ConditionExpression": "v = :expected",
            "ExpressionAttributeValues": {":expected": {"S": expected}},
        }
        done = await self._record(CAS, key, [expected, value], "PutItem", request)
        if done.ok:
            self.last_seen[key] = value

    async def counter_add(self, key: str) -> None:
        delta = self.rng.randint(1, 5)
        request = {
            "TableName": COUNTERS,
            "Key": {"k": {"S": key}},
            "UpdateExpression": "ADD n :d",
            "ExpressionAttributeValues": {":d": {"N": str(delta)}},
        }
        await self._record(ADD, key, delta, "UpdateItem", request)

    async def counter_read(self, key: str, final: bool = False) -> Operation:
        request = {"TableName": COUNTERS, "Key": {"k": {"S": key}}, "ConsistentRead": True}
        return await self._record(READ, key, None, "GetItem", request, _counter_value, final)

    async def list_append(self, key: str) -> None:
        element = self.unique()
        request = {
            "TableName": LISTS,
            "Key": {"k": {"S": key}},
            "UpdateExpression": "SET l = list_append(if_not_exists(l, :empty), :e)",
            "ExpressionAttributeValues": {
                ":empty": {"L": []},
                ":e": {"L": [{"S": element}]},
            },
        }
        await self._record(APPEND, key, element, "UpdateItem", request)

    async def list_read(self, key: str, final: bool = False) -> Operation:
        request = {"TableName": LISTS, "Key": {"k": {"S": key}}, "ConsistentRead": True}
        return await self._record(READ, key, None, "GetItem", request, _list_value, final)

    async def index_write(self, key: str) -> None:
        value = self.unique()
        group = (
            None if self.rng.random() < indexed.UNGROUPED_SHARE else self.rng.choice(indexed.GROUPS)
        )
        request = indexed.write_request(key, group, value)
        await self._record(INDEX_WRITE, key, [group, value], "PutItem", request)

    async def index_read(self) -> None:
        group = self.rng.choice(indexed.GROUPS)
        request = indexed.read_request(group)
        await self._record(INDEX_READ, group, None, "Query", request, indexed.entries_of)

    async def bank_transfer(self, accounts: list[str]) -> None:
        """Move an amount between two accounts in one transaction, if the source holds it."""
        source, target = self.rng.sample(accounts, 2)
        amount = self.rng.randint(1, TRANSFER_AMOUNT_MAX)
        value = {":a": {"N": str(amount)}}
        request = {
            "TransactItems": [
                {
                    "Update": {
                        "TableName": BANK,
                        "Key": {"k": {"S": source}},
                        "UpdateExpression": "SET balance = balance - :a",
                        "ConditionExpression": "balance >= :a",
                        "ExpressionAttributeValues": value,
                    }
                },
                {
                    "Update": {
                        "TableName": BANK,
                        "Key": {"k": {"S": target}},
                        "UpdateExpression": "SET balance = balance + :a",
                        "ExpressionAttributeValues": value,
                    }
                },
            ]
        }
        await self._record(
            TRANSFER, "bank", [source, target, amount], "TransactWriteItems", request
        )

    async def bank_balances(self, accounts: list[str], final: bool = False) -> Operation:
        """Every account's balance, read as of one instant (TransactGetItems)."""
        request = {
            "TransactItems": [
                {"Get": {"TableName": BANK, "Key": {"k": {"S": account}}}} for account in accounts
            ]
        }

        def balances(reply: dict[str, Any]) -> dict[str, int | None]:
            return {
                account: (int(r["Item"]["balance"]["N"]) if r.get("Item") else None)
                for account, r in zip(accounts, reply["Responses"], strict=True)
            }

        return await self._record(
            BALANCES, "bank", None, "TransactGetItems", request, balances, final
        )

    async def one_operation(self, keys: Keys) -> None:
        """Issue one operation drawn from this client's random source."""
        kinds = [
            kind
            for kind, present in (
                ("r", keys.registers),
                ("c", keys.counters),
                ("l", keys.lists),
                ("i", keys.indexed),
                ("b", keys.accounts[1:]),
            )
            if present
        ]
        kind = self.rng.choice(kinds)
        if kind == "i":
            if self.rng.random() < 0.5:
                await self.index_read()
            else:
                await self.index_write(self.rng.choice(keys.indexed))
        elif kind == "b":
            if self.rng.random() < 0.7:
                await self.bank_transfer(keys.accounts)
            else:
                await self.bank_balances(keys.accounts)
        elif kind == "c":
            await self.counter_add(self.rng.choice(keys.counters))
        elif kind == "l":
            await self.list_append(self.rng.choice(keys.lists))
        else:
            key = self.rng.choice(keys.registers)
            draw = self.rng.random()
            if draw < 0.4:
                await self.register_read(key)
            elif draw < 0.6 and key in self.last_seen:
                await self.register_cas(key)
            elif draw < 0.75 and len(keys.registers) > 1:
                count = self.rng.randint(2, min(BATCH_KEYS_MAX, len(keys.registers)))
                await self.register_batch_write(self.rng.sample(keys.registers, count))
            else:
                await self.register_write(key)


def _register_value(reply: dict[str, Any]) -> str | None:
    item = reply.get("Item")
    return None if item is None else str(item["v"]["S"])


def _counter_value(reply: dict[str, Any]) -> int:
    item = reply.get("Item")
    return 0 if item is None else int(item["n"]["N"])


def _list_value(reply: dict[str, Any]) -> list[str]:
    item = reply.get("Item")
    return [] if item is None else [element["S"] for element in item["l"]["L"]]


def session(endpoint: str) -> tuple[aiohttp.ClientSession, DynamoDBClient]:
    timeout = aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    http = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0))
    signer = SigV4Signer("lab", "lab", "us-east-1", host_header(endpoint))
    return http, DynamoDBClient(http, endpoint, signer)


async def create_tables(
    api: DynamoDBClient, keys: Keys, plan: indexed.IndexPlan | None = None
) -> None:
    """Create the tables and wait until each is ACTIVE, retrying what a busy cluster refuses
    (a CreateTable that was applied before its answer was lost is then "in use": done). Tables
    of the same names left by an earlier run (a cluster the lab did not start) are dropped first:
    the checkers need every value in them to come from this run."""
    deadline = time.monotonic() + TABLE_ACTIVE_TIMEOUT_S
    await _drop_tables(api, [*TABLES, indexed.TABLE], deadline)
    requests: list[dict[str, Any]] = [
        {
            "TableName": table,
            "AttributeDefinitions": [{"AttributeName": "k", "AttributeType": "S"}],
            "KeySchema": [{"AttributeName": "k", "KeyType": "HASH"}],
            "BillingMode": "PAY_PER_REQUEST",
        }
        for table in TABLES
    ]
    plan = indexed.IndexPlan() if plan is None else plan
    if keys.indexed:
        requests.append(indexed.create_table_request(plan))
    for request in requests:
        while True:
            try:
                await api.request("CreateTable", request)
                break
            except DynamoDBError as exc:
                if exc.type_name == "ResourceInUseException":
                    break
                if exc.type_name not in SETUP_RETRYABLE or time.monotonic() > deadline:
                    raise
            except (TimeoutError, aiohttp.ClientError):
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(SETUP_PAUSE_S)
    for table in (request["TableName"] for request in requests):
        while True:
            try:
                reply = await api.request("DescribeTable", {"TableName": table})
                if reply["Table"]["TableStatus"] == "ACTIVE":
                    break
            except DynamoDBError as exc:
                if exc.type_name not in SETUP_RETRYABLE:
                    raise
            except (TimeoutError, aiohttp.ClientError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"table {table} not ACTIVE after {TABLE_ACTIVE_TIMEOUT_S} s")
            await asyncio.sleep(SETUP_PAUSE_S)
    if keys.indexed and plan.preload:
        await indexed.preload(api, plan)


async def _drop_tables(api: DynamoDBClient, names: list[str], deadline: float) -> None:
    """Delete each table that exists and wait until it is gone."""
    for name in names:
        while True:
            try:
                await api.request("DescribeTable", {"TableName": name})
            except DynamoDBError as exc:
                if exc.type_name == "ResourceNotFoundException":
                    break
                if exc.type_name not in SETUP_RETRYABLE:
                    raise
            except (TimeoutError, aiohttp.ClientError):
                pass
            else:
                try:
                    await api.request("DeleteTable", {"TableName": name})
                except DynamoDBError as exc:
                    # Gone meanwhile, being deleted already, or still being created: ask again.
                    expected = {
                        *SETUP_RETRYABLE,
                        "ResourceInUseException",
                        "ResourceNotFoundException",
                    }
                    if exc.type_name not in expected:
                        raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"table {name} of an earlier run still there")
            await asyncio.sleep(SETUP_PAUSE_S)


async def run_clients(
    api: DynamoDBClient,
    recorder: Recorder,
    keys: Keys,
    clients: int,
    until_s: float,
    seed: str,
    plan: indexed.IndexPlan | None = None,
) -> None:
    """Run `clients` clients back to back until `until_s` on the recorder's clock (and add the
    index online when the plan says so)."""

    async def loop(client: Client) -> None:
        while recorder.now() < until_s:
            before = len(recorder.history)
            await client.one_operation(keys)
            if any(not o.ok for o in recorder.history[before:]):
                await asyncio.sleep(FAILURE_PAUSE_S)

    online = (
        indexed.create_online(api, recorder, plan) if plan is not None and keys.indexed else None
    )
    await asyncio.gather(
        *(loop(Client(p, api, recorder, seed)) for p in range(1, clients + 1)),
        *([online] if online is not None else []),
    )


async def final_reads(api: DynamoDBClient, recorder: Recorder, keys: Keys) -> None:
    """Read every key back with strong reads, retrying each until it answers or time is up."""
    reader = Client(0, api, recorder, "final")
    readers = [
        *((reader.register_read, key) for key in keys.registers),
        *((reader.counter_read, key) for key in keys.counters),
        *((reader.list_read, key) for key in keys.lists),
    ]
    deadline = recorder.now() + FINAL_READ_TIMEOUT_S
    for read, key in readers:
        while not (await read(key, True)).ok and recorder.now() < deadline:
            await asyncio.sleep(FINAL_READ_PAUSE_S)
    if keys.indexed:
        recorder.history.append(await indexed.final_scan(api, recorder))
    # Locks a dead router or node left are released by a resolver within its resolve time.
    while (
        keys.accounts
        and not (await reader.bank_balances(keys.accounts, True)).ok
        and recorder.now() < deadline
    ):
        await asyncio.sleep(FINAL_READ_PAUSE_S)


async def open_accounts(api: DynamoDBClient, keys: Keys) -> None:
    """Give every account its opening balance (before the clients and the faults start)."""
    deadline = time.monotonic() + TABLE_ACTIVE_TIMEOUT_S
    for account in keys.accounts:
        item = {"k": {"S": account}, "balance": {"N": str(OPENING_BALANCE)}}
        while True:
            try:
                await api.request("PutItem", {"TableName": BANK, "Item": item})
                break
            except (DynamoDBError, TimeoutError, aiohttp.ClientError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(SETUP_PAUSE_S)
