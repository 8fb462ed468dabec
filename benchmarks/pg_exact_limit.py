"""PostgreSQL: where an owner-filtered AMP cell search should stop ranking exactly.

`PostgresStore._nearest` ranks every cell of a filter naming an owner exactly up to
`OWNER_EXACT_LIMIT` rows and walks the HNSW graph (iterative scan) above it. This
measures both paths on the same owners, through the store's own step
(`search_candidates`, k = 100, what a 10-hit search asks): recall@10 against numpy's
exact answer and wall ms p50 / p95, with the limit set above the owner's size (exact)
and below it (HNSW). It reuses a database `benchmarks/pg_ann_recall.py` loaded (its
``--work`` folder: the PostgreSQL data, the saved URLs and the cached vectors), so run
that first at the same ``--rows``.

    nice -n 15 env OPENBLAS_NUM_THREADS=1 PYTHONPATH=src:. python -m benchmarks.pg_exact_limit \\
        --text-file /tmp/lead/pieces.jsonl --rows 300000 --work /tmp/pgrecall/w300
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.amp_bench import BIG_OWNER, owner_of  # noqa: E402
from benchmarks.pg_ann_recall import embedded, exact_top, series  # noqa: E402

OWNERS = (BIG_OWNER, "user_3")  # about 8 % and 1.8 % of the rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--text-file", type=Path, required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("AMPUP_TEST_PGDATA", str(args.work / "pg"))

    import numpy as np
    from tests.pg import _embedded

    from ampup_memory.amp.store import postgres as pg
    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.search.embed import WordLlamaEmbedder
    from benchmarks.amp_ann_bench import text_queries

    saved = json.loads((args.work / f"urls_{args.rows}.json").read_text())
    vecs = embedded(args.text_file, args.rows, args.work)
    qs = np.asarray(WordLlamaEmbedder().embed(
        text_queries(args.text_file, args.queries, 11)), dtype=np.float32)
    owners = np.asarray([owner_of(i) for i in range(args.rows)])
    out: dict[str, Any] = {"rows": args.rows, "queries": args.queries,
                           "exact_limit": pg.OWNER_EXACT_LIMIT, "owners": {}}
    keep = pg.OWNER_EXACT_LIMIT
    with _embedded():
        store = pg.PostgresStore(saved["cells"], int(vecs.shape[1]))
        try:
            for owner in OWNERS:
                pick = np.flatnonzero(owners == owner)
                truth = [exact_top(vecs, saved["ids"], pick, q) for q in qs]
                flt = CellFilter(agent_id="agent_bench_1", owner_id=owner)

                def cells(q: Any, flt: Any = flt) -> dict[Any, float]:
                    return {h.cell_id: h.cosine or 0.0
                            for h in store.search_candidates(flt, [], [float(x) for x in q],
                                                             100)}
                res: dict[str, Any] = {"cells": int(len(pick))}
                for path, limit in (("exact", len(pick) + 1), ("hnsw", len(pick) - 1)):
                    pg.OWNER_EXACT_LIMIT = limit
                    cells(qs[0])  # warm the buffers this path reads
                    res[path] = series(cells, qs, truth)
                    print(owner, path, json.dumps(res[path]), file=sys.stderr, flush=True)
                out["owners"][owner] = res
        finally:
            pg.OWNER_EXACT_LIMIT = keep
            store.close()
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
