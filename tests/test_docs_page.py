"""The interactive API pages (`/docs`, `/redoc`) work offline: every script, stylesheet
and icon they load comes from the server itself, never from a CDN."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from tests.server_process import ServerProcess

# src="…", href="…", spec-url="…" and the `url: '…'` Swagger UI is told to load.
REFERENCE = re.compile(r"""(?:\bsrc|\bhref|spec-url)\s*=\s*["']([^"']+)["']"""
                       r"""|\burl\s*:\s*["']([^"']+)["']""")


def references(html: str) -> list[str]:
    return [a or b for a, b in REFERENCE.findall(html)]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_api_pages_load_only_local_assets(server: ServerProcess, page: str) -> None:
    r = httpx.get(server.url + page, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    urls = references(r.text)
    scripts = [u for u in urls if u.endswith(".js")]
    assert scripts, f"{page} loads no script: {r.text[:500]}"
    assert "/openapi.json" in urls
    for url in urls:
        parts = urlsplit(url)
        assert not parts.scheme and not parts.netloc, f"{page} loads {url} from elsewhere"
    assert "googleapis" not in r.text and "jsdelivr" not in r.text and "unpkg" not in r.text
    for url in urls:
        asset = httpx.get(urljoin(server.url + page, url), timeout=30)
        assert asset.status_code == 200, (url, asset.status_code)
        assert asset.content, url
    for url in scripts:  # the real bundle, not an empty placeholder
        assert len(httpx.get(urljoin(server.url + page, url), timeout=30).content) > 100_000


def test_an_unknown_asset_is_the_usual_404(server: ServerProcess) -> None:
    r = httpx.get(server.url + "/static-offline-docs/no-such-file.js", timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"
