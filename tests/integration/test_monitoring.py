"""The monitoring files in deploy/monitoring: Prometheus' scrape configuration passes `promtool
check config`, and every query of the Grafana dashboard names metrics that a real router and a real
storage node serve."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dynalab.cluster import PROJECT_ROOT, LocalCluster, free_ports

MONITORING = PROJECT_ROOT / "deploy" / "monitoring"
PROMTOOL_TIMEOUT_S = 60.0
SCRAPE_TIMEOUT_S = 10.0
NODE_START_TIMEOUT_S = 30.0
NODE_STOP_TIMEOUT_S = 10.0
# PromQL's own words, which look like metric names in an expression.
PROMQL_WORDS = {"sum", "by", "rate", "histogram_quantile", "le", "without", "avg", "max", "min"}


def exposed_names(text: str) -> set[str]:
    """Every metric family and sample name in a Prometheus text exposition."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        # A counter family is named without its `_total`; its samples carry it.
        if family.type == "counter":
            names.add(f"{family.name}_total")
        if family.type == "histogram":
            names.update(f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count"))
    return names


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        return str(response.read().decode())


def dashboard_metric_names() -> set[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert expressions, "the dashboard has no queries"
    names = set()
    for expression in expressions:
        # Label names inside by (...) and {...} are not metrics.
        stripped = re.sub(r"by \([^)]*\)|\{[^}]*\}|\[[^\]]*\]", "", expression)
        names.update(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", stripped))
    return {name for name in names if name not in PROMQL_WORDS}


def test_prometheus_configuration_passes_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus); .ci/run installs it")
    run = subprocess.run(
        [promtool, "check", "config", str(MONITORING / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_dashboard_query_names_served_metrics(cluster: LocalCluster, tmp_path: Path) -> None:
    router_names = exposed_names(fetch(f"{cluster.router_url}/metrics"))
    node_port, metrics_port = free_ports(2)
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "storagenode",
            "--node-id",
            "node-metrics",
            "--listen",
            f"127.0.0.1:{node_port}",
            "--data-dir",
            str(tmp_path / "node"),
            "--metrics-listen",
            f"127.0.0.1:{metrics_port}",
        ],
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + NODE_START_TIMEOUT_S
        while True:
            try:
                node_names = exposed_names(fetch(f"http://127.0.0.1:{metrics_port}/metrics"))
                break
            except (urllib.error.URLError, ConnectionError):
                assert node.poll() is None, f"the storage node exited with {node.returncode}"
                assert time.monotonic() < deadline, "the node's metrics server never answered"
                time.sleep(0.1)
    finally:
        node.terminate()
        node.wait(NODE_STOP_TIMEOUT_S)
    missing = dashboard_metric_names() - router_names - node_names
    assert not missing, f"the dashboard queries metrics nobody serves: {sorted(missing)}"
