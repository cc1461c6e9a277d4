"""A node failure reaches clients as one readable line, never gRPC's multi-line debug text."""

import grpc

from rpc.client import _describe


def test_grpc_errors_are_described_by_status_and_details() -> None:
    error = grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details="failed to connect to all addresses",
        debug_error_string='UNKNOWN:Error from peer {grpc_status:14,\n created_time:"..."}',
    )
    text = _describe(error)
    assert text == "UNAVAILABLE failed to connect to all addresses"
    assert "\n" not in text and "debug" not in text


def test_other_errors_are_described_by_repr() -> None:
    assert _describe(ConnectionResetError("peer reset")) == "ConnectionResetError('peer reset')"
