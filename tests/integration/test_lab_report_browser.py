"""The lab's report opened in headless Chromium: the page renders, its plots show the fault
windows, counted as pixels of the shading's colour in a screenshot, and a simulated run's message
timeline draws its arrows and fault windows from the page alone, and a violating key's operations
are drawn with the smallest set that cannot be ordered highlighted. Skipped where Chromium is not
installed (.ci/run installs it with apt-get where it can)."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from matplotlib import image

from dynalab.lab import checkers, report, timeline
from dynalab.lab.history import READ, WRITE, Operation, Outcome

BROWSER_TIMEOUT_S = 90.0
# #d62728 (a kill-node window) at 15% opacity over white, as the screenshot shows it.
KILL_SHADE = np.array([249, 223, 223]) / 255
SHADE_TOLERANCE = 3 / 255


def browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("Chromium is not installed")


def screenshot(page: str, tmp_path) -> np.ndarray:
    html, png = tmp_path / "report.html", tmp_path / "shot.png"
    html.write_text(page)
    command = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    command += ["--window-size=1200,1400", f"--screenshot={png}", html.as_uri()]
    subprocess.run(command, capture_output=True, timeout=BROWSER_TIMEOUT_S, check=True)
    return image.imread(png)[:, :, :3]


def page_with(executed: list[dict]) -> str:
    ops = [
        Operation(1, WRITE, "r", f"v{i}", i * 0.1, i * 0.1 + 0.01, Outcome.OK) for i in range(200)
    ]
    run = {"scenario": "kill-node", "description": "d", "seed": 1, "duration_s": 20.0}
    return report.render(run, ops, executed, checkers.check(ops), report.plot(ops, executed))


def shaded_pixels(pixels: np.ndarray) -> int:
    return int((np.abs(pixels - KILL_SHADE).max(axis=2) <= SHADE_TOLERANCE).sum())


def test_report_opens_in_chromium_and_shows_the_fault_windows(tmp_path):
    kill = [
        {"at_s": 5.0, "fault": "kill-node", "target": "node-2", "done_s": 5.01},
        {"at_s": 9.0, "fault": "restart-node", "target": "node-2", "done_s": 9.5},
    ]
    with_fault = screenshot(page_with(kill), tmp_path)
    without = screenshot(page_with([]), tmp_path)
    # Three plots, each with a band a fifth of its width: tens of thousands of pixels.
    assert shaded_pixels(with_fault) > 20_000
    assert shaded_pixels(without) < 500


# The timeline's request arrows (#1f77b4) and reply arrows (#2ca02c), drawn opaque.
REQUEST_BLUE = np.array([31, 119, 180]) / 255
REPLY_GREEN = np.array([44, 160, 44]) / 255
ARROW_TOLERANCE = 40 / 255  # Anti-aliased lines blend into what they cross.


def synthetic_timeline() -> timeline.Timeline:
    """Two seconds of a client's PutItems through the router to node2, each with its reply."""
    trace = timeline.Timeline(0.0)
    for i in range(40):
        sent = i * 0.05
        call = f"c{i}"
        for kind, source, destination, at in (
            ("request", "client-1", "router1", sent),
            ("request", "router1", "node2", sent + 0.01),
            ("reply", "node2", "router1", sent + 0.02),
            ("reply", "router1", "client-1", sent + 0.03),
        ):
            trace.add(
                timeline.Message(
                    call,
                    kind,
                    source,
                    destination,
                    "PutItem",
                    at,
                    at + 0.005,
                    "ok",
                    process=1,
                    keys=("r",),
                )
            )
    for lane in ("node1", "node3"):
        trace.add(timeline.Message("x", "request", "router1", lane, "get", 0.1, 0.1, "delivered"))
    return trace


def pixels_like(pixels: np.ndarray, colour: np.ndarray, tolerance: float) -> int:
    return int((np.abs(pixels - colour).max(axis=2) <= tolerance).sum())


def test_the_timeline_draws_its_messages_and_fault_windows_in_chromium(tmp_path):
    ops = [
        Operation(1, WRITE, "r", f"v{i}", i * 0.1, i * 0.1 + 0.01, Outcome.OK) for i in range(20)
    ]
    run = {"scenario": "kill-node", "description": "d", "seed": 1, "duration_s": 2.0}
    kill = [
        {"at_s": 0.5, "fault": "kill-node", "target": "node-2", "done_s": 0.5},
        {"at_s": 1.0, "fault": "restart-node", "target": "node-2", "done_s": 1.2},
    ]
    figure = report.plot(ops, kill)
    page = report.render(run, ops, kill, checkers.check(ops), figure, synthetic_timeline())
    # Nothing is fetched from elsewhere: the script and its data are in the page.
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", page)
    with_timeline = screenshot(page, tmp_path)
    without = screenshot(report.render(run, ops, kill, checkers.check(ops), figure), tmp_path)
    assert pixels_like(with_timeline, REQUEST_BLUE, ARROW_TOLERANCE) > 1_000
    assert pixels_like(with_timeline, REPLY_GREEN, ARROW_TOLERANCE) > 1_000
    # The kill is shaded across the timeline's lanes too, beside the plots' bands.
    assert shaded_pixels(with_timeline) > shaded_pixels(without) + 10_000


VIOLATION_FILL = np.array([255, 214, 214]) / 255  # report.VIOLATION_FILL, #ffd6d6.


def test_a_violating_key_is_drawn_with_its_smallest_unorderable_set_in_chromium(tmp_path):
    ops = [
        Operation(1, WRITE, "r", f"v{i}", i * 0.1, i * 0.1 + 0.05, Outcome.OK) for i in range(20)
    ]
    ops += [
        Operation(2, WRITE, "r", "a", 2.0, 2.1, Outcome.OK),
        Operation(3, WRITE, "r", "b", 2.2, 2.3, Outcome.OK),
        Operation(4, READ, "r", "a", 2.4, 2.6, Outcome.OK),  # Stale: b was acknowledged.
    ]
    run = {"scenario": "kill-node", "description": "d", "seed": 1, "duration_s": 3.0}
    verdict = checkers.check(ops)
    [example] = report.violations(verdict)
    assert len(example["violation"]) == 3
    page = report.render(run, ops, [], verdict, report.plot(ops, []), synthetic_timeline())
    assert "The read of r by client 4 (2.400-2.600 s) returned a after" in page
    shot = screenshot(page, tmp_path)
    # Three highlighted bars, each 22 px high and tens of pixels wide.
    assert pixels_like(shot, VIOLATION_FILL, SHADE_TOLERANCE) > 3 * 22 * 30
    clean = [o for o in ops if o.process != 4]
    valid = report.render(run, clean, [], checkers.check(clean), report.plot(clean, []))
    assert "Linearizability, key by key" not in valid
    assert pixels_like(screenshot(valid, tmp_path), VIOLATION_FILL, SHADE_TOLERANCE) < 100
