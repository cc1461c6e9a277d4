"""The committed protobuf/gRPC modules must be exactly what `make proto` generates from proto/."""

from pathlib import Path

import pytest

generate = pytest.importorskip("rpc.generate", reason="grpcio-tools is a dev dependency")


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    generate.generate(tmp_path)
    produced = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py"))
    assert produced, "protoc produced nothing"
    for relative in produced:
        committed = generate.ROOT / relative
        assert committed.exists(), f"{relative} is generated but not committed: run `make proto`"
        assert committed.read_text() == (tmp_path / relative).read_text(), (
            f"{relative} is stale: run `make proto` and commit the result"
        )
