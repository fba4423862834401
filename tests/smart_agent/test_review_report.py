"""The HTML report as text: self-contained, every log string escaped, plots drawn from the
data. (How it renders in a real browser: test_review_browser.py.)"""

from __future__ import annotations

import re
from datetime import UTC
from html.parser import HTMLParser
from pathlib import Path

import pytest

from predictors.types import Forecast
from smart_agent.predlog import PredictionLog
from smart_agent.review import report
from smart_agent.review.query import Filters, load, open_log
from smart_agent.review.score import compute
from tests.smart_agent.review_helpers import INJECTION, LATER, T0, USER, hand_made_log

HOSTILE_NAME = '<b onmouseover="alert(2)">x</b>'
HOSTILE_CUE = '"><svg onload=alert(3)>'


class Tags(HTMLParser):
    """Every element and attribute of a page, and its visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _html(path: Path, monkeypatch: pytest.MonkeyPatch | None = None) -> str:
    db = open_log(path)
    selection = load(db, Filters())
    db.close()
    scores = compute(selection, now=LATER, tz=UTC)
    return report.build(
        selection, scores, tz=UTC, source=path.name, filters="none", generated_at=LATER
    )


@pytest.fixture(scope="module")
def hostile_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("review") / "predictions.db"
    hand_made_log(path)
    log = PredictionLog(path)
    f = Forecast(T0, T0 + 600, 1, 0.5, HOSTILE_NAME, rationale=INJECTION, user=USER)
    log.forecast(f, cycle_id=None, made_at=T0, user=USER, decision="shadow", reason=INJECTION)
    fid = log.forecast(
        f, cycle_id=None, made_at=T0, user=USER, decision="accepted", reason="a", cue=HOSTILE_CUE
    )
    log.hold_made(fid, hold_id="h9", gpus=1)
    log.hold_outcome("h9", outcome="expired", at=T0 + 600, idle_gpu_minutes=10.0)
    log.close()
    return path


def test_report_is_self_contained(hostile_log: Path) -> None:
    html = _html(hostile_log)
    page = Tags()
    page.feed(html)
    names = {tag for tag, _ in page.tags}
    assert not names & {"script", "link", "img", "iframe", "object", "embed", "base", "b"}
    for tag, attrs in page.tags:
        for key, value in attrs.items():
            assert not key.startswith("on"), (tag, key)
            assert not re.search(r"(https?:|javascript:)", value or "", re.I), (tag, key)
    csp = [a for t, a in page.tags if t == "meta" and a.get("http-equiv")]
    assert csp and csp[0]["content"] == report.CSP
    assert "url(" not in html and "@import" not in html


def test_log_text_is_escaped_and_still_readable(hostile_log: Path) -> None:
    html = _html(hostile_log)
    for raw in (INJECTION, HOSTILE_NAME, HOSTILE_CUE, "<svg onload"):
        assert raw not in html
    page = Tags()
    page.feed(html)
    text = "".join(page.text)
    # The reader sees the text as it was logged: in the latest decisions, the lane names,
    # the cue column, and the tooltips of the windows.
    assert INJECTION in text and HOSTILE_CUE in text
    assert f"holds: {HOSTILE_NAME}" in text and f"shadow: {HOSTILE_NAME}" in text
    assert "&lt;script&gt;" in html


def test_plots_are_drawn_from_the_data(tmp_path: Path) -> None:
    hand_made_log(tmp_path / "p.db")
    html = _html(tmp_path / "p.db")
    page = Tags()
    page.feed(html)
    svgs = {a["id"]: a for t, a in page.tags if t == "svg"}
    assert set(svgs) == {"timeline", "timeline-day", "calibration", "idle", "cost"}
    # 5 real holds + 6 virtual burst holds + 3 virtual llm holds; 6 jobs (one without GPUs).
    assert (svgs["timeline"]["data-bars"], svgs["timeline"]["data-jobs"]) == ("14", "6")
    assert svgs["timeline"]["data-lanes"] == "3"
    windows = [a for t, a in page.tags if t == "rect" and "fw" in (a.get("class") or "")]
    assert len(windows) == 14 + int(svgs["timeline-day"]["data-bars"])
    kinds = sorted(a["class"] for a in windows[:14])
    assert kinds.count("fw hit") == 2 + 3 + 2 and kinds.count("fw cancelled") == 1
    assert kinds.count("fw open") == 1  # h5, still pending
    # Calibration: 4 bins of real holds, 6 of burst, 3 of llm.
    assert svgs["calibration"]["data-points"] == "13"
    # 2026-03-02 .. 2026-03-09: eight days; idle on both Mondays (claimed and not).
    assert svgs["idle"]["data-days"] == "8" and svgs["idle"]["data-bars"] == "4"
    assert svgs["cost"]["data-bars"] == "2"
    assert "2026-03-02: USD (LLM calls) 0.0300 USD" in html
    assert "2026-03-02: never claimed 0.33 GPU-hours" in html


def test_timeline_keeps_the_latest_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hand_made_log(tmp_path / "p.db")
    monkeypatch.setattr(report, "MAX_BARS", 5)
    html = _html(tmp_path / "p.db")
    assert 'data-bars="5"' in html
    assert "Showing the latest 5 windows; 9 older ones left out." in html


def test_an_empty_log_still_makes_a_page(tmp_path: Path) -> None:
    PredictionLog(tmp_path / "empty.db").close()
    html = _html(tmp_path / "empty.db")
    assert "Nothing to score." in html and "No acted forecasts in this selection." in html
    assert 'id="timeline"' in html and 'data-bars="0"' in html
