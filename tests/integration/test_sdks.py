"""Clients other than boto3 against a real cluster: PynamoDB, and the AWS SDK for JavaScript v3.

Each SDK parses the error code from `__type` (after the `#`) and its message from either key, so
these tests check that DynamoDB's envelopes reach them as DynamoDB's would: a conditional failure
is ConditionalCheckFailedException with its message, a missing table ResourceNotFoundException, a
bad parameter ValidationException.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dynalab.cluster import LocalCluster

pynamodb_models = pytest.importorskip("pynamodb.models", reason="PynamoDB is a dev dependency")
pynamodb_attributes = pytest.importorskip("pynamodb.attributes")
pynamodb_exceptions = pytest.importorskip("pynamodb.exceptions")


def music_model(host: str, table: str) -> Any:
    class Music(pynamodb_models.Model):  # type: ignore[misc, name-defined]
        class Meta:
            table_name = table
            region = "us-east-1"
            aws_access_key_id = "any"
            aws_secret_access_key = "any"
            max_retry_attempts = 0

        artist = pynamodb_attributes.UnicodeAttribute(hash_key=True)
        song = pynamodb_attributes.UnicodeAttribute(range_key=True)
        year = pynamodb_attributes.NumberAttribute(null=True)

    Music.Meta.host = host
    return Music


def test_pynamodb_round_trip_and_errors(
    cluster: LocalCluster, table_name: Callable[[], str]
) -> None:
    music = music_model(cluster.router_url, table_name())
    music.create_table(wait=True, billing_mode="PAY_PER_REQUEST")
    music("Arvo Pärt", "Spiegel im Spiegel", year=1978).save()
    music("Arvo Pärt", "Für Alina", year=1976).save()
    assert music.get("Arvo Pärt", "Für Alina").year == 1976
    assert [m.song for m in music.query("Arvo Pärt")] == ["Für Alina", "Spiegel im Spiegel"]

    with pytest.raises(pynamodb_exceptions.PutError) as failed:
        music("Arvo Pärt", "Für Alina").save(condition=music.artist.does_not_exist())
    assert failed.value.cause_response_code == "ConditionalCheckFailedException"
    assert failed.value.cause_response_message == "The conditional request failed"

    with pytest.raises(pynamodb_exceptions.QueryError) as invalid:
        list(music.query("Arvo Pärt", filter_condition=music.artist == "x"))
    assert invalid.value.cause_response_code == "ValidationException"
    assert invalid.value.cause_response_message == (
        "Filter Expression can only contain non-primary key attributes: "
        "Primary key attribute: artist"
    )

    missing = music_model(cluster.router_url, "no-such-table")
    with pytest.raises(pynamodb_exceptions.GetError) as not_found:
        missing.get("a", "b")
    assert not_found.value.cause_response_code == "ResourceNotFoundException"


JS_DIR = Path(__file__).resolve().parents[1] / "js"
NODE_TIMEOUT_S = 120


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_js_sdk_v3(cluster: LocalCluster, table_name: Callable[[], str]) -> None:
    if not (JS_DIR / "node_modules" / "@aws-sdk" / "client-dynamodb").is_dir():
        pytest.skip("the JS SDK is not installed: run `npm ci` in tests/js")
    completed = subprocess.run(
        ["node", str(JS_DIR / "sdk_check.mjs"), cluster.router_url, table_name()],
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["item"] == {"pk": {"S": "a"}, "n": {"N": "1"}}
    assert result["conditional"] == {
        "name": "ConditionalCheckFailedException",
        "message": "The conditional request failed",
        "status": 400,
    }
    assert result["notFound"] == {
        "name": "ResourceNotFoundException",
        "message": "Requested resource not found: Table: no-such-table not found",
        "status": 400,
    }
    assert result["validation"] == {
        "name": "ValidationException",
        "message": "1 validation error detected: Value '0' at 'limit' failed to satisfy "
        "constraint: Member must have value greater than or equal to 1",
        "status": 400,
    }
