"""The query-time reranker under concurrent load, through a real server over HTTP.

One `ampup-memory serve` with `AMPUP_MEMORY_RERANK=minilm-l12`, loaded with the
LongMemEval_S subset of `retrieval_quality.py` (82 sessions through `POST /episodes/batch`).
First a quality pass: the 16 questions one at a time as reranked `POST /query` (limit
100), recall@5 and MRR by session, as `retrieval_quality.py --via-api` counts them. Then,
for each concurrency C, C clients send reranked `POST /query` back to back for
``--seconds``, while one more client sends a stream of cheap requests (`GET /health`, an
AMP cell read `GET /amp/v1/memories/{id}`, a write `POST /episodes`, and a plain
`POST /query` with `rerank: false`), one every 50 ms. Per level: p50/p95 of each kind,
reranked queries per second, the server's CPU seconds per reranked query, its peak RSS and
thread count, and the 1-minute load average at the level's end.

    python -m benchmarks.rerank_load [--levels 1,2,4,8,48] [--seconds 30]
        [--postgres] [--embedder wordllama] [--env NAME=VALUE ...] [--json FILE]

``--postgres`` puts the catalog, the search index and the AMP cell store on a fresh
database of an embedded PostgreSQL (tests/pg.py; its data under ``--tmp``).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from tests.server_process import ServerProcess

from benchmarks.retrieval_quality import (
    POOL,
    SCOPE,
    api_episodes,
    load,
    metrics,
    sessions_found,
)

USER = {"X-AmpUp-User": "bench", "X-AMP-Agent-ID": "agent_bench"}
CHEAP_GAP = 0.05  # seconds between two cheap requests of the stream
TICKS = os.sysconf("SC_CLK_TCK")


def proc_status(pid: int) -> dict[str, int]:
    """RSS (MB) and thread count of a process, from /proc."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "VmRSS":
            out["rss_mb"] = int(value.split()[0]) // 1024
        elif key == "Threads":
            out["threads"] = int(value)
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def pct(values: list[float], q: float) -> float:
    ms = sorted(v * 1000 for v in values)
    return round(ms[min(len(ms) - 1, round(q * (len(ms) - 1)))], 1) if ms else float("nan")


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50_ms": pct(values, 0.5), "p95_ms": pct(values, 0.95),
            "max_ms": pct(values, 1.0)}


