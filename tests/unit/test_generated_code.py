"""The committed protobuf/gRPC modules and .pyi stubs must be what `make proto` generates."""

from pathlib import Path

import pytest

generate = pytest.importorskip("rpc.generate", reason="grpcio-tools is a dev dependency")


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    generate.generate(tmp_path)
    produced = sorted(
        p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.suffix in (".py", ".pyi")
    )
    assert produced, "protoc produced nothing"
    stubs = {p.with_suffix("") for p in produced if p.suffix == ".pyi"}
    modules = {p.with_suffix("") for p in produced if p.suffix == ".py"}
    assert stubs == modules, "every generated module must have its .pyi stub (mypy-protobuf)"
    for relative in produced:
        committed = generate.ROOT / relative
        assert committed.exists(), f"{relative} is generated but not committed: run `make proto`"
        assert committed.read_text() == (tmp_path / relative).read_text(), (
            f"{relative} is stale: run `make proto` and commit the result"
        )
