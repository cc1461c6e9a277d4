"""CORS on the router's DynamoDB endpoint (`router.protocol`): a browser's script may call it.

A request naming its `Origin` is answered with `Access-Control-Allow-Origin: *` and the headers the
SDKs read exposed, whatever its method; an `OPTIONS` preflight with an `Origin` is answered 200,
echoing the method and headers it asked for as allowed, with `Access-Control-Max-Age`; a request
without an `Origin` carries none of these headers. (What ScyllaDB's test_cors.py checks against
DynamoDB itself.)
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest

CORS_HEADERS = (
    "Access-Control-Allow-Origin",
    "Access-Control-Allow-Credentials",
    "Access-Control-Expose-Headers",
    "Access-Control-Max-Age",
    "Access-Control-Allow-Methods",
    "Access-Control-Allow-Headers",
)
TIMEOUT_SECONDS = 10.0
METHODS = ("OPTIONS", "GET", "POST")


def call(url: str, method: str, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(url, method=method, headers=headers, data=None)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)


@pytest.fixture(scope="module")
def url(dynamodb: Any) -> str:
    return str(dynamodb.meta.endpoint_url)


@pytest.mark.parametrize("method", METHODS)
def test_a_request_without_an_origin_gets_no_cors_headers(url: str, method: str) -> None:
    _, headers = call(url, method, {})
    assert [name for name in CORS_HEADERS if name in headers] == []


@pytest.mark.parametrize("method", METHODS)
def test_a_request_with_an_origin_may_be_read_by_any_origin(url: str, method: str) -> None:
    asked = {
        "Origin": "http://example.com/",
        "Access-Control-Request-Method": "dog",
        "Access-Control-Request-Headers": "cat, meerkat, mouse",
    }
    status, headers = call(url, method, asked)
    assert headers["Access-Control-Allow-Origin"] == "*"
    assert "x-amzn-RequestId" in headers["Access-Control-Expose-Headers"]
    assert "x-amz-crc32" in headers["Access-Control-Expose-Headers"]
    if method == "OPTIONS":
        assert status == 200
        assert headers["Access-Control-Max-Age"] == "172800"
        assert headers["Access-Control-Allow-Methods"] == "dog"
        assert headers["Access-Control-Allow-Headers"] == "cat, meerkat, mouse"
    else:
        absent = ("Access-Control-Max-Age", "Access-Control-Allow-Methods")
        assert [name for name in (*absent, "Access-Control-Allow-Headers") if name in headers] == []


def test_an_api_call_from_a_page_carries_the_headers_its_script_reads(dynamodb: Any) -> None:
    # boto3 stands in for the browser's SDK: the reply to a real call names the origin rule.
    captured: dict[str, str] = {}

    def add_origin(request: Any, **_: Any) -> None:
        request.headers["Origin"] = "http://app.example"

    def keep(http_response: Any, **_: Any) -> None:
        captured.update(http_response.headers)

    events = dynamodb.meta.events
    events.register("before-send.dynamodb.ListTables", add_origin)
    events.register("after-call.dynamodb.ListTables", keep)
    try:
        dynamodb.list_tables()
    finally:
        events.unregister("before-send.dynamodb.ListTables", add_origin)
        events.unregister("after-call.dynamodb.ListTables", keep)
    assert captured["Access-Control-Allow-Origin"] == "*"
    assert "x-amzn-RequestId" in captured
