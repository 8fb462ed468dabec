"""Typed query benchmark, in process on the embedded default (SQLite catalog and read index).

    python benchmarks/schema_bench.py                  # 10k opportunities, writes docs
    python benchmarks/schema_bench.py --opportunities 2000 --no-docs   # quick

A scope with the built-in `sales` schema and N opportunities, each with stage, amount,
close_date, owner and next_step (5 facts; commits of 1,000 facts), citing 20 episodes under
5 different ACLs; the reader is in one group, so about a fifth of the citations are hidden
from it. Measures `find: "entities"` (the service call POST /query makes, no HTTP):
- the sales question: open, over $50k, closing in a quarter, select owner/next_step/amount,
  ordered by amount, first 50;
- every opportunity, every attribute, first 50 (the whole type read and ordered).
30 runs each after one warm-up; p50 and p95.

Results go to benchmarks/results/schemas.json and, between markers, into
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from ampup_memory.memory.episodes import EpisodeIn  # noqa: E402
from ampup_memory.memory.facts import FactIn  # noqa: E402
from ampup_memory.memory.query import TypedQuery, run  # noqa: E402
from ampup_memory.memory.schemas import PutSchema, set_schema  # noqa: E402
from ampup_memory.memory.service import MemoryService  # noqa: E402
from ampup_memory.settings import load_settings  # noqa: E402

MARK_START, MARK_END = "<!-- schema-bench:start -->", "<!-- schema-bench:end -->"
SCOPE = "bench/sales"
STAGES = ["prospecting", "discovery", "demo", "proposal", "negotiation", "closed_won",
          "closed_lost"]
ACLS = [["*"], ["group:sales"], ["group:emea"], ["group:sales", "group:emea"], ["user:x"]]
# "Which open deals over $50k close next quarter, biggest first?"
SALES_QUESTION: dict[str, Any] = {"find": "entities", "type": "opportunity", "where": [
    {"attribute": "stage", "op": "in", "value": STAGES[:5]},
    {"attribute": "amount", "op": "gt", "value": "$50k"},
    {"attribute": "close_date", "op": "gte", "value": "2025-07-01"},
    {"attribute": "close_date", "op": "lte", "value": "2025-09-30"}],
    "select": ["owner", "next_step", "amount"],
    "order_by": [{"attribute": "amount", "desc": True}], "limit": 50}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)


def fill(svc: MemoryService, n: int) -> None:
    rng = random.Random(7)
    svc.set_principal("writer", ["sales", "emea"], [], "bench")
    svc.set_principal("x", [], [], "bench")
    svc.set_principal("reader", ["sales"], [], "bench")
    set_schema(svc, "bench", SCOPE, PutSchema(builtin="sales"))
    eps = []
    for i in range(20):
        result = svc.write_episodes("writer", SCOPE, None, [EpisodeIn.model_validate({
            "source": f"crm:export/{i}", "acl": ACLS[i % len(ACLS)],
            "body": json.dumps({"export": i, "note": "Pipeline export"})})])
        eps.append(result.episodes[0][0])
    facts: list[FactIn] = []
    for k in range(n):
        opp = f"opportunity:o{k:06d}"
        values = {"stage": rng.choice(STAGES),
                  "amount": {"amount": rng.randrange(5, 200) * 1000, "currency": "USD"},
                  "close_date": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                  "owner": rng.choice(["ann", "ben", "cy", "dee"]),
                  "next_step": f"follow up {k}"}
        for predicate, value in values.items():
            facts.append(FactIn.model_validate({
                "entity": opp, "predicate": predicate, "value": value,
                "quote": "Pipeline export", "cites": [{"episode": rng.choice(eps), "unit": 2}],
                "valid_from": "2025-01-01T00:00:00Z"}))
    by_author: dict[str, list[FactIn]] = {}  # each fact posted by a reader of its episode
    for f in facts:
        hidden = ACLS[eps.index(f.cites[0].episode) % len(ACLS)] == ["user:x"]
        by_author.setdefault("x" if hidden else "writer", []).append(f)
    for author, items in by_author.items():
        for i in range(0, len(items), 1000):
            svc.post_facts(author, SCOPE, None, items[i:i + 1000])


def timed(svc: MemoryService, body: dict[str, Any], runs: int = 30) -> dict[str, Any]:
    req = TypedQuery.model_validate({"scope": SCOPE, **body})
    t0, c0 = time.perf_counter(), time.process_time()
    answer = run(svc, "reader", req)  # warm-up: the first query, nothing kept for the view
    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    times, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        run(svc, "reader", req)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"p50_ms": pct(times, 0.5), "p95_ms": pct(times, 0.95),
            "cpu_p50_ms": pct(cpu, 0.5), "first_ms": round(first * 1000),
            "first_cpu_ms": round(first_cpu * 1000),
            "load_average": [round(x, 1) for x in os.getloadavg()],
            "median_ms": round(statistics.median(times) * 1000, 2),
            "total": answer["total"], "runs": runs}


def after_commit(svc: MemoryService, body: dict[str, Any], n: int, rounds: int = 10,
                 changed: int = 5) -> dict[str, Any]:
    """Write one more commit (``changed`` new values of random opportunities), then time
    the query once; ``rounds`` times. The query before each commit keeps the view warm, as
    a dashboard that asks again after every write would."""
    rng = random.Random(11)
    req = TypedQuery.model_validate({"scope": SCOPE, **body})
    view = svc.view(SCOPE)
    held = svc.index.episodes(SCOPE, view.segments, svc.index.episodes_in(SCOPE, view.segments))
    eps = sorted(i for i, r in held.items()  # the exports the writer reads
                 if r.source.startswith("crm:export") and "user:x" not in r.acl)
    run(svc, "reader", req)
    times, cpu, write_ms = [], [], []
    for r in range(rounds):
        facts = []
        for _ in range(changed):
            predicate = rng.choice(["stage", "owner", "amount"])
            value = {"stage": rng.choice(STAGES), "owner": rng.choice(["ann", "eve"]),
                     "amount": f"${rng.randrange(5, 200)}k"}[predicate]
            facts.append(FactIn.model_validate({
                "entity": f"opportunity:o{rng.randrange(n):06d}", "predicate": predicate,
                "value": value, "quote": "Pipeline export",
                "cites": [{"episode": rng.choice(eps), "unit": 2}],
                "valid_from": f"2025-02-{r + 1:02d}T00:00:00Z"}))
        t0 = time.perf_counter()
        svc.post_facts("writer", SCOPE, None, facts)
        write_ms.append(time.perf_counter() - t0)
        t0, c0 = time.perf_counter(), time.process_time()
        run(svc, "reader", req)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    ms = lambda x: round(x * 1000, 2)  # noqa: E731
    return {"rounds": rounds, "changed": changed, "min_ms": ms(min(times)),
            "median_ms": ms(statistics.median(times)), "cpu_min_ms": ms(min(cpu)),
            "cpu_median_ms": ms(statistics.median(cpu)),
            "write_median_ms": ms(statistics.median(write_ms)),
            "load_average": [round(x, 1) for x in os.getloadavg()]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--opportunities", type=int, default=10_000)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        svc = MemoryService.open(load_settings(home=Path(home), embedding_provider="hash"))
        t0 = time.perf_counter()
        fill(svc, args.opportunities)
        load_s = round(time.perf_counter() - t0, 1)
        question = SALES_QUESTION
        results = {
            "opportunities": args.opportunities, "facts": args.opportunities * 5,
            "load_seconds": load_s,
            "sales_question": timed(svc, question),
            "all_entities": timed(svc, {"find": "entities", "type": "opportunity",
                                        "limit": 50}),
            "sales_question_after_commit": after_commit(svc, question, args.opportunities),
            "all_entities_after_commit": after_commit(
                svc, {"find": "entities", "type": "opportunity", "limit": 50},
                args.opportunities),
            "machine": f"{platform.machine()}, {platform.python_version()}, "
                       f"{platform.system()}",
        }
        svc.close()
    print(json.dumps(results, indent=2))
    out = ROOT / "benchmarks" / "results" / "schemas.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    if not args.no_docs:
        doc = ROOT / "docs" / "performance.md"
        text = doc.read_text()
        q, a = results["sales_question"], results["all_entities"]
        qc, ac = results["sales_question_after_commit"], results["all_entities_after_commit"]
        table = (f"{MARK_START}\n"
                 f"Typed queries (`python benchmarks/schema_bench.py`, {results['machine']}, "
                 f"embedded SQLite; {results['opportunities']:,} opportunities = "
                 f"{results['facts']:,} facts, a reader who sees ~4/5 of the citations; "
                 "the service call, no HTTP; wall time, and beside it the process's CPU "
                 "time, which the machine's load does not inflate):\n\n"
                 "| query | matched | p50 | p95 | CPU p50 | first query, nothing kept "
                 "(wall / CPU) |\n"
                 "|---|---|---|---|---|---|\n"
                 f"| sales question (open, > $50k, closing in Q3, 3 attributes) | "
                 f"{q['total']:,} | {q['p50_ms']} ms | {q['p95_ms']} ms | "
                 f"{q['cpu_p50_ms']} ms | {q['first_ms']:,} ms / {q['first_cpu_ms']:,} ms |\n"
                 f"| every opportunity, every attribute, first 50 | {a['total']:,} | "
                 f"{a['p50_ms']} ms | {a['p95_ms']} ms | {a['cpu_p50_ms']} ms | "
                 f"{a['first_ms']:,} ms / {a['first_cpu_ms']:,} ms |\n\n"
                 f"Query right after one more commit ({qc['changed']} new values of random "
                 f"opportunities, one `post_facts` commit, then the query; "
                 f"{qc['rounds']} rounds each):\n\n"
                 "| query | min | median | CPU min | CPU median |\n"
                 "|---|---|---|---|---|\n"
                 f"| sales question | {qc['min_ms']} ms | {qc['median_ms']} ms | "
                 f"{qc['cpu_min_ms']} ms | {qc['cpu_median_ms']} ms |\n"
                 f"| every opportunity, first 50 | {ac['min_ms']} ms | {ac['median_ms']} ms | "
                 f"{ac['cpu_min_ms']} ms | {ac['cpu_median_ms']} ms |\n\n"
                 f"Load average (1, 5, 15 min) after each: {q['load_average']}, "
                 f"{a['load_average']}, {qc['load_average']}, {ac['load_average']}.\n"
                 f"{MARK_END}")
        if MARK_START in text:
            start, end = text.index(MARK_START), text.index(MARK_END) + len(MARK_END)
            text = text[:start] + table + text[end:]
        else:
            text = text.rstrip() + "\n\n## Typed queries\n\n" + table + "\n"
        doc.write_text(text)


if __name__ == "__main__":
    main()
