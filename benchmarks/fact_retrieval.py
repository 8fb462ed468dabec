"""Fact retrieval quality: `POST /search` (facts) and AMP cell search on a set of our own.

The data (benchmarks/fact_data.py) is hand-made for this benchmark: 190 facts about one
small company (12 people, 8 services, 10 deals, 20 decisions) with near-duplicate
distractors, and 45 queries in four kinds (by name, paraphrased, by number, by date), each
with its gold facts. Everything goes through a real server over HTTP:

- AmpUp: one `doc:` episode per entity (a paragraph per fact sentence) through
  `POST /episodes/batch`, the facts through `POST /facts/batch` (quote = the sentence),
  ranked by `POST /search` with `limit` 10;
- AMP: the same sentences as `semantic` cells (`POST /amp/v1/memories`), ranked by
  `POST /amp/v1/memories/search` with `limit` 10.

Keyword-only and meaning-only rows come from the ranker's weights, as in
retrieval_quality.py: the same memory home is served three times, by the stock server
(0.6 / 0.4, the hybrid) and by servers whose `search/rank.py` weights are set to 1 / 0 and
0 / 1 before start. The candidate pool (keyword top-k ∪ vector top-k) does not depend on
the weights, so the three rows rank the same candidates. Metrics: recall@n is the share of
a query's gold facts among the top n; MRR the reciprocal rank of the first gold fact.

    python -m benchmarks.fact_retrieval [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
from tests.server_process import ServerProcess, free_port

from benchmarks.fact_data import QUERIES, facts
from benchmarks.retrieval_quality import metrics, write_section

SCOPE = "bench/facts"
USER = {"X-AmpUp-User": "bench"}
AGENT = {"X-AMP-Agent-ID": "bench"}
MODES = {"keyword only": 1.0, "meaning only": 0.0, "hybrid 0.6/0.4": None}
LAUNCH = (
    "import sys, ampup_memory.search.rank as r\n"
    "r.KEYWORD_WEIGHT = float(sys.argv[1]); r.MEANING_WEIGHT = 1.0 - r.KEYWORD_WEIGHT\n"
    "sys.argv = ['ampup-memory'] + sys.argv[2:]\n"
    "from ampup_memory.cli import main\n"
    "main()\n"
)


def server(home: Path, weight: float | None) -> ServerProcess:
    """The stock server (weight None), or one whose keyword weight is `weight`."""
    if weight is None:
        return ServerProcess(home)
    port = free_port()
    return ServerProcess(home, port=port, command=[
        sys.executable, "-c", LAUNCH, str(weight), "serve", "--port", str(port)])


def load(c: httpx.Client) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], str]]:
    """Write the facts both ways; (entity, predicate) → fact id, and → cell id."""
    rows = facts()
    by_entity: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_entity[row[0]].append(i)
    episodes, cites = [], {}
    for entity, members in by_entity.items():
        body = "\n\n".join(rows[i][3] for i in members)
        first = min(rows[i][4] for i in members)
        episodes.append({"source": f"doc:notes/{entity}", "body": body, "acl": ["*"],
                         "occurred_at": f"{first}T09:00:00Z"})
        for unit, i in enumerate(members, start=1):
            cites[i] = (len(episodes) - 1, unit)
    r = c.post("/episodes/batch", json={"scope": SCOPE, "episodes": episodes}, headers=USER)
    r.raise_for_status()
    ids = [e["id"] for e in r.json()["episodes"]]
    batch = [{"entity": e, "predicate": p, "value": v, "quote": s,
              "cites": [{"episode": ids[cites[i][0]], "unit": cites[i][1]}],
              "valid_from": f"{since}T09:00:00Z"}
             for i, (e, p, v, s, since) in enumerate(rows)]
    r = c.post("/facts/batch", json={"scope": SCOPE, "facts": batch}, headers=USER)
    if r.status_code >= 400:
        raise SystemExit(f"POST /facts/batch: {r.status_code} {r.text[:800]}")
    fact_ids = dict(zip(((e, p) for e, p, *_ in rows), r.json()["ids"], strict=True))
    cell_ids = {}
    for e, p, _, sentence, _ in rows:
        r = c.post("/amp/v1/memories", headers=AGENT, json={
            "type": "semantic", "content": {"text": sentence},
            "identity": {"owner_id": "bench", "owner_type": "agent"}})
        r.raise_for_status()
        cell_ids[(e, p)] = r.json()["id"]
    return fact_ids, cell_ids


def rank(c: httpx.Client, weight: float
         ) -> tuple[list[list[str]], list[list[str]], list[float]]:
    """Top-10 fact ids and cell ids per query, and each request's latency in ms.

    Every fact's score must be the blend at `weight`, so a server that ignored the
    weights given at its start (say, the ranker moved them elsewhere) stops the run."""
    by_fact, by_cell, ms = [], [], []
    for _, query, _ in QUERIES:
        t = time.perf_counter()
        r = c.post("/search", headers=USER, json={"scope": SCOPE, "query": query, "limit": 10})
        ms.append((time.perf_counter() - t) * 1000)
        r.raise_for_status()
        for hit in r.json()["results"]:
            p = hit["parts"]
            want = weight * p["keyword"] + (1 - weight) * p["meaning"]
            if "rerank" in p:  # AMPUP_MEMORY_RERANK set: search/rank.py's reranked blend
                w = float(os.environ.get("AMPUP_MEMORY_RERANK_WEIGHT", "0.3"))
                want = (1 - w) * want + w * p["rerank"]
            want += p["time"]
            if abs(hit["score"] - want) > 1e-3:
                raise SystemExit(f"score {hit['score']} is not the blend at {weight}: {p}")
        by_fact.append([hit["id"] for hit in r.json()["results"]])
        t = time.perf_counter()
        r = c.post("/amp/v1/memories/search", headers=AGENT, json={"query": query, "limit": 10})
        ms.append((time.perf_counter() - t) * 1000)
        r.raise_for_status()
        by_cell.append([cell["id"] for cell in r.json()["results"]])
    return by_fact, by_cell, ms


def table(ranked: list[list[str]], gold: list[set[str]]) -> dict[str, dict[str, float]]:
    """Metrics over all queries and per query kind."""
    out = {"all": metrics(ranked, gold)}
    for kind in dict.fromkeys(k for k, _, _ in QUERIES):
        picked = [i for i, (k, _, _) in enumerate(QUERIES) if k == kind]
        out[kind] = metrics([ranked[i] for i in picked], [gold[i] for i in picked])
    return out


def first_hit(ranked: list[str], gold: set[str]) -> int | None:
    """1-based rank of the first gold result in the top 10, None when there is none."""
    return next((i + 1 for i, x in enumerate(ranked) if x in gold), None)


def run() -> dict[str, Any]:
    started = time.perf_counter()
    result: dict[str, Any] = {"facts": len(facts()), "queries": len(QUERIES),
                              "kinds": {k: sum(1 for q in QUERIES if q[0] == k)
                                        for k in dict.fromkeys(q[0] for q in QUERIES)},
                              "facts_face": {}, "amp_face": {}}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        fact_ids: dict[tuple[str, str], str] = {}
        cell_ids: dict[tuple[str, str], str] = {}
        ms: list[float] = []
        # The stock server loads the data; each mode then serves the same home.
        for name in ["hybrid 0.6/0.4", "keyword only", "meaning only"]:
            with server(home, MODES[name]) as srv, \
                    httpx.Client(base_url=srv.url, timeout=300) as c:
                if not fact_ids:
                    t = time.perf_counter()
                    fact_ids, cell_ids = load(c)
                    result["load_seconds"] = round(time.perf_counter() - t, 1)
                weight = MODES[name]
                by_fact, by_cell, ms_mode = rank(c, 0.6 if weight is None else weight)
                ms += ms_mode
            gold_f = [{fact_ids[k] for k in g} for _, _, g in QUERIES]
            gold_c = [{cell_ids[k] for k in g} for _, _, g in QUERIES]
            result["facts_face"][name] = table(by_fact, gold_f)
            result["amp_face"][name] = table(by_cell, gold_c)
            result.setdefault("first_gold_rank", {})[name] = {
                "facts": [first_hit(r, g) for r, g in zip(by_fact, gold_f, strict=True)],
                "amp": [first_hit(r, g) for r, g in zip(by_cell, gold_c, strict=True)]}
    ms.sort()
    result["request_ms_median"] = round(ms[len(ms) // 2], 1)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["load_average"] = os.getloadavg()[0]
    return result


def markdown(result: dict[str, Any]) -> str:
    kinds = ", ".join(f"{n} {k}" for k, n in result["kinds"].items())
    lines = [
        "## Search: fact retrieval (our own set)",
        "",
        f"`python -m benchmarks.fact_retrieval`: {result['facts']} facts and "
        f"{result['queries']} queries ({kinds}) that **we wrote for this benchmark** "
        "(`benchmarks/fact_data.py`), not a public set: one small company's people, "
        "services, deals and decisions, with near-duplicate distractors on purpose. "
        "Written before the first run and not tuned to it. Loaded through a real server "
        "over HTTP (`POST /episodes/batch`, `POST /facts/batch`, and the same sentences as "
        "AMP cells), ranked by `POST /search` and `POST /amp/v1/memories/search` "
        "(limit 10), embedder `wordllama`. Keyword-only and meaning-only rows serve the "
        "same home with the ranker's weights set to 1 / 0 and 0 / 1 (the candidate pool "
        "does not depend on them; the script checks every fact's score is the blend at "
        "its row's weights). "
        f"Whole run {result['seconds']} s (load {result['load_seconds']} s, median request "
        f"{result['request_ms_median']} ms) at load average {result['load_average']:.1f} "
        "on 2 shared cores.",
        "",
    ]

    def cells(m: dict[str, float]) -> str:
        return " | ".join(f"{m[k]:.3f}" for k in ("recall@1", "recall@5", "recall@10", "mrr"))

    for face, title in (("facts_face", "`POST /search` (facts)"),
                        ("amp_face", "AMP cell search")):
        lines += [f"{title}:", "", "| queries | ranking | recall@1 | recall@5 | recall@10 "
                  "| MRR |", "|---|---|---|---|---|---|"]
        for kind in ["all", *result["kinds"]]:
            for name, per_kind in result[face].items():
                lines.append(f"| {kind} | {name} | {cells(per_kind[kind])} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    result = run()
    print(json.dumps(result, indent=2))
    if args.write_docs:
        write_section(Path(__file__).resolve().parent.parent / "docs" / "performance.md",
                      markdown(result))


if __name__ == "__main__":
    main()
