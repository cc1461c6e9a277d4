"""dynalab's command line: `dynalab up` runs a cluster on this machine, `dynalab node` stops and
starts its processes (`dynalab.nodes`), `dynalab bench` loads any DynamoDB endpoint with a
workload and prints what it measured, `dynalab status` prints the state of a running cluster
(`dynalab.status`, `--json` for scripts), `dynalab scrub` reads storage node data directories in
full and reports damaged data, `dynalab gsi violations` lists the items a global secondary index
leaves out (`dynalab.violations`), `dynalab lab` runs fault-injection experiments (`dynalab.lab`).

`dynalab up` stays in the foreground until Ctrl-C or SIGTERM and then stops every process it
started, so an orchestrator (a terminal, systemd, a test) only ever has one process to manage.
"""

from __future__ import annotations

import argparse
import os
import signal
import webbrowser
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import aiohttp
from rich.console import Console
from rich.table import Table

from core import settings
from dynalab import bench, nodes, status, violations
from dynalab.cluster import ClusterError, LocalCluster
from dynalab.lab import command as lab_command
from storagenode.scrub import scrub
from storagenode.settings import NodeSettings

WATCH_INTERVAL_S = 0.5  # How often `dynalab up` looks for processes of the cluster that died.


class StopRequested(Exception):
    """Raised in the main thread by the SIGINT/SIGTERM handler of `dynalab up`."""


def _request_stop(signum: int, frame: FrameType | None) -> None:
    # Stopping the cluster takes a few seconds; a second Ctrl-C must not cut it short and leave
    # processes behind, so further signals are ignored from here on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise StopRequested(signal.Signals(signum).name)


def _summary(cluster: LocalCluster) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("endpoint", f"[green]{cluster.router_url}[/green]")
    table.add_row("dashboard", dashboard_url(cluster))
    for router in cluster.routers[1:]:
        table.add_row("", router.url)
    for node in cluster.nodes:
        table.add_row(node.node_id, f"{node.address}  data {node.data_dir}")
    for replicator in cluster.replicators:
        table.add_row(replicator.name, f"{replicator.url}/metrics")
    table.add_row("logs", str(cluster.log_dir))
    return table


def dashboard_url(cluster: LocalCluster) -> str:
    return f"{cluster.router_url}/dashboard"


CREDENTIALS = (
    "export AWS_ACCESS_KEY_ID=dynalab AWS_SECRET_ACCESS_KEY=dynalab AWS_DEFAULT_REGION=us-east-1"
)


def _example(cluster: LocalCluster) -> str:
    return f"aws dynamodb list-tables --endpoint-url {cluster.router_url}"


def _throughput_line(enforced: bool) -> str:
    if enforced:
        return (
            "[yellow]enforced[/yellow]: provisioned tables throttle at their read/write units "
            "(a 5/5 table takes ~20 s for 100 puts); turn it off with --throttling off"
        )
    return "not enforced (--throttling off): tables take any load, none is throttled"


def _report_exits(
    cluster: LocalCluster,
    controls: nodes.Controls,
    reported: dict[str, object],
    console: Console,
) -> bool:
    """Say once for each process that went down how to start it again; whether any did."""
    changed = False
    for service in cluster.services():
        if service.is_running() or reported.get(service.name) is service.process:
            continue
        reported[service.name] = service.process
        changed = True
        again = f"dynalab node start {service.name} --data-dir {cluster.data_dir}"
        if controls.was_stopped(service.name):
            console.print(
                f"{service.name} is down on request; start it with: {again}", soft_wrap=True
            )
            continue
        code = service.process.returncode if service.process else None
        console.print(
            f"[red]{service.name} exited (code {code})[/red]; see {service.log_path}; "
            f"start it again with: {again}",
            soft_wrap=True,
            highlight=False,
        )
    return changed


