"""The passage time boost (docs/search.md "Time boost"), over HTTP: when a query names a
window, a passage whose episode occurred in it ranks above every passage whose episode did
not, whatever their text scores; the words naming the window match nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.memory_support import QUIET, Memory, new_scope, serving

BODIES = {  # the March note matches the words better; the June note is the one in June
    "2025-03-10T09:00:00Z": "Acme pilot kickoff: budget, timeline and the pilot kickoff owner.",
    "2025-06-12T09:00:00Z": "Acme pilot kickoff notes.",
}


@pytest.fixture(scope="module")
def scoped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Memory, str, dict]]:
    home: Path = tmp_path_factory.mktemp("passage-time")
    with serving(home, QUIET) as server:
        m = Memory(server.url)
        scope = new_scope()
        ids = {}
        for when, body in BODIES.items():
            r = m.write(scope, body, source=f"doc:{when[:10]}", occurred_at=when)
            assert r.status_code == 201, r.text
            ids[when[:7]] = r.json()["id"]
        yield m, scope, ids
        m.close()


def _order(m: Memory, scope: str, query: str) -> list[str]:
    r = m.http.post("/query", json={"scope": scope, "find": "passages", "query": query})
    assert r.status_code == 200, r.text
    return [p["episode"] for p in r.json()["results"]]


def test_no_window_ranks_by_text(scoped: tuple[Memory, str, dict]) -> None:
    m, scope, ids = scoped
    assert _order(m, scope, "Acme pilot kickoff budget timeline owner") == [
        ids["2025-03"], ids["2025-06"]]


def test_a_named_window_puts_its_passages_first(scoped: tuple[Memory, str, dict]) -> None:
    m, scope, ids = scoped
    words = "Acme pilot kickoff budget timeline owner"
    assert _order(m, scope, f"{words} in June 2025") == [ids["2025-06"], ids["2025-03"]]
    assert _order(m, scope, f"{words} in March 2025") == [ids["2025-03"], ids["2025-06"]]
    # A window holding neither episode boosts neither: text order again.
    assert _order(m, scope, f"{words} in 2023") == [ids["2025-03"], ids["2025-06"]]
