"""The system's Chromium under Playwright, for the browser tests (the inspector, the API
pages, the advice page). Playwright's own browser download cannot work offline, so the
tests drive Debian's `chromium` through ``executable_path``; where either is missing the
test skips and says why."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


@contextmanager
def chromium(*args: str) -> Iterator[Any]:
    """A launched headless Chromium (a Playwright ``Browser``), closed on exit, with
    ``args`` on its command line; skips the test where Playwright or Chromium is not
    installed."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    exe = chromium_path()
    if exe is None:
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox", *args])
        try:
            yield browser
        finally:
            browser.close()
