"""Settings as data (`core.settings`): each service's environment variables declared once, read
once at start by its `__main__`, flags winning over variables, every refusal naming its source;
and no module of a service reads the environment on its own."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from core import limits, settings
from core.settings import SettingError
from gsi_replicator.settings import ReplicatorSettings
from router.settings import RouterSettings
from storagenode.__main__ import parse_args
from storagenode.settings import NodeSettings

SERVICES = (NodeSettings, RouterSettings, ReplicatorSettings)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("service", SERVICES)
def test_an_empty_environment_gives_the_defaults(service: type[NodeSettings]) -> None:
    assert settings.from_environ(service, {}, {}) == service()


def test_the_node_defaults_are_the_named_limits() -> None:
    assert NodeSettings().split_bytes == limits.PARTITION_SPLIT_BYTES_DEFAULT
    assert NodeSettings().ttl_sweep_seconds == limits.TTL_SWEEP_SECONDS_DEFAULT


def test_variables_are_parsed_and_blank_is_unset() -> None:
    read = settings.from_environ(
        NodeSettings,
        {
            "DYNALAB_THROTTLING": " Off ",
            "DYNALAB_SPLIT_BYTES": "4096",
            "DYNALAB_TTL_SWEEP_SECONDS": "0.2",
            "DYNALAB_BURST_SECONDS": "",
            "DYNALAB_UNRELATED": "x",
        },
        {},
    )
    assert (read.throttling, read.split_bytes, read.ttl_sweep_seconds) == (False, 4096, 0.2)
    assert read.burst_seconds == limits.BURST_SECONDS_MAX


def test_a_flag_wins_over_its_variable_and_is_checked_the_same_way() -> None:
    environ = {"DYNALAB_SPLIT_BYTES": "4096"}
    read = settings.from_environ(NodeSettings, environ, {"split_bytes": "8192"})
    assert read.split_bytes == 8192
    assert settings.from_environ(NodeSettings, environ, {"split_bytes": None}).split_bytes == 4096
    with pytest.raises(SettingError, match="--split-bytes '0'"):
        settings.from_environ(NodeSettings, environ, {"split_bytes": "0"})


@pytest.mark.parametrize(
    ("variable", "text"),
    [
        ("DYNALAB_THROTTLING", "maybe"),
        ("DYNALAB_SPLIT_BYTES", "0"),
        ("DYNALAB_SPLIT_BYTES", "ten"),
        ("DYNALAB_TTL_SWEEP_SECONDS", "0"),
        ("DYNALAB_TTL_SWEEP_SECONDS", str(limits.TTL_SWEEP_SECONDS_MAX + 1)),
        ("DYNALAB_BURST_SECONDS", "0"),
        ("DYNALAB_STREAM_RETENTION_SECONDS", "-1"),
        ("DYNALAB_METRICS_LISTEN", "host:port"),
    ],
)
def test_a_refused_text_names_its_variable(variable: str, text: str) -> None:
    with pytest.raises(SettingError, match=variable):
        settings.from_environ(NodeSettings, {variable: text}, {})


def test_the_node_command_line_reads_its_settings_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNALAB_STREAM_RETENTION_SECONDS", "2")
    monkeypatch.setenv("DYNALAB_TTL_SWEEP_SECONDS", "5")
    args = parse_args(
        [
            "--node-id",
            "n",
            "--listen",
            "127.0.0.1:1",
            "--data-dir",
            "/d",
            "--ttl-sweep-seconds",
            "3",
        ]
    )
    assert args.settings.stream_retention_seconds == 2.0
    assert args.settings.ttl_sweep_seconds == 3.0
    monkeypatch.setenv("DYNALAB_DISK_RESERVE_BYTES", "-5")
    with pytest.raises(SystemExit):
        parse_args(["--node-id", "n", "--listen", "127.0.0.1:1", "--data-dir", "/d"])


@pytest.mark.parametrize("service", SERVICES)
def test_help_lists_every_variable_once(service: type[NodeSettings]) -> None:
    described = settings.describe(service).splitlines()
    declared = settings.variables(service)
    assert sorted(line.split(" ", 1)[0] for line in described) == sorted(declared)
    assert len(declared) == len(dataclasses.fields(service))


def test_the_router_and_replicator_refuse_what_they_cannot_use() -> None:
    with pytest.raises(SettingError, match="DYNALAB_ROUTER_IDLE_SECONDS"):
        settings.from_environ(RouterSettings, {"DYNALAB_ROUTER_IDLE_SECONDS": "0"}, {})
    lease = str(limits.GSI_LEASE_SECONDS)
    with pytest.raises(SettingError, match="--lease-gc-grace-seconds"):
        settings.from_environ(ReplicatorSettings, {}, {"lease_gc_grace_seconds": lease})
    read = settings.from_environ(RouterSettings, {"DYNALAB_MOVE_SPLIT_CHILDREN": "off"}, {})
    assert not read.move_split_children


# Where a service may read its environment: its entry point, and the process-level hooks every
# service shares (the lifeline to a parent process, the test-only hold points of machines).
ENVIRONMENT_READERS = {
    "storagenode/__main__.py",
    "router/__main__.py",
    "gsi_replicator/__main__.py",
    "rpc/lifeline.py",
    "rpc/machines.py",
}


def _reads_environment(path: Path) -> bool:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("environ", "getenv")
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            return True
    return False


def test_no_module_of_a_service_reads_the_environment_on_its_own() -> None:
    readers = {
        str(path.relative_to(ROOT))
        for package in ("storagenode", "router", "gsi_replicator", "rpc", "core")
        for path in (ROOT / package).rglob("*.py")
        if _reads_environment(path)
    }
    assert readers <= ENVIRONMENT_READERS, sorted(readers - ENVIRONMENT_READERS)
