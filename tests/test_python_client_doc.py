"""docs/python-client.md: every Python example runs against a real server and prints
exactly the ```text block that follows it."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampup_memory.client import AMPClient, AmpUpClient, AsyncAMPClient, AsyncAmpUpClient
from tests.server_process import ServerProcess

DOC = Path(__file__).resolve().parent.parent / "docs" / "python-client.md"


def examples() -> list[tuple[str, str]]:
    """(python block, the ```text block after it)."""
    return re.findall(r"^```python\n(.*?)^```\n+prints\n+```text\n(.*?)^```",
                      DOC.read_text(), re.S | re.M)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("client-doc")).start(timeout=180)
    try:
        yield proc
    finally:
        proc.stop()


def test_every_python_block_has_its_output() -> None:
    text = DOC.read_text()
    assert len(examples()) == text.count("```python") == 6


@pytest.mark.parametrize("n", range(6))
def test_example_prints_what_the_page_says(server: ServerProcess, n: int) -> None:
    code, printed = examples()[n]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.replace("http://127.0.0.1:8765", server.url), str(DOC), "exec"),
             {"__name__": "__doc_example__"})
    assert out.getvalue() == printed


def test_the_method_table_names_every_public_method() -> None:
    text = DOC.read_text()
    # Every client's methods live in the class the sync and async faces share (dir, not
    # vars).
    for cls, public in (
        (AMPClient, set(dir(AMPClient))), (AsyncAMPClient, set(dir(AsyncAMPClient))),
        (AmpUpClient, set(dir(AmpUpClient))), (AsyncAmpUpClient, set(dir(AsyncAmpUpClient))),
    ):
        public = {name for name in public if not name.startswith("_")} - {
            "close", "aclose", "base_url"}
        missing = [name for name in public if f"`{name}" not in text]
        assert not missing, (cls.__name__, missing)


def test_every_route_is_a_method_or_named_not_wrapped() -> None:
    """The page's tables (each method's HTTP column) and its "Not wrapped" line together
    name every route of docs/openapi.json: a new route is given a method, or the page says
    no client method sends it."""
    routes = json.loads((DOC.parent / "openapi.json").read_text())["paths"]
    named = set()
    for verb, path in re.findall(r"`(GET|POST|PUT|PATCH|DELETE) (/[^`?\s]*)",
                                 DOC.read_text()):
        path = re.sub(r"\{[^}]+\}", "{}", path)
        named |= {(verb, path), (verb, "/amp/v1" + path)}  # the AMP table leaves out /amp/v1
    missing = sorted((verb.upper(), path) for path, operations in routes.items()
                     for verb in operations
                     if (verb.upper(), re.sub(r"\{[^}]+\}", "{}", path)) not in named)
    assert not missing
