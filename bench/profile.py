"""Where the router's and the nodes' time goes, workload by workload: py-spy on a running cluster.

    pip install '.[profile]'                      # py-spy
    dynalab up --replicators 0                    # in another terminal (or any running cluster)
    python bench/profile.py [--endpoint http://127.0.0.1:8000] [--runs get,put,mixed,query]
                            [--seconds 8] [--rate 200] [--top 12] [--out profiles/]

For each workload of `--runs`, `dynalab bench`'s client drives the cluster (as `bench/cluster.py`
does, same workers and requests), and while it is measured `py-spy record` samples the router
serving the endpoint and each of the storage nodes it names (`--rate` samples a second, every
thread, idle threads left out, so a sample is time spent running Python or waiting in a call
that holds the thread, such as an fsync). The raw stacks are written to `--out` (one file per
workload and process, in py-spy's collapsed format: open them in speedscope or flamegraph.pl),
and for the router and for the nodes together the program prints:

- the share of samples by where the innermost Python frame is: dynalab's own packages (router,
  storagenode, rpc, core, ...) one by one, gRPC, aiohttp and its helpers, protobuf, the event
  loop (asyncio, uvloop), and the rest (the standard library, other libraries);
- the functions with the most samples as the innermost frame (self time);
- dynalab's functions with the most samples anywhere on the stack (inclusive time).

A frame calling into a compiled library (RocksDB through rocksdict, orjson, grpc's core) counts
as its Python caller's: the time a synced commit waits for the disk shows as the node's store
function that commits. It prints numbers and asserts nothing; docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cluster import find_cluster, measure  # noqa: E402

from dynalab import bench  # noqa: E402

OURS = ("router", "storagenode", "rpc", "core", "gsi_replicator", "dynalab")
# py-spy names a frame's file by its path under its sys.path entry ("grpc/aio/_call.py"): the
# category of a frame not in dynalab's packages, by that path's first part.
LIBRARIES = {
    "grpc": "grpc",
    "aiohttp": "aiohttp",
    "multidict": "aiohttp",
    "yarl": "aiohttp",
    "google": "protobuf",
    "asyncio": "event loop",
    "uvloop": "event loop",
    "threading.py": "threads",
    "concurrent": "threads",
}
PY_SPY_GRACE_SECONDS = 30.0  # For py-spy to write its file once its duration is over.


@dataclass(frozen=True)
class Frame:
    function: str
    path: str
    line: str

    @classmethod
    def parse(cls, text: str) -> Frame:
        """A frame of py-spy's collapsed format: `function (path:line)`."""
        name, _, where = text.rpartition(" (")
        if not name or not where.endswith(")"):
            return cls(text, "", "")
        path, _, line = where[:-1].rpartition(":")
        return cls(name, path, line)

    @property
    def package(self) -> str | None:
        """Which of dynalab's packages the frame is in (None: not ours)."""
        first = Path(self.path).parts[:1]
        return first[0] if first and first[0] in OURS and len(Path(self.path).parts) > 1 else None

    @property
    def category(self) -> str:
        package = self.package
        if package is not None:
            return package
        first = Path(self.path).parts[:1]
        return LIBRARIES.get(first[0], "other") if first else "other"

    @property
    def label(self) -> str:
        package = self.package
        return f"{self.function} ({self.path if package is not None else Path(self.path).name})"


def stacks(lines: Iterable[str]) -> Iterator[tuple[list[Frame], int]]:
    """The (frames, outermost first; samples) of py-spy's collapsed output."""
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            continue
        text, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        yield [Frame.parse(part) for part in text.split(";")], int(count)


@dataclass
class Profile:
    """Samples of one or more processes, aggregated."""

    samples: int = 0
    categories: Counter[str] = field(default_factory=Counter)
    own: Counter[str] = field(default_factory=Counter)
    inclusive: Counter[str] = field(default_factory=Counter)

    def add(self, lines: Iterable[str]) -> None:
        for frames, count in stacks(lines):
            if not frames:
                continue
            self.samples += count
            leaf = frames[-1]
            self.categories[leaf.category] += count
            self.own[leaf.label] += count
            for label in {frame.label for frame in frames if frame.package is not None}:
                self.inclusive[label] += count

    def report(self, title: str, top: int) -> str:
        if not self.samples:
            return f"{title}: no samples"

        def share(count: int) -> str:
            return f"{100 * count / self.samples:5.1f}%"

        out = [f"{title}: {self.samples} samples"]
        out.append(
            "  by innermost frame: "
            + ", ".join(
                f"{name} {share(count).strip()}" for name, count in self.categories.most_common()
            )
        )
        out.append("  self time:")
        out.extend(f"    {share(count)}  {label}" for label, count in self.own.most_common(top))
        out.append("  dynalab's functions, inclusive:")
        out.extend(
            f"    {share(count)}  {label}" for label, count in self.inclusive.most_common(top)
        )
        return "\n".join(out)


def record(pid: int, seconds: float, rate: int, path: Path) -> subprocess.Popen[bytes]:
    py_spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if py_spy is None:
        raise SystemExit("py-spy is not installed: pip install '.[profile]'")
    command = [py_spy, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds)))]
    command += ["--rate", str(rate), "--format", "raw", "--output", str(path), "--nonblocking"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def profile_run(
    args: argparse.Namespace, workload: str, router: int, nodes: dict[str, int], out: Path
) -> None:
    config = bench.BenchConfig(
        endpoint=args.endpoint,
        workload=workload,
        concurrency=args.concurrency,
        duration_s=args.seconds,
        item_size=args.item_size,
    )
    files = {"router": out / f"{workload}-router.txt"}
    files.update({node: out / f"{workload}-{node}.txt" for node in nodes})
    pids = {"router": router, **nodes}
    recorders: dict[str, subprocess.Popen[bytes]] = {}

    def start() -> None:
        # Once the table is prepared and preloaded: the profile is of the workload alone.
        for name, path in files.items():
            recorders[name] = record(pids[name], args.seconds, args.rate, path)

    run = await measure(config, router, list(nodes.values()), start)
    for name, recorder in recorders.items():
        try:
            _, error = recorder.communicate(timeout=PY_SPY_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            recorder.kill()
            raise SystemExit(f"py-spy on {name} did not finish") from None
        if recorder.returncode != 0:
            raise SystemExit(f"py-spy on {name} failed: {error.decode().strip()}")
    print(f"== {workload}: {run.line()}")
    router_profile = Profile()
    router_profile.add(files["router"].read_text().splitlines())
    nodes_profile = Profile()
    for node in nodes:
        nodes_profile.add(files[node].read_text().splitlines())
    print(router_profile.report("router", args.top))
    print(nodes_profile.report(f"nodes ({len(nodes)})", args.top))
    print()


async def main(args: argparse.Namespace) -> None:
    router, nodes = find_cluster(args.endpoint)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="dynalab-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"router pid {router}, nodes {nodes}; raw stacks in {out}")
    for workload in args.runs.split(","):
        await profile_run(args, workload, router, nodes, out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--endpoint", default="http://127.0.0.1:8000")
    parser.add_argument("--runs", default="get,put,mixed,query")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--item-size", type=int, default=200)
    parser.add_argument(
        "--out", help="where the raw stacks go (default: a new temporary directory)"
    )
    uvloop.run(main(parser.parse_args()))
