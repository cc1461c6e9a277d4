"""`report.html`: what a run did over time, with its fault windows shaded, and its verdict.

Three plots over the run's clock, drawn with matplotlib as inline SVG so the page is one file
that opens anywhere: operations completed per second by outcome, p50 and p99 latency of the
acknowledged ones, and failures by error type; a fourth when the run has the indexed workload: the
GSI's visibility lag, from a write's acknowledgement to the first index query that showed it.
Each fault is a shaded band from when the nemesis struck to when it healed, labelled with the
fault and its target. Below the plots: the verdict of every checker with its first
counterexamples, and the fault events as executed.

Each register key that is not linearizable gets its own drawing: its operations as intervals on a
time axis, a row per client, the smallest set that cannot be ordered highlighted
(`linearizable.minimal_violation`) and the anomaly in words above it.

A simulated run also has its message timeline (`dynalab.lab.timeline`): a Lamport diagram of
every message between its processes, drawn by `timeline.js` (inlined, as the data is, so the page
needs no network) on a canvas, with the same fault windows.
"""

from __future__ import annotations

import html
import io
import json
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# A Figure made directly, not through pyplot, needs no display and keeps no global state.
from matplotlib.figure import Figure

from dynalab.bench import percentile
from dynalab.lab.history import INDEX_READ, INDEX_WRITE, Operation, Outcome
from dynalab.lab.scenarios import fault_windows
from dynalab.lab.sweep import replay_command
from dynalab.lab.timeline import Timeline

BUCKET_S = 1.0  # Width of one point of the plots.
COUNTEREXAMPLES_SHOWN = 3  # Per checker, in the page; verdict.json holds more.
FAULT_COLOURS = {
    "kill-node": "#d62728",
    "pause-node": "#ff7f0e",
    "kill-router": "#9467bd",
    "kill-replicator": "#8c564b",
    "partition-node": "#e377c2",
}
TIMELINE_SCRIPT = Path(__file__).with_name("timeline.js")
KEYS_DRAWN_MAX = 3  # Violating register keys drawn operation by operation.
KEY_OPERATIONS_DRAWN_MAX = 200  # Of one key, in the window drawn.
VIOLATION_FILL, VIOLATION_STROKE = "#ffd6d6", "#c00000"
KEY_VIEW_WIDTH_PX, KEY_ROW_PX, KEY_LEFT_PX, KEY_TOP_PX = 1060, 30, 80, 24
LABEL_CHAR_PX = 6.5  # About the width of a character of an 11 px sans-serif label.
MESSAGES_SHOWN_MAX = 100_000  # Messages put in the page; the first ones of a longer run.
# The timeline's first view with no violation to show: from a little before the first fault.
VIEW_BEFORE_FAULT_S = 0.5
VIEW_SPAN_S = 2.0


def series(history: Sequence[Operation], bucket_s: float = BUCKET_S) -> dict[str, Any]:
    """Per bucket of completion time: operations by outcome per second, p50/p99 latency of the
    acknowledged ones in ms, and failures by error type per second."""
    operations = [o for o in history if not o.final]
    end = max((o.complete_s for o in operations), default=0.0)
    buckets = max(1, math.ceil(end / bucket_s))
    by_outcome = {outcome.value: [0.0] * buckets for outcome in Outcome}
    latencies: list[list[float]] = [[] for _ in range(buckets)]
    errors: dict[str, list[float]] = defaultdict(lambda: [0.0] * buckets)
    for operation in operations:
        index = min(buckets - 1, int(operation.complete_s / bucket_s))
        by_outcome[operation.outcome.value][index] += 1 / bucket_s
        if operation.ok:
            latencies[index].append(1000 * (operation.complete_s - operation.invoke_s))
        elif operation.error:
            errors[operation.error][index] += 1 / bucket_s
    p50 = [percentile(sorted(b), 0.5) if b else math.nan for b in latencies]
    p99 = [percentile(sorted(b), 0.99) if b else math.nan for b in latencies]
    lags: list[list[float]] = [[] for _ in range(buckets)]
    for written_s, lag_s in index_visibility_lags(operations):
        lags[min(buckets - 1, int(written_s / bucket_s))].append(1000 * lag_s)
    return {
        "t": [(i + 0.5) * bucket_s for i in range(buckets)],
        "by_outcome": by_outcome,
        "p50_ms": p50,
        "p99_ms": p99,
        "errors": dict(sorted(errors.items())),
        "index_lag_p50_ms": [percentile(sorted(b), 0.5) if b else math.nan for b in lags],
        "index_lag_max_ms": [max(b) if b else math.nan for b in lags],
        "has_index": any(o.op == INDEX_READ for o in operations),
        "end_s": buckets * bucket_s,
    }


