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
    lines += ["", MARK_END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--index-runs", type=int, default=10_000)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    load_before = round(os.getloadavg()[0], 2)
    result = run(args.n)
    if args.index_runs:
        result["index_only"] = index_only(args.index_runs)
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
