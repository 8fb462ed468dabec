"""The interactive API pages: ``/docs`` (Swagger UI, and its OAuth2 redirect page) and
``/redoc``, with a Content-Security-Policy like the inspector's.

Their scripts, styles and icon are the files the fastapi-offline wheel ships, served by
this server under ``/static-offline-docs`` (no CDN: they work offline). Each page also
has one inline script or style, allowed by its SHA-256 hash, so nothing else runs on the
page and nothing loads from anywhere but this server. ReDoc alone also sets styles of its
own making (its styled-components write ``<style>`` elements, with no nonce to give
them): its page allows inline styles, never inline scripts.
"""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from starlette.responses import HTMLResponse

STATIC = "/static-offline-docs"
DOCS = "/docs"
REDOC = "/redoc"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"
# An inline element (no src): a script the page runs or a style it sets.
_INLINE = {"script": re.compile(r"<script>(.*?)</script>", re.S),
           "style": re.compile(r"<style>(.*?)</style>", re.S)}
# Swagger UI shows a badge from validator.swagger.io for a schema not on localhost: the
# policy would refuse the image (a console error), and the page must not call out.
SWAGGER_PARAMETERS = {"validatorUrl": None}


def _hashes(html: str, kind: str) -> str:
    return " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"
        for text in _INLINE[kind].findall(html))


def policy(html: str, *, inline_styles: bool = False) -> str:
    """The page's Content-Security-Policy: this server's files, the page's own inline
    script and style by hash (any inline style with ``inline_styles``), images also as
    data URIs (Swagger UI's icons), fetches to this server only (the schema, "Try it
    out"), workers from blobs (ReDoc's search)."""
    styles = "'unsafe-inline'" if inline_styles else _hashes(html, "style")
    return "; ".join([
        "default-src 'self'",
        f"script-src 'self' {_hashes(html, 'script')}".rstrip(),
        f"style-src 'self' {styles}".rstrip(),
        "img-src 'self' data:",
        "connect-src 'self'",
        "worker-src 'self' blob:",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'none'",
    ])


def _page(page: HTMLResponse, *, inline_styles: bool = False) -> HTMLResponse:
    html = bytes(page.body).decode()
    # Caching and the browser headers every answer carries: web/answer_headers.py.
    return HTMLResponse(html, headers={
        "Content-Security-Policy": policy(html, inline_styles=inline_styles)})


def mount(app: FastAPI, title: str) -> None:
    """The three pages, outside the API schema. ``app`` serves the files under
    ``STATIC`` (fastapi-offline mounts them) and the schema at ``app.openapi_url``."""
    openapi_url = str(app.openapi_url)

    def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _page(get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}", title=f"{title} - Swagger UI",
            oauth2_redirect_url=OAUTH2_REDIRECT,
            swagger_js_url=f"{root}{STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{root}{STATIC}/favicon.png",
            swagger_ui_parameters=SWAGGER_PARAMETERS))

    def oauth2_redirect() -> HTMLResponse:
        return _page(get_swagger_ui_oauth2_redirect_html())

    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _page(get_redoc_html(
            openapi_url=f"{root}{openapi_url}", title=f"{title} - ReDoc",
            redoc_js_url=f"{root}{STATIC}/redoc.standalone.js", with_google_fonts=False,
            redoc_favicon_url=f"{root}{STATIC}/favicon.png"), inline_styles=True)

    app.add_api_route(DOCS, docs, methods=["GET"], include_in_schema=False)
    app.add_api_route(OAUTH2_REDIRECT, oauth2_redirect, methods=["GET"],
                      include_in_schema=False)
    app.add_api_route(REDOC, redoc, methods=["GET"], include_in_schema=False)
