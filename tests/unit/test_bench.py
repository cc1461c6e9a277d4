"""Tests of `dynalab bench`: its statistics, request building and signing as pure functions, and
whole runs against a small in-memory DynamoDB served by aiohttp in the test process."""

from __future__ import annotations

import io
import random
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import botocore.auth
import orjson
import pytest
from aiohttp import web
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from rich.console import Console

from dynalab import bench

NAMESPACE = "com.amazonaws.dynamodb.v20120810#"


# --- statistics ----------------------------------------------------------------------------------


def test_percentile_is_nearest_rank() -> None:
    samples = [float(i) for i in range(1, 101)]
    assert bench.percentile(samples, 0.50) == 50.0
    assert bench.percentile(samples, 0.95) == 95.0
    assert bench.percentile(samples, 0.99) == 99.0
    assert bench.percentile(samples, 1.0) == 100.0
    assert bench.percentile(samples, 0.001) == 1.0


def test_percentile_returns_an_observed_sample() -> None:
    samples = [1.0, 2.0, 10.0]
    assert bench.percentile(samples, 0.5) == 2.0
    assert bench.percentile(samples, 0.99) == 10.0
    assert bench.percentile([7.0], 0.5) == 7.0


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_percentile_rejects_fractions_outside_0_1(fraction: float) -> None:
    with pytest.raises(ValueError):
        bench.percentile([1.0], fraction)


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        bench.percentile([], 0.5)


def test_latency_summary_in_milliseconds() -> None:
    samples = [i / 1000 for i in range(100, 0, -1)]  # 1..100 ms, unsorted
    summary = bench.LatencySummary.from_seconds(samples)
    assert summary is not None
    assert summary.count == 100
    assert summary.p50_ms == pytest.approx(50.0)
    assert summary.p95_ms == pytest.approx(95.0)
    assert summary.p99_ms == pytest.approx(99.0)
    assert summary.max_ms == pytest.approx(100.0)
    assert summary.mean_ms == pytest.approx(50.5)
    assert bench.LatencySummary.from_seconds([]) is None


def test_result_from_recorder() -> None:
    recorder = bench.Recorder()
    recorder.latencies_s.extend([0.001, 0.002, 0.003, 0.004])
    recorder.errors["ThrottlingException"] += 3
    recorder.errors["ValidationException"] += 1
    result = bench.BenchResult.from_recorder(recorder, "put", 8, 2.0, 0.5)
    assert result.ops == 4
    assert result.ops_per_s == 2.0
    assert result.error_count == 4
    assert list(result.errors) == ["ThrottlingException", "ValidationException"]
    assert result.latency is not None and result.latency.p50_ms == pytest.approx(2.0)


def test_error_type_strips_the_namespace() -> None:
    body = orjson.dumps({"__type": NAMESPACE + "ResourceNotFoundException", "message": "x"})
    assert bench.error_type(400, body) == "ResourceNotFoundException"
    coral = orjson.dumps({"__type": "com.amazon.coral.service#SerializationException"})
    assert bench.error_type(400, coral) == "SerializationException"


@pytest.mark.parametrize("body", [b"", b"<html>oops</html>", b"[]", b'{"message": "no type"}'])
def test_error_type_falls_back_to_the_status(body: bytes) -> None:
    assert bench.error_type(503, body) == "HTTP 503"


# --- configuration, items and requests -----------------------------------------------------------


def dynamodb_size(item: dict[str, Any]) -> int:
    """DynamoDB's size of an item made only of string attributes."""
    return sum(len(name.encode()) + len(value["S"].encode()) for name, value in item.items())


@pytest.mark.parametrize("size", [40, 200, 1000, 4096])
def test_items_have_the_requested_size(size: int) -> None:
    assert dynamodb_size(bench.make_item(bench.partition_key(3), None, size)) == size
    assert dynamodb_size(bench.make_item(bench.partition_key(3), bench.sort_key(7), size)) == size


def test_tiny_items_still_carry_a_payload() -> None:
    item = bench.make_item(bench.partition_key(1), bench.sort_key(1), 1)
    assert item["data"]["S"] == "x"


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        bench.BenchConfig(endpoint="http://h", workload="delete")
    with pytest.raises(ValueError):
        bench.BenchConfig(endpoint="http://h", concurrency=0)
    with pytest.raises(ValueError):
        bench.BenchConfig(endpoint="http://h", item_size=500 * 1024)
    with pytest.raises(ValueError):
        bench.BenchConfig(endpoint="localhost:8000")


