"""`dynalab bench`: a load generator for any DynamoDB endpoint, dynalab or another.

It prepares a table (PAY_PER_REQUEST; `pk` S, plus `sk` S for the query workload), preloads the key
space for the workloads that read, then runs `concurrency` asyncio workers that issue one request
after another until the duration is up, and prints throughput, latency percentiles and errors by
their DynamoDB `__type`.

The client has to stay cheap, because on a small machine it shares the CPU with the cluster it
measures: one aiohttp session with kept-alive connections, uvloop, orjson bodies, and a SigV4 signer
of our own that caches the signing key (botocore's SigV4Auth costs about 70 us a request, this one a
few, and `test_bench.py` checks that both produce the same signature). It prints the CPU time it
used so a reader can tell whether the client was the bottleneck.

The statistics (percentiles, the summary of a run) and the request builders are pure functions at
the top of this module, tested without a network.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import math
import os
import random
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from core.limits import ITEM_SIZE_BYTES_MAX

WORKLOADS = ("put", "get", "query", "scan", "mixed")
TARGET_PREFIX = "DynamoDB_20120810."
CONTENT_TYPE = "application/x-amz-json-1.0"
REQUEST_TIMEOUT_S = 10.0  # A request slower than this counts as an error, not a latency sample.
TABLE_ACTIVE_TIMEOUT_S = 60.0  # How long a new table may stay CREATING before the bench gives up.
TABLE_POLL_INTERVAL_S = 0.2
PRELOAD_ATTEMPTS_MAX = 5  # Tries per preloaded item when the server throttles.
PRELOAD_BACKOFF_S = 0.05  # First pause after a throttled preload write; doubles each try.
PROGRESS_REFRESH_S = 0.5
PROGRESS_LINE_S = 2.0  # Progress when output is not a terminal: a line every this many seconds.
# Throttling is the one error worth retrying while preloading: the data must all be there.
THROTTLING_TYPES = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException"})
DUMMY_ACCESS_KEY = "dynalab"
DUMMY_SECRET_KEY = "dynalab"

# The attribute names of the bench's items. Short names keep the key overhead of an item small,
# so --item-size mostly measures the payload.
PK = "pk"
SK = "sk"
PAYLOAD = "data"


# --- statistics -----------------------------------------------------------------------------------


def percentile(sorted_samples: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest sample with at least `fraction` of the samples
    at or below it. It always returns an observed value, which is what latency reports expect."""
    if not sorted_samples:
        raise ValueError("percentile of no samples")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    rank = math.ceil(fraction * len(sorted_samples))
    return sorted_samples[rank - 1]


@dataclass(frozen=True)
class LatencySummary:
    """Latency of the successful requests of a run, in milliseconds."""

    count: int
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def from_seconds(cls, samples: Sequence[float]) -> LatencySummary | None:
        """Summarise latencies given in seconds; None when there are none."""
        if not samples:
            return None
        ordered = sorted(samples)
        return cls(
            count=len(ordered),
            mean_ms=1000.0 * sum(ordered) / len(ordered),
            p50_ms=1000.0 * percentile(ordered, 0.50),
            p95_ms=1000.0 * percentile(ordered, 0.95),
            p99_ms=1000.0 * percentile(ordered, 0.99),
            max_ms=1000.0 * ordered[-1],
        )


def error_type(status: int, body: bytes) -> str:
    """The short DynamoDB error type of a failed reply: `__type` without its namespace
    ("com.amazonaws.dynamodb.v20120810#ResourceNotFoundException" -> "ResourceNotFoundException"),
    or "HTTP <status>" when the body carries none."""
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        reply = None
    type_name = reply.get("__type") if isinstance(reply, dict) else None
    if not isinstance(type_name, str) or not type_name:
        return f"HTTP {status}"
    return type_name.rsplit("#", 1)[-1]


@dataclass
class Recorder:
    """What the workers observed, appended to as replies arrive."""

    latencies_s: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    # Successful reads that found nothing: a sign that the key space was not loaded as expected.
    empty_reads: int = 0

    @property
    def ops(self) -> int:
        return len(self.latencies_s)


@dataclass(frozen=True)
class BenchResult:
    """The outcome of a run, ready to print."""

    workload: str
    concurrency: int
    elapsed_s: float
    ops: int
    errors: dict[str, int]
    empty_reads: int
    latency: LatencySummary | None
    client_cpu_s: float

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @classmethod
    def from_recorder(
        cls,
        recorder: Recorder,
        workload: str,
        concurrency: int,
        elapsed_s: float,
        client_cpu_s: float,
    ) -> BenchResult:
        return cls(
            workload=workload,
            concurrency=concurrency,
            elapsed_s=elapsed_s,
            ops=recorder.ops,
            errors=dict(recorder.errors.most_common()),
            empty_reads=recorder.empty_reads,
            latency=LatencySummary.from_seconds(recorder.latencies_s),
            client_cpu_s=client_cpu_s,
        )


