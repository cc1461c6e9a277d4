"""The lab's report opened in headless Chromium: the page renders, and its plots show the fault
windows, counted as pixels of the shading's colour in a screenshot. Skipped where Chromium is not
installed (.ci/run installs it with apt-get where it can)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from matplotlib import image

from dynalab.lab import checkers, report
from dynalab.lab.history import WRITE, Operation, Outcome

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
