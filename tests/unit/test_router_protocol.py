"""router.protocol: DynamoDB's JSON 1.0 wire protocol, served by aiohttp to a stand-in context.

The handlers here are fakes, registered under real operation names (the body is deserialised
against the named operation's input shape before its handler runs), that raise or return what each
test needs; the real operations are tested against real processes in tests/integration.
"""

from __future__ import annotations

import logging
import re
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from core import limits
from core.errors import (
    ConditionalCheckFailed,
    ResourceNotFound,
    SerializationError,
    ServiceUnavailable,
    ValidationError,
)
from router.app import GUARD, create_app
from router.limits import GuardedSite
from router.metrics import RouterMetrics
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
        self.metrics = RouterMetrics()
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


async def serialization(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    raise SerializationError("NUMBER_VALUE cannot be converted to String")


# Real operation names, each served by a fake.
ECHO = "ListTables"
OPERATIONS = {
    ECHO: echo,
    "PutItem": conditional_failure,
    "DescribeTable": not_found,
    "DeleteTable": validation,
    "GetItem": unavailable,
    "UpdateItem": bug,
    "Scan": serialization,
}


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(
        TestServer(create_app(FakeContext(), OPERATIONS), auto_decompress=False)
    ) as test_client:
        yield test_client


def headers(operation: str | None = ECHO, **overrides: str) -> dict[str, str]:
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
    """Every reply carries a request id (52 of [0-9A-Z]) and the CRC32 of exactly its body bytes."""
    assert re.fullmatch("[0-9A-Z]{52}", reply_headers["x-amzn-RequestId"])
    assert reply_headers["x-amz-crc32"] == str(zlib.crc32(body))


def error_of(status: int, body: bytes) -> tuple[int, str, str]:
    """(status, __type, text) of an error reply whose text is under the lowercase `message`."""
    parsed = orjson.loads(body)
    assert "Message" not in parsed
    return status, parsed["__type"], parsed.get("message", "")


async def test_success_reply(client: TestClient[Any, Any]) -> None:
    status, body, reply_headers = await post(client, b'{"TableName": "abc"}', headers())
    assert status == 200
    assert orjson.loads(body) == {"Echo": {"TableName": "abc"}, "Region": "eu-west-3"}
    assert reply_headers["Content-Type"] == "application/x-amz-json-1.0"
    check_envelope(body, reply_headers)


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8"])
async def test_plain_json_is_accepted_and_answered_in_kind(
    client: TestClient[Any, Any], content_type: str
) -> None:
    status, body, reply_headers = await post(
        client, b"{}", headers(**{"Content-Type": content_type})
    )
    assert status == 200
    assert reply_headers["Content-Type"] == "application/json"
    check_envelope(body, reply_headers)


async def test_request_ids_are_unique(client: TestClient[Any, Any]) -> None:
    ids = set()
    for _ in range(3):
        _, _, reply_headers = await post(client, b"{}", headers())
        ids.add(reply_headers["x-amzn-RequestId"])
    assert len(ids) == 3


async def test_region_defaults_without_a_credential_scope(client: TestClient[Any, Any]) -> None:
    request_headers = headers(
        Authorization="AWS4-HMAC-SHA256 Credential=AKID, SignedHeaders=host, Signature=abc"
    )
    status, body, _ = await post(client, b"{}", request_headers)
    assert status == 200
    assert orjson.loads(body)["Region"] == "us-east-1"


def check_not_found(status: int, body: bytes, reply_headers: Any) -> None:
    """DynamoDB's answer to what is not a DynamoDB call: a bare 404 with an XML body."""
    assert status == 404
    assert body == b"<UnknownOperationException/>\n"
    # The CRC32 DynamoDB sends with this body.
    assert reply_headers["x-amz-crc32"] == "3552371480"
    check_envelope(body, reply_headers)


@pytest.mark.parametrize(("method", "path"), [("PUT", "/"), ("DELETE", "/"), ("GET", "/x")])
async def test_other_methods_get_dynamodb_404(
    client: TestClient[Any, Any], method: str, path: str
) -> None:
    response = await client.request(method, path, data=b"{}", headers=headers())
    check_not_found(response.status, await response.read(), response.headers)


async def test_options_gets_dynamodb_404(client: TestClient[Any, Any]) -> None:
    response = await client.options("/")
    check_not_found(response.status, await response.read(), response.headers)


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-amz-json-1.1", "whatever", None]
)
async def test_a_body_of_another_content_type_gets_dynamodb_404(
    client: TestClient[Any, Any], content_type: str | None
) -> None:
    request_headers = headers()
    del request_headers["Content-Type"]
    if content_type is not None:
        request_headers["Content-Type"] = content_type
    status, body, reply_headers = await post(client, b"hi", request_headers)
    check_not_found(status, body, reply_headers)


