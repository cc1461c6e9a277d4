"""The storage node's command line: flags, their environment fallbacks, and what is required."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from storagenode.__main__ import parse_args, parse_peers

ENTRYPOINT = Path(__file__).resolve().parents[2] / "deploy" / "entrypoint.sh"


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


def test_peers_may_name_this_node_too_as_one_shared_list_does() -> None:
    shared = "node-1=a:7001,node-2=b:7001,node-3=c:7001"
    assert parse_peers(shared, "node-2") == {"node-1": "a:7001", "node-3": "c:7001"}
    assert parse_peers("", "anything") == {}
    with pytest.raises(ValueError, match="twice"):
        parse_peers("node-1=a:7001,node-1=b:7001", "node-2")
    with pytest.raises(ValueError, match="node-N"):
        parse_peers("node-1=a:7001", "storage-a")
    with pytest.raises(ValueError, match="node-N"):
        parse_peers("alpha=a:7001", "node-1")


@pytest.mark.parametrize(
    ("hostname", "node_id"), [("dynalab-storagenode-0", "node-1"), ("s-11", "node-12")]
)
def test_a_statefulset_pods_node_id_is_node_ordinal_plus_one(hostname: str, node_id: str) -> None:
    environment = {"PATH": os.environ["PATH"], "HOSTNAME": hostname}
    environment["DYNALAB_NODE_ID_FROM_ORDINAL"] = "1"
    done = subprocess.run(
        ["sh", str(ENTRYPOINT), "sh", "-c", 'echo "$DYNALAB_NODE_ID"'],
        env=environment,
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert (done.returncode, done.stdout.strip()) == (0, node_id), done.stderr


def test_a_hostname_without_an_ordinal_is_refused() -> None:
    environment = {"PATH": os.environ["PATH"], "HOSTNAME": "storagenode"}
    environment["DYNALAB_NODE_ID_FROM_ORDINAL"] = "1"
    done = subprocess.run(
        ["sh", str(ENTRYPOINT), "true"], env=environment, capture_output=True, text=True, timeout=10
    )
    assert done.returncode == 64 and "ordinal" in done.stderr
