"""DynamoDB's JSON 1.0 protocol over HTTP: the one place where requests and errors meet the wire.

A request is `POST` (to any path, which DynamoDB ignores) with `X-Amz-Target:
DynamoDB_20120810.<Operation>` (or `DynamoDBStreams_20120810.<Operation>` for the Streams API), a
JSON object as body, Content-Type `application/x-amz-json-1.0` (or `application/json`, which
DynamoDB accepts too and answers in kind) and a SigV4 `Authorization` header.
`JsonProtocol.handle` checks it in the order DynamoDB does:

1. the HTTP request itself: any other method, or a body under another content type, gets
   DynamoDB's bare 404 `<UnknownOperationException/>`;
2. the body parses as JSON (else a SerializationException with no text);
3. the operation exists (else an UnknownOperationException with no text);
4. `Authorization` is there and names SigV4 (`MissingAuthenticationTokenException`), with its
   Credential, Signature and SignedHeaders and a date header (`IncompleteSignatureException`).
   Signatures are not verified: any credentials are accepted;
5. the body is not empty and is deserialised against the operation's input shape
   (`router.shapes`), before the handler validates constraints and looks anything up.

Every `core.errors.DynamoError` raised on the way becomes DynamoDB's error reply here and nowhere
else, rendered from its row of `core.errors.WIRE_ERRORS`: the HTTP status and `{"__type":
"<namespace>#<type>", "message" | "Message": ...}` plus the error's extra fields. Any other
exception is a bug: the client gets a 500 InternalServerError and the log gets the traceback under
the request id.

Every reply carries `x-amzn-RequestId` (52 characters of [0-9A-Z], like DynamoDB's) and
`x-amz-crc32` (the CRC32 of the body bytes, which the AWS SDKs verify).

Bodies may be compressed, both ways (`core.content_coding`): a request's is inflated, bounded,
before it is parsed (a body that does not inflate gets DynamoDB's 500 InternalServerError, one
inflating past 16 MB its bare 413), and a reply of 4 KB or more is compressed when the request's
Accept-Encoding accepts gzip or deflate, the CRC32 then of the bytes sent.

CORS, so that a page's script (DynamoDB's JS SDK in a browser) can call the router directly: a
request with an `Origin` header is answered with `Access-Control-Allow-Origin: *` and the headers
the SDKs read exposed (`add_cors_headers`, on every reply); an `OPTIONS` preflight with an `Origin`
is answered 200 with the method and headers it asked for allowed, for two days
(`preflight`). A request without an `Origin` gets none of these headers, as from DynamoDB.
DynamoDB publishes none of this; the behaviour is what its endpoints answer and what ScyllaDB's
tests, run against DynamoDB, check; the exposed header list is ours (the ones an SDK reads).

This is the hot path of every request, so it does the least it can: one header lookup for the
operation, orjson in both directions, and no per-request objects beyond the reply.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from core import content_coding, limits
from core.errors import (
    DynamoError,
    IncompleteSignature,
    InternalServerError,
    MissingAuthenticationToken,
    SerializationError,
    ThroughputExceeded,
    UnknownOperation,
)
from router import shapes
from router.metrics import UNKNOWN_OPERATION

if TYPE_CHECKING:
    from router.context import RouterContext

log = logging.getLogger("router.protocol")

Handler = Callable[["RouterContext", dict[str, Any]], Awaitable[dict[str, Any]]]

TARGET_PREFIX = "DynamoDB_20120810."
STREAMS_TARGET_PREFIX = "DynamoDBStreams_20120810."
CONTENT_TYPE_AMZ_JSON = "application/x-amz-json-1.0"
CONTENT_TYPE_JSON = "application/json"
CONTENT_TYPES = frozenset({CONTENT_TYPE_AMZ_JSON, CONTENT_TYPE_JSON})

# DynamoDB's answer to a request that is not a DynamoDB call at all: another method, or a body
# under a content type it does not read. The body is XML, the one place DynamoDB speaks it.
NOT_FOUND_BODY = b"<UnknownOperationException/>\n"
CORS_MAX_AGE = str(limits.CORS_PREFLIGHT_MAX_AGE_SECONDS)
# The reply headers a browser lets a cross-origin script read: the ones the AWS SDKs look at.
CORS_EXPOSED_HEADERS = (
    "x-amzn-RequestId,x-amzn-ErrorType,x-amzn-ErrorMessage,x-amz-crc32,x-amz-user-agent,Date"
)

REQUEST_ID_CHARS = 52
_REQUEST_ID_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_PREFIX_HEX_DIGITS = 32
_COUNTER_DIGITS = REQUEST_ID_CHARS - _PREFIX_HEX_DIGITS
_COUNTER_MODULUS = len(_REQUEST_ID_DIGITS) ** _COUNTER_DIGITS

# The SigV4 parameters an Authorization header must name, in the order DynamoDB lists the missing.
SIGV4_PARAMETERS = ("Credential", "Signature", "SignedHeaders")


class RequestIds:
    """Request ids as DynamoDB writes them: 52 characters of [0-9A-Z].

    A random prefix of 32 hex digits (upper case) is drawn once per application (from the
    context's `Sources`) and a counter in base 36 fills the last 20 characters, which makes ids
    unique across processes with overwhelming odds without drawing random bytes per request.
    """

    def __init__(self, prefix_hex: str) -> None:
        if len(prefix_hex) != _PREFIX_HEX_DIGITS:
            raise ValueError(f"a request-id prefix is {_PREFIX_HEX_DIGITS} hex digits")
        self._prefix = prefix_hex.upper()
        self._numbers = itertools.count()

    def __call__(self) -> str:
        number = next(self._numbers) % _COUNTER_MODULUS
        digits = []
        for _ in range(_COUNTER_DIGITS):
            number, digit = divmod(number, len(_REQUEST_ID_DIGITS))
            digits.append(_REQUEST_ID_DIGITS[digit])
        return self._prefix + "".join(reversed(digits))


REGION_DEFAULT = "us-east-1"
# dynalab has no accounts; ARNs name this one, as DynamoDB Local does.
ACCOUNT_ID = "000000000000"
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
    """DynamoDB's JSON error body for `error`, as its row in `WIRE_ERRORS` says to write it."""
    wire = error.wire
    body: dict[str, Any] = {"__type": f"{wire.namespace}#{error.type_name}"}
    if error.message is not None:
        body[wire.message_key.value] = error.message
    body.update(error.extra_fields())
    if isinstance(error, ThroughputExceeded) and error.reasons:
        # A node names the resource as it holds it; the client sees its ARN, in the request's
        # Region (API Reference, ThrottlingReason).
        arn = f"arn:aws:dynamodb:{request_region()}:{ACCOUNT_ID}:table/"
        body[error.reasons_key] = [
            {"reason": reason.reason, "resource": arn + reason.resource} for reason in error.reasons
        ]
    return orjson.dumps(body)


def _reply(
    status: int,
    payload: bytes,
    request_id: str,
    content_type: str | None,
    accept_encoding: str | None = None,
) -> web.Response:
    """The reply, its body compressed as the request's `accept_encoding` accepts when it is
    large enough to be (the CRC32 then of the compressed bytes, as DynamoDB's)."""
    headers = {"x-amzn-RequestId": request_id}
    coding = content_coding.reply_coding(payload, accept_encoding)
    if coding is not None:
        payload = content_coding.encoded_body(payload, coding)
        headers["Content-Encoding"] = coding
    headers["x-amz-crc32"] = str(zlib.crc32(payload))
    if content_type is not None:
        headers["Content-Type"] = content_type
    return web.Response(status=status, body=payload, headers=headers)


def preflight(headers: Mapping[str, str], request_id: str) -> web.Response:
    """The answer to a CORS preflight: the method and headers it asks for, allowed for two days
    (`add_cors_headers` adds the origin and the exposed headers, as to every reply)."""
    allowed = {"x-amzn-RequestId": request_id, "Access-Control-Max-Age": CORS_MAX_AGE}
    method = headers.get("Access-Control-Request-Method")
    if method is not None:
        allowed["Access-Control-Allow-Methods"] = method
    asked = headers.get("Access-Control-Request-Headers")
    if asked is not None:
        allowed["Access-Control-Allow-Headers"] = asked
    return web.Response(status=200, headers=allowed)


async def add_cors_headers(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """Let a cross-origin script read the reply to a request that names its `Origin` (an
    `on_response_prepare` signal of the application: every reply passes here)."""
    if "Origin" in request.headers:
        response.headers["Access-Control-Allow-Origin"] = "*"
        response.headers["Access-Control-Expose-Headers"] = CORS_EXPOSED_HEADERS


def _content_type(header: str) -> str | None:
    """The accepted JSON content type named by a Content-Type header, or None."""
    if header in CONTENT_TYPES:
        return header
    media_type = header.split(";", 1)[0].strip().lower()
    return media_type if media_type in CONTENT_TYPES else None


def _parse_body(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        # DynamoDB names neither the fault nor its place.
        raise SerializationError(None) from None


def check_authorization(header: str, has_date: bool) -> None:
    """Check that an Authorization header has SigV4's shape, as DynamoDB does before signatures.

    A header that does not start with `AWS4-` is no SigV4 token at all; one that does must name
    its Credential, Signature and SignedHeaders, and the request must carry X-Amz-Date or Date.
    DynamoDB lists everything missing in one message and quotes the header.
    """
    token = header.strip()
    if not token.startswith("AWS4-"):
        raise MissingAuthenticationToken("Request is missing Authentication Token")
    present: set[str] = set()
    _, _, parameters = token.partition(" ")
    for parameter in parameters.split(","):
        name, equals, value = parameter.strip().partition("=")
        if equals and value:
            present.add(name)
    missing = "".join(
        f"Authorization header requires '{name}' parameter. "
        for name in SIGV4_PARAMETERS
        if name not in present
    )
    if not has_date:
        missing += (
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header. "
        )
    if missing:
        raise IncompleteSignature(f"{missing}Authorization={header}")


@dataclasses.dataclass(slots=True)
class _Served:
    """A reply and what the request metrics count of it."""

    response: web.Response
    body: bytes
    bytes_in: int
    operation: str = UNKNOWN_OPERATION
    error_type: str | None = None


class JsonProtocol:
    """Serves DynamoDB JSON 1.0 requests by dispatching them to operation handlers."""

    def __init__(
        self,
        ctx: RouterContext,
        operations: Mapping[str, Handler],
        streams_operations: Mapping[str, Handler] | None = None,
    ) -> None:
        self.ctx = ctx
        self.new_request_id = RequestIds(ctx.sources.new_id())
        # Keyed by the whole header value, so dispatch is one dictionary lookup. The two services'
        # operation names differ, so each names its input shape in `router.shapes` alone.
        served = [(TARGET_PREFIX, operations), (STREAMS_TARGET_PREFIX, streams_operations or {})]
        self._handlers = {
            prefix + name: handler for prefix, ops in served for name, handler in ops.items()
        }
        self._operations = {prefix + name: name for prefix, ops in served for name in ops}

    async def handle(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        served = await self._serve(request)
        self.ctx.metrics.observe(
            served.operation,
            served.response.status,
            served.error_type,
            time.perf_counter() - started,
            served.bytes_in,
            len(served.body),
        )
        return served.response

    async def _serve(self, request: web.Request) -> _Served:
        request_id = self.new_request_id()
        headers = request.headers
        if request.method == "OPTIONS" and "Origin" in headers:
            return _Served(preflight(headers, request_id), b"", 0)
        # The body was admitted and read within the router's limits (router/limits.py), as sent:
        # the application is served without aiohttp's own inflating (`router.app`).
        raw = await request.read() if request.method == "POST" else b""
        accepted = _content_type(headers.get("Content-Type", ""))
        if request.method != "POST" or (raw and accepted is None):
            return _Served(_reply(404, NOT_FOUND_BODY, request_id, None), NOT_FOUND_BODY, len(raw))
        # DynamoDB answers in the JSON dialect it was asked in, compressed if asked and large.
        content_type = CONTENT_TYPE_JSON if accepted is None else accepted
        accept_encoding = headers.get("Accept-Encoding")  # Read only for a large reply.
        target = headers.get("X-Amz-Target", "")
        operation = self._operations.get(target, UNKNOWN_OPERATION)
        try:
            raw = content_coding.decoded_body(raw, headers.get("Content-Encoding"))
        except content_coding.BodyTooLarge:
            # As a body over the limit as sent: DynamoDB's bare 413 (router/limits.py).
            response = _reply(413, b"", request_id, None)
            response.force_close()
            return _Served(response, b"", len(raw), operation)
        except content_coding.Undecodable:
            # DynamoDB's answer to a body it cannot inflate, or a coding it does not read:
            # a 500, nothing applied.
            error = InternalServerError("Internal server error")
            payload = error_body(error)
            response = _reply(error.http_status, payload, request_id, content_type, accept_encoding)
            return _Served(response, payload, len(raw), operation, error.type_name)
        try:
            body = _parse_body(raw) if raw else None
            handler = self._handlers.get(target)
            if handler is None:
                raise UnknownOperation()
            authorization = headers.get("Authorization", "")
            check_authorization(authorization, "X-Amz-Date" in headers or "Date" in headers)
            if body is None:
                raise SerializationError(None)
            shapes.deserialize(operation, body)
            request_authorization.set(authorization)
            payload = orjson.dumps(await handler(self.ctx, body))
        except DynamoError as error:
            payload = error_body(error)
            response = _reply(error.http_status, payload, request_id, content_type, accept_encoding)
            return _Served(response, payload, len(raw), operation, error.type_name)
        except Exception:
            log.exception("request %s (%s) failed", request_id, target)
            internal = InternalServerError("Internal server error")
            payload = error_body(internal)
            response = _reply(
                internal.http_status, payload, request_id, content_type, accept_encoding
            )
            return _Served(response, payload, len(raw), operation, internal.type_name)
        response = _reply(200, payload, request_id, content_type, accept_encoding)
        return _Served(response, payload, len(raw), operation)

    def error_response(self, request: web.BaseRequest, error: DynamoError) -> web.Response:
        """DynamoDB's reply for `error`, for a request refused before its body was read."""
        accepted = _content_type(request.headers.get("Content-Type", ""))
        content_type = CONTENT_TYPE_JSON if accepted is None else accepted
        return _reply(error.http_status, error_body(error), self.new_request_id(), content_type)

    def bare_response(self, status: int) -> web.Response:
        """A reply of `status` with no body, as DynamoDB answers a request too large (413)."""
        return _reply(status, b"", self.new_request_id(), None)

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