async def test_any_path_is_served(client: TestClient[Any, Any]) -> None:
    response = await client.post("/some/path", data=b"{}", headers=headers())
    assert response.status == 200


@pytest.mark.parametrize("operation", [None, "NoSuchOperation", "ListTable"])
async def test_unknown_operation(client: TestClient[Any, Any], operation: str | None) -> None:
    status, body, reply_headers = await post(client, b"{}", headers(operation))
    assert status == 400
    # DynamoDB sends the type alone.
    assert orjson.loads(body) == {"__type": "com.amazon.coral.service#UnknownOperationException"}
    check_envelope(body, reply_headers)


async def test_other_api_version_is_unknown(client: TestClient[Any, Any]) -> None:
    request_headers = headers(**{"X-Amz-Target": f"DynamoDB_20111205.{ECHO}"})
    status, body, _ = await post(client, b"{}", request_headers)
    assert error_of(status, body)[1] == "com.amazon.coral.service#UnknownOperationException"


@pytest.mark.parametrize("data", [b"{", b"not json", b'{"a": }', b"hi"])
async def test_malformed_json(client: TestClient[Any, Any], data: bytes) -> None:
    status, body, reply_headers = await post(client, data, headers())
    assert status == 400
    assert orjson.loads(body) == {"__type": "com.amazon.coral.service#SerializationException"}
    check_envelope(body, reply_headers)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[1, 2]", "Unrecognized collection type class com.amazonaws.dynamodb.v20120810."),
        (b"42", "Unexpected field type"),
        (b'"text"', "Unexpected field type"),
    ],
)
async def test_a_body_that_is_no_object(
    client: TestClient[Any, Any], data: bytes, message: str
) -> None:
    status, body, _ = await post(client, data, headers())
    parsed = orjson.loads(body)
    assert (status, parsed["__type"]) == (400, "com.amazon.coral.service#SerializationException")
    assert parsed["Message"].startswith(message)


async def test_malformed_json_is_reported_before_an_unknown_operation(
    client: TestClient[Any, Any],
) -> None:
    # DynamoDB parses the body before it looks at the operation.
    status, body, _ = await post(client, b"{", headers("NoSuchOperation"))
    assert error_of(status, body)[1] == "com.amazon.coral.service#SerializationException"


async def test_empty_body(client: TestClient[Any, Any]) -> None:
    status, body, _ = await post(client, b"", headers())
    assert status == 400
    assert orjson.loads(body) == {"__type": "com.amazon.coral.service#SerializationException"}


async def test_empty_body_without_content_type_is_read(client: TestClient[Any, Any]) -> None:
    request_headers = headers()
    del request_headers["Content-Type"]
    status, body, reply_headers = await post(client, b"", request_headers)
    assert status == 400
    assert reply_headers["Content-Type"] == "application/json"
    assert orjson.loads(body) == {"__type": "com.amazon.coral.service#SerializationException"}


MISSING_TOKEN = (
    400,
    "com.amazon.coral.service#MissingAuthenticationTokenException",
    "Request is missing Authentication Token",
)


@pytest.mark.parametrize("authorization", [None, "", "AWS4", "Basic abc", "AWS3-HMAC"])
async def test_missing_authentication(
    client: TestClient[Any, Any], authorization: str | None
) -> None:
    request_headers = headers()
    del request_headers["Authorization"]
    if authorization is not None:
        request_headers["Authorization"] = authorization
    status, body, reply_headers = await post(client, b"{}", request_headers)
    assert error_of(status, body) == MISSING_TOKEN
    check_envelope(body, reply_headers)


async def test_authentication_is_checked_after_the_operation(
    client: TestClient[Any, Any],
) -> None:
    request_headers = headers("NoSuchOperation")
    del request_headers["Authorization"]
    status, body, _ = await post(client, b"{}", request_headers)
    assert error_of(status, body)[1] == "com.amazon.coral.service#UnknownOperationException"


