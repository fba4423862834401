"""/docs in a real headless chromium: Swagger UI renders from the server's own files (nothing
fetched elsewhere), Authorize takes an API key, and "Try it out" then gets 200, not 401.

JITGPU_DOCS_SCREENSHOT=docs/api-docs-authorize.png refreshes the screenshot in the docs (the
Authorize dialog open over the page).
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.migrate import upgrade
from smart_agent.client import Client
from tests.conftest import ADMIN_TOKEN
from tests.smart_agent.test_review_browser import Page, _fetched, devtools, page  # noqa: F401
from tests.support.liveserver import LiveServer

pytestmark = pytest.mark.browser


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    db = Database(f"sqlite:///{tmp_path / 'cp.db'}")
    upgrade(db)
    settings = ServerSettings(database_url=db.url, admin_token=ADMIN_TOKEN, run_jobs=False)
    with LiveServer(db, settings) as server, Client(server.url, ADMIN_TOKEN) as admin:
        tenant = admin.create_tenant("alice", quota_gpus=2)
        yield server.url, admin.create_api_key(tenant.id).key
    db.dispose()


def _until(tab: Page, expression: str, what: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = tab.js(expression)
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout:.0f}s; problems: {tab.problems()}")


def _click(tab: Page, selector: str) -> None:
    _until(tab, f"!!document.querySelector({selector!r})", f"no {selector}")
    tab.js(f"document.querySelector({selector!r}).click()")


def test_docs_page_offline_with_authorize(page: Page, served: tuple[str, str]) -> None:  # noqa: F811
    url, key = served
    page.call("Page.navigate", url=f"{url}/docs")
    page.wait_for("Page.loadEventFired")
    _until(page, "!!document.querySelector('.swagger-ui .info .title')", "Swagger UI rendered")
    assert all(u.startswith((url, "data:")) for u in _fetched(page)), _fetched(page)

    _click(page, ".swagger-ui .auth-wrapper .btn.authorize")
    _until(page, "!!document.querySelector('.modal-ux .auth-container input')", "the dialog")
    page.js(
        "(() => { const i = document.querySelector('.modal-ux .auth-container input');"
        " const set = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set;"
        f" set.call(i, {key!r}); i.dispatchEvent(new Event('input', {{bubbles: true}})); }})()"
    )
    assert "apiKey" in page.js("document.querySelector('.modal-ux').innerText")
    shot = page.call("Page.captureScreenshot", format="png")
    target = os.environ.get("JITGPU_DOCS_SCREENSHOT")
    if target:
        Path(target).write_bytes(base64.b64decode(shot["data"]))

    _click(page, ".modal-ux .auth-btn-wrapper .btn.modal-btn.auth.authorize")
    _until(page, "!!document.querySelector('.modal-ux .btn-done')", "authorized")
    _click(page, ".modal-ux .btn-done")

    # "Try it out" on GET /v1/holds: the key goes with it.
    _click(page, ".opblock-get .opblock-summary-path[data-path='/v1/holds']")
    _click(page, ".opblock.is-open .try-out__btn")
    _click(page, ".opblock.is-open .btn.execute")
    status = _until(
        page,
        "(document.querySelector('.opblock.is-open .live-responses-table"
        " tr.response .response-col_status') || {}).innerText",
        "a response",
    )
    assert status.strip().startswith("200"), status
    assert page.problems() == []
    assert all(u.startswith((url, "data:")) for u in _fetched(page)), _fetched(page)
