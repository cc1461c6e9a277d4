"""The storage node's command line: flags, their environment fallbacks, and what is required."""

from __future__ import annotations

import pytest

from storagenode.__main__ import parse_args


def test_flags_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNALAB_NODE_ID", "from-env")
    monkeypatch.setenv("DYNALAB_LISTEN", "0.0.0.0:7001")
    monkeypatch.setenv("DYNALAB_DATA_DIR", "/data")
    args = parse_args(["--node-id", "node-1"])
    assert (args.node_id, args.listen, args.data_dir) == ("node-1", "0.0.0.0:7001", "/data")


def test_every_setting_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DYNALAB_NODE_ID", "DYNALAB_LISTEN", "DYNALAB_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit):
        parse_args(["--node-id", "n", "--listen", "127.0.0.1:1"])
