"""Advice write benchmark: `POST /runs` next to `POST /episodes` on one real server.

    python benchmarks/advice_bench.py                 # 200 writes of each, writes docs
    python benchmarks/advice_bench.py --n 50 --no-docs

Both are single writes of one commit (rows, then one ledger row); the issue asks that
recording a run be as fast as any other single write. The two kinds are interleaved
(episode, run, episode, run, ...) on one scope, so machine load hits both alike; min and
median per kind. Also: `GET /runs/{id}` and `GET /runs?scope=` (list, 50 newest) after
the writes. The server runs on the embedded default (SQLite catalog and read index),
`hash` embedder, timers off.

Then, in process on a read index alone (SQLite), filled with 10,000 runs each with a
reward and a 1 KB trace: one page of `GET /runs` (50 newest, readable by everyone) and
the fold of every rewarded task the learning passes read (`rewarded_tasks`' work).

Then `POST /advice` on a real server (default WordLlama embedder, SQLite) whose scope holds
10,000 rewarded runs (written in-process through `MemoryService.write_events`, 1,000
events a commit), a 200-situation map (one distinct task text per situation, 50 runs each,
committed as one `situations` event) and one promoted note per situation: the map and notes
are built directly as data (clustering has its own benchmark, cluster_bench.py). Three
requests, interleaved: a task of a known kind without a session (the promoted note), with
an open session (the note, and the serving recorded on the session: one commit), and an
unrelated task (null).

Results go to benchmarks/results/advice.json and, between markers, into
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.server_process import ServerProcess  # noqa: E402

MARK_START, MARK_END = "<!-- advice-bench:start -->", "<!-- advice-bench:end -->"
ENV = {"AMP_EMBEDDING_PROVIDER": "hash", "AMP_LIFECYCLE_ENABLED": "false",
       "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0",
       "AMPUP_MEMORY_ADVICE_JUDGE_INTERVAL_SECONDS": "0"}
SCOPE = "bench/advice"


def ms(v: float) -> float:
    return round(v * 1000, 1)


def summary(times: list[float]) -> dict[str, float]:
    return {"min_ms": ms(min(times)), "median_ms": ms(statistics.median(times)),
            "n": len(times)}


def timed(call: Any) -> float:
    start = time.perf_counter()
    r = call()
    took = time.perf_counter() - start
    assert r.status_code in (200, 201), r.text
    return took


def run(n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home, ServerProcess(Path(home), env=ENV) as proc:
        http = httpx.Client(base_url=proc.url, timeout=60, headers={"X-AmpUp-User": "bench"})
        # Warm up: the scope's tables are created by its first write.
        http.post("/episodes", json={"scope": SCOPE, "source": "doc:warm", "body": "warm",
                                     "acl": ["*"]})
        http.post("/runs", json={"scope": SCOPE, "task": "warm"})
        episodes: list[float] = []
        runs: list[float] = []
        last = ""
        for i in range(n):
            episodes.append(timed(lambda i=i: http.post("/episodes", json={
                "scope": SCOPE, "source": f"doc:bench/{i}", "acl": ["*"],
                "body": f"Bench note {i}: the deploy needs the staging flag first."})))
            body = {"scope": SCOPE, "task": f"deploy service {i % 7}",
                    "trace": "checked flags; ran deploy", "outcome": "deployed"}
            start = time.perf_counter()
            r = http.post("/runs", json=body)
            runs.append(time.perf_counter() - start)
            assert r.status_code == 201, r.text
            last = r.json()["id"]
        get_one = [timed(lambda: http.get(f"/runs/{last}")) for _ in range(50)]
        listing = [timed(lambda: http.get("/runs", params={"scope": SCOPE})) for _ in range(20)]
        http.close()
    return {"post_episode": summary(episodes), "post_run": summary(runs),
            "get_run": summary(get_one), "list_runs_50": summary(listing), "runs_held": n + 1}


def index_only(runs: int) -> dict[str, Any]:
    from datetime import UTC, datetime

    from ulid import ULID

    from ampup_memory.advice.runs import REWARD, RUN, _grouped, new_id, rewarded_task
    from ampup_memory.memory.events import EventRecord
    from ampup_memory.memory.ledger import LedgerEntry
    from ampup_memory.memory.readindex import ReadIndex
    from ampup_memory.memory.segments import Segment

    with tempfile.TemporaryDirectory() as home:
        index = ReadIndex(f"sqlite:///{home}/index.db")
        now = datetime.now(UTC)
        for c in range(0, runs, 1000):
            entry = LedgerEntry(commit_id=str(ULID()), parent=None, scope=SCOPE,
                                branch="main", seq=c // 1000 + 1, author="bench",
                                committed_at=now, message="bench")
            events = []
            for i in range(c, min(c + 1000, runs)):
                subject = new_id("run_")
                events.append(EventRecord(
                    id=str(ULID()), subject=subject, kind=RUN, user="bench", at=now,
                    acl=("*",), data={"task": f"deploy service {i % 7}",
                                      "trace": "step " * 200, "outcome": "ok"}))
                events.append(EventRecord(id=str(ULID()), subject=subject, kind=REWARD,
                                          user="bench", at=now, reward=0.5,
                                          data={"by": "explicit", "reason": "ok"}))
            index.apply(entry, [], [], [], (), events)
        segs = (Segment("main"),)
        pages, folds = [], []
        for _ in range(20):
            start = time.perf_counter()
            page = index.newest_subjects(SCOPE, segs, RUN, None, lambda e: True, 51)
            index.events(SCOPE, segs, (REWARD,), [e.subject for e in page])
            pages.append(time.perf_counter() - start)
        for _ in range(3):
            start = time.perf_counter()
            tasks = [rewarded_task(evs) for evs in
                     _grouped(index.events(SCOPE, segs)).values()]
            folds.append(time.perf_counter() - start)
            assert len(tasks) == runs
        index.close()
    return {"runs": runs, "list_page": summary(pages), "rewarded_tasks": summary(folds)}


KINDS = ["deploy", "refund", "invoice", "migrate", "review", "onboard", "backup", "audit",
         "forecast", "triage"]
OBJECTS = ["the billing service", "a customer order", "the staging database",
           "the mobile app", "a pull request", "the sales report", "the search index",
           "a new employee laptop", "the marketing site", "the data warehouse",
           "the payment gateway", "a support ticket", "the CI pipeline", "the CRM export",
           "the quarterly budget", "the HR policy", "the API gateway", "a vendor contract",
           "the analytics dashboard", "the email campaign"]


def serving(runs: int, n: int) -> dict[str, Any]:
    """POST /advice with ``runs`` rewarded runs and len(KINDS)*len(OBJECTS) situations."""
    from ulid import ULID

    from ampup_memory.advice.gate import Evidence, NoteState
    from ampup_memory.advice.loop import MAP, MAP_SUBJECT, NOTE, _learning_event
    from ampup_memory.advice.notes import Note
    from ampup_memory.advice.runs import RUN, new_id, reward_event, utcnow
    from ampup_memory.advice.situations import Category, Situation, SituationMap
    from ampup_memory.memory.events import EventRecord
    from ampup_memory.memory.scopes import parse_scope
    from ampup_memory.memory.service import MemoryService
    from ampup_memory.search.embed import build_embedder
    from ampup_memory.settings import Settings

    env = {k: v for k, v in ENV.items() if k != "AMP_EMBEDDING_PROVIDER"}  # the default
    texts = [f"{k} {o}" for k in KINDS for o in OBJECTS]
    with tempfile.TemporaryDirectory() as home:
        settings = Settings.model_validate({**env, "AMPUP_MEMORY_HOME": home})
        embedder = build_embedder(settings)
        scope = parse_scope(SCOPE)
        svc = MemoryService.open(settings)
        started = time.perf_counter()
        members: dict[int, list[str]] = {i: [] for i in range(len(texts))}
        for c in range(0, runs, 500):
            events = []
            for i in range(c, min(c + 500, runs)):
                subject = new_id("run_")
                members[i % len(texts)].append(subject)
                events.append(EventRecord(
                    id=str(ULID()), subject=subject, kind=RUN, user=f"u{i % 40}",
                    at=utcnow(), acl=(f"user:u{i % 40}",),
                    data={"task": texts[i % len(texts)], "trace": "step " * 100,
                          "outcome": "ok", "advice_key": None}))
                events.append(reward_event(subject, f"u{i % 40}", 0.5, "ok", "explicit",
                                           "main"))
            svc.write_events("bench", scope, "main", "bench runs", events)
        vectors = embedder.embed(texts)
        cat = f"cat_{ULID()}"
        situations = tuple(Situation(id=f"sit_{ULID()}", category=cat, name=t,
                                     terms=tuple(t.split()[:3]), centroid=tuple(v),
                                     members=tuple(sorted(members[i])))
                           for i, (t, v) in enumerate(zip(texts, vectors, strict=True)))
        smap = SituationMap(embedder=embedder.name, built_at=utcnow().isoformat(),
                            categories=(Category(cat, "all", ("all",),
                                                 tuple(s.id for s in situations)),),
                            situations=situations)
        notes = [Note(key=f"note_{ULID()}", situation=s.id, when=f"For {s.name}.",
                      steps=("Check first.", "Then do it."), pitfalls=("Skipping it.",),
                      sources=s.members[:6], model="bench", created_at=utcnow().isoformat(),
                      state=NoteState.PROMOTED, evidence=Evidence())
                 for s in situations]
        svc.write_events("learner", scope, "main", "bench map",
                         [_learning_event(MAP_SUBJECT, MAP, {"map": smap.to_json()})])
        svc.write_events("learner", scope, "main", "bench notes",
                         [_learning_event(n.key, NOTE, {"note": n.to_dict()}) for n in notes])
        svc.close()
        fill_s = time.perf_counter() - started
        with ServerProcess(Path(home), env=env) as proc:
            http = httpx.Client(base_url=proc.url, timeout=60,
                                headers={"X-AmpUp-User": "u1"})
            known = {"scope": SCOPE, "task": "deploy the billing service to production"}
            unrelated = {"scope": SCOPE, "task": "what is the capital of France"}
            first = http.post("/advice", json=known)  # fills the per-process cache
            assert first.json()["advice"]["kind"] == "note", first.text
            note, session, null = [], [], []
            for _ in range(n):
                note.append(timed(lambda: http.post("/advice", json=known)))
                ses = http.post("/sessions/start", json={"scope": SCOPE, "task": "x"}).json()
                session.append(timed(lambda ses=ses: http.post(
                    "/advice", json=known | {"session": ses["id"]})))
                r = http.post("/advice", json=unrelated)
                null.append(timed(lambda: http.post("/advice", json=unrelated)))
                assert r.json()["advice"] is None, r.text
            http.close()
    return {"runs": runs, "situations": len(texts), "fill_seconds": round(fill_s, 1),
            "advice_note": summary(note), "advice_note_session": summary(session),
            "advice_unrelated": summary(null)}


def markdown(result: dict[str, Any]) -> str:
    rows = [("`POST /episodes` (one episode)", result["post_episode"]),
            ("`POST /runs` (one run)", result["post_run"]),
            (f"`GET /runs/{{id}}` ({result['runs_held']} runs held)", result["get_run"]),
            ("`GET /runs?scope=` (50 newest)", result["list_runs_50"])]
    lines = [MARK_START, "",
             f"Run: `python benchmarks/advice_bench.py` on {platform.machine()}, "
             f"{os.cpu_count()} cores, Python {platform.python_version()}; load average "
             f"{result['load_before']} before, {result['load_after']} after (a shared "
             "machine: wall times carry that load, both kinds alike since they alternate).",
             "", "| request | n | min ms | median ms |", "|---|---|---|---|"]
    lines += [f"| {name} | {s['n']} | {s['min_ms']} | {s['median_ms']} |" for name, s in rows]
    lines += ["", "A run is one commit like an episode (event rows, then one ledger row), so "
              "the two should cost the same; reads come from the read index."]
    big = result.get("index_only")
    if big:
        lines += ["", f"On the read index alone with {big['runs']:,} rewarded runs (1 KB trace "
                  "each): one `GET /runs` page (50 newest, their rewards) "
                  f"{big['list_page']['median_ms']} ms median; folding every rewarded "
                  f"task (what the learning passes read) {big['rewarded_tasks']['median_ms']} "
                  "ms median."]
    serve = result.get("serving")
    if serve:
        lines += ["", f"`POST /advice` with {serve['runs']:,} rewarded runs and "
                  f"{serve['situations']} situations (one promoted note each) in the scope, "
                  "default WordLlama embedder:", "",
                  "| request | n | min ms | median ms |", "|---|---|---|---|"]
        for name, key in (("known kind, no session (promoted note)", "advice_note"),
                          ("known kind, open session (served, recorded: one commit)",
                           "advice_note_session"),
                          ("unrelated task (null)", "advice_unrelated")):
            s = serve[key]
            lines.append(f"| {name} | {s['n']} | {s['min_ms']} | {s['median_ms']} |")
    lines += ["", MARK_END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--index-runs", type=int, default=10_000)
    parser.add_argument("--serve-runs", type=int, default=10_000)
    parser.add_argument("--serve-n", type=int, default=100)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    load_before = round(os.getloadavg()[0], 2)
    result = run(args.n)
    if args.index_runs:
        result["index_only"] = index_only(args.index_runs)
    if args.serve_runs:
        result["serving"] = serving(args.serve_runs, args.serve_n)
    result["load_before"], result["load_after"] = load_before, round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    (out / "advice.json").write_text(json.dumps(result, indent=2) + "\n")
    if args.no_docs:
        return
    doc = ROOT / "docs" / "performance.md"
    text = doc.read_text()
    block = markdown(result)
    if MARK_START in text:
        head, rest = text.split(MARK_START, 1)
        text = head + block + rest.split(MARK_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Advice: recording runs\n\nMeasured by " \
            "`benchmarks/advice_bench.py` (one real server over HTTP).\n\n" + block + "\n"
    doc.write_text(text)


if __name__ == "__main__":
    main()
