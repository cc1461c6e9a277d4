"""Regenerate `router/dynamodb_shapes.json` from botocore's DynamoDB and DynamoDB Streams models.

Run as `python -m router.generate_shapes` (or `make shapes`). The file holds, for every operation of
both service models (the router serves both: `DynamoDB_20120810.*` and
`DynamoDBStreams_20120810.*`), its input shape and every shape reachable from it, reduced to what
request deserialisation needs: each shape's type, a structure's members, a list's member and a
map's value. The two models share shape names (`TableName`, `KeySchema`, ...); a shared name must
reduce to the same shape in both, and no operation name is in both.
It is committed, so the router needs no botocore at run time; a test regenerates it and fails when
the committed copy is stale against the installed botocore (pinned in the dev dependencies).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import botocore

OUTPUT = Path(__file__).resolve().parent / "dynamodb_shapes.json"
DATA_DIR = Path(botocore.__file__).resolve().parent / "data"
MODEL_DIR = DATA_DIR / "dynamodb" / "2012-08-10"
STREAMS_MODEL_DIR = DATA_DIR / "dynamodbstreams" / "2012-08-10"


def _load(directory: Path) -> dict[str, Any]:
    """A botocore service model, stored plain or gzipped depending on botocore's version."""
    plain = directory / "service-2.json"
    if plain.exists():
        return dict(json.loads(plain.read_text()))
    return dict(json.loads(gzip.decompress((directory / "service-2.json.gz").read_bytes())))


def service_model() -> dict[str, Any]:
    """botocore's DynamoDB service model."""
    return _load(MODEL_DIR)


def streams_service_model() -> dict[str, Any]:
    """botocore's DynamoDB Streams service model."""
    return _load(STREAMS_MODEL_DIR)


def reduce_model(model: dict[str, Any]) -> dict[str, Any]:
    """The operations' input shapes and the types reachable from them."""
    shapes: dict[str, Any] = {}
    operations: dict[str, str] = {}

    def visit(name: str) -> None:
        if name in shapes:
            return
        shape = model["shapes"][name]
        kind = shape["type"]
        reduced: dict[str, Any] = {"type": kind}
        shapes[name] = reduced
        if kind == "structure":
            reduced["members"] = {m: spec["shape"] for m, spec in shape["members"].items()}
            for spec in shape["members"].values():
                visit(spec["shape"])
        elif kind == "list":
            reduced["member"] = shape["member"]["shape"]
            visit(shape["member"]["shape"])
        elif kind == "map":
            reduced["value"] = shape["value"]["shape"]
            visit(shape["value"]["shape"])

    for operation_name, operation in model["operations"].items():
        if "input" in operation:
            operations[operation_name] = operation["input"]["shape"]
            visit(operation["input"]["shape"])
    return {
        "operations": operations,
        "shapes": shapes,
    }


def merge(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two reduced models as one; refuses an operation in both or a name reduced two ways."""
    clashes = first["operations"].keys() & second["operations"].keys()
    assert not clashes, f"operations in both models: {sorted(clashes)}"
    for name in first["shapes"].keys() & second["shapes"].keys():
        assert first["shapes"][name] == second["shapes"][name], f"shape {name} differs"
    return {
        "operations": {**first["operations"], **second["operations"]},
        "shapes": {**first["shapes"], **second["shapes"]},
    }


def render(model: dict[str, Any], streams_model: dict[str, Any]) -> str:
    reduced = merge(reduce_model(model), reduce_model(streams_model))
    return json.dumps(reduced, indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    OUTPUT.write_text(render(service_model(), streams_service_model()))
    sys.exit(0)
