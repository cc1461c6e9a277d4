"""Regenerate `router/dynamodb_shapes.json` from botocore's DynamoDB service model.

Run as `python -m router.generate_shapes` (or `make shapes`). The file holds, for every operation of
the service model, its input shape and every shape reachable from it, reduced to what request
deserialisation needs: each shape's type, a structure's members, a list's member and a map's value.
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
MODEL_DIR = Path(botocore.__file__).resolve().parent / "data" / "dynamodb" / "2012-08-10"


def service_model() -> dict[str, Any]:
    """botocore's DynamoDB service model, stored plain or gzipped depending on its version."""
    plain = MODEL_DIR / "service-2.json"
    if plain.exists():
        return dict(json.loads(plain.read_text()))
    return dict(json.loads(gzip.decompress((MODEL_DIR / "service-2.json.gz").read_bytes())))


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
        "source": f"botocore {botocore.__version__}, dynamodb 2012-08-10",
        "operations": operations,
        "shapes": shapes,
    }


def render(model: dict[str, Any]) -> str:
    reduced = reduce_model(model)
    reduced.pop("source")
    return json.dumps(reduced, indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    OUTPUT.write_text(render(service_model()))
    sys.exit(0)
