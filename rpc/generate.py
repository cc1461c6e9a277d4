"""Regenerate the protobuf and gRPC modules from proto/ (run as `python -m rpc.generate`).

The generated files are committed so that installing dynalab needs no protoc; a test regenerates
them into a temporary directory and fails if the committed copies are stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "proto"
PROTOS = ["rpc/node.proto", "rpc/changefeed.proto"]


def generate(out_dir: Path) -> None:
    """Write the *_pb2.py and *_pb2_grpc.py modules for every proto under out_dir."""
    include = Path(protoc.__file__).parent / "_proto"
    for proto in PROTOS:
        code = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{PROTO_ROOT}",
                f"-I{include}",
                f"--python_out={out_dir}",
                f"--grpc_python_out={out_dir}",
                str(PROTO_ROOT / proto),
            ]
        )
        if code != 0:
            raise SystemExit(f"protoc failed on {proto} with exit code {code}")


if __name__ == "__main__":
    generate(ROOT)
    sys.exit(0)
