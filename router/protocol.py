"""DynamoDB's JSON 1.0 protocol over HTTP: the one place where requests and errors meet the wire.

A request is `POST /` with `X-Amz-Target: DynamoDB_20120810.<Operation>`, a JSON object as body and
Content-Type `application/x-amz-json-1.0` (1.1 is accepted too). `JsonProtocol.handle` checks it in
the order DynamoDB does (content type, JSON, operation, authentication), runs the operation's
handler, and writes the reply. Every `core.errors.DynamoError` a handler raises becomes DynamoDB's
error reply here and nowhere else: its HTTP status and `{"__type": "<namespace>#<type>",
"message": ...}` plus the error's extra fields. Any other exception is a bug: the client gets a 500
InternalServerError and the log gets the traceback under the request id.

Every reply carries `x-amzn-RequestId` and `x-amz-crc32` (the CRC32 of the body bytes, which the
AWS SDKs verify). Requests must be SigV4-signed, as DynamoDB requires, but signatures are not
verified yet: any credentials are accepted.

This is the hot path of every request, so it does the least it can: one header lookup for the
operation, orjson in both directions, and no per-request objects beyond the reply.
"""

from __future__ import annotations

import itertools
import logging
import uuid
import zlib
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from core.errors import (
    DynamoError,
    InternalServerError,
    MissingAuthenticationToken,
    SerializationError,
    UnknownOperation,
)

if TYPE_CHECKING:
    from router.context import RouterContext

log = logging.getLogger("router.protocol")

Handler = Callable[["RouterContext", dict[str, Any]], Awaitable[dict[str, Any]]]

TARGET_PREFIX = "DynamoDB_20120810."
CONTENT_TYPE_JSON_10 = "application/x-amz-json-1.0"
CONTENT_TYPE_JSON_11 = "application/x-amz-json-1.1"
CONTENT_TYPES = frozenset({CONTENT_TYPE_JSON_10, CONTENT_TYPE_JSON_11})

_REQUEST_ID_SEQUENCE_MASK = (1 << 48) - 1  # The counter fills the UUID's last group, 12 hex digits.


class RequestIds:
    """UUID-formatted request ids, unique across processes with overwhelming odds.

    Request ids are UUIDs, as DynamoDB's are: a random prefix drawn once per application (from the
    context's `Sources`) and a counter in the last group, which makes them unique without drawing
    16 random bytes for every request.
    """

    def __init__(self, prefix_hex: str) -> None:
        self._prefix = str(uuid.UUID(hex=prefix_hex))[:24]
        self._numbers = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._numbers) & _REQUEST_ID_SEQUENCE_MASK:012x}"


REGION_DEFAULT = "us-east-1"
# The Authorization header of the request being handled, set for each request before its handler
# runs. Handlers get only (context, body), and the one that needs more, a table's ARN, reads the
# Region from here, as DynamoDB puts the request's Region in a TableArn.
request_authorization: ContextVar[str] = ContextVar("request_authorization", default="")


def request_region() -> str:
    """The Region of the current request's SigV4 credential scope (us-east-1 when there is none).

    The scope is `Credential=<key id>/<yyyymmdd>/<region>/<service>/aws4_request`.
    """
    header = request_authorization.get()
    start = header.find("Credential=")
    if start < 0:
        return REGION_DEFAULT
    scope = header[start + len("Credential=") :].split(",", 1)[0].strip().split("/")
    if len(scope) != 5 or not scope[2]:
        return REGION_DEFAULT
    return scope[2]


def error_body(error: DynamoError) -> bytes:
    """DynamoDB's JSON error body for `error`."""
    body = {"__type": f"{error.namespace}#{error.type_name}", "message": error.message}
    body.update(error.extra_fields())
    return orjson.dumps(body)


def _reply(status: int, payload: bytes, request_id: str, content_type: str) -> web.Response:
    return web.Response(
        status=status,
        body=payload,
        headers={
            "Content-Type": content_type,
            "x-amzn-RequestId": request_id,
            "x-amz-crc32": str(zlib.crc32(payload)),
        },
    )


def _content_type(header: str) -> str | None:
    """The accepted JSON content type named by a Content-Type header, or None."""
    if header in CONTENT_TYPES:
        return header
    media_type = header.split(";", 1)[0].strip().lower()
    return media_type if media_type in CONTENT_TYPES else None


def _parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise SerializationError(f"The request body is not valid JSON: {error}") from None
    if isinstance(body, dict):
        return body
    if isinstance(body, list):
        raise SerializationError("Start of list found where not expected")
    raise SerializationError("Unexpected value type in payload: the body must be a JSON object")


class JsonProtocol:
    """Serves DynamoDB JSON 1.0 requests by dispatching them to operation handlers."""

    def __init__(self, ctx: RouterContext, operations: Mapping[str, Handler]) -> None:
        self.ctx = ctx
        self.new_request_id = RequestIds(ctx.sources.new_id())
        # Keyed by the whole header value, so dispatch is one dictionary lookup.
        self._handlers = {TARGET_PREFIX + name: handler for name, handler in operations.items()}

    async def handle(self, request: web.Request) -> web.Response:
        request_id = self.new_request_id()
        headers = request.headers
        content_type = CONTENT_TYPE_JSON_10
        target = headers.get("X-Amz-Target", "")
        try:
            accepted = _content_type(headers.get("Content-Type", ""))
            if accepted is None:
                raise UnknownOperation(
                    f"Unsupported Content-Type: use {CONTENT_TYPE_JSON_10} "
                    f"or {CONTENT_TYPE_JSON_11}"
                )
            content_type = accepted
            raw = await request.read()
            # DynamoDB checks the JSON before the operation, and both before authentication.
            body = _parse_body(raw) if raw else None
            handler = self._handlers.get(target)
            if handler is None:
                raise UnknownOperation(f"Unknown operation: {target or '(no X-Amz-Target)'}")
            authorization = headers.get("Authorization", "")
            if not authorization.startswith("AWS4-"):
                raise MissingAuthenticationToken("Request is missing Authentication Token")
            if body is None:
                raise SerializationError("The request body is empty; it must be a JSON object")
            request_authorization.set(authorization)
            payload = orjson.dumps(await handler(self.ctx, body))
        except DynamoError as error:
            return _reply(error.http_status, error_body(error), request_id, content_type)
        except web.HTTPRequestEntityTooLarge:
            # DynamoDB answers an oversized request with a bare 413.
            return _reply(413, b"", request_id, content_type)
        except Exception:
            log.exception("request %s (%s) failed", request_id, target)
            error = InternalServerError("Internal server error")
            return _reply(error.http_status, error_body(error), request_id, content_type)
        return _reply(200, payload, request_id, content_type)

    async def health(self, request: web.Request) -> web.Response:
        """`GET /`: DynamoDB's health check answer, `healthy: <host>`."""
        payload = f"healthy: {request.host}".encode()
        return web.Response(
            body=payload,
            headers={
                "Content-Type": "text/plain",
                "x-amzn-RequestId": self.new_request_id(),
                "x-amz-crc32": str(zlib.crc32(payload)),
            },
        )