def level(url: str, pid: int, questions: list[str], clients: int, seconds: float,
          cell_id: str) -> dict[str, Any]:
    stop = threading.Event()
    reranked: list[float] = []
    cheap: dict[str, list[float]] = {"health": [], "cell_read": [], "write": [],
                                     "plain_query": []}
    errors: list[str] = []
    peak = {"rss_mb": 0, "threads": 0}

    def asker(i: int) -> None:
        with httpx.Client(base_url=url, headers=USER, timeout=600) as c:
            n = i
            while not stop.is_set():
                t = time.perf_counter()
                r = c.post("/query", json={"scope": SCOPE, "find": "passages",
                                           "query": questions[n % len(questions)],
                                           "limit": 10})
                if r.status_code != 200:
                    errors.append(f"query {r.status_code}")
                else:
                    reranked.append(time.perf_counter() - t)
                n += clients

    def cheap_stream() -> None:
        calls = [
            ("health", lambda c, n: c.get("/health")),
            ("cell_read", lambda c, n: c.get(f"/amp/v1/memories/{cell_id}")),
            ("write", lambda c, n: c.post("/episodes", json={
                "scope": "bench/side", "body": f"side note {n} during the burst",
                "acl": ["*"], "source": f"doc:side{n}"})),
            ("plain_query", lambda c, n: c.post("/query", json={
                "scope": SCOPE, "find": "passages", "query": questions[n % len(questions)],
                "limit": 10, "rerank": False})),
        ]
        with httpx.Client(base_url=url, headers=USER, timeout=600) as c:
            n = 0
            while not stop.is_set():
                name, call = calls[n % len(calls)]
                t = time.perf_counter()
                r = call(c, n)
                if r.status_code >= 400:
                    errors.append(f"{name} {r.status_code}")
                else:
                    cheap[name].append(time.perf_counter() - t)
                n += 1
                time.sleep(CHEAP_GAP)

    def sampler() -> None:
        while not stop.is_set():
            for key, value in proc_status(pid).items():
                peak[key] = max(peak[key], value)
            time.sleep(0.25)

    cpu0, began = cpu_seconds(pid), time.perf_counter()
    threads = [threading.Thread(target=asker, args=(i,)) for i in range(clients)]
    threads += [threading.Thread(target=cheap_stream), threading.Thread(target=sampler)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    cpu = cpu_seconds(pid) - cpu0
    after = proc_status(pid)
    return {
        "clients": clients, "wall_s": round(wall, 1),
        "reranked": summary(reranked),
        "reranked_per_s": round(len(reranked) / wall, 2),
        "cpu_s_per_reranked": round(cpu / max(1, len(reranked)), 2),
        **{k: summary(v) for k, v in cheap.items()},
        "peak_rss_mb": peak["rss_mb"], "peak_threads": peak["threads"],
        "threads_after": after["threads"],
        "load1": round(os.getloadavg()[0], 2), "errors": errors[:10],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    questions, sessions = load(args.cache)
    env = {"AMP_EMBEDDING_PROVIDER": args.embedder, "AMPUP_MEMORY_RERANK": "minilm-l12",
           "AMP_LIFECYCLE_ENABLED": "false", "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0"}
    env.update(dict(kv.split("=", 1) for kv in args.env))
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.tmp)))
        if args.postgres:
            from tests.pg import PostgresFactory, _embedded

            pg = PostgresFactory(stack.enter_context(_embedded()))
            url = pg.new_database("rerank")
            env.update({"AMPUP_MEMORY_CATALOG_URI": url, "AMPUP_MEMORY_INDEX_URI": url,
                        "AMP_STORE_URI": url})
        srv = stack.enter_context(ServerProcess(tmp / "home", env=env))
        assert srv.proc is not None
        pid = srv.proc.pid
        c = stack.enter_context(httpx.Client(base_url=srv.url, headers=USER, timeout=600))
        r = c.post("/episodes/batch", json={"scope": SCOPE, "episodes": api_episodes(sessions)})
        r.raise_for_status()
        r = c.post("/amp/v1/memories", json={
            "type": "semantic", "content": {"text": "prefers short answers"},
            "identity": {"owner_id": "agent_bench", "owner_type": "agent"}})
        r.raise_for_status()
        cell_id = r.json()["id"]
        gold = [set(q["ground_truth"]["supporting_session_ids"]) for q in questions]
        quality = {}
        for name, rerank in (("reranker_off", False), ("reranked", True)):
            times: list[float] = []
            ranked = [sessions_found(c, SCOPE, q["question"], POOL, times, rerank)
                      for q in questions]
            m = metrics(ranked, gold)
            quality[name] = {"recall@1": round(m["recall@1"], 3),
                             "recall@5": round(m["recall@5"], 3),
                             "recall@10": round(m["recall@10"], 3),
                             "mrr": round(m["mrr"], 3), "one_at_a_time": summary(times),
                             "first": [r[0] if r else None for r in ranked]}
        result: dict[str, Any] = {
            "backend": "postgresql" if args.postgres else "sqlite",
            "embedder": args.embedder, "env": args.env, "quality": quality,
            "idle": {**proc_status(pid), "load1": round(os.getloadavg()[0], 2)},
            "levels": [],
        }
        print(json.dumps(result), flush=True)
        texts = [q["question"] for q in questions]
        for clients in args.levels:
            row = level(srv.url, pid, texts, clients, args.seconds, cell_id)
            print(json.dumps(row), flush=True)
            result["levels"].append(row)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ampup-bench")
    ap.add_argument("--levels", default="1,2,4,8",  # "": the quality pass only
                    type=lambda s: [int(x) for x in s.split(",") if x])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--postgres", action="store_true")
    ap.add_argument("--embedder", default="wordllama")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server")
    ap.add_argument("--tmp", default=None, help="folder for the server's home (and PG data)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result = run(args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