def test_query_key_space_groups_items_under_partition_keys() -> None:
    config = bench.BenchConfig(endpoint="http://h", workload="query", keys=100, query_items=10)
    assert config.has_sort_key and config.table_name == "dynalab-bench-range"
    assert config.partition_keys == 10
    items = list(bench.preload_items(config))
    assert len(items) == config.preload_count == 100
    assert len({item["pk"]["S"] for item in items}) == 10
    assert bench.create_table_request(config)["KeySchema"][1] == {
        "AttributeName": "sk",
        "KeyType": "RANGE",
    }


def test_hash_key_space() -> None:
    config = bench.BenchConfig(endpoint="http://h", workload="get", keys=30, table="t1")
    assert not config.has_sort_key and config.table_name == "t1"
    assert len({item["pk"]["S"] for item in bench.preload_items(config)}) == 30
    assert len(bench.create_table_request(config)["KeySchema"]) == 1
    assert not bench.BenchConfig(endpoint="http://h", workload="put").preloads


def test_mixed_is_half_gets_half_puts() -> None:
    config = bench.BenchConfig(endpoint="http://h", workload="mixed", keys=50)
    plan = bench.RequestPlan(config, random.Random(7))
    operations = [plan.next_request()[0] for _ in range(10_000)]
    assert set(operations) == {"GetItem", "PutItem"}
    assert 4_700 < operations.count("GetItem") < 5_300


def test_scan_walks_the_table_and_starts_over() -> None:
    config = bench.BenchConfig(endpoint="http://h", workload="scan", query_items=5)
    plan = bench.RequestPlan(config, random.Random(1))
    operation, request = plan.next_request()
    assert operation == "Scan" and request["Limit"] == 5 and "ExclusiveStartKey" not in request
    last_key = {"pk": {"S": "key-000000004"}}
    assert plan.observe("Scan", orjson.dumps({"Count": 5, "LastEvaluatedKey": last_key}))
    assert plan.next_request()[1]["ExclusiveStartKey"] == last_key
    # An empty page in the middle of a walk is normal, and so is one that ends it.
    assert plan.observe("Scan", orjson.dumps({"Count": 0, "LastEvaluatedKey": last_key}))
    assert plan.observe("Scan", orjson.dumps({"Count": 0}))
    assert "ExclusiveStartKey" not in plan.next_request()[1]
    # A walk that ends on its first page without items found an empty table.
    assert not plan.observe("Scan", orjson.dumps({"Count": 0}))


def test_observe_counts_reads_that_found_nothing() -> None:
    plan = bench.RequestPlan(
        bench.BenchConfig(endpoint="http://h", workload="get"), random.Random()
    )
    assert plan.observe("GetItem", b'{"Item": {"pk": {"S": "a"}}}')
    assert not plan.observe("GetItem", b"{}")
    assert plan.observe("PutItem", b"{}")


# --- signing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "host"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000"),
        ("http://localhost", "localhost"),
        ("http://localhost:80/", "localhost"),
        ("https://dynamodb.us-east-1.amazonaws.com", "dynamodb.us-east-1.amazonaws.com"),
        ("https://example.com:8443", "example.com:8443"),
        ("http://[::1]:8000", "[::1]:8000"),
    ],
)
def test_host_header(endpoint: str, host: str) -> None:
    assert bench.host_header(endpoint) == host


@pytest.mark.parametrize("token", [None, "session-token"])
@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8000", "https://dynamodb.example.com"])
def test_signature_matches_botocore(
    monkeypatch: pytest.MonkeyPatch, token: str | None, endpoint: str
) -> None:
    moment = datetime(2024, 2, 29, 23, 59, 58, tzinfo=UTC)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: moment.replace(tzinfo=None))
    body = orjson.dumps({"TableName": "t", "Key": {"pk": {"S": "k1"}}})
    request = AWSRequest(
        method="POST",
        url=endpoint + "/",
        data=body,
        headers={"Content-Type": bench.CONTENT_TYPE, "X-Amz-Target": "DynamoDB_20120810.GetItem"},
    )
    botocore.auth.SigV4Auth(Credentials("AKID", "SECRET", token), "dynamodb", "eu-west-1").add_auth(
        request
    )
    signer = bench.SigV4Signer("AKID", "SECRET", "eu-west-1", bench.host_header(endpoint), token)
    ours = signer.headers("GetItem", body, moment.timestamp())
    assert ours["Authorization"] == request.headers["Authorization"]
    assert ours["X-Amz-Date"] == request.headers["X-Amz-Date"]
    if token:
        assert ours["X-Amz-Security-Token"] == token


