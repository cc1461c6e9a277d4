"""core.content_coding: request bodies inflated as DynamoDB inflates them, bounded; the coding a
response is compressed in, chosen from Accept-Encoding as DynamoDB chooses it."""

from __future__ import annotations

import gzip
import zlib

import pytest

from core import content_coding, limits
from core.content_coding import BodyTooLarge, Undecodable

BODY = b'{"TableName": "Music", "Item": {"pk": {"S": "a"}}}'


def deflated(data: bytes, wbits: int) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize("coding", [None, "", "identity", " IDENTITY "])
def test_an_uncoded_body_is_taken_as_it_is(coding: str | None) -> None:
    assert content_coding.decoded_body(BODY, coding) == BODY


def test_gzip_members_one_after_another_are_one_body() -> None:
    assert content_coding.decoded_body(gzip.compress(BODY), "gzip") == BODY
    two = gzip.compress(BODY[:10]) + gzip.compress(BODY[10:])
    assert content_coding.decoded_body(two, "GZip") == BODY
    # Bytes after the last member that start no other are ignored, as DynamoDB ignores them.
    assert content_coding.decoded_body(gzip.compress(BODY) + b"junk", "gzip") == BODY


def test_deflate_is_a_zlib_stream_or_a_raw_one() -> None:
    assert content_coding.decoded_body(deflated(BODY, zlib.MAX_WBITS), "deflate") == BODY
    assert content_coding.decoded_body(deflated(BODY, -zlib.MAX_WBITS), "deflate") == BODY


# A fixed mtime, so these parameters (the header holds the time of compression) and their test ids
# are the same in every process: pytest-xdist's workers each collect the tests, and refuse to run
# when their collections differ.
GZIPPED = gzip.compress(BODY, mtime=0)


@pytest.mark.parametrize(
    ("raw", "coding"),
    [
        (BODY, "gzip"),  # Not gzip at all.
        (GZIPPED[:-1], "gzip"),  # Its end missing.
        (GZIPPED[:12], "gzip"),
        (b"", "gzip"),  # Nothing to inflate.
        (b"", "deflate"),
        (b"\x00\x01\x02", "deflate"),
        (GZIPPED, "br"),  # A coding DynamoDB does not read.
        (GZIPPED, "x-gzip"),
        (BODY, "gzip, identity"),
    ],
)
def test_a_body_that_does_not_decode_is_undecodable(raw: bytes, coding: str) -> None:
    with pytest.raises(Undecodable):
        content_coding.decoded_body(raw, coding)


def test_inflating_stops_as_soon_as_it_passes_the_limit() -> None:
    limit = 64 * 1024
    exactly = b" " * limit
    assert content_coding.decoded_body(gzip.compress(exactly), "gzip", limit) == exactly
    for raw in (gzip.compress(exactly + b" "), gzip.compress(exactly[:40_000]) * 2):
        with pytest.raises(BodyTooLarge):
            content_coding.decoded_body(raw, "gzip", limit)
    # A bomb: 20 MB of spaces in about 20 KB, refused past the request limit without 20 MB held.
    bomb = deflated(b" " * (20 * limits.MIB), zlib.MAX_WBITS)
    assert len(bomb) < 64 * 1024
    with pytest.raises(BodyTooLarge):
        content_coding.decoded_body(bomb, "deflate")


# Accept-Encoding as DynamoDB reads it (ScyllaDB's tests of compressed responses, run against
# DynamoDB, pin every one of these).
CHOSEN = [
    (None, None),
    ("", None),
    ("identity", None),
    ("br", None),
    ("zstd", None),
    ("compress", None),
    ("x-gzip", None),
    ("gzip", "gzip"),
    ("deflate", "deflate"),
    ("gzip, deflate", "gzip"),
    ("br, identity, deflate, gzip", "deflate"),
    ("GZIP, identity", "gzip"),
    ("dog, gzip ,, cat", "gzip"),
    ("gzip;q=0.8, deflate;q=0.5", "gzip"),
    ("br, gzip;q=0, deflate; q = 0.5 , identity;q=0", "deflate"),
    ("*", "gzip"),
    ("*, deflate;q=0.5", "gzip"),
    ("*, deflate", "deflate"),
    ("*, identity", "gzip"),
    ("*, gzip;q=0.5", "deflate"),
    ("gzip ;q=0", None),
    ("identity;q=0", None),
    ("*;q=0", None),
    ("*;q=0.5,identity", "gzip"),
    ("gzip;q=0.5,identity;q=0.8", "gzip"),
    ("br;q=0.8,identity;q=0.5,*;q=0", None),
    ('"gzip"', None),
    ("gzip br", None),
    ("gzip:q=1", None),
    ("deflate;q=0.5, gzip;q=31", "gzip"),
    ("gzip;q=31,deflate;q=51", "gzip"),
    ("deflate;q=0.5, gzip;q=0.2", "deflate"),
    ("deflate;q=0.5, gzip;q=1;q=0.2", "gzip"),
    ("deflate;q=0.5,gzip;q=0.", "deflate"),
    ("deflate;q=0.5,gzip;q=0.x", "gzip"),
    ("deflate;q=-0.5,gzip;q=0.2", "gzip"),
    ("gzip;nq=1;q=0 ", None),
    ("gzip;q=0, gzip;q=1, gzip;q=0", "gzip"),
    ("br,identity;q=0.5,gzip;q=0.0001", "gzip"),
]


@pytest.mark.parametrize(("accept", "chosen"), CHOSEN)
def test_the_response_coding_is_the_one_dynamodb_picks(accept: str | None, chosen: str) -> None:
    assert content_coding.response_coding(accept) == chosen


def test_a_response_of_4_kb_or_more_is_compressed_and_inflates_back() -> None:
    small = b"x" * (limits.HTTP_RESPONSE_COMPRESSION_BYTES_MIN - 1)
    large = small + b"x"
    assert content_coding.reply_coding(small, "gzip") is None
    assert content_coding.reply_coding(large, None) is None
    assert content_coding.reply_coding(large, "identity") is None
    assert content_coding.reply_coding(large, "deflate") == "deflate"
    assert content_coding.reply_coding(large, "gzip;q=0.5, deflate;q=0.4") == "gzip"
    assert gzip.decompress(content_coding.encoded_body(large, "gzip")) == large
    assert zlib.decompress(content_coding.encoded_body(large, "deflate")) == large
