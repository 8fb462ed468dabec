"""The AMP cell stores' keyword-text rule (session 33): ASCII hits and scores before and
after, keyword step speed, and the upgrade's time at open. Each step runs under any
version's sources (``PYTHONPATH=<that version>/src:.``), so a store can be filled and
searched by an older version and opened or searched by this one:

    fill URI HOME N FRACTION   N cells through the store's own insert (SQLite's `create`,
                               PostgreSQL's INSERT in batches of 1,000), FRACTION of them
                               a sentence of tools/intl_audit.py before the ASCII text
    search URI OUT             200 ASCII queries of 1-3 words, unfiltered, for the 8 %
                               owner and for a 1 % owner, keyword step only (no vector,
                               k = 100) five times: every hit's id and repr(score) of the
                               first round, min / median / mean ms per filter
    diff A B                   the hit lists of two `search` outputs that differ
    open URI                   the time a store takes to open (an upgrade's, the first time)

    PYTHONPATH=/tmp/old/src:. python -m benchmarks.amp_cell_words fill sqlite:///w/a.db w/h 20000 0
    PYTHONPATH=/tmp/old/src:. python -m benchmarks.amp_cell_words search sqlite:///w/a.db old.json
    PYTHONPATH=src:. python -m benchmarks.amp_cell_words open sqlite:///w/a.db

The queries are searched with the words the AMP service of that version searches with
(`keyword_terms` since session 33, `query_terms` before: the same for ASCII).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.intl_audit import CORPUS, NOISE  # noqa: E402

_VOCAB = sorted({"".join(random.Random(n).choice("abcdefghijklmnopqrstuvwxyz")
                         for _ in range(random.Random(-n).randint(3, 9))) for n in range(4000)})
_INTL = [s for _, s, _ in CORPUS] + NOISE


def ascii_text(r: random.Random) -> str:
    """8-40 words, half of them Zipf-distributed (a few very common words)."""
    return " ".join(_VOCAB[min(int(r.paretovariate(1.0)) - 1, len(_VOCAB) - 1)]
                    if r.random() < .5 else r.choice(_VOCAB) for _ in range(r.randint(8, 40)))


def text(i: int, fraction: float) -> str:
    r = random.Random(i)
    if r.random() < fraction:
        return r.choice(_INTL) + " " + ascii_text(r)[:60]
    return ascii_text(r)


def owner(i: int) -> str:
    return "user_big" if i % 12 == 0 else f"user_{i % 97}"


def fill(uri: str, home: str, n: int, fraction: float) -> None:
    from ampup_memory.amp.model import Content, Identity, StoredCell
    from ampup_memory.amp.store.rows import columns
    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings

    os.environ.setdefault("AMP_EMBEDDING_PROVIDER", "hash")
    Path(home).mkdir(parents=True, exist_ok=True)
    rt = open_runtime(load_settings(home=home, store_uri=uri))
    template = rt.amp.create("loader", json.dumps({
        "type": "semantic", "content": {"text": "template"},
        "identity": {"owner_id": "user_0", "owner_type": "user"},
        "access_policy": {"readable_by": ["*"]}}).encode())
    store = rt.store

    def cell(i: int) -> StoredCell:
        return StoredCell(cell=template.model_copy(update={
            "id": f"mem_{i:026d}", "content": Content(text=text(i, fraction), metadata={}),
            "identity": Identity(owner_id=owner(i), owner_type=template.identity.owner_type,
                                 created_by="loader")}))

    started = time.perf_counter()
    if store.info.name == "sqlite":
        store._conn().execute("PRAGMA synchronous=OFF")  # type: ignore[attr-defined]
        for i in range(n):
            store.create(cell(i), None)
    else:
        from ampup_memory.amp.store import postgres as pgs

        sql = (f"INSERT INTO cells (id, access_count, last_accessed_at, {pgs._WRITE_COLS},"
               f" embedding) VALUES (%s, %s, %s, {pgs._WRITE_MARKS}, NULL)")
        for start in range(0, n, 1000):
            rows = []
            for i in range(start, min(n, start + 1000)):
                c = columns(cell(i))
                rows.append(pgs._params((c.id, c.access_count, c.last_accessed_at,
                                         *pgs._written(c))))
            with store._conn() as conn, conn.transaction(), conn.cursor() as cur:  # type: ignore[attr-defined]
                cur.executemany(sql, rows)
    print(f"filled {n} cells in {time.perf_counter() - started:.1f} s")
    rt.close()


def search(uri: str, out: str) -> None:
    from ampup_memory.amp import service
    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.amp.store.registry import open_store

    terms_of = getattr(service, "keyword_terms", None) or service.query_terms
    store = open_store(uri, None)
    pick = random.Random(3)
    queries = []
    for i in range(200):
        words = ascii_text(random.Random(10_000 + i)).split()
        queries.append(" ".join(pick.sample(words, min(len(words), pick.choice([1, 2, 3])))))
    filters = {"all": CellFilter(agent_id="x"),
               "owner 8%": CellFilter(agent_id="x", owner_id="user_big"),
               "owner 1%": CellFilter(agent_id="x", owner_id="user_5")}
    hits: dict[str, list[tuple[str, str]]] = {}
    times: dict[str, list[float]] = {name: [] for name in filters}
    for round_ in range(5):
        for name, flt in filters.items():
            for q in queries:
                t = time.perf_counter()
                found = store.search_candidates(flt, terms_of(q), None, 100)
                times[name].append((time.perf_counter() - t) * 1000)
                if round_ == 0:
                    hits[f"{name}|{q}"] = sorted((h.cell_id, repr(h.keyword)) for h in found)
    store.close()
    summary = {name: {"min_ms": round(min(v), 3), "median_ms": round(statistics.median(v), 3),
                      "mean_ms": round(statistics.mean(v), 3)} for name, v in times.items()}
    print(json.dumps(summary))
    Path(out).write_text(json.dumps({"hits": hits, "times": summary}))


def diff(a: str, b: str) -> None:
    x, y = (json.loads(Path(p).read_text())["hits"] for p in (a, b))
    differ = [k for k in x if x[k] != y.get(k)]
    print(f"{len(differ)} of {len(x)} hit lists differ ({sum(map(len, x.values()))} hits)")
    for k in differ[:10]:
        print(" ", k)


def open_time(uri: str) -> None:
    import logging

    from ampup_memory.amp.store.registry import open_store

    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    open_store(uri, None).close()
    print(f"opened in {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "fill":
        fill(args[0], args[1], int(args[2]), float(args[3]))
    elif mode == "search":
        search(args[0], args[1])
    elif mode == "diff":
        diff(args[0], args[1])
    else:
        open_time(args[0])