def test_signer_follows_the_clock_across_midnight() -> None:
    signer = bench.SigV4Signer("AKID", "SECRET", "us-east-1", "h")
    before = signer.headers(
        "PutItem", b"{}", datetime(2024, 1, 1, 23, 59, 59, tzinfo=UTC).timestamp()
    )
    after = signer.headers("PutItem", b"{}", datetime(2024, 1, 2, 0, 0, 0, tzinfo=UTC).timestamp())
    assert "AKID/20240101/us-east-1/dynamodb/aws4_request" in before["Authorization"]
    assert "AKID/20240102/us-east-1/dynamodb/aws4_request" in after["Authorization"]
    assert after["X-Amz-Date"] == "20240102T000000Z"


# --- whole runs against an in-memory DynamoDB -----------------------------------------------------


class FakeDynamoDB:
    """Just enough of DynamoDB for the bench: tables of string keys in dicts.

    `throttle_every` makes every n-th PutItem fail with ProvisionedThroughputExceededException.
    """

    def __init__(self, throttle_every: int = 0) -> None:
        self.tables: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []
        self.throttle_every = throttle_every
        self.puts = 0
        self.unsigned = 0

    def error(self, type_name: str, message: str = "") -> web.Response:
        body = {"__type": NAMESPACE + type_name, "message": message}
        return web.json_response(body, status=400)

    async def handle(self, request: web.Request) -> web.Response:
        if not request.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256 "):
            self.unsigned += 1
        operation = request.headers["X-Amz-Target"].removeprefix(bench.TARGET_PREFIX)
        body = orjson.loads(await request.read())
        if operation == "CreateTable":
            if body["TableName"] in self.tables:
                return self.error("ResourceInUseException")
            keys = [k["AttributeName"] for k in body["KeySchema"]]
            # New tables report CREATING once, so the bench has to wait for ACTIVE.
            self.tables[body["TableName"]] = {"keys": keys, "items": {}, "describes": 0}
            return web.json_response({"TableDescription": {"TableStatus": "CREATING"}})
        table = self.tables.get(body["TableName"])
        if table is None:
            return self.error("ResourceNotFoundException", "Requested resource not found")
        if operation == "DeleteTable":
            del self.tables[body["TableName"]]
            self.deleted.append(body["TableName"])
            return web.json_response({"TableDescription": {"TableStatus": "DELETING"}})
        if operation == "DescribeTable":
            table["describes"] += 1
            status = "ACTIVE" if table["describes"] > 1 else "CREATING"
            return web.json_response({"Table": {"TableStatus": status}})
        items = table["items"]
        if operation == "PutItem":
            self.puts += 1
            if self.throttle_every and self.puts % self.throttle_every == 0:
                return self.error("ProvisionedThroughputExceededException")
            item = body["Item"]
            items[tuple(item[k]["S"] for k in table["keys"])] = item
            return web.json_response({})
        if operation == "GetItem":
            key = tuple(body["Key"][k]["S"] for k in table["keys"])
            return web.json_response({"Item": items[key]} if key in items else {})
        ordered = [items[k] for k in sorted(items)]
        if operation == "Query":
            pk = body["ExpressionAttributeValues"][":pk"]["S"]
            found = [item for item in ordered if item["pk"]["S"] == pk]
            return web.json_response({"Items": found, "Count": len(found)})
        assert operation == "Scan"
        start = body.get("ExclusiveStartKey")
        if start is not None:
            after = tuple(start[k]["S"] for k in table["keys"])
            ordered = [items[k] for k in sorted(items) if k > after]
        page = ordered[: body["Limit"]]
        reply: dict[str, Any] = {"Items": page, "Count": len(page)}
        if len(page) < len(ordered):
            reply["LastEvaluatedKey"] = {k: page[-1][k] for k in table["keys"]}
        return web.json_response(reply)


ServerFactory = Callable[..., Any]