def run_up(args: argparse.Namespace, console: Console) -> int:
    """Start a LocalCluster, print where it is, and run until SIGINT or SIGTERM, serving node
    controls (`dynalab.nodes`) meanwhile."""
    signal.signal(signal.SIGINT, _request_stop)
    signal.signal(signal.SIGTERM, _request_stop)
    if args.throttling is not None:
        # The nodes read it from their environment, which they inherit from this process.
        os.environ[settings.variable(NodeSettings, "throttling")] = args.throttling
    try:
        enforced = settings.from_environ(NodeSettings, os.environ, {}).throttling
    except settings.SettingError as error:
        console.print(f"[red]dynalab up:[/red] {error}")
        return 2
    try:
        cluster = LocalCluster(
            args.data_dir,
            nodes=args.nodes,
            routers=args.routers,
            router_port=args.port,
            replicators=args.replicators,
            ttl_sweep_seconds=args.ttl_sweep_seconds,
            split_bytes=args.split_bytes,
            replication_factor=args.replication_factor,
        )
    except ValueError as exc:
        console.print(f"[red]dynalab up:[/red] {exc}")
        return 2
    server: nodes.ControlServer | None = None
    try:
        with console.status(f"starting {args.nodes} nodes and {args.routers} router(s)"):
            cluster.start()
        controls = nodes.Controls(cluster)
        server = nodes.ControlServer(controls).start()
        # One write for the whole banner (the console buffers inside `with`), so whoever reads
        # the output once "dynalab is up" appears finds all of it.
        with console:
            console.print(
                f"[bold]dynalab is up[/bold]: {args.nodes} storage nodes, {args.routers} router(s)"
            )
            console.print(_summary(cluster))
            console.print(
                f"throughput: {_throughput_line(enforced)}", soft_wrap=True, highlight=False
            )
            # soft_wrap keeps each command on one line, so it can be copied from any terminal width.
            console.print(
                "credentials: any will do (signatures are not checked), but SDKs and the AWS CLI "
                f"want some:\n  {CREDENTIALS}",
                soft_wrap=True,
                highlight=False,
            )
            console.print(f"try: {_example(cluster)}", soft_wrap=True, highlight=False)
            console.print(
                "nodes: dynalab node list|stop|start|kill|pause|resume NAME "
                f"--data-dir {cluster.data_dir}",
                soft_wrap=True,
                highlight=False,
            )
            console.print("Press Ctrl-C to stop.")
        if args.open and not webbrowser.open(dashboard_url(cluster)):
            console.print("no web browser to open the dashboard in; open the URL above")
        reported: dict[str, object] = {}
        while True:
            # A process that dies is reported, not replaced: in a lab, a crash is worth seeing.
            if _report_exits(cluster, controls, reported, console):
                server.record()
            server.serve_pending(WATCH_INTERVAL_S)
    except StopRequested as stop:
        console.print(f"{stop} received, stopping the cluster")
        return 0
    except ClusterError as exc:
        console.print(f"[red]dynalab up failed:[/red] {exc}")
        return 1
    finally:
        # Whatever ended the loop, no process of the cluster may outlive `dynalab up`.
        if server is not None:
            server.close()
        cluster.stop()
        console.print("stopped")


def run_node(args: argparse.Namespace, console: Console) -> int:
    """`dynalab node COMMAND [NAME]`: ask the running `dynalab up` to act on a process."""
    if args.node_command != "list" and args.name is None:
        console.print(f"[red]dynalab node {args.node_command}:[/red] name a process (e.g. node-1)")
        return 2
    try:
        reply = nodes.request(args.data_dir, args.node_command, args.name)
    except nodes.ControlError as exc:
        console.print(f"[red]dynalab node:[/red] {exc}", highlight=False)
        return 1
    if args.node_command == "list":
        table = Table("name", "state", "pid", "address", "exit code")
        for service in reply["services"]:
            state = service["state"]
            style = {"running": "green", "paused": "yellow"}.get(state, "red")
            table.add_row(
                service["name"],
                f"[{style}]{state}[/{style}]",
                str(service["pid"] or ""),
                service["address"],
                "" if service["exit_code"] is None else str(service["exit_code"]),
            )
        console.print(table)
    if not reply["ok"]:
        console.print(f"[red]dynalab node {args.node_command}:[/red] {reply['message']}")
        return 1
    if reply["message"]:
        console.print(reply["message"], highlight=False)
    return 0


def run_bench(args: argparse.Namespace, console: Console) -> int:
    """Run one benchmark and print its summary; fail when no request succeeded."""
    try:
        config = bench.BenchConfig(
            endpoint=args.endpoint,
            workload=args.workload,
            concurrency=args.concurrency,
            duration_s=args.duration,
            item_size=args.item_size,
            table=args.table,
            keys=args.keys,
            query_items=args.query_items,
            create_table=args.create_table,
            region=args.region,
            keep=args.keep,
        )
    except ValueError as exc:
        console.print(f"[red]dynalab bench:[/red] {exc}")
        return 2
    try:
        result = bench.run(config, console)
    except (bench.DynamoDBError, aiohttp.ClientError, TimeoutError) as exc:
        console.print(f"[red]dynalab bench failed:[/red] {exc}")
        return 1
    except KeyboardInterrupt:
        console.print("interrupted")
        return 130
    console.print(bench.render_result(result, config))
    return 0 if result.ops > 0 else 1


def run_scrub(args: argparse.Namespace, console: Console) -> int:
    """Read every node data directory given and list what is damaged; 1 if anything is."""
    damaged = False
    for path in args.data_dirs:
        report = scrub(Path(path))
        counts = ", ".join(f"{family} {count}" for family, count in report.keys.items())
        if report.ok:
            console.print(f"[green]ok[/green] {path}: {counts}", highlight=False)
            continue
        damaged = True
        console.print(f"[red]damaged[/red] {path}: {counts or 'not read'}", highlight=False)
        for problem in report.problems:
            console.print(f"  {problem}", highlight=False, soft_wrap=True)
    return 1 if damaged else 0


