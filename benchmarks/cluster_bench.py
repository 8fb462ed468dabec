"""Situation clustering benchmark: the situation map of 10k rewarded runs, in process.

    python benchmarks/cluster_bench.py                   # 10k runs, 5 repeats, writes docs
    python benchmarks/cluster_bench.py --runs 2000 --repeats 2 --no-docs   # quick

Synthetic tasks from 8 templates (kinds of work), each filled with varied words, embedded
with the default offline embedder (WordLlama). Measures, per repeat:
- embedding the task texts (what `build_map` does when not given vectors);
- clustering the vectors into the two-level map (`build_map` given the vectors);
- a re-clustering with the previous map (ids kept by member overlap).
Reports min and median, the number of situations and categories, and how many templates
were split or merged (a template whose tasks are not all in one situation, or a situation
holding two templates). Results go to benchmarks/results/cluster.json and, between
markers, into docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from ampup_memory.advice.situations import build_map  # noqa: E402
from ampup_memory.search.embed import WordLlamaEmbedder  # noqa: E402

MARK_START, MARK_END = "<!-- cluster-bench:start -->", "<!-- cluster-bench:end -->"

TEMPLATES: dict[str, tuple[str, dict[str, list[str]]]] = {
    "sql": ("Write a SQL query that reports {m} {x} by {r} from the {t} table", {
        "m": ["monthly", "weekly", "daily", "quarterly"],
        "x": ["revenue", "sales", "signups", "refunds"],
        "r": ["region", "country", "product", "channel"],
        "t": ["orders", "invoices", "events", "payments"]}),
    "bug": ("Fix the failing unit test in the {s} service after the {c} broke {f}", {
        "s": ["payment", "billing", "auth", "search"],
        "c": ["refactor", "dependency upgrade", "config change", "schema migration"],
        "f": ["retries", "timeouts", "validation", "serialisation"]}),
    "email": ("Draft a follow-up email to {p} at {co} after the {m} about {x}", {
        "p": ["the buyer", "the CFO", "our champion", "the procurement lead"],
        "co": ["Acme", "Globex", "Initech", "Umbrella"],
        "m": ["demo", "discovery call", "pricing call", "kickoff"],
        "x": ["pricing", "the renewal", "the pilot", "the security review"]}),
    "deploy": ("Roll out version {v} of the {s} to {env} with a {how}", {
        "v": ["2.1", "3.0", "1.14", "4.2"],
        "s": ["API gateway", "web frontend", "worker fleet", "scheduler"],
        "env": ["staging", "production", "the EU cluster", "the canary pool"],
        "how": ["blue-green switch", "canary release", "rolling restart", "feature flag"]}),
    "hire": ("Write a job description for a {lvl} {role} in the {team} team", {
        "lvl": ["senior", "junior", "staff", "lead"],
        "role": ["backend engineer", "data analyst", "designer", "product manager"],
        "team": ["platform", "growth", "payments", "mobile"]}),
    "travel": ("Book flights and a hotel in {city} for the {ev} in {mon}", {
        "city": ["Berlin", "Lisbon", "Austin", "Singapore"],
        "ev": ["offsite", "conference", "customer visit", "board meeting"],
        "mon": ["March", "June", "September", "November"]}),
    "invoice": ("Reconcile the {v} invoices against purchase orders for {q}", {
        "v": ["vendor", "cloud hosting", "contractor", "software licence"],
        "q": ["the first quarter", "last month", "the fiscal year", "October"]}),
    "summary": ("Summarise the {d} into five bullet points for the {aud}", {
        "d": ["incident postmortem", "customer interview notes", "board deck",
              "research paper"],
        "aud": ["leadership team", "engineering all-hands", "sales team", "new hires"]}),
}


@dataclass(frozen=True)
class Run:
    id: str
    task: str
    kind: str = "run"
    reward: float = 1.0
    user: str = "u"
    trace: str = ""
    outcome: str = ""
    advice_key: str | None = None
    at: datetime = datetime(2026, 1, 1, tzinfo=UTC)


def runs(n: int, seed: int = 11, distinct: bool = False) -> tuple[list[Run], dict[str, str]]:
    """``n`` runs cycling through the templates; ``distinct`` adds a ticket number to each
    task so no two texts are the same (the tree is built over distinct texts)."""
    rng = random.Random(seed)
    kinds = sorted(TEMPLATES)
    out, kind_of = [], {}
    for i in range(n):
        kind = kinds[i % len(kinds)]
        template, words = TEMPLATES[kind]
        task = template.format(**{k: rng.choice(v) for k, v in words.items()})
        if distinct:
            task += f" (ticket {100000 + i})"
        run = Run(id=f"run_{i:06d}", task=task)
        out.append(run)
        kind_of[run.id] = kind
    return out, kind_of


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()

    embedder = WordLlamaEmbedder()
    tasks, kind_of = runs(args.runs)
    embed_s, cluster_s, recluster_s = [], [], []
    smap = None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        vectors = embedder.embed([t.task for t in tasks])
        t1 = time.perf_counter()
        smap = build_map(tasks, embedder, vectors=vectors)
        t2 = time.perf_counter()
        again = build_map(tasks, embedder, vectors=vectors, previous=smap)
        t3 = time.perf_counter()
        embed_s.append(t1 - t0)
        cluster_s.append(t2 - t1)
        recluster_s.append(t3 - t2)
        assert {s.id for s in again.situations} == {s.id for s in smap.situations}
    assert smap is not None
    distinct_tasks, distinct_kind_of = runs(args.runs, distinct=True)
    distinct_vectors = embedder.embed([t.task for t in distinct_tasks])
    distinct_s = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        distinct_map = build_map(distinct_tasks, embedder, vectors=distinct_vectors)
        distinct_s.append(time.perf_counter() - t0)
    distinct_mixed = sum(1 for s in distinct_map.situations
                         if len(Counter(distinct_kind_of[m] for m in s.members)) > 1)
    split = sum(1 for kind in TEMPLATES
                if sum(1 for s in smap.situations
                       if any(kind_of[m] == kind for m in s.members)) > 1)
    merged = sum(1 for s in smap.situations
                 if len(Counter(kind_of[m] for m in s.members)) > 1)

    def stat(values: list[float]) -> dict[str, float]:
        return {"min_s": round(min(values), 3), "median_s": round(statistics.median(values), 3)}

    result = {
        "runs": args.runs, "repeats": args.repeats, "templates": len(TEMPLATES),
        "situations": len(smap.situations), "categories": len(smap.categories),
        "templates_split": split, "situations_mixed": merged,
        "embed": stat(embed_s), "cluster": stat(cluster_s), "recluster": stat(recluster_s),
        "distinct_texts": len({t.task for t in tasks}),
        "cluster_all_distinct": stat(distinct_s),
        "all_distinct_situations": len(distinct_map.situations),
        "all_distinct_situations_mixed": distinct_mixed,
        "total": stat([a + b for a, b in zip(embed_s, cluster_s, strict=True)]),
        "machine": f"{platform.machine()}, {platform.python_version()}, {platform.system()}",
    }
    print(json.dumps(result, indent=2))
    out = ROOT / "benchmarks" / "results" / "cluster.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    if not args.no_docs:
        doc = ROOT / "docs" / "performance.md"
        text = doc.read_text()
        r = result
        table = (
            f"{MARK_START}\n"
            f"Situation clustering (`python benchmarks/cluster_bench.py`, {r['machine']}; "
            f"{r['runs']:,} runs from {r['templates']} task templates, WordLlama 256-d, "
            f"{r['repeats']} repeats, in process):\n\n"
            "| step | min | median |\n|---|---|---|\n"
            f"| embed the task texts | {r['embed']['min_s']} s | {r['embed']['median_s']} s |\n"
            f"| cluster into the two-level map | {r['cluster']['min_s']} s | "
            f"{r['cluster']['median_s']} s |\n"
            f"| embed + cluster | {r['total']['min_s']} s | {r['total']['median_s']} s |\n"
            f"| re-cluster with the previous map | {r['recluster']['min_s']} s | "
            f"{r['recluster']['median_s']} s |\n"
            f"| cluster {r['runs']:,} all-distinct texts (a ticket number in each) | "
            f"{r['cluster_all_distinct']['min_s']} s | "
            f"{r['cluster_all_distinct']['median_s']} s |\n\n"
            f"Result: {r['situations']} situations in {r['categories']} categories; "
            f"{r['templates_split']} templates split over several situations, "
            f"{r['situations_mixed']} situations mixing templates; every situation id kept "
            f"by the re-clustering. The {r['runs']:,} runs hold {r['distinct_texts']:,} "
            f"distinct texts; with every text distinct: {r['all_distinct_situations']} "
            f"situations, {r['all_distinct_situations_mixed']} mixing templates.\n{MARK_END}")
        if MARK_START in text:
            start, end = text.index(MARK_START), text.index(MARK_END) + len(MARK_END)
            text = text[:start] + table + text[end:]
        else:
            text = text.rstrip("\n") + "\n\n## Situation clustering\n\n" + table + "\n"
        doc.write_text(text)


if __name__ == "__main__":
    main()