# --- configuration, keys, items and requests ------------------------------------------------------


@dataclass(frozen=True)
class BenchConfig:
    endpoint: str
    workload: str = "put"
    concurrency: int = 32
    duration_s: float = 10.0
    item_size: int = 200
    table: str | None = None
    keys: int = 1000  # Items in the key space (for query: keys // query_items partition keys).
    query_items: int = 10  # Items under each partition key for query; page size for scan.
    create_table: bool = True
    region: str = "us-east-1"
    keep: bool = False  # Keep a table the bench created; by default it is deleted afterwards.

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}")
        if self.concurrency < 1 or self.keys < 1 or self.query_items < 1:
            raise ValueError("concurrency, keys and query items must be at least 1")
        if self.duration_s <= 0:
            raise ValueError("duration must be positive")
        if not 1 <= self.item_size <= ITEM_SIZE_BYTES_MAX:
            raise ValueError(f"item size must be between 1 and {ITEM_SIZE_BYTES_MAX} bytes")
        if urlsplit(self.endpoint).scheme not in ("http", "https"):
            raise ValueError(f"endpoint must be an http:// or https:// URL, got {self.endpoint!r}")

    @property
    def has_sort_key(self) -> bool:
        return self.workload == "query"

    @property
    def table_name(self) -> str:
        if self.table:
            return self.table
        # One default table per key schema, so runs of different workloads do not collide.
        return "dynalab-bench-range" if self.has_sort_key else "dynalab-bench"

    @property
    def partition_keys(self) -> int:
        """How many distinct partition keys the key space has."""
        return max(1, self.keys // self.query_items) if self.has_sort_key else self.keys

    @property
    def preloads(self) -> bool:
        return self.workload != "put"

    @property
    def preload_count(self) -> int:
        """How many items the preload writes."""
        return self.partition_keys * self.query_items if self.has_sort_key else self.keys


def partition_key(index: int) -> str:
    return f"key-{index:09d}"


def sort_key(index: int) -> str:
    return f"{index:06d}"


def make_item(pk: str, sk: str | None, item_size: int) -> dict[str, Any]:
    """An item of about `item_size` bytes by DynamoDB's measure (the UTF-8 lengths of attribute
    names and string values), padded with a string attribute of at least one byte."""
    item: dict[str, Any] = {PK: {"S": pk}}
    used = len(PK) + len(pk) + len(PAYLOAD)
    if sk is not None:
        item[SK] = {"S": sk}
        used += len(SK) + len(sk)
    item[PAYLOAD] = {"S": "x" * max(1, item_size - used)}
    return item


def create_table_request(config: BenchConfig) -> dict[str, Any]:
    attributes = [{"AttributeName": PK, "AttributeType": "S"}]
    key_schema = [{"AttributeName": PK, "KeyType": "HASH"}]
    if config.has_sort_key:
        attributes.append({"AttributeName": SK, "AttributeType": "S"})
        key_schema.append({"AttributeName": SK, "KeyType": "RANGE"})
    return {
        "TableName": config.table_name,
        "AttributeDefinitions": attributes,
        "KeySchema": key_schema,
        "BillingMode": "PAY_PER_REQUEST",
    }


def preload_items(config: BenchConfig) -> Iterator[dict[str, Any]]:
    """Every item of the key space that the reading workloads expect to find."""
    if config.has_sort_key:
        for p in range(config.partition_keys):
            for s in range(config.query_items):
                yield make_item(partition_key(p), sort_key(s), config.item_size)
    else:
        for p in range(config.keys):
            yield make_item(partition_key(p), None, config.item_size)


class RequestPlan:
    """Chooses each worker's next request and keeps its per-worker state (a scan's position)."""

    def __init__(self, config: BenchConfig, rng: random.Random) -> None:
        self.config = config
        self.table = config.table_name
        self.rng = rng
        self.scan_start: dict[str, Any] | None = None
        self.padding = make_item(partition_key(0), None, config.item_size)[PAYLOAD]

    def next_request(self) -> tuple[str, dict[str, Any]]:
        """The operation name and request body of the next request."""
        workload = self.config.workload
        if workload == "mixed":
            workload = "get" if self.rng.random() < 0.5 else "put"
        pk = partition_key(self.rng.randrange(self.config.partition_keys))
        if workload == "put":
            return "PutItem", {
                "TableName": self.table,
                "Item": {PK: {"S": pk}, PAYLOAD: self.padding},
            }
        if workload == "get":
            return "GetItem", {"TableName": self.table, "Key": {PK: {"S": pk}}}
        if workload == "query":
            return "Query", {
                "TableName": self.table,
                "KeyConditionExpression": "#pk = :pk",
                "ExpressionAttributeNames": {"#pk": PK},
                "ExpressionAttributeValues": {":pk": {"S": pk}},
            }
        request: dict[str, Any] = {"TableName": self.table, "Limit": self.config.query_items}
        if self.scan_start is not None:
            request["ExclusiveStartKey"] = self.scan_start
        return "Scan", request

    def observe(self, operation: str, body: bytes) -> bool:
        """Take in a successful reply; return False for a read that found nothing."""
        if operation == "PutItem":
            return True
        reply = orjson.loads(body)
        if operation == "GetItem":
            return "Item" in reply
        if operation == "Scan":
            # Each worker walks the table page by page and starts over at the end. A page may
            # legitimately be empty mid-walk (DynamoDB may stop at a partition's end), so only a
            # walk that ends on its first page without items means the table is empty.
            walk_started = self.scan_start is None
            self.scan_start = reply.get("LastEvaluatedKey")
            return bool(reply.get("Count")) or not (walk_started and self.scan_start is None)
        return bool(reply.get("Count"))


# --- signing and transport ------------------------------------------------------------------------


class SigV4Signer:
    """Signs DynamoDB JSON requests with AWS Signature Version 4, as botocore's SigV4Auth does.

    Signs the headers content-type, host, x-amz-date, x-amz-target (and x-amz-security-token when a
    session token is given). The derived signing key depends only on the date, so it is computed
    once a day instead of once a request.
    """

    service = "dynamodb"

    def __init__(
        self,
        access_key: str,
        secret_key: str,
        region: str,
        host: str,
        session_token: str | None = None,
    ) -> None:
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self.host = host
        self.session_token = session_token
        self.signed_headers = "content-type;host;x-amz-date;" + (
            "x-amz-security-token;x-amz-target" if session_token else "x-amz-target"
        )
        self._second = -1
        self._amz_date = ""
        self._date = ""
        self._signing_key = b""

    def _refresh_clock(self, now: float) -> None:
        second = int(now)
        if second == self._second:
            return
        self._second = second
        self._amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(second))
        date = self._amz_date[:8]
        if date != self._date:
            self._date = date
            key = ("AWS4" + self.secret_key).encode()
            for part in (date, self.region, self.service, "aws4_request"):
                key = hmac.digest(key, part.encode(), "sha256")
            self._signing_key = key

    def headers(self, operation: str, body: bytes, now: float) -> dict[str, str]:
        """The HTTP headers of a signed request for `operation` with `body`, at time `now`."""
        self._refresh_clock(now)
        target = TARGET_PREFIX + operation
        token_line = f"x-amz-security-token:{self.session_token}\n" if self.session_token else ""
        canonical_request = (
            f"POST\n/\n\ncontent-type:{CONTENT_TYPE}\nhost:{self.host}\n"
            f"x-amz-date:{self._amz_date}\n{token_line}x-amz-target:{target}\n\n"
            f"{self.signed_headers}\n{hashlib.sha256(body).hexdigest()}"
        )
        scope = f"{self._date}/{self.region}/{self.service}/aws4_request"
        string_to_sign = (
            f"AWS4-HMAC-SHA256\n{self._amz_date}\n{scope}\n"
            f"{hashlib.sha256(canonical_request.encode()).hexdigest()}"
        )
        signature = hmac.new(self._signing_key, string_to_sign.encode(), "sha256").hexdigest()
        headers = {
            "Content-Type": CONTENT_TYPE,
            "Host": self.host,
            "X-Amz-Date": self._amz_date,
            "X-Amz-Target": target,
            "Authorization": (
                f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                f"SignedHeaders={self.signed_headers}, Signature={signature}"
            ),
        }
        if self.session_token:
            headers["X-Amz-Security-Token"] = self.session_token
        return headers


