"""SQLite: the AMP cell store's keyword step on real text, with and without the newest cut.

The first ``--rows`` pieces of a `real_text.py` corpus as AMP cells of a SQLite cell store
(``--work``/cells.db, kept; owners as `amp_bench.owner_of`), written in one transaction
straight into ``cells`` (the store's own `rows.columns` of a template cell made by
`AmpService.create`, FTS5 filled by the store's triggers; no vectors: the keyword step
only). Then the held-out queries (`amp_ann_bench.text_queries`, seed 11, through
`tokenize.query_terms`) and ``--common`` queries (`pg_cell_keyword.common_queries`: 3
words each over the postings budget) through `SQLiteStore.search_candidates` with no
vector, k = 100, unfiltered and for the 8 % owner: this process's CPU per query (SQLite
runs in it) and wall p50 / p95, with the newest cut (`budget.newest_ranked`, measured
in session 22 and not adopted: run this at commit 923e3ce, where the store has it) and
without it (every match of the rarest word ranked, as the store does), and whether each
query's top 10 (ids and scores) is the same.

    nice -n 10 env PYTHONPATH=src:. python -m benchmarks.sqlite_cell_keyword \\
        --text-file /tmp/pgkw22/pieces.jsonl --rows 300000 --work /tmp/pgkw22/lite300
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.amp_bench import BIG_OWNER, cell_body, owner_of  # noqa: E402
from benchmarks.pg_ann_recall import _pct  # noqa: E402


def fill(path: Path, texts: list[str]) -> None:
    """The cells (see the module's doc), unless the file is there."""
    from ulid import ULID

    from ampup_memory.amp.model import Content, Identity, StoredCell
    from ampup_memory.amp.store.rows import columns
    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings

    if path.exists():
        return
    home = path.parent / "home"
    home.mkdir(parents=True, exist_ok=True)
    rt = open_runtime(load_settings(home=str(home), store_uri=f"sqlite:///{path}"))
    template = rt.amp.create("loader", json.dumps(cell_body("template", "user_0")).encode())
    conn = rt.store._conn()  # type: ignore[attr-defined]
    with conn:
        conn.execute("DELETE FROM cells")
        for i, text in enumerate(texts):
            cell = template.model_copy(update={
                "id": f"mem_{ULID()}", "content": Content(text=text, metadata={}),
                "identity": Identity(owner_id=owner_of(i),
                                     owner_type=template.identity.owner_type,
                                     created_by="loader")})
            c = columns(StoredCell(cell=cell))
            conn.execute(
                "INSERT INTO cells (id, type, owner_id, created_by, status, public,"
                " has_readers, access_count, last_accessed_at, text, doc, guard, importance,"
                " confidence, decay_rate, last_updated_at, expires_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (c.id, c.type, c.owner_id, c.created_by, c.status, c.public, c.has_readers,
                 c.access_count, c.last_accessed_at, c.text, c.doc, c.guard, c.importance,
                 c.confidence, c.decay_rate, c.last_updated_at, c.expires_at))
    conn.execute("ANALYZE")
    rt.close()


def series(store: Any, flt: Any, queries: list[list[str]]
           ) -> tuple[dict[str, Any], list[list[tuple[str, float]]]]:
    from benchmarks.pg_cell_keyword import timed_keyword_step

    wall: list[float] = []
    cpu: list[float] = []
    tops: list[list[tuple[str, float]]] = []
    for terms in queries:
        timed_keyword_step(store, flt, terms, wall, cpu, tops)
    return ({"cpu_p50_ms": round(statistics.median(cpu), 2),
             "cpu_mean_ms": round(statistics.mean(cpu), 2),
             "p50_ms": round(statistics.median(wall), 2),
             "p95_ms": round(_pct(wall, 0.95), 2),
             "load": round(os.getloadavg()[0], 2)}, tops)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--text-file", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--out", default="sqlite_cell_keyword_300k_s22.json")
    args = parser.parse_args()

    from ampup_memory.amp.store import sqlite as lite
    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.search.tokenize import query_terms
    from benchmarks.amp_ann_bench import text_queries
    from benchmarks.pg_cell_keyword import common_queries
    from benchmarks.real_text import load_pieces

    if not hasattr(lite, "newest_ranked"):
        raise SystemExit("the newest cut was measured at commit 923e3ce and not adopted "
                         "(docs/performance.md, session 22); check that commit out to run this")
    args.work.mkdir(parents=True, exist_ok=True)
    texts = load_pieces(args.text_file, args.rows)
    path = args.work / "cells.db"
    t = time.perf_counter()
    fill(path, texts)
    out: dict[str, Any] = {"rows": args.rows, "fill_s": round(time.perf_counter() - t, 1),
                           "load_at_start": os.getloadavg()[0], "runs": []}
    sets = {"held-out": [query_terms(q) for q in text_queries(args.text_file,
                                                              args.queries, 11)],
            "common": common_queries(texts, 30)}
    filters = {"unfiltered": CellFilter(agent_id="agent_bench_1"),
               "owner 8 %": CellFilter(agent_id="agent_bench_1", owner_id=BIG_OWNER)}
    shipped = lite.newest_ranked
    store = lite.SQLiteStore(f"sqlite:///{path}", None)
    try:
        for qname, queries in sets.items():
            for fname, flt in filters.items():
                tops: dict[str, list[list[tuple[str, float]]]] = {}
                for lever, rule in (("every match (before)", lambda over: None),
                                    ("newest cut (shipped)", shipped)):
                    lite.newest_ranked = rule  # type: ignore[assignment]
                    series(store, flt, queries[:20])  # untimed: pages read once
                    row, tops[lever] = series(store, flt, queries)
                    row.update({"queries": qname, "filter": fname, "lever": lever})
                    if len(tops) == 2:
                        a, b = tops.values()
                        row["queries_ranked_otherwise"] = sum(
                            [i for i, _ in x] != [i for i, _ in y]
                            or any(abs(s - u) > 1e-9 for (_, s), (_, u) in zip(x, y,
                                                                               strict=True))
                            for x, y in zip(a, b, strict=True))
                    print(json.dumps(row), file=sys.stderr, flush=True)
                    out["runs"].append(row)
    finally:
        lite.newest_ranked = shipped  # type: ignore[assignment]
        store.close()
    out["load_at_end"] = os.getloadavg()[0]
    (ROOT / "benchmarks" / "results" / args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