@pytest.mark.parametrize(
    ("authorization", "date", "message"),
    [
        (
            "AWS4-",
            False,
            "Authorization header requires 'Credential' parameter. "
            "Authorization header requires 'Signature' parameter. "
            "Authorization header requires 'SignedHeaders' parameter. "
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' "
            "header. Authorization=AWS4-",
        ),
        (
            "AWS4-HMAC-SHA256 Credential=a/b/c/d/e, SignedHeaders=host",
            True,
            "Authorization header requires 'Signature' parameter. "
            "Authorization=AWS4-HMAC-SHA256 Credential=a/b/c/d/e, SignedHeaders=host",
        ),
        (
            AUTHORIZATION,
            False,
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' "
            f"header. Authorization={AUTHORIZATION}",
        ),
    ],
)
async def test_incomplete_signature(
    client: TestClient[Any, Any], authorization: str, date: bool, message: str
) -> None:
    request_headers = headers(Authorization=authorization)
    if not date:
        del request_headers["X-Amz-Date"]
    status, body, reply_headers = await post(client, b"{}", request_headers)
    assert error_of(status, body) == (
        400,
        "com.amazon.coral.service#IncompleteSignatureException",
        message,
    )
    check_envelope(body, reply_headers)


async def test_a_date_header_stands_for_x_amz_date(client: TestClient[Any, Any]) -> None:
    request_headers = headers(Date="Mon, 01 Jan 2024 00:00:00 GMT")
    del request_headers["X-Amz-Date"]
    status, _, _ = await post(client, b"{}", request_headers)
    assert status == 200


async def test_the_body_is_deserialised_before_the_handler_runs(
    client: TestClient[Any, Any],
) -> None:
    # The echo handler would answer 200: the shape check answers first.
    status, body, reply_headers = await post(client, b'{"Limit": "5"}', headers())
    assert status == 400
    assert orjson.loads(body) == {
        "__type": "com.amazon.coral.service#SerializationException",
        "Message": "STRING_VALUE cannot be converted to Integer",
    }
    check_envelope(body, reply_headers)


async def test_serialization_errors_carry_a_capital_message(client: TestClient[Any, Any]) -> None:
    status, body, _ = await post(client, b"{}", headers("Scan"))
    assert status == 400
    assert orjson.loads(body) == {
        "__type": "com.amazon.coral.service#SerializationException",
        "Message": "NUMBER_VALUE cannot be converted to String",
    }


@pytest.mark.parametrize(
    ("operation", "status", "error_type", "message"),
    [
        (
            "DescribeTable",
            400,
            "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException",
            "Requested resource not found",
        ),
        (
            "DeleteTable",
            400,
            "com.amazon.coral.validate#ValidationException",
            "1 validation error detected: something",
        ),
        (
            "GetItem",
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
    status, body, _ = await post(client, b"{}", headers("PutItem"))
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
        status, body, reply_headers = await post(client, b"{}", headers("UpdateItem"))
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


@pytest.mark.slow  # Builds and sends a 16 MB body: `make test-fast` leaves it out.
async def test_oversized_request() -> None:
    # The connection guard answers it, as in a router process: wrapped around the application by
    # the listening site, it refuses the body before reading it.
    app = create_app(FakeContext(), OPERATIONS)
    runner = web.AppRunner(app, access_log=None, auto_decompress=False)
    await runner.setup()
    try:
        site = GuardedSite(runner, "127.0.0.1", 0, app[GUARD])
        await site.start()
        host, port = runner.addresses[0][:2]
        data = b'{"a": "' + b"x" * limits.HTTP_REQUEST_BYTES_MAX + b'"}'
        url = f"http://{host}:{port}/"
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, data=data, headers=headers()) as reply,
        ):
            body = await reply.read()
            assert reply.status == 413
            check_envelope(body, reply.headers)
    finally:
        await runner.cleanup()


async def test_health(client: TestClient[Any, Any]) -> None:
    response = await client.get("/")
    body = await response.read()
    assert response.status == 200
    assert body.decode() == f"healthy: {client.host}:{client.port}"
    check_envelope(body, response.headers)


async def test_context_is_started_and_closed() -> None:
    ctx = FakeContext()
    async with TestClient(TestServer(create_app(ctx, OPERATIONS), auto_decompress=False)):
        assert ctx.started and not ctx.closed
    assert ctx.closed
