"""The HTML report in a real headless chromium, driven over the DevTools protocol: it renders
without console errors, fetches nothing, runs nothing the log wrote, and paints the plots.

Skips only where no chromium is on PATH and JITGPU_REQUIRE_BROWSER is not 1 (CI sets it and
installs Debian's chromium). JITGPU_REPORT_SCREENSHOT=docs/prediction-report.png refreshes
the screenshot in the docs from the representative report.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from websockets.sync.client import ClientConnection, connect

from smart_agent.review.query import Filters, load, open_log
from smart_agent.review.report import build
from smart_agent.review.score import compute
from tests.smart_agent.review_helpers import INJECTION, LATER, hand_made_log, representative_log

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("JITGPU_REQUIRE_BROWSER") == "1"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
)
PLOTS = {"timeline": "rect.fw", "calibration": "circle.pt", "idle": "rect.bar:not(.key)"}
PLOTS |= {"cost": "rect.bar:not(.key)", "timeline-day": "rect.fw"}


class Page:
    """One browser tab over the DevTools protocol: commands, and the events seen meanwhile."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.seq = 0
        self.events: list[dict[str, Any]] = []

    def _next(self, deadline: float) -> dict[str, Any]:
        message = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        if "method" in message:
            self.events.append(message)
        return message

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.seq += 1
        self.ws.send(json.dumps({"id": self.seq, "method": method, "params": params}))
        deadline = time.monotonic() + 20
        while True:
            message = self._next(deadline)
            if message.get("id") == self.seq:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def wait_for(self, method: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not any(e["method"] == method for e in self.events):
            self._next(deadline)

    def js(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def problems(self) -> list[str]:
        """Uncaught exceptions, console errors, and error-level log entries (CSP included)."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails']}")
            elif e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                out.append(f"console.{p['type']}: {p['args']}")
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(f"log: {p['entry']['text']}")
        return out


@pytest.fixture(scope="module")
def devtools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A headless chromium with a fresh profile; yields its DevTools HTTP address."""
    if CHROMIUM is None:
        if REQUIRED:
            pytest.fail(
                "JITGPU_REQUIRE_BROWSER=1 but neither chromium nor chromium-browser is on PATH"
            )
        pytest.skip("no chromium on PATH (CI installs Debian's; JITGPU_REQUIRE_BROWSER=1 fails)")
    profile = tmp_path_factory.mktemp("chromium-profile")
    stderr = (profile.parent / "chromium.log").open("wb")
    proc = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (active.is_file() and active.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (profile.parent / "chromium.log").read_text(errors="replace")[-2000:]
                pytest.fail(f"chromium did not open its DevTools port:\n{log}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{active.read_text().split()[0]}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        stderr.close()


@pytest.fixture
def page(devtools: str) -> Iterator[Page]:
    with httpx.Client(base_url=devtools, trust_env=False, timeout=10) as http:
        target = http.put("/json/new?about:blank").raise_for_status().json()
        with connect(target["webSocketDebuggerUrl"], proxy=None, max_size=None) as ws:
            tab = Page(ws)
            for domain in ("Page", "Runtime", "Log", "Network"):
                tab.call(f"{domain}.enable")
            tab.call(
                "Emulation.setDeviceMetricsOverride",
                width=1200,
                height=900,
                deviceScaleFactor=1,
                mobile=False,
            )
            yield tab
        http.get(f"/json/close/{target['id']}")


def _report(log: Path, out: Path) -> Path:
    db = open_log(log)
    selection = load(db, Filters())
    db.close()
    scores = compute(selection, now=LATER, tz=UTC)
    html = build(selection, scores, tz=UTC, source=log.name, filters="none", generated_at=LATER)
    out.write_text(html, encoding="utf-8")
    return out


def _open(page: Page, report: Path) -> str:
    url = report.resolve().as_uri()
    page.call("Page.navigate", url=url)
    page.wait_for("Page.loadEventFired")
    assert page.js("document.readyState") == "complete"
    return url


def _fetched(page: Page) -> set[str]:
    return {
        e["params"]["request"]["url"]
        for e in page.events
        if e["method"] == "Network.requestWillBeSent"
    }


def _colorful(image: Image.Image) -> int:
    """Pixels of a clear hue (the plots' greens, reds, blues), not white, grey or black."""
    saturation = image.convert("RGB").convert("HSV").getchannel("S")
    return saturation.point(lambda s: 255 if s > 80 else 0).histogram()[255]


def test_report_renders_its_plots_without_errors(page: Page, tmp_path: Path) -> None:
    log = tmp_path / "predictions.db"
    representative_log(log)
    url = _open(page, _report(log, tmp_path / "report.html"))

    assert page.problems() == []
    assert _fetched(page) == {url}, "the report must not fetch anything"

    plots = page.js(
        "JSON.stringify([...document.querySelectorAll('svg.plot')].map(s => {"
        " const r = s.getBoundingClientRect();"
        " return {id: s.id, w: r.width, h: r.height, top: r.top + scrollY, left: r.left,"
        " data: Object.assign({}, s.dataset)}; }))"
    )
    plots = {p["id"]: p for p in json.loads(plots)}
    assert set(plots) == set(PLOTS)
    for plot_id, shapes in PLOTS.items():
        p = plots[plot_id]
        assert p["w"] > 300 and p["h"] > 100, p
        drawn = page.js(f"document.querySelectorAll('#{plot_id} {shapes}').length")
        expected = p["data"].get("bars") or p["data"].get("points")
        assert drawn == int(expected) > 0, (plot_id, drawn, p["data"])
    fill = page.js("getComputedStyle(document.querySelector('rect.fw.hit')).fill")
    assert fill == "rgb(44, 160, 44)"  # the stylesheet applied

    size = page.call("Page.getLayoutMetrics")["cssContentSize"]
    shot = page.call(
        "Page.captureScreenshot",
        format="png",
        captureBeyondViewport=True,
        clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
    )
    png = base64.b64decode(shot["data"])
    image = Image.open(io.BytesIO(png))
    assert image.size == (int(size["width"]), int(size["height"]))
    for plot_id, p in plots.items():
        box = (int(p["left"]), int(p["top"]), int(p["left"] + p["w"]), int(p["top"] + p["h"]))
        assert _colorful(image.crop(box)) > 200, f"{plot_id} looks blank in the screenshot"
    target = os.environ.get("JITGPU_REPORT_SCREENSHOT")
    if target:
        Path(target).write_bytes(png)


def test_log_text_runs_nothing_in_the_browser(page: Page, tmp_path: Path) -> None:
    log = tmp_path / "predictions.db"
    hand_made_log(log)
    _open(page, _report(log, tmp_path / "report.html"))
    assert page.problems() == []
    assert page.js("document.querySelectorAll('script, img, iframe, object, embed').length") == 0
    assert not any(e["method"] == "Page.javascriptDialogOpening" for e in page.events)
    # The hostile rationale is on the page, as text.
    assert page.js("document.body.innerText").count(INJECTION) >= 1


def test_the_checks_catch_a_broken_page(page: Page, tmp_path: Path) -> None:
    # Without this, a checker that saw nothing would pass every report.
    broken = tmp_path / "broken.html"
    broken.write_text(
        "<!DOCTYPE html><html><body><svg class='plot'></svg>"
        "<img src='http://127.0.0.1:9/x.png'><script>undefinedFunction()</script>"
        "<script>console.error('boom')</script></body></html>"
    )
    url = _open(page, broken)
    problems = page.problems()
    assert any("undefinedFunction" in p for p in problems), problems
    assert any("boom" in p for p in problems), problems
    assert _fetched(page) == {url, "http://127.0.0.1:9/x.png"}