def index_visibility_lags(history: Sequence[Operation]) -> list[tuple[float, float]]:
    """(acknowledged at, seconds until seen) of every acknowledged index write that some later
    index query showed: from the write's completion to the completion of the first query invoked
    after it that returned it. An upper bound of the replicator's lag, as fine as the queries are
    frequent; a write overwritten before any query saw it has none."""
    reads: dict[str, list[Operation]] = defaultdict(list)
    for operation in history:
        if operation.op == INDEX_READ and operation.ok:
            reads[operation.key].append(operation)
    lags = []
    for write in history:
        if write.op != INDEX_WRITE or not write.ok or write.value[0] is None:
            continue
        entry = [write.key, write.value[1]]
        seen = (
            read.complete_s
            for read in reads[write.value[0]]
            if read.invoke_s >= write.complete_s and entry in read.value
        )
        first = min(seen, default=None)
        if first is not None:
            lags.append((write.complete_s, first - write.complete_s))
    return lags


def _colour(label: str) -> str:
    return FAULT_COLOURS.get(label.split()[0], "#7f7f7f")


def plot(history: Sequence[Operation], executed: list[dict[str, Any]]) -> Figure:
    """The three plots, one above the other on the run's clock."""
    data = series(history)
    windows = fault_windows(executed, data["end_s"])
    rows = 4 if data["has_index"] else 3
    figure = Figure(figsize=(11, 3 * rows), layout="constrained")
    plots = figure.subplots(rows, 1, sharex=True)
    throughput, latency, failures = plots[:3]
    t = data["t"]
    for outcome, colour in (("ok", "#2ca02c"), ("unknown", "#ff7f0e"), ("failed", "#d62728")):
        throughput.plot(t, data["by_outcome"][outcome], label=outcome, color=colour)
    throughput.set_ylabel("operations/s")
    throughput.set_title("throughput by outcome")
    latency.plot(t, data["p50_ms"], label="p50", color="#1f77b4")
    latency.plot(t, data["p99_ms"], label="p99", color="#9467bd")
    latency.set_ylabel("latency, ms (acknowledged)")
    latency.set_title("latency")
    for error, rates in data["errors"].items():
        failures.plot(t, rates, label=error)
    failures.set_ylabel("failures/s")
    failures.set_title("failures by error type")
    if data["has_index"]:
        lag = plots[3]
        lag.plot(t, data["index_lag_p50_ms"], label="p50", color="#1f77b4")
        lag.plot(t, data["index_lag_max_ms"], label="max", color="#8c564b")
        lag.set_ylabel("ms, by time of the write")
        lag.set_title("GSI visibility lag: write acknowledged to first index query showing it")
    plots[-1].set_xlabel("seconds since the workload started")
    for axes in plots:
        for start, end, label in windows:
            axes.axvspan(start, end, color=_colour(label), alpha=0.15, linewidth=0)
        axes.grid(True, alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(loc="upper right", fontsize="small")
    for start, _, label in windows:
        throughput.annotate(
            label,
            (start, 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            fontsize="x-small",
            color=_colour(label),
        )
    return figure


def svg(figure: Figure) -> str:
    """A figure as an SVG element to put inline in a page."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    document = buffer.getvalue()
    return document[document.index("<svg") :]


def violations(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    """The register keys' counterexamples that carry a minimal set (`linearizable`)."""
    result = verdict["checkers"].get("linearizable-registers", {})
    return [c for c in result.get("counterexamples", []) if c.get("violation")]


def violation_window(example: dict[str, Any]) -> tuple[float, float]:
    """The span of a key's minimal set, with a margin either side."""
    ops = [Operation.from_json(o) for o in example["violation"]]
    start = min(o.invoke_s for o in ops)
    end = max(o.complete_s if o.outcome is not Outcome.UNKNOWN else o.invoke_s for o in ops)
    margin = max(0.02, 0.15 * (end - start))
    return max(0.0, start - margin), end + margin


def _label(operation: Operation) -> str:
    """An operation as a bar's label: W a, R a, R none, CAS a>c (refused: a cross)."""
    value = operation.value
    if operation.op == "write":
        return f"W {value}"
    if operation.op == "read":
        return f"R {'none' if value is None else value}"
    if operation.op == "cas":
        refused = " \u2717" if operation.condition_failed else ""
        return f"CAS {value[0]}\u2192{value[1]}{refused}"
    return f"{operation.op} {value}"


def key_view(
    example: dict[str, Any], history: Sequence[Operation], executed: list[dict[str, Any]]
) -> str:
    """One violating key's operations as intervals on a time axis, a row per client, the
    minimal set that cannot be ordered highlighted, the fault windows shaded (inline SVG)."""
    key = example["key"]
    start, end = violation_window(example)
    chosen = [Operation.from_json(o) for o in example["violation"]]
    chosen_keys = {(o.process, o.invoke_s, o.op) for o in chosen}
    shown = [
        o
        for o in history
        if o.key == key and o.invoke_s <= end and (o.complete_s >= start or o in chosen)
    ]
    shown = sorted(shown, key=lambda o: (o.invoke_s, o.process))[:KEY_OPERATIONS_DRAWN_MAX]
    shown.extend(o for o in chosen if o not in shown)
    rows = sorted({o.process for o in shown})
    height = KEY_TOP_PX + KEY_ROW_PX * len(rows) + 8
    plot = KEY_VIEW_WIDTH_PX - KEY_LEFT_PX - 10

    def x(t: float) -> float:
        return KEY_LEFT_PX + (min(max(t, start), end) - start) / (end - start) * plot

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' class='key-view' width='{KEY_VIEW_WIDTH_PX}' "
        f"height='{height}' font-family='sans-serif' font-size='11'>"
    ]
    for fault_start, fault_end, label in fault_windows(executed, end):
        if fault_end >= start and fault_start <= end:
            parts.append(
                f"<rect x='{x(fault_start):.1f}' y='{KEY_TOP_PX}' "
                f"width='{x(fault_end) - x(fault_start):.1f}' height='{height - KEY_TOP_PX}' "
                f"fill='{_colour(label)}' fill-opacity='0.15'><title>{html.escape(label)}"
                "</title></rect>"
            )
    for i in range(6):
        t = start + (end - start) * i / 5
        parts.append(
            f"<text x='{x(t):.1f}' y='12' text-anchor='middle' fill='#555'>{t:.3f} s</text>"
            f"<line x1='{x(t):.1f}' x2='{x(t):.1f}' y1='16' y2='{height}' stroke='#eee'/>"
        )
    for row, process in enumerate(rows):
        y = KEY_TOP_PX + row * KEY_ROW_PX
        name = "final reads" if process == 0 else f"client {process}"
        parts.append(f"<text x='4' y='{y + KEY_ROW_PX / 2 + 4}'>{name}</text>")

    def label_of(operation: Operation) -> str:
        return _label(operation) + ("?" if operation.outcome is Outcome.UNKNOWN else "")

    def extent(operation: Operation) -> tuple[float, float]:
        left = x(operation.invoke_s)
        return left, left + 3 + LABEL_CHAR_PX * len(label_of(operation))

    # Every highlighted operation is labelled; another only where its label overlaps no other
    # label in its row (in a long window most bars are too close together for theirs).
    labelled: list[tuple[float, float, int]] = [
        (*extent(o), o.process) for o in shown if (o.process, o.invoke_s, o.op) in chosen_keys
    ]
    for operation in sorted(shown, key=lambda o: o.invoke_s):
        if (operation.process, operation.invoke_s, operation.op) in chosen_keys:
            continue
        low, high = extent(operation)
        if all(p != operation.process or high < a or low > b for a, b, p in labelled):
            labelled.append((low, high, operation.process))
    drawn_labels = {(low, process) for low, _, process in labelled}
    for operation in shown:
        y = KEY_TOP_PX + rows.index(operation.process) * KEY_ROW_PX + 4
        unknown = operation.outcome is Outcome.UNKNOWN
        left = x(operation.invoke_s)
        right = x(end if unknown else operation.complete_s)
        picked = (operation.process, operation.invoke_s, operation.op) in chosen_keys
        fill, stroke = (VIOLATION_FILL, VIOLATION_STROKE) if picked else ("#eee", "#999")
        faded = "" if picked or operation.ok or operation.condition_failed else " opacity='0.5'"
        dash = " stroke-dasharray='4 3'" if unknown else ""
        title = html.escape(json.dumps(operation.to_json()))
        text = ""
        if (left, operation.process) in drawn_labels:
            text = (
                f"<text x='{left + 3:.1f}' y='{y + KEY_ROW_PX / 2}' "
                f"font-weight='{'bold' if picked else 'normal'}'>"
                f"{html.escape(label_of(operation))}</text>"
            )
        parts.append(
            f"<g{faded}><title>{title}</title><rect x='{left:.1f}' y='{y}' "
            f"width='{max(right - left, 6 if picked else 2):.1f}' height='{KEY_ROW_PX - 8}' "
            f"fill='{fill}' stroke='{stroke}' stroke-width='{2 if picked else 1}'{dash}/>"
            f"{text}</g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def key_views_section(
    verdict: dict[str, Any],
    history: Sequence[Operation],
    executed: list[dict[str, Any]],
    with_timeline: bool,
) -> str:
    """The violating register keys, each its anomaly in words and its operations drawn."""
    examples = violations(verdict)[:KEYS_DRAWN_MAX]
    if not examples:
        return ""
    parts = [
        "<h2 id='keys'>Linearizability, key by key</h2><p>Each violating key's operations as "
        "intervals from invocation to completion, a row per client; highlighted, a smallest set "
        "of them that no single register could have produced in any order (remove any one and "
        "an order exists). A dashed bar's outcome is unknown; a faded one failed.</p>"
    ]
    for example in examples:
        start, end = violation_window(example)
        link = (
            f" <a href='#timeline' onclick=\"dynalabTimeline({start:.6f}, {end:.6f}, "
            f'{html.escape(json.dumps(example["key"]))})">its messages</a>'
            if with_timeline
            else ""
        )
        parts.append(
            f"<h3>{html.escape(example['key'])}{link}</h3>"
            f"<p class='anomaly'>{html.escape(example['anomaly'])}</p>"
            f"<figure>{key_view(example, history, executed)}</figure>"
        )
    return "".join(parts)


def fault_lanes(target: str, lanes: Sequence[str]) -> list[str]:
    """The timeline lanes a fault's target names: "node-2" is lane node2; "router-1" and
    "replicator-1" are every router's and replicator's lane, since a restart is a new process."""
    if target.startswith("node-"):
        return [lane for lane in lanes if lane == target.replace("-", "")]
    kind = target.split("-")[0]
    return [lane for lane in lanes if lane.startswith(kind)]


def timeline_data(
    trace: Timeline, executed: list[dict[str, Any]], view: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What the page's timeline script draws: the trace's lanes, messages and marks, the fault
    windows with their colours and lanes, the extent of the run, and the first view (a window
    and maybe a key; by default from just before the first fault)."""
    record = trace.to_json()
    messages = record["messages"][:MESSAGES_SHOWN_MAX]
    end = max((m.arrived_s or m.sent_s for m in trace.messages), default=1.0)
    windows = fault_windows(executed, end)
    if view is None:
        first = windows[0][0] - VIEW_BEFORE_FAULT_S if windows else 0.0
        view = {"start_s": max(0.0, first), "end_s": max(0.0, first) + VIEW_SPAN_S}
    return {
        **record,
        "messages": messages,
        "truncated": len(record["messages"]) - len(messages),
        "extent": {"start_s": 0.0, "end_s": end},
        "windows": [
            {
                "start_s": start,
                "end_s": stop,
                "label": label,
                "colour": _colour(label),
                "lanes": fault_lanes(label.split()[-1], record["lanes"]),
            }
            for start, stop, label in windows
        ],
        "view": view,
    }


def timeline_section(data: dict[str, Any]) -> str:
    """The timeline's part of the page: its controls, canvas, data and script."""
    keys = sorted({key for m in data["messages"] for key in m[data["fields"].index("keys")]})
    options = "".join(f"<option>{html.escape(key)}</option>" for key in keys)
    links = "".join(
        f"<li><a href='#timeline' onclick='dynalabTimeline({w['start_s'] - 0.2:.3f}, "
        f"{w['start_s'] + VIEW_SPAN_S:.3f})'>{html.escape(w['label'])} at "
        f"{w['start_s']:.3f} s</a></li>"
        for w in data["windows"]
    )
    truncated = (
        f"<p>The run sent {data['truncated']} more messages than the page holds.</p>"
        if data["truncated"]
        else ""
    )
    # "</" may not appear inside a script element: JSON allows "<\/" for it.
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return f"""<h2 id="timeline">Messages</h2>
<p>Every message between the processes, one lane each: a request (blue), its reply (green, orange
if it carried an error), a change feed batch (purple); red ending in a cross if it never arrived.
Fault windows are shaded. Scroll to zoom, drag to pan; <i>order</i> spreads the messages of one
instant apart in the order they happened.</p>
<form id="timeline-controls">from <input name="start" size="8"> to <input name="end" size="8"> s
<select name="key"><option value="">every key</option>{options}</select>
<label><input type="checkbox" name="order"> order</label>
<label><input type="checkbox" name="background"> messages serving no client</label>
<button>show</button> <button type="button" id="timeline-all">whole run</button>
<span id="timeline-count"></span></form>
<canvas id="timeline-canvas" style="width: 100%; display: block"></canvas>
<div id="timeline-tip" style="display: none; position: absolute; background: #ffe; border: 1px
solid #999; padding: 4px; font-size: 11px; white-space: pre"></div>
<ul>{links}</ul>{truncated}
<script type="application/json" id="timeline-data">{payload}</script>
<script>{TIMELINE_SCRIPT.read_text()}</script>"""


def _first_view(verdict: dict[str, Any]) -> dict[str, Any] | None:
    """The timeline's first view: the first violating key's messages around its minimal set
    (None: the default, from just before the first fault)."""
    examples = violations(verdict)
    if not examples:
        return None
    start, end = violation_window(examples[0])
    return {"start_s": start, "end_s": end, "key": examples[0]["key"], "order": True}


def _replay(run: dict[str, Any]) -> str:
    """How to run the same experiment again: a simulated run replays exactly from its seed."""
    scenario, seed, duration = html.escape(run["scenario"]), run["seed"], run["duration_s"]
    if run.get("simulated"):
        command = replay_command(run["scenario"], seed, duration, "DIR", run.get("exercise"))
        return f"Replay this very run with <code>{html.escape(command)}</code>."
    return (
        f"Replay the same faults with <code>dynalab lab run {scenario} --seed {seed} "
        f"--duration {duration}</code>."
    )


def render(
    run: dict[str, Any],
    history: Sequence[Operation],
    executed: list[dict[str, Any]],
    verdict: dict[str, Any],
    figure: Figure,
    trace: Timeline | None = None,
) -> str:
    """The whole page, around `figure` (from `plot`), with the message timeline of `trace`."""
    escape = html.escape
    status = "VALID" if verdict["valid"] else "INVALID"
    rows = []
    for name, result in verdict["checkers"].items():
        examples = "".join(
            f"<pre>{escape(json.dumps(example, indent=1))}</pre>"
            for example in result["counterexamples"][:COUNTEREXAMPLES_SHOWN]
        )
        rows.append(
            f"<tr class='{'ok' if result['valid'] else 'bad'}'><td>{escape(name)}</td>"
            f"<td>{'valid' if result['valid'] else 'INVALID'}</td>"
            f"<td>{result['violations']}</td><td>{examples}</td></tr>"
        )
    faults = "".join(
        f"<tr><td>{e['at_s']}</td><td>{e.get('done_s', '')}</td><td>{escape(e['fault'])}</td>"
        f"<td>{escape(e['target'])}</td><td>{escape(e.get('error', ''))}</td></tr>"
        for e in executed
    )
    counts = Counter(o.outcome.value for o in history if not o.final)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>dynalab lab: {escape(run["scenario"])} seed {run["seed"]}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1100px; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; vertical-align: top; text-align: left; }}
tr.bad td {{ background: #fdd; }} pre {{ margin: 0; font-size: 11px; }}
.verdict {{ font-size: 1.4em; font-weight: bold; }}
.anomaly {{ font-weight: bold; color: #900; }}
</style></head><body>
<h1>{escape(run["scenario"])}, seed {run["seed"]}</h1>
<p>{escape(run["description"])}</p>
<p class="verdict" id="verdict">verdict: {status}</p>
<p>{run["duration_s"]} s of workload, {counts["ok"]} operations acknowledged, {counts["failed"]}
failed, {counts["unknown"]} with an unknown outcome. {_replay(run)}</p>
<figure id="plots">{svg(figure)}</figure>
{key_views_section(verdict, history, executed, trace is not None)}
{"" if trace is None else timeline_section(timeline_data(trace, executed, _first_view(verdict)))}
<h2>Checkers</h2>
<table><tr><th>checker</th><th>verdict</th><th>violations</th><th>counterexamples</th></tr>
{"".join(rows)}</table>
<h2>Faults as executed</h2>
<table><tr><th>at s</th><th>done s</th><th>fault</th><th>target</th><th>error</th></tr>
{faults}</table>
</body></html>
"""
