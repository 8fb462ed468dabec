"""Changing the embedder of an existing store, end to end: real servers, real CLI.

Cells are written by a server on the `hash` embedder (no meaning, only shared words).
The server restarted on WordLlama (the same 256 dimensions, so nothing but the recorded
model tells the vector spaces apart) re-embeds them at start: a query sharing no word
with a cell now finds it by meaning, and no cell's clock moved. `ampup-memory reembed`
then does the same explicitly with the servers stopped.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.memory_support import bar_line
from tests.server_process import ServerProcess

AGENT = {"X-AMP-Agent-ID": "agent_r"}
OWNER = "user_r"
# cell text -> a query sharing no word with it (nor with any other cell)
MEANINGS = {
    "my favourite drink is green tea": "hot beverage brewed from leaves",
    "the car needs new tyres before winter": "vehicle maintenance",
    "our daughter starts school in september": "child education",
    "the quarterly invoice is overdue": "unpaid bill",
}
HASH = {"AMP_EMBEDDING_PROVIDER": "hash", "AMP_LIFECYCLE_ENABLED": "false"}
WORDLLAMA = {"AMP_EMBEDDING_PROVIDER": "wordllama", "AMP_LIFECYCLE_ENABLED": "false"}


def _top(http: httpx.Client, query: str) -> str:
    r = http.post("/memories/search", headers=AGENT, json={"query": query, "owner_id": OWNER})
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return str(results[0]["content"]["text"])


def _listing(http: httpx.Client) -> list[dict[str, Any]]:
    r = http.get("/memories", headers=AGENT, params={"owner_id": OWNER, "limit": 100})
    assert r.status_code == 200, r.text
    cells: list[dict[str, Any]] = r.json()["results"]
    return cells


def _cli(home: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "ampup_memory.cli", "reembed", *args],
        env={**os.environ, "AMPUP_MEMORY_HOME": str(home), **env},
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_restart_with_another_embedder_reembeds_and_search_finds_by_meaning(
    tmp_path: Path,
) -> None:
    with ServerProcess(tmp_path, env=HASH) as server, \
            httpx.Client(base_url=server.url + "/amp/v1", timeout=30) as http:
        for text in MEANINGS:
            body = {"type": "semantic", "content": {"text": text},
                    "identity": {"owner_id": OWNER, "owner_type": "user"}}
            assert http.post("/memories", headers=AGENT, json=body).status_code == 201
        # Hash vectors know no meaning: most of these queries miss their cell.
        missed = [q for text, q in MEANINGS.items() if _top(http, q) != text]
        assert len(missed) >= 2, missed
        before = _listing(http)

    with ServerProcess(tmp_path, env=WORDLLAMA) as server, \
            httpx.Client(base_url=server.url + "/amp/v1", timeout=30) as http:
        embedding = http.get("/spec").json()["capabilities"]["embedding"]
        assert embedding == {"provider": "wordllama", "dimensions": 256}
        for text, query in MEANINGS.items():
            assert _top(http, query) == text, query
        assert _listing(http) == before  # not an update: no clock, counter or field moved
    log = server.log_path.read_text()
    assert "from hash/256 (256d) to wordllama/l2_supercat_256 (256d): re-embedding 4 cells" \
        in log, log
    assert "4/4" in bar_line(log, "re-embedding cells")  # before the server answered

    # With the servers stopped, the command does it explicitly (and only when needed).
    report = _cli(tmp_path, HASH)
    assert report == {"reembedded": 4, "model": "hash/256", "dimensions": 256,
                      "previous_model": "wordllama/l2_supercat_256",
                      "previous_dimensions": 256}
    assert _cli(tmp_path, HASH)["reembedded"] == 0
    assert _cli(tmp_path, HASH, "--force")["reembedded"] == 4

    last = ServerProcess(tmp_path, env=HASH)
    earlier = last.log_path.read_text() if last.log_path.exists() else ""  # a reused port
    with last, httpx.Client(base_url=last.url + "/amp/v1", timeout=30) as http:
        assert http.get("/spec").json()["capabilities"]["embedding"]["provider"] == "hash"
        assert _listing(http) == before
    assert "re-embedding" not in last.log_path.read_text()[len(earlier):]  # record matched


def test_a_short_wait_for_another_process_says_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Servers started together on a fresh store: one records the embedder (milliseconds)
    while the others wait. That wait said `WARNING another process is re-embedding the
    cell store` at every fleet's first start; only a wait that outlasts one poll does."""
    from ampup_memory.amp.reembed import REEMBED_LEASE, WAIT_POLL_SECONDS, ensure_embedding_model
    from ampup_memory.amp.store.registry import open_store
    from ampup_memory.search.embed import HashEmbedder

    said = "another process is re-embedding"
    for held_for, warned in ((0.05, False), (WAIT_POLL_SECONDS * 2.5, True)):
        uri = f"sqlite:///{tmp_path}/amp-{held_for}.db"
        holder, waiter = open_store(uri, 256), open_store(uri, 256)
        taken, release = threading.Event(), threading.Event()

        def hold(store: Any = holder, taken: threading.Event = taken,
                 release: threading.Event = release) -> None:
            with store.lease(REEMBED_LEASE, 60) as held:
                assert held
                taken.set()
                release.wait(10)

        thread = threading.Thread(target=hold)
        thread.start()
        taken.wait(10)
        threading.Timer(held_for, release.set).start()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="ampup_memory.amp"):
            ensure_embedding_model(waiter, HashEmbedder(256))
        thread.join(10)
        assert any(said in r.getMessage() for r in caplog.records) is warned, caplog.text
        holder.close()
        waiter.close()
