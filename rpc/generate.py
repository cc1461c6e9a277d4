"""Regenerate the protobuf and gRPC modules and their stubs from proto/ (`python -m rpc.generate`).

The generated files are committed so that installing dynalab needs no protoc; a test regenerates
them into a temporary directory and fails if the committed copies are stale. Beside each `_pb2.py`
and `_pb2_grpc.py` module, mypy-protobuf's two protoc plugins write a `.pyi` stub, so that
`mypy --strict` checks every message field and servicer method that `rpc/` and `storagenode/` use
(protoc's own `--pyi_out` types messages only, and not the gRPC stubs and servicers).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "proto"
PROTOS = ["rpc/node.proto", "rpc/changefeed.proto", "rpc/raft.proto"]
# mypy-protobuf installs these two protoc plugins as console scripts beside the interpreter.
STUB_PLUGINS = {"protoc-gen-mypy": "mypy_out", "protoc-gen-mypy_grpc": "mypy_grpc_out"}


def _plugin(name: str) -> Path:
    """The path of a protoc plugin, looked up beside this interpreter first, then on PATH.

    Beside the interpreter first, so that `.venv/bin/python -m rpc.generate` finds the venv's
    plugins even when that venv is not activated.
    """
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return beside
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found: install the dev dependencies (mypy-protobuf)")
    return Path(found)


def generate(out_dir: Path) -> None:
    """Write the *_pb2.py and *_pb2_grpc.py modules and their .pyi stubs under out_dir."""
    include = Path(protoc.__file__).parent / "_proto"
    stub_args = []
    for plugin, out_flag in STUB_PLUGINS.items():
        stub_args += [f"--plugin={plugin}={_plugin(plugin)}", f"--{out_flag}={out_dir}"]
    for proto in PROTOS:
        code = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{PROTO_ROOT}",
                f"-I{include}",
                f"--python_out={out_dir}",
                f"--grpc_python_out={out_dir}",
                *stub_args,
                str(PROTO_ROOT / proto),
            ]
        )
        if code != 0:
            raise SystemExit(f"protoc failed on {proto} with exit code {code}")


if __name__ == "__main__":
    generate(ROOT)
    sys.exit(0)
