"""One ablation over both retrieval benchmarks: each lever, same run, both sets.

A lever is a small change to query reading or ranking, applied by patching the server's
modules before it starts (so every face ranks with it: `POST /query`, `POST /search`,
AMP cell search). For every row:

- LongMemEval_S subset (benchmarks/retrieval_quality.py): 16 questions over 82 sessions,
  ranked by the engine in a fresh process with the lever applied (the `POST /query` row of
  that script agrees with the engine rows); hybrid, keyword-only and meaning-only;
- our fact set (benchmarks/fact_retrieval.py): loaded once into one home by the stock
  server, then served by a server started with the lever applied, `POST /search` and
  `POST /amp/v1/memories/search` (limit 10), hybrid.

Levers are named on the command line and joined with `+` for a combined row; `shipped`
is the code as it is. `no_x` turns an adopted lever off (`no_date_words`), so the table keeps
reproducing after a lever lands. `prf=D,T,W`, `rocchio=D,W` (and `feedback_own`,
`feedback_or`, `feedback_min_docs=N`) are the pseudo-relevance feedback levers of
`benchmarks/feedback_lever.py`; they re-rank passages only.

    python -m benchmarks.retrieval_ablation [LEVER ...] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from tests.server_process import ServerProcess, free_port

from benchmarks import fact_retrieval as fr
from benchmarks.fact_data import QUERIES

ROOT = Path(__file__).resolve().parent.parent


def apply(name: str) -> None:
    """Patch the modules for lever ``name`` (before a server or engine starts)."""
    import ampup_memory.search.bm25f as bm25f
    import ampup_memory.search.tokenize as tk

    for part in name.split("+"):
        if part in ("shipped", ""):
            continue
        if part == "no_stop_many":  # "many" and "much" count as words, as before
            tk.STOPWORDS = tk.STOPWORDS - {"many", "much"}
        elif part == "stop_be":  # the forms of "be" / "have" / "do" missing from the list
            tk.STOPWORDS = tk.STOPWORDS | {"am", "been", "being", "having", "doing"}
        elif part == "no_date_words":  # a written date is a window only, as before
            from ampup_memory.search import engine
            from ampup_memory.search.timewindow import find_window

            def old_query(self: Any, query: str, now: Any, tz: Any) -> Any:
                window, rest = find_window(query, now, tz)
                return window, (tk.query_terms(rest) if rest.strip() else []), rest.strip()

            engine.SearchEngine._query = old_query  # type: ignore[method-assign]
        elif part.startswith("entity="):
            bm25f.FIELD_WEIGHTS["entity"] = float(part.split("=", 1)[1])
        elif part.startswith("weights="):
            import ampup_memory.search.rank as rank
            rank.KEYWORD_WEIGHT = float(part.split("=", 1)[1])
            rank.MEANING_WEIGHT = 1.0 - rank.KEYWORD_WEIGHT
        elif part.startswith(("prf=", "rocchio=", "feedback_")):
            _feedback(part)
        else:
            raise SystemExit(f"unknown lever {part!r}")


def _feedback(part: str) -> None:
    """Pseudo-relevance feedback levers (benchmarks/feedback_lever.py): ``prf=D,T,W``
    (keyword side: T words of the D best results, weight W), ``rocchio=D,W`` (meaning
    side), ``feedback_own`` (each side picks its own best results), ``feedback_min_docs=N``,
    ``feedback_or`` (a probabilistic OR of the two keyword scores, not a sum),
    ``feedback_distinct`` (the feedback results from distinct episodes)."""
    from benchmarks import feedback_lever as fl

    fl.install()
    name, _, value = part.partition("=")
    if name == "prf":
        docs, terms, weight = value.split(",")
        fl.PRF.update(docs=int(docs), terms=int(terms), weight=float(weight))
    elif name == "rocchio":
        docs, weight = value.split(",")
        fl.ROCCHIO.update(docs=int(docs), weight=float(weight))
    elif name == "feedback_own":
        fl.FROM["value"] = "own"
    elif name == "feedback_distinct":
        fl.DISTINCT["value"] = True
    elif name == "feedback_or":
        fl.MODE["value"] = "or"
    elif name == "feedback_min_docs":
        fl.MIN_DOCS["value"] = int(value)
    else:
        raise SystemExit(f"unknown lever {part!r}")


LME = """
import json, sys
from pathlib import Path
from benchmarks.retrieval_ablation import apply
apply(sys.argv[1])
from benchmarks.retrieval_quality import SCOPE, episodes, ingested, load, metrics
from ampup_memory.search.visibility import Principal
questions, sessions = load(Path(sys.argv[2]))
docs, session_of = episodes(sessions)
with ingested(docs) as got:
    pools = [[(session_of[p.episode.id], p.parts) for p in got.engine.search_passages(
        SCOPE, "main", q["question"], Principal("bench"), limit=100).passages]
        for q in questions]