@pytest.fixture
async def fake_dynamodb() -> AsyncIterator[ServerFactory]:
    """Starts FakeDynamoDB servers on free loopback ports; returns (fake, endpoint URL)."""
    runners: list[web.AppRunner] = []

    async def start(**options: Any) -> tuple[FakeDynamoDB, str]:
        fake = FakeDynamoDB(**options)
        app = web.Application()
        app.router.add_post("/", fake.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        return fake, f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


def quiet_console() -> Console:
    return Console(file=io.StringIO(), force_terminal=False)


@pytest.mark.parametrize("workload", bench.WORKLOADS)
async def test_each_workload_runs_cleanly(fake_dynamodb: ServerFactory, workload: str) -> None:
    fake, endpoint = await fake_dynamodb()
    config = bench.BenchConfig(
        endpoint=endpoint,
        workload=workload,
        concurrency=4,
        duration_s=0.3,
        keys=40,
        query_items=5,
        keep=True,
    )
    result = await bench.run_async(config, quiet_console())
    assert result.ops > 0 and result.ops_per_s > 0
    assert result.errors == {}
    assert result.empty_reads == 0
    assert result.latency is not None and result.latency.p99_ms >= result.latency.p50_ms
    assert fake.unsigned == 0
    table = fake.tables[config.table_name]
    expected_items = 40 if workload != "put" else None
    if expected_items is not None:
        assert len(table["items"]) == expected_items


async def test_errors_are_counted_by_type(fake_dynamodb: ServerFactory) -> None:
    # Every 7th write is throttled: preload retries through it, the run counts it.
    _, endpoint = await fake_dynamodb(throttle_every=7)
    config = bench.BenchConfig(
        endpoint=endpoint, workload="mixed", concurrency=4, duration_s=0.3, keys=30
    )
    result = await bench.run_async(config, quiet_console())
    assert result.ops > 0
    assert set(result.errors) == {"ProvisionedThroughputExceededException"}
    assert result.empty_reads == 0


async def test_a_missing_table_fails_early_without_create(fake_dynamodb: ServerFactory) -> None:
    _, endpoint = await fake_dynamodb()
    config = bench.BenchConfig(endpoint=endpoint, workload="get", create_table=False)
    with pytest.raises(bench.DynamoDBError, match="ResourceNotFoundException"):
        await bench.run_async(config, quiet_console())


async def test_an_existing_table_is_reused(fake_dynamodb: ServerFactory) -> None:
    fake, endpoint = await fake_dynamodb()
    config = bench.BenchConfig(
        endpoint=endpoint, workload="get", duration_s=0.1, keys=10, keep=True
    )
    for _ in range(2):
        result = await bench.run_async(config, quiet_console())
        assert result.ops > 0 and result.errors == {}
    assert list(fake.tables) == [config.table_name]
    assert fake.deleted == []


async def test_a_table_the_bench_created_is_deleted_unless_kept(
    fake_dynamodb: ServerFactory,
) -> None:
    fake, endpoint = await fake_dynamodb()
    kept = bench.BenchConfig(endpoint=endpoint, workload="put", duration_s=0.1, keep=True)
    await bench.run_async(kept, quiet_console())
    assert list(fake.tables) == [kept.table_name]
    # The table exists now, so this run did not create it and leaves it alone.
    reused = bench.BenchConfig(endpoint=endpoint, workload="put", duration_s=0.1)
    await bench.run_async(reused, quiet_console())
    assert fake.deleted == []
    console = Console(file=io.StringIO(), force_terminal=False)
    fresh = bench.BenchConfig(endpoint=endpoint, workload="query", duration_s=0.1, keys=10)
    await bench.run_async(fresh, console)
    assert fake.deleted == [fresh.table_name]
    assert list(fake.tables) == [kept.table_name]
    assert isinstance(console.file, io.StringIO)
    assert f"deleted table {fresh.table_name}" in console.file.getvalue()


async def test_progress_lines_when_output_is_not_a_terminal(fake_dynamodb: ServerFactory) -> None:
    _, endpoint = await fake_dynamodb()
    console = Console(file=io.StringIO(), force_terminal=False)
    config = bench.BenchConfig(endpoint=endpoint, workload="put", duration_s=2.5)
    await bench.run_async(config, console)
    assert isinstance(console.file, io.StringIO)
    assert "/2.5 s" in console.file.getvalue()


def test_render_result_lists_throughput_latency_and_errors() -> None:
    recorder = bench.Recorder()
    recorder.latencies_s.extend([0.001] * 10)
    recorder.errors["ThrottlingException"] = 2
    result = bench.BenchResult.from_recorder(recorder, "put", 4, 1.0, 0.2)
    console = Console(record=True, width=120, file=io.StringIO())
    console.print(bench.render_result(result, bench.BenchConfig(endpoint="http://h")))
    text = console.export_text()
    for expected in ("ops/s", "10.0", "p50 (ms)", "p99 (ms)", "ThrottlingException", "1.00"):
        assert expected in text
