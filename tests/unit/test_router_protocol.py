"""router.protocol: DynamoDB's JSON 1.0 wire protocol, served by aiohttp to a stand-in context.

The handlers here are fakes that raise or return what each test needs; the real operations are
tested against real processes in tests/integration.
"""

from __future__ import annotations

import logging
import uuid
import zlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from core import limits
from core.errors import (
    ConditionalCheckFailed,
    ResourceNotFound,
    ServiceUnavailable,
    ValidationError,
)
from router.app import create_app
from router.protocol import request_region
from router.sources import Sources

AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=AKID/20240101/eu-west-3/dynamodb/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=abcdef"
)


class FakeContext:
    """Stands in for RouterContext: the protocol starts and closes it, and reads its sources."""

    def __init__(self) -> None:
        self.sources = Sources.seeded(0, 0.0)
        self.started = False
        self.closed = False

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True


async def echo(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    return {"Echo": body, "Region": request_region()}


async def conditional_failure(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    raise ConditionalCheckFailed(item={"pk": {"S": "a"}})


async def not_found(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    raise ResourceNotFound("Requested resource not found")


async def validation(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    raise ValidationError("1 validation error detected: something")


async def unavailable(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    raise ServiceUnavailable("node down")


async def bug(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("a bug")


OPERATIONS = {
    "Echo": echo,
    "ConditionalFailure": conditional_failure,
    "NotFound": not_found,
    "Validation": validation,
    "Unavailable": unavailable,
    "Bug": bug,
}


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(create_app(FakeContext(), OPERATIONS))) as test_client:
        yield test_client


def headers(operation: str | None = "Echo", **overrides: str) -> dict[str, str]:
    base = {
        "Content-Type": "application/x-amz-json-1.0",
        "Authorization": AUTHORIZATION,
        "X-Amz-Date": "20240101T000000Z",
    }
    if operation is not None:
        base["X-Amz-Target"] = f"DynamoDB_20120810.{operation}"
    base.update(overrides)
    return base


async def post(
    client: TestClient[Any, Any], data: bytes, request_headers: dict[str, str]
) -> tuple[int, bytes, Any]:
    response = await client.post("/", data=data, headers=request_headers)
    body = await response.read()
    return response.status, body, response.headers


def check_envelope(body: bytes, reply_headers: Any) -> None:
    """Every reply carries a request id (a UUID) and the CRC32 of exactly its body bytes."""
    uuid.UUID(reply_headers["x-amzn-RequestId"])
    assert reply_headers["x-amz-crc32"] == str(zlib.crc32(body))


def error_of(status: int, body: bytes) -> tuple[int, str, str]:
    parsed = orjson.loads(body)
    return status, parsed["__type"], parsed.get("message", "")


async def test_success_reply(client: TestClient[Any, Any]) -> None:
    status, body, reply_headers = await post(client, b'{"TableName": "abc"}', headers())
    assert status == 200
    assert orjson.loads(body) == {"Echo": {"TableName": "abc"}, "Region": "eu-west-3"}
    assert reply_headers["Content-Type"] == "application/x-amz-json-1.0"
    check_envelope(body, reply_headers)


async def test_json_11_is_accepted_and_echoed(client: TestClient[Any, Any]) -> None:
    request_headers = headers(**{"Content-Type": "application/x-amz-json-1.1; charset=utf-8"})
    status, _, reply_headers = await post(client, b"{}", request_headers)
    assert status == 200
    assert reply_headers["Content-Type"] == "application/x-amz-json-1.1"


async def test_request_ids_are_unique(client: TestClient[Any, Any]) -> None:
    ids = set()
    for _ in range(3):
        _, _, reply_headers = await post(client, b"{}", headers())
        ids.add(reply_headers["x-amzn-RequestId"])
    assert len(ids) == 3


async def test_region_defaults_without_a_credential_scope(client: TestClient[Any, Any]) -> None:
    request_headers = headers(Authorization="AWS4-HMAC-SHA256 Signature=abc")
    status, body, _ = await post(client, b"{}", request_headers)
    assert status == 200
    assert orjson.loads(body)["Region"] == "us-east-1"


@pytest.mark.parametrize("operation", [None, "NoSuchOperation"])
async def test_unknown_operation(client: TestClient[Any, Any], operation: str | None) -> None:
    status, body, reply_headers = await post(client, b"{}", headers(operation))
    assert error_of(status, body)[:2] == (
        400,
        "com.amazon.coral.service#UnknownOperationException",
    )
    check_envelope(body, reply_headers)


async def test_other_api_version_is_unknown(client: TestClient[Any, Any]) -> None:
    request_headers = headers(**{"X-Amz-Target": "DynamoDB_20111205.Echo"})
    status, body, _ = await post(client, b"{}", request_headers)
    assert error_of(status, body)[1] == "com.amazon.coral.service#UnknownOperationException"


async def test_unsupported_content_type(client: TestClient[Any, Any]) -> None:
    status, body, reply_headers = await post(
        client, b"{}", headers(**{"Content-Type": "text/plain"})
    )
    assert error_of(status, body)[:2] == (
        400,
        "com.amazon.coral.service#UnknownOperationException",
    )
    check_envelope(body, reply_headers)


@pytest.mark.parametrize("data", [b"{", b"not json", b'{"a": }', b"[1, 2]", b"42", b'"text"'])
async def test_malformed_or_non_object_json(client: TestClient[Any, Any], data: bytes) -> None:
    status, body, reply_headers = await post(client, data, headers())
    assert error_of(status, body)[:2] == (400, "com.amazon.coral.service#SerializationException")
    check_envelope(body, reply_headers)


async def test_malformed_json_is_reported_before_an_unknown_operation(
    client: TestClient[Any, Any],
) -> None:
    # DynamoDB parses the body before it looks at the operation.
    status, body, _ = await post(client, b"{", headers("NoSuchOperation"))
    assert error_of(status, body)[1] == "com.amazon.coral.service#SerializationException"


async def test_empty_body(client: TestClient[Any, Any]) -> None:
    status, body, _ = await post(client, b"", headers())
    assert error_of(status, body)[:2] == (400, "com.amazon.coral.service#SerializationException")


async def test_missing_authentication(client: TestClient[Any, Any]) -> None:
    request_headers = headers()
    del request_headers["Authorization"]
    status, body, reply_headers = await post(client, b"{}", request_headers)
    assert error_of(status, body) == (
        400,
        "com.amazon.coral.service#MissingAuthenticationTokenException",
        "Request is missing Authentication Token",
    )
    check_envelope(body, reply_headers)


@pytest.mark.parametrize(
    ("operation", "status", "error_type", "message"),
    [
        (
            "NotFound",
            400,
            "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException",
            "Requested resource not found",
        ),
        (
            "Validation",
            400,
            "com.amazonaws.dynamodb.v20120810#ValidationException",
            "1 validation error detected: something",
        ),
        (
            "Unavailable",
            503,
            "com.amazon.coral.availability#ServiceUnavailable",
            "node down",
        ),
    ],
)
async def test_domain_errors(
    client: TestClient[Any, Any], operation: str, status: int, error_type: str, message: str
) -> None:
    reply_status, body, reply_headers = await post(client, b"{}", headers(operation))
    assert error_of(reply_status, body) == (status, error_type, message)
    check_envelope(body, reply_headers)


async def test_error_extra_fields(client: TestClient[Any, Any]) -> None:
    status, body, _ = await post(client, b"{}", headers("ConditionalFailure"))
    assert status == 400
    assert orjson.loads(body) == {
        "__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
        "message": "The conditional request failed",
        "Item": {"pk": {"S": "a"}},
    }


async def test_bug_is_a_logged_500(
    client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="router.protocol"):
        status, body, reply_headers = await post(client, b"{}", headers("Bug"))
    assert error_of(status, body) == (
        500,
        "com.amazonaws.dynamodb.v20120810#InternalServerError",
        "Internal server error",
    )
    check_envelope(body, reply_headers)
    request_id = reply_headers["x-amzn-RequestId"]
    (record,) = [r for r in caplog.records if request_id in r.getMessage()]
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
    # The client learns nothing about the bug but the request id to report.
    assert b"a bug" not in body


async def test_oversized_request(client: TestClient[Any, Any]) -> None:
    data = b'{"a": "' + b"x" * limits.HTTP_REQUEST_BYTES_MAX + b'"}'
    status, body, reply_headers = await post(client, data, headers())
    assert status == 413
    check_envelope(body, reply_headers)


async def test_health(client: TestClient[Any, Any]) -> None:
    response = await client.get("/")
    body = await response.read()
    assert response.status == 200
    assert body.decode() == f"healthy: {client.host}:{client.port}"
    check_envelope(body, response.headers)


async def test_context_is_started_and_closed() -> None:
    ctx = FakeContext()
    async with TestClient(TestServer(create_app(ctx, OPERATIONS))):
        assert ctx.started and not ctx.closed
    assert ctx.closed
