"""The interactive API pages (`/docs`, `/redoc`) work offline: every script, stylesheet
and icon they load comes from the server itself, never from a CDN."""

from __future__ import annotations

import base64
import hashlib
import re
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from tests.browser import chromium
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


def _directives(policy: str) -> dict[str, str]:
    named = (part.strip().partition(" ") for part in policy.split(";") if part.strip())
    return {name: value for name, _, value in named}


@pytest.mark.parametrize("page", ["/docs", "/docs/oauth2-redirect", "/redoc"])
def test_api_pages_carry_a_content_security_policy(server: ServerProcess, page: str) -> None:
    """Like the inspector's page: scripts from this server and the page's own inline script
    by its hash, never any inline script else, and nothing fetched from another host."""
    r = httpx.get(server.url + page, timeout=30)
    assert r.status_code == 200, r.text
    policy = _directives(r.headers["content-security-policy"])
    assert policy["default-src"] == "'self'" and policy["connect-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'" and policy["base-uri"] == "'none'"
    scripts = policy["script-src"].split()
    assert scripts[0] == "'self'" and "'unsafe-inline'" not in scripts
    assert "'unsafe-eval'" not in scripts
    inline = re.findall(r"<script>(.*?)</script>", r.text, re.S)
    assert inline or page == "/redoc", r.text  # ReDoc's page has no inline script
    assert sorted(scripts[1:]) == sorted(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in inline)
    if page != "/redoc":  # ReDoc writes <style> elements of its own (docs/api.md)
        assert "'unsafe-inline'" not in policy["style-src"]
    assert "http" not in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"


def test_api_pages_work_under_their_policy_in_a_browser(server: ServerProcess) -> None:
    """Swagger UI draws every operation and opens one with no console error: nothing it
    needs is refused. ReDoc draws its menu; the one refusal is the logo its bundle would
    fetch from cdn.redoc.ly (offline, that load failed anyway)."""
    errors: dict[str, list[str]] = {"/docs": [], "/redoc": []}
    with chromium() as browser:
        for path, ready in (("/docs", ".opblock"), ("/redoc", "li[role=menuitem]")):
            page = browser.new_page()
            page.on("console", lambda m, p=path: m.type == "error" and errors[p].append(
                m.text))
            page.on("pageerror", lambda e, p=path: errors[p].append(str(e)))
            page.goto(server.url + path)
            page.wait_for_selector(ready, timeout=30000)
            assert page.locator(ready).count() > 20, path
            if path == "/docs":
                page.locator(".opblock-summary").first.click()
                page.wait_for_selector(".opblock-body", timeout=10000)
            page.wait_for_timeout(500)
            page.close()
    assert errors["/docs"] == [], errors["/docs"]
    assert all("cdn.redoc.ly" in e for e in errors["/redoc"]), errors["/redoc"]