def host_header(endpoint: str) -> str:
    """The Host header for an endpoint URL: its netloc without a default port, as SDKs send it."""
    parts = urlsplit(endpoint)
    default_port = 443 if parts.scheme == "https" else 80
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # An IPv6 literal keeps its brackets.
    return host if parts.port in (None, default_port) else f"{host}:{parts.port}"


class DynamoDBError(Exception):
    """A reply other than 200 to a setup request (creating, describing or preloading the table)."""

    def __init__(self, operation: str, type_name: str) -> None:
        super().__init__(f"{operation} failed: {type_name}")
        self.type_name = type_name


class DynamoDBClient:
    """Signs and sends DynamoDB JSON 1.0 requests over one aiohttp session."""

    def __init__(self, session: aiohttp.ClientSession, endpoint: str, signer: SigV4Signer) -> None:
        self.session = session
        self.url = endpoint.rstrip("/") + "/"
        self.signer = signer

    async def call(self, operation: str, request: dict[str, Any]) -> tuple[int, bytes]:
        """Send one request; return the HTTP status and the reply body."""
        body = orjson.dumps(request)
        headers = self.signer.headers(operation, body, time.time())
        async with self.session.post(self.url, data=body, headers=headers) as response:
            return response.status, await response.read()

    async def request(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return its decoded reply, raising DynamoDBError on failure."""
        status, body = await self.call(operation, request)
        if status != 200:
            raise DynamoDBError(operation, error_type(status, body))
        reply: dict[str, Any] = orjson.loads(body)
        return reply


# --- the run --------------------------------------------------------------------------------------


async def prepare_table(client: DynamoDBClient, config: BenchConfig) -> bool:
    """Create the table unless told not to (an existing one is reused) and wait until it is
    ACTIVE; whether this call created it."""
    created = False
    if config.create_table:
        try:
            await client.request("CreateTable", create_table_request(config))
            created = True
        except DynamoDBError as exc:
            if exc.type_name != "ResourceInUseException":
                raise
    deadline = time.monotonic() + TABLE_ACTIVE_TIMEOUT_S
    while True:
        reply = await client.request("DescribeTable", {"TableName": config.table_name})
        if reply["Table"]["TableStatus"] == "ACTIVE":
            return created
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"table {config.table_name} was not ACTIVE after {TABLE_ACTIVE_TIMEOUT_S} s"
            )
        await asyncio.sleep(TABLE_POLL_INTERVAL_S)


async def put_with_retry(client: DynamoDBClient, table: str, item: dict[str, Any]) -> None:
    """Write one preload item, retrying a bounded number of times while throttled."""
    for attempt in range(PRELOAD_ATTEMPTS_MAX):
        try:
            await client.request("PutItem", {"TableName": table, "Item": item})
            return
        except DynamoDBError as exc:
            if exc.type_name not in THROTTLING_TYPES or attempt == PRELOAD_ATTEMPTS_MAX - 1:
                raise
        await asyncio.sleep(PRELOAD_BACKOFF_S * 2**attempt)


async def preload(client: DynamoDBClient, config: BenchConfig, progress: Progress | None) -> int:
    """Write the whole key space with `concurrency` writers; return the number of items."""
    items = preload_items(config)
    task = progress.add_task("preload", total=config.preload_count, rate="") if progress else None
    done = 0

    async def writer() -> None:
        nonlocal done
        # Writers share one generator; asyncio runs one at a time, so next() is never concurrent.
        for item in items:
            await put_with_retry(client, config.table_name, item)
            done += 1
            if progress is not None and task is not None:
                progress.update(task, completed=done)

    await asyncio.gather(*(writer() for _ in range(config.concurrency)))
    if progress is not None and task is not None:
        progress.remove_task(task)
    return done


async def worker(
    client: DynamoDBClient, plan: RequestPlan, recorder: Recorder, deadline: float
) -> None:
    """Issue requests back to back until `deadline` (a time.monotonic() value)."""
    while time.monotonic() < deadline:
        operation, request = plan.next_request()
        started = time.perf_counter()
        try:
            status, body = await client.call(operation, request)
        except (aiohttp.ClientError, TimeoutError) as exc:
            recorder.errors[type(exc).__name__] += 1
            continue
        latency = time.perf_counter() - started
        if status != 200:
            recorder.errors[error_type(status, body)] += 1
            continue
        recorder.latencies_s.append(latency)
        if not plan.observe(operation, body):
            recorder.empty_reads += 1


async def report_lines(
    console: Console, recorder: Recorder, duration_s: float, started: float
) -> None:
    """Where no live display can be drawn (a pipe, a log), print a line of progress now and then
    until cancelled, so a long run shows it is alive."""
    last_ops, last_time = 0, started
    while True:
        await asyncio.sleep(PROGRESS_LINE_S)
        now = time.monotonic()
        rate = (recorder.ops - last_ops) / (now - last_time)
        last_ops, last_time = recorder.ops, now
        errors = sum(recorder.errors.values())
        elapsed = min(duration_s, now - started)
        console.print(
            f"{elapsed:5.1f}/{duration_s:g} s  {rate:,.0f} ops/s  {errors} errors", highlight=False
        )


async def report_progress(
    progress: Progress, recorder: Recorder, duration_s: float, started: float
) -> None:
    """Keep the progress display's throughput and error count current until cancelled."""
    task = progress.add_task("bench", total=duration_s, rate="")
    last_ops, last_time = 0, started
    while True:
        await asyncio.sleep(PROGRESS_REFRESH_S)
        now = time.monotonic()
        rate = (recorder.ops - last_ops) / (now - last_time)
        last_ops, last_time = recorder.ops, now
        errors = sum(recorder.errors.values())
        progress.update(
            task,
            completed=min(duration_s, now - started),
            rate=f"{rate:,.0f} ops/s, {errors} errors",
        )


def make_progress(console: Console) -> Progress | None:
    """A live progress display, or None when output does not go to a terminal (a log, a pipe)."""
    if not console.is_terminal:
        return None
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
        console=console,
        # Two refreshes a second are enough to read and keep the display's thread nearly idle.
        refresh_per_second=1 / PROGRESS_REFRESH_S,
        transient=True,
    )


