"""HTTP content codings of DynamoDB request and response bodies, as DynamoDB's front end treats
them. Pure: bytes in, bytes out, nothing read or written.

Requests. An SDK may compress a request body ("Content-Encoding: gzip"; botocore does for the
operations its model marks, boto3 since 2023). DynamoDB inflates gzip, including a body of several
gzip members one after another, and answers a body that does not inflate (truncated, not gzip at
all, empty) with a 500 InternalServerError, having applied nothing; an unknown coding gets the
same 500. It ignores bytes after the last whole member. (ScyllaDB's Alternator tests, which run
against DynamoDB, pin each of these.) `deflate` (a zlib stream, or a raw deflate one as some
clients send) is inflated too. DynamoDB does not bound the inflated size (a 1 GB body of spaces
goes through); dynalab does: a body that would inflate past DynamoDB's 16 MB request limit is
refused as soon as inflating passes it (`BodyTooLarge`, answered as an oversized request is),
never held whole.

Responses. DynamoDB compresses a response body of at least 4 KB when the request's
Accept-Encoding accepts gzip or deflate, and leaves smaller ones alone; the x-amz-crc32 header is
then the CRC32 of the compressed bytes, which the SDKs that ask for compression check (the Go
SDK v2's DynamoDB customizations check it before inflating; botocore never asks, sending
"Accept-Encoding: identity", but checks the CRC32 of the bytes on the wire all the same). Which
coding it picks (`response_coding`) follows RFC 9110's quality values the way DynamoDB reads
them: the highest q wins, q=0 refuses a coding, a missing or unreadable q counts as 1 and one
above 1 as 1, the first q of an entry counts, a coding named outright beats `*` at the same q,
`*` alone means gzip first, and entries that are not a token (quoted, two words, `gzip:q=1`) are
skipped; br, zstd, compress and x-gzip are not served.
"""

from __future__ import annotations

import re
import zlib

from core import limits

GZIP = "gzip"
DEFLATE = "deflate"
IDENTITY = "identity"
# The codings dynalab serves, in the order `*` prefers them.
SERVED = (GZIP, DEFLATE)

_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_QUALITY = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)")


class BodyTooLarge(Exception):
    """A compressed request body that inflates past the request limit."""


class Undecodable(Exception):
    """A request body its Content-Encoding does not decode (or a coding not served)."""


def decoded_body(
    raw: bytes, content_encoding: str | None, limit: int = limits.HTTP_REQUEST_BYTES_MAX
) -> bytes:
    """The request body `raw` as sent under `content_encoding` (None or identity: as it is),
    inflated to at most `limit` bytes; raises BodyTooLarge past it, Undecodable when it does not
    decode."""
    coding = (content_encoding or IDENTITY).strip().lower()
    if coding in ("", IDENTITY):
        return raw
    if coding not in SERVED:
        raise Undecodable(f"Content-Encoding {content_encoding!r} is not one DynamoDB reads")
    if not raw:
        raise Undecodable("an empty body is no compressed stream")
    try:
        if coding == GZIP:
            return _inflate_members(raw, limit)
        return _inflate(zlib.decompressobj(_deflate_wbits(raw)), raw, limit)[0]
    except zlib.error as error:
        raise Undecodable(str(error)) from None


def _deflate_wbits(raw: bytes) -> int:
    # A zlib stream starts with a header whose two bytes are a multiple of 31 and name deflate
    # (method 8); anything else is taken as a raw deflate stream.
    if len(raw) >= 2 and raw[0] & 0x0F == 8 and (raw[0] << 8 | raw[1]) % 31 == 0:
        return zlib.MAX_WBITS
    return -zlib.MAX_WBITS


def _inflate_members(raw: bytes, limit: int) -> bytes:
    """Every gzip member of `raw`, one after another, as one body; bytes after the last whole
    member that start no other are ignored, as DynamoDB ignores them."""
    out = bytearray()
    data = raw
    while True:
        inflated, rest = _inflate(zlib.decompressobj(_GZIP_WBITS), data, limit - len(out))
        out += inflated
        if not rest.startswith(_GZIP_MAGIC):
            return bytes(out)
        data = rest


def _inflate(decompressor: zlib._Decompress, data: bytes, room: int) -> tuple[bytes, bytes]:
    """One stream of `data` inflated, never more than `room` bytes (BodyTooLarge past them),
    and the bytes after its end; Undecodable when it ends early."""
    out = bytearray()
    while True:
        # One byte past the room tells a body that fits exactly from one that does not.
        out += decompressor.decompress(data, room - len(out) + 1)
        if len(out) > room:
            raise BodyTooLarge(f"the body inflates past {room} bytes")
        if decompressor.eof:
            return bytes(out), decompressor.unused_data
        data = decompressor.unconsumed_tail
        if not data:
            raise Undecodable("the compressed stream ends before its end")


def response_coding(accept_encoding: str | None) -> str | None:
    """The coding to compress a response in for a request's Accept-Encoding (None: none)."""
    if not accept_encoding:
        return None
    named: dict[str, tuple[float, int]] = {}  # coding: (quality, first position)
    star: float | None = None
    for position, element in enumerate(accept_encoding.split(",")):
        coding, quality = _entry(element)
        if coding is None:
            continue
        if coding == "*":
            star = quality if star is None else max(star, quality)
        elif coding in SERVED:
            # A coding named twice counts at its best quality, from where it was first named.
            so_far, first = named.get(coding, (0.0, position))
            named[coding] = (max(so_far, quality), first)
    choices: list[tuple[float, int, int, str]] = []  # (quality, named first, position, coding)
    for preference, coding in enumerate(SERVED):
        if coding in named:
            quality, position = named[coding]
            choices.append((quality, 0, position, coding))
        elif star is not None:
            choices.append((star, 1, preference, coding))
    choices = [choice for choice in choices if choice[0] > 0]
    if not choices:
        return None
    return min(choices, key=lambda choice: (-choice[0], choice[1], choice[2]))[3]


def _entry(element: str) -> tuple[str | None, float]:
    """One Accept-Encoding element's coding (lower case; None when it is no token) and
    quality."""
    name, *parameters = element.split(";")
    name = name.strip()
    if not _TOKEN.fullmatch(name):
        return None, 0.0
    quality: float | None = None
    for parameter in parameters:
        key, _, value = parameter.partition("=")
        if key.strip().lower() != "q" or quality is not None:
            continue
        value = value.strip()
        quality = min(1.0, max(0.0, float(value))) if _QUALITY.fullmatch(value) else 1.0
    return name.lower(), 1.0 if quality is None else quality


def encoded_body(payload: bytes, coding: str) -> bytes:
    """`payload` compressed in `coding` (gzip, or deflate as a zlib stream)."""
    wbits = _GZIP_WBITS if coding == GZIP else zlib.MAX_WBITS
    compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, wbits)
    return compressor.compress(payload) + compressor.flush()


def reply_coding(payload: bytes, accept_encoding: str | None) -> str | None:
    """The coding response body `payload` is sent in for a request's Accept-Encoding (None: as
    it is). Only a body of at least `limits.HTTP_RESPONSE_COMPRESSION_BYTES_MIN` is compressed,
    and Accept-Encoding is read only for one, so a small reply (most are) costs a length check:
    boto3 sends "Accept-Encoding: identity" on every request."""
    if len(payload) < limits.HTTP_RESPONSE_COMPRESSION_BYTES_MIN:
        return None
    return response_coding(accept_encoding)
