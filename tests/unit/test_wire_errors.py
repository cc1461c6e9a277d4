"""core.errors.WIRE_ERRORS, the table of how DynamoDB sends each error, checked against botocore.

The service's own errors must be exactly the exception shapes of DynamoDB's service model, each
with the message key the model names; whether the AWS SDKs retry an error must agree with
botocore's standard retry mode, which retries throttling codes and 5xx statuses.
"""

from __future__ import annotations

from typing import Any

import pytest

from core import errors
from core.errors import ERROR_TYPES, WIRE_ERRORS, MessageKey, Namespace

generate_shapes = pytest.importorskip(
    "router.generate_shapes", reason="botocore is a dev dependency"
)
standard = pytest.importorskip("botocore.retries.standard")
awsrequest = pytest.importorskip("botocore.awsrequest")


def exception_shapes() -> dict[str, dict[str, Any]]:
    """The exception shapes of DynamoDB's model and DynamoDB Streams' (the router serves both)."""
    shapes: dict[str, dict[str, Any]] = {}
    for model in (generate_shapes.service_model(), generate_shapes.streams_service_model()):
        shapes.update(
            (name, shape) for name, shape in model["shapes"].items() if shape.get("exception")
        )
    return shapes


def test_every_modelled_exception_is_in_the_table_in_dynamodb_namespace() -> None:
    modelled = exception_shapes()
    ours = {name for name, wire in WIRE_ERRORS.items() if wire.namespace == Namespace.DYNAMODB}
    assert ours == set(modelled)


@pytest.mark.parametrize("name", sorted(exception_shapes()))
def test_message_key_is_the_models(name: str) -> None:
    members = exception_shapes()[name]["members"]
    (key,) = [member for member in members if member.lower() == "message"]
    assert WIRE_ERRORS[name].message_key == MessageKey(key)


@pytest.mark.parametrize("name", sorted(WIRE_ERRORS))
def test_sdk_retries_agrees_with_botocore_standard_mode(name: str) -> None:
    wire = WIRE_ERRORS[name]
    response = awsrequest.AWSResponse("http://localhost/", wire.http_status, {}, None)
    context = standard.RetryContext(
        attempt_number=1,
        parsed_response={"Error": {"Code": name, "Message": ""}},
        http_response=response,
    )
    checkers = [standard.TransientRetryableChecker(), standard.ThrottledRetryableChecker()]
    assert wire.sdk_retries == any(checker.is_retryable(context) for checker in checkers)


def test_framework_errors_and_their_namespaces() -> None:
    assert WIRE_ERRORS["ValidationException"].namespace == Namespace.VALIDATE
    for name in (
        "SerializationException",
        "UnknownOperationException",
        "MissingAuthenticationTokenException",
        "IncompleteSignatureException",
    ):
        assert WIRE_ERRORS[name].namespace == Namespace.SERVICE
    assert WIRE_ERRORS["SerializationException"].message_key == MessageKey.UPPER
    assert WIRE_ERRORS["ValidationException"].message_key == MessageKey.LOWER


def test_every_error_class_has_its_row_and_status() -> None:
    for name, cls in ERROR_TYPES.items():
        assert cls.type_name == name
        assert name in WIRE_ERRORS
    assert errors.InternalServerError("x").http_status == 500
    assert errors.ServiceUnavailable("x").http_status == 503
    assert errors.ValidationError("x").http_status == 400