async def run_async(config: BenchConfig, console: Console) -> BenchResult:
    """Prepare the table, preload it, run the workload and return what was measured."""
    signer = SigV4Signer(
        os.environ.get("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY),
        os.environ.get("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_KEY),
        config.region,
        host_header(config.endpoint),
        os.environ.get("AWS_SESSION_TOKEN"),
    )
    connector = aiohttp.TCPConnector(limit=config.concurrency)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    progress = make_progress(console)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        client = DynamoDBClient(session, config.endpoint, signer)
        with progress if progress is not None else contextlib.nullcontext():
            created = await prepare_table(client, config)
            if config.preloads:
                count = await preload(client, config, progress)
                console.print(f"preloaded {count} items into {config.table_name}")
            recorder = Recorder()
            rng = random.Random()
            plans = [RequestPlan(config, rng) for _ in range(config.concurrency)]
            cpu_started = time.process_time()
            started = time.monotonic()
            deadline = started + config.duration_s
            reporter = asyncio.create_task(
                report_progress(progress, recorder, config.duration_s, started)
                if progress is not None
                else report_lines(console, recorder, config.duration_s, started)
            )
            try:
                await asyncio.gather(*(worker(client, plan, recorder, deadline) for plan in plans))
            finally:
                reporter.cancel()
            elapsed = time.monotonic() - started
            cpu = time.process_time() - cpu_started
        if created and not config.keep:
            await client.request("DeleteTable", {"TableName": config.table_name})
            console.print(f"deleted table {config.table_name} (keep it with --keep)")
    return BenchResult.from_recorder(recorder, config.workload, config.concurrency, elapsed, cpu)


def run(config: BenchConfig, console: Console) -> BenchResult:
    """Run the benchmark on uvloop where it exists (it is not built for Windows)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(run_async(config, console))
    return uvloop.run(run_async(config, console))


def render_result(result: BenchResult, config: BenchConfig) -> Table:
    """The summary table printed at the end of a run."""
    table = Table(title="dynalab bench")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("endpoint", config.endpoint)
    table.add_row("workload", result.workload)
    table.add_row("table", config.table_name)
    table.add_row("concurrency", str(result.concurrency))
    table.add_row("duration (s)", f"{result.elapsed_s:.2f}")
    table.add_row("ops", f"{result.ops:,}")
    table.add_row("ops/s", f"{result.ops_per_s:,.1f}")
    if result.latency is not None:
        for name, value in (
            ("p50 (ms)", result.latency.p50_ms),
            ("p95 (ms)", result.latency.p95_ms),
            ("p99 (ms)", result.latency.p99_ms),
            ("mean (ms)", result.latency.mean_ms),
            ("max (ms)", result.latency.max_ms),
        ):
            table.add_row(name, f"{value:.2f}")
    table.add_row("errors", f"{result.error_count:,}")
    for type_name, count in result.errors.items():
        table.add_row(f"  {type_name}", f"{count:,}")
    if result.empty_reads:
        table.add_row("reads that found nothing", f"{result.empty_reads:,}")
    cpu_share = result.client_cpu_s / result.elapsed_s if result.elapsed_s > 0 else 0.0
    table.add_row("client CPU (% of one core)", f"{100 * cpu_share:.0f}")
    return table
