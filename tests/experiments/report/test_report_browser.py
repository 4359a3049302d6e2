"""report.html rendered in headless Chromium (Debian's chromium and chromium-driver, driven over
the WebDriver protocol with urllib): every image loads, the console has no error, the screenshot
is not blank; and the page reads like a paper's figures (title, a headline leading with the
heuristics' gaps, a caption per figure); the profiles' and gap panels' helpers on small cases."""
from __future__ import annotations

import base64
import html
import io
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib import image

from experiments.sweep.config import load_config
from experiments.report.plots import CAPTIONS, clip_limit, coinciding, colour
from experiments.report.html import write_report
from experiments.sweep.run import run_sweep

CONFIG = """
name = "browser-check"
seed = 1
measures = ["traffic", "peak", "optimum", "compile", "kernel_time"]
fusion = ["none", "greedy"]
order = ["original", "best"]
[timing]
repeat = 3
[reference]
time_limit = 5
[[families]]
name = "layered"
sizes = [6, 8]
[[families]]
name = "vsep_tree"
sizes = [6]
[[families]]
name = "softmax"
sizes = [16]
"""
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1200,900"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebDriver:
    """The few WebDriver commands the test needs, over HTTP to a chromedriver process."""

    def __init__(self, profile: Path):
        self.port = _free_port()
        self.process = subprocess.Popen([shutil.which("chromedriver"), f"--port={self.port}"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while True:
            try:
                self._call("GET", "/status")
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        options = {"binary": shutil.which("chromium"), "args": [*FLAGS, f"--user-data-dir={profile}"]}
        session = self._call("POST", "/session", {"capabilities": {"alwaysMatch": {
            "goog:chromeOptions": options, "goog:loggingPrefs": {"browser": "ALL"}}}})
        self.session = f"/session/{session['sessionId']}"

    def _call(self, method: str, path: str, body: dict | None = None):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())["value"]

    def go(self, url: str) -> None:
        self._call("POST", f"{self.session}/url", {"url": url})

    def run(self, script: str):
        return self._call("POST", f"{self.session}/execute/sync", {"script": script, "args": []})

    def console(self) -> list[dict]:
        return self._call("POST", f"{self.session}/se/log", {"type": "browser"})

    def screenshot(self) -> np.ndarray:
        return image.imread(io.BytesIO(base64.b64decode(self._call("GET", f"{self.session}/screenshot"))))

    def close(self) -> None:
        try:
            self._call("DELETE", self.session)
        finally:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    (tmp / "sweep.toml").write_text(CONFIG)
    summary = run_sweep(load_config(tmp / "sweep.toml"), tmp / "out", workers=2, progress=False, echo=lambda _: None)
    assert (summary.table["status"] == "ok").all()
    return write_report(summary.table, tmp / "out", "browser-check")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip("needs Debian's chromium and chromium-driver (.ci/run installs them with apt-get)")
    driver = WebDriver(tmp_path_factory.mktemp("profile"))
    yield driver
    driver.close()


def test_report_renders_in_chromium(report, browser, tmp_path):
    browser.go(report.as_uri())
    images = browser.run("return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth])")
    assert len(images) >= 5
    assert all(complete and width >= 800 for _, complete, width in images), images
    errors = [entry for entry in browser.console() if entry["level"] == "SEVERE"]
    assert not errors, errors
    shot = browser.screenshot()
    assert shot.shape[1] >= 1000
    assert shot[..., :3].std() > 0.05, "the first screen is blank"  # text and a table, not one colour
    first_screen = browser.run("return document.body.innerText.slice(0, 400)")
    assert first_screen.startswith("browser-check\n\nFusion, traffic above the best known in geometric mean, over 3 "
                                   "instances: greedy +")  # the finding first: the heuristic's gap


def test_every_figure_has_a_caption_and_strategies_keep_their_colour(report):
    page = report.read_text()
    assert page.count("<figure>") == page.count("<figcaption>") >= 5
    for stem in CAPTIONS:
        if f"alt='{stem}'" in page:
            assert html.escape(CAPTIONS[stem][:40]) in page
    colours = [colour(name) for name in ("none", "greedy", "random", "mwc", "cpsat", "original", "best", "lpmf",
                                         "bfs", "dfs", "dp")]
    assert len(set(colours)) == len(colours)
    assert f"background:{colour('greedy')}" in page


def test_the_headline_leads_with_the_heuristics_and_names_where_they_differ(report):
    text = html.unescape(re.sub(r"<[^>]+>", "", report.read_text()))
    fusion = text[text.index("Fusion, "):text.index("Order, ")]
    greedy, baseline = fusion.index("greedy +"), fusion.index("none, the baseline, +")
    assert greedy < baseline and "greedy is furthest from the best known on " in fusion
    assert "problems at optimum" in text and "A cell is one run of the sweep" in text


def test_equal_profiles_are_named_and_a_far_baseline_is_clipped():
    curves = {"best": np.array([1.0, 1.2]), "cpsat": np.array([1.0, 1.0]), "lpmf": np.array([1.0, 1.2])}
    assert coinciding(curves) == {"lpmf": "best"}
    gaps = pd.DataFrame({"fusion": ["greedy", "greedy", "none", "none"], "gap": [0.0, 20.0, 30.0, 600.0]})
    assert clip_limit(gaps, "fusion", "none") == 25.0  # 1.25 x the others' worst
    assert clip_limit(gaps.iloc[:3], "fusion", None) is None  # nothing to clip
    near = gaps.assign(gap=[0.0, 1.0, 2.0, 4.0])
    assert clip_limit(near, "fusion", "none") is None  # within the 5% floor: drawn whole
