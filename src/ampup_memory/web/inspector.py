"""The web inspector: static files shipped in the wheel, served at ``/`` and ``/inspector/``.

It has no API of its own: the page is a client of the same HTTP routes (and so the same
identity and ACL rules) as any other caller. Only the files listed here are served (no
directory listing, no path from the request reaches the file system), and the page's
Content-Security-Policy lets it load nothing but this server's own files.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.responses import FileResponse

from ampup_memory.errors import NotFound

STATIC = Path(__file__).resolve().parent / "inspector"
PAGE, FILES = "/", "/inspector/"  # the page, and where its files are served
ASSETS = {"app.js": "text/javascript", "rooms.js": "text/javascript", "app.css": "text/css"}
# Scripts, styles, images and fetches from this server only: nothing from the internet.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
# Caching and the browser headers every answer carries: web/answer_headers.py.
HEADERS = {"Content-Security-Policy": CSP}


def index() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=HEADERS)


def asset(name: str) -> FileResponse:
    media = ASSETS.get(name)
    if media is None:
        raise NotFound("No such route.")
    return FileResponse(STATIC / name, media_type=media, headers=HEADERS)


def mount(app: FastAPI) -> None:
    """``GET /`` is the page, ``GET /inspector/<file>`` its script and style; neither is
    part of the API schema."""
    app.add_api_route(PAGE, index, methods=["GET", "HEAD"], include_in_schema=False)
    app.add_api_route(FILES + "{name}", asset, methods=["GET", "HEAD"],
                      include_in_schema=False)