class _DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """Help that names each option's default, except where there is none to name (None, off)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynalab", description="A multi-node, DynamoDB-compatible database cluster."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="run a cluster on this machine until Ctrl-C")
    up.add_argument("--nodes", type=int, default=3, help="storage nodes (default 3)")
    up.add_argument("--routers", type=int, default=1, help="routers (default 1)")
    up.add_argument(
        "--replicators", type=int, default=1, help="GSI replicators (default 1; 0: none)"
    )
    up.add_argument(
        "--port",
        type=int,
        default=8000,
        help="port of the first router; router i listens on port+i; 0 picks free ports",
    )
    up.add_argument(
        "--data-dir", default="./dynalab-data", help="where nodes keep data and logs go"
    )
    up.add_argument(
        "--throttling",
        choices=("on", "off"),
        default=None,
        help="enforce tables' provisioned and on-demand throughput "
        "(default: DYNALAB_THROTTLING, else on)",
    )
    up.add_argument(
        "--ttl-sweep-seconds",
        type=float,
        default=None,
        help="how often each node deletes expired TTL items "
        "(default: DYNALAB_TTL_SWEEP_SECONDS, else 1 s)",
    )
    up.add_argument(
        "--split-bytes",
        type=int,
        default=None,
        help="split a partition once its items pass this many bytes "
        "(default: DYNALAB_SPLIT_BYTES, else 10 GB; kilobytes make splits easy to watch)",
    )

    up.add_argument(
        "--replication-factor",
        type=int,
        default=1,
        help="replicas of each new table's partitions, on distinct nodes, kept by a Raft group "
        "each (default 1)",
    )
    up.add_argument(
        "--open", action="store_true", help="open the dashboard in a web browser once up"
    )

    watch = commands.add_parser(
        "status", help="print nodes, tables, partitions, throttling and lag of a running cluster"
    )
    watch.add_argument(
        "--endpoint",
        default="http://127.0.0.1:8000",
        help="URL of any router of the cluster (default: that of `dynalab up`)",
    )
    watch.add_argument(
        "--json", action="store_true", help="print the router's snapshot as JSON, for scripts"
    )

    node = commands.add_parser(
        "node",
        help="list, stop, start, kill, pause or resume a process of a running dynalab up",
    )
    node.add_argument(
        "node_command", metavar="COMMAND", choices=nodes.COMMANDS, help=", ".join(nodes.COMMANDS)
    )
    node.add_argument("name", metavar="NAME", nargs="?", help="a process: node-1, router-1, ...")
    node.add_argument(
        "--data-dir", default="./dynalab-data", help="the data directory of that dynalab up"
    )

    check = commands.add_parser(
        "scrub", help="read storage node data directories in full and report damaged data"
    )
    check.add_argument("data_dirs", nargs="+", metavar="DIR", help="a node's data directory")

    load = commands.add_parser(
        "bench",
        help="load a DynamoDB endpoint and print what it did",
        formatter_class=_DefaultsShown,
    )
    load.add_argument("--endpoint", default="http://127.0.0.1:8000", help="DynamoDB endpoint URL")
    load.add_argument(
        "--workload", choices=bench.WORKLOADS, default="put", help="the requests to send"
    )
    load.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    load.add_argument("--duration", type=float, default=10.0, help="seconds of load")
    load.add_argument("--item-size", type=int, default=200, help="bytes per item")
    load.add_argument("--table", help="table name (default: dynalab-bench[-range])")
    load.add_argument(
        "--keys", type=int, default=1000, help="items in the key space (preloaded for reads)"
    )
    load.add_argument(
        "--query-items",
        type=int,
        default=10,
        help="items per partition key for query, page size for scan",
    )
    load.add_argument(
        "--create-table",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="create the table if it does not exist",
    )
    load.add_argument("--region", default="us-east-1", help="region to sign requests for")
    load.add_argument(
        "--keep",
        action="store_true",
        help="keep the table afterwards (a table the bench created is deleted by default)",
    )
    index = commands.add_parser("gsi", help="global secondary index tools")
    index_commands = index.add_subparsers(dest="gsi_command", required=True)
    detector = index_commands.add_parser(
        "violations",
        help="list the items an index leaves out for a wrongly typed, empty or too large key "
        "attribute (CSV on standard output)",
    )
    detector.add_argument("table", metavar="TABLE")
    detector.add_argument("index", metavar="INDEX")
    detector.add_argument(
        "--endpoint", default="http://127.0.0.1:8000", help="DynamoDB endpoint URL"
    )
    detector.add_argument("--region", default="us-east-1", help="region to sign requests for")
    lab_command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    if args.command == "up":
        return run_up(args, console)
    if args.command == "status":
        return status.run(args.endpoint, console, as_json=args.json)
    if args.command == "node":
        return run_node(args, console)
    if args.command == "scrub":
        return run_scrub(args, console)
    if args.command == "lab":
        return lab_command.main(args, console)
    if args.command == "gsi":
        return violations.run(args.endpoint, args.table, args.index, args.region)
    return run_bench(args, console)