gold = [set(q["ground_truth"]["supporting_session_ids"]) for q in questions]
import ampup_memory.search.rank as rank
def ranking(w):
    out = []
    for pool in pools:
        best = {}
        for s, p in pool:
            best[s] = max(best.get(s, -1.0), w * p.keyword + (1 - w) * p.meaning + p.time)
        out.append(sorted(best, key=lambda s: -best[s]))
    return out
print(json.dumps({"hybrid": metrics(ranking(rank.KEYWORD_WEIGHT), gold),
                  "keyword only": metrics(ranking(1.0), gold),
                  "meaning only": metrics(ranking(0.0), gold)}))
"""

LAUNCH = (
    "import sys\n"
    "from benchmarks.retrieval_ablation import apply\n"
    "apply(sys.argv[1])\n"
    "sys.argv = ['ampup-memory'] + sys.argv[2:]\n"
    "from ampup_memory.cli import main\n"
    "main()\n"
)


def longmemeval(lever: str, cache: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", LME, lever, str(cache)], cwd=ROOT,
                         check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(ROOT), os.environ.get("PYTHONPATH", "")])})
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def facts(lever: str, home: Path, ids: dict[str, Any]) -> dict[str, Any]:
    port = free_port()
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with ServerProcess(home, port=port, env=env, command=[
            sys.executable, "-c", LAUNCH, lever, "serve", "--port", str(port)]) as srv, \
            httpx.Client(base_url=srv.url, timeout=300) as c:
        if not ids:
            ids["facts"], ids["cells"] = fr.load(c)
        by_fact, by_cell, _ = rank_all(c)
    gold_f = [{ids["facts"][k] for k in g} for _, _, g in QUERIES]
    gold_c = [{ids["cells"][k] for k in g} for _, _, g in QUERIES]
    return {"facts": fr.table(by_fact, gold_f), "amp": fr.table(by_cell, gold_c),
            "first": {"facts": [fr.first_hit(r, g) for r, g in zip(by_fact, gold_f, strict=True)],
                      "amp": [fr.first_hit(r, g) for r, g in zip(by_cell, gold_c, strict=True)]}}


def rank_all(c: httpx.Client) -> tuple[list[list[str]], list[list[str]], list[float]]:
    by_fact, by_cell = [], []
    for _, query, _ in QUERIES:
        r = c.post("/search", headers=fr.USER, json={"scope": fr.SCOPE, "query": query,
                                                      "limit": 10})
        r.raise_for_status()
        by_fact.append([hit["id"] for hit in r.json()["results"]])
        r = c.post("/amp/v1/memories/search", headers=fr.AGENT,
                   json={"query": query, "limit": 10})
        r.raise_for_status()
        by_cell.append([cell["id"] for cell in r.json()["results"]])
    return by_fact, by_cell, []


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (engines, servers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run(levers: list[str], cache: Path) -> dict[str, Any]:
    started, cpu = time.perf_counter(), _cpu()
    load_before = os.getloadavg()[0]
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ids: dict[str, Any] = {}
        for lever in levers:
            rows[lever] = {"longmemeval": longmemeval(lever, cache),
                           **facts(lever, Path(tmp) / "home", ids)}
            print(lever, json.dumps(summary(rows[lever])), file=sys.stderr, flush=True)
    return {"rows": rows, "seconds": round(time.perf_counter() - started, 1),
            "cpu_seconds": round(_cpu() - cpu, 1),
            "load_before": load_before, "load_after": os.getloadavg()[0]}


def summary(row: dict[str, Any]) -> dict[str, float]:
    lme = row["longmemeval"]
    return {"lme r@5": round(lme["hybrid"]["recall@5"], 3),
            "lme mrr": round(lme["hybrid"]["mrr"], 3),
            "lme kw r@5": round(lme["keyword only"]["recall@5"], 3),
            "lme kw mrr": round(lme["keyword only"]["mrr"], 3),
            "lme mo r@5": round(lme["meaning only"]["recall@5"], 3),
            "lme mo mrr": round(lme["meaning only"]["mrr"], 3),
            "facts r@1": round(row["facts"]["all"]["recall@1"], 3),
            "facts r@5": round(row["facts"]["all"]["recall@5"], 3),
            "facts mrr": round(row["facts"]["all"]["mrr"], 3),
            "amp r@1": round(row["amp"]["all"]["recall@1"], 3),
            "amp r@5": round(row["amp"]["all"]["recall@5"], 3),
            "amp mrr": round(row["amp"]["all"]["mrr"], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("levers", nargs="*", default=["shipped"])
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ampup-bench")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.levers, args.cache)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    for lever, row in result["rows"].items():
        print(lever, json.dumps(summary(row)))
    print(f"seconds {result['seconds']} cpu {result['cpu_seconds']} load "
          f"{result['load_before']:.1f} -> {result['load_after']:.1f}")


if __name__ == "__main__":
    main()
