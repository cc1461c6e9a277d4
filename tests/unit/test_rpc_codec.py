"""The codec carries every core.errors type across a Response and back unchanged."""

from __future__ import annotations

import pytest

from core.errors import (
    ERROR_TYPES,
    ConditionalCheckFailed,
    InternalServerError,
    OnDemandThrottled,
    ServiceUnavailable,
    StaleEpoch,
    ThrottlingReason,
    ThroughputExceeded,
    WriteOutcomeUnknown,
)
from rpc import codec, node_pb2


@pytest.mark.parametrize("error_type", sorted(ERROR_TYPES.values(), key=lambda t: t.type_name))
def test_every_error_type_round_trips(error_type: type) -> None:
    error = error_type("something went wrong")
    response = codec.error_response(7, error)
    assert response.id == 7 and response.error_type == error_type.type_name
    decoded = codec.error_from_response(node_pb2.Response.FromString(response.SerializeToString()))
    assert type(decoded) is error_type
    assert decoded.message == "something went wrong"


def test_conditional_check_failed_carries_its_item() -> None:
    item = {"pk": {"S": "a"}, "n": {"N": "1"}}
    response = codec.error_response(1, ConditionalCheckFailed(item=item))
    decoded = codec.error_from_response(response)
    assert isinstance(decoded, ConditionalCheckFailed)
    assert decoded.item == item and decoded.message == "The conditional request failed"
    assert codec.error_response(1, ConditionalCheckFailed()).body == b""
    assert codec.error_from_response(codec.error_response(1, ConditionalCheckFailed())).item is None


def test_throughput_exceeded_keeps_its_message() -> None:
    decoded = codec.error_from_response(codec.error_response(1, ThroughputExceeded()))
    assert decoded.message == ThroughputExceeded().message
    assert isinstance(decoded, ThroughputExceeded) and decoded.reasons == ()


@pytest.mark.parametrize("throttle", [ThroughputExceeded, OnDemandThrottled])
def test_a_throttle_carries_its_throttling_reasons(throttle: type[ThroughputExceeded]) -> None:
    reasons = (
        ThrottlingReason("TableWriteKeyRangeThroughputExceeded", "Music"),
        ThrottlingReason("IndexWriteProvisionedThroughputExceeded", "Music/index/ByArtist"),
    )
    decoded = codec.error_from_response(codec.error_response(1, throttle("slow down", reasons)))
    assert type(decoded) is throttle
    assert (decoded.message, decoded.reasons) == ("slow down", reasons)


def test_replies_and_raised_errors() -> None:
    assert codec.reply_from_response(codec.ok_response(3, {"item": None})) == {"item": None}
    assert codec.reply_from_response(node_pb2.Response(id=3)) == {}
    with pytest.raises(StaleEpoch, match="epoch 4"):
        codec.reply_from_response(codec.error_response(3, StaleEpoch("at epoch 4")))


def test_an_unknown_error_type_is_a_bug_not_a_guess() -> None:
    decoded = codec.error_from_response(
        node_pb2.Response(id=1, error_type="NoSuchError", error_message="boom")
    )
    assert isinstance(decoded, InternalServerError)
    assert "NoSuchError" in decoded.message and "boom" in decoded.message


def test_a_write_of_unknown_outcome_crosses_as_itself_and_shows_clients_a_500() -> None:
    """A node's "may or may not apply" (`WriteOutcomeUnknown`) is ServiceUnavailable to its
    callers, under a name of its own on the wire, and InternalServerError to a client."""
    error = WriteOutcomeUnknown("lost track of it; the write may or may not apply")
    response = codec.error_response(2, error)
    assert response.error_type == WriteOutcomeUnknown.node_wire_name
    decoded = codec.error_from_response(node_pb2.Response.FromString(response.SerializeToString()))
    assert type(decoded) is WriteOutcomeUnknown and decoded.message == error.message
    assert isinstance(decoded, ServiceUnavailable)
    assert decoded.type_name == "InternalServerError" and decoded.http_status == 500
    plain = codec.error_from_response(codec.error_response(3, ServiceUnavailable("down")))
    assert type(plain) is ServiceUnavailable
