"""Clients other than boto3 against a real cluster: PynamoDB, and the AWS SDK for JavaScript v3,
in Node.js and in a page of headless Chromium (from another origin, so through CORS).

Each SDK parses the error code from `__type` (after the `#`) and its message from either key, so
these tests check that DynamoDB's envelopes reach them as DynamoDB's would: a conditional failure
is ConditionalCheckFailedException with its message, a missing table ResourceNotFoundException, a
bad parameter ValidationException.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dynalab.cluster import LocalCluster

pynamodb_models = pytest.importorskip("pynamodb.models", reason="PynamoDB is a dev dependency")
pynamodb_attributes = pytest.importorskip("pynamodb.attributes")
pynamodb_exceptions = pytest.importorskip("pynamodb.exceptions")


def music_model(host: str, table: str) -> Any:
    class Music(pynamodb_models.Model):  # type: ignore[misc, name-defined]
        class Meta:
            table_name = table
            region = "us-east-1"
            aws_access_key_id = "any"
            aws_secret_access_key = "any"
            max_retry_attempts = 0

        artist = pynamodb_attributes.UnicodeAttribute(hash_key=True)
        song = pynamodb_attributes.UnicodeAttribute(range_key=True)
        year = pynamodb_attributes.NumberAttribute(null=True)

    Music.Meta.host = host
    return Music


def test_pynamodb_round_trip_and_errors(
    cluster: LocalCluster, table_name: Callable[[], str]
) -> None:
    music = music_model(cluster.router_url, table_name())
    music.create_table(wait=True, billing_mode="PAY_PER_REQUEST")
    music("Arvo Pärt", "Spiegel im Spiegel", year=1978).save()
    music("Arvo Pärt", "Für Alina", year=1976).save()
    assert music.get("Arvo Pärt", "Für Alina").year == 1976
    assert [m.song for m in music.query("Arvo Pärt")] == ["Für Alina", "Spiegel im Spiegel"]

    with pytest.raises(pynamodb_exceptions.PutError) as failed:
        music("Arvo Pärt", "Für Alina").save(condition=music.artist.does_not_exist())
    assert failed.value.cause_response_code == "ConditionalCheckFailedException"
    assert failed.value.cause_response_message == "The conditional request failed"

    with pytest.raises(pynamodb_exceptions.QueryError) as invalid:
        list(music.query("Arvo Pärt", filter_condition=music.artist == "x"))
    assert invalid.value.cause_response_code == "ValidationException"
    assert invalid.value.cause_response_message == (
        "Filter Expression can only contain non-primary key attributes: "
        "Primary key attribute: artist"
    )

    missing = music_model(cluster.router_url, "no-such-table")
    with pytest.raises(pynamodb_exceptions.GetError) as not_found:
        missing.get("a", "b")
    assert not_found.value.cause_response_code == "ResourceNotFoundException"


JS_DIR = Path(__file__).resolve().parents[1] / "js"
NODE_TIMEOUT_S = 120


def check_js_result(result: dict[str, Any]) -> None:
    """What sdk_calls.mjs reports, as DynamoDB's replies would make the SDK report it."""
    assert result["item"] == {"pk": {"S": "a"}, "n": {"N": "1"}}
    assert result["conditional"] == {
        "name": "ConditionalCheckFailedException",
        "message": "The conditional request failed",
        "status": 400,
    }
    assert result["notFound"] == {
        "name": "ResourceNotFoundException",
        "message": "Requested resource not found: Table: no-such-table not found",
        "status": 400,
    }
    assert result["validation"] == {
        "name": "ValidationException",
        "message": "1 validation error detected: Value '0' at 'limit' failed to satisfy "
        "constraint: Member must have value greater than or equal to 1",
        "status": 400,
    }


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_js_sdk_v3(cluster: LocalCluster, table_name: Callable[[], str]) -> None:
    if not (JS_DIR / "node_modules" / "@aws-sdk" / "client-dynamodb").is_dir():
        pytest.skip("the JS SDK is not installed: run `npm ci` in tests/js")
    completed = subprocess.run(
        ["node", str(JS_DIR / "sdk_check.mjs"), cluster.router_url, table_name()],
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    check_js_result(json.loads(completed.stdout))


BROWSER_TIMEOUT_S = 120.0
PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>dynalab JS SDK check</title></head>
<body><script type="module" src="/bundle.js"></script></body></html>
"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("Chromium is not installed")


class _Page:
    """The page's own origin: serves the page and the bundled SDK, and takes the page's result."""

    def __init__(self, bundle: bytes) -> None:
        self.bundle = bundle
        self.outcome: dict[str, Any] | None = None
        self.posted = threading.Event()
        page = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/bundle.js"):
                    self.answer(200, "text/javascript", page.bundle)
                else:
                    self.answer(200, "text/html", PAGE)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                page.outcome = json.loads(self.rfile.read(length))
                self.answer(204, "text/plain", b"")
                page.posted.set()

            def answer(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"


@pytest.fixture
def bundle(tmp_path: Path) -> Iterator[bytes]:
    """browser_check.mjs and the SDK bundled for the browser by esbuild (the SDK's browser
    builds: fetch for HTTP, Web Crypto for SigV4)."""
    esbuild = JS_DIR / "node_modules" / ".bin" / "esbuild"
    if shutil.which("node") is None or not esbuild.exists():
        pytest.skip("the JS SDK and esbuild are not installed: run `npm ci` in tests/js")
    out = tmp_path / "bundle.js"
    command = [str(esbuild), str(JS_DIR / "browser_check.mjs"), "--bundle", "--format=esm"]
    command += ["--platform=browser", "--log-level=warning", f"--outfile={out}"]
    subprocess.run(command, capture_output=True, timeout=NODE_TIMEOUT_S, check=True)
    yield out.read_bytes()


def test_js_sdk_v3_in_headless_chromium_through_cors(
    cluster: LocalCluster, table_name: Callable[[], str], bundle: bytes, tmp_path: Path
) -> None:
    """DynamoDB's JS SDK in a real browser page served from another origin than the router's:
    every call is a cross-origin fetch the browser preflights (the SDK sends
    application/x-amz-json-1.0 and its x-amz-* headers) and whose reply it hands the script only
    with the router's Access-Control-* headers; without them each call fails with a TypeError
    and the page posts that instead. The errors' names and messages come from headers and bodies
    the browser exposes (x-amzn-ErrorType is one of the exposed headers)."""
    browser = chromium()
    page = _Page(bundle)
    page.thread.start()
    query = f"?endpoint={cluster.router_url}&table={table_name()}"
    assert cluster.router_url.split(":")[-1] not in page.url  # Two origins.
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    command += [f"--user-data-dir={tmp_path / 'profile'}", page.url + query]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        posted = page.posted.wait(BROWSER_TIMEOUT_S)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # The browser and its helpers: this group alone.
        process.wait(timeout=30)
        page.server.shutdown()
    assert posted, "the page did not post a result"
    outcome = page.outcome
    assert outcome is not None
    assert "HeadlessChrome" in outcome["agent"], outcome
    assert "error" not in outcome, outcome
    check_js_result(outcome["result"])
