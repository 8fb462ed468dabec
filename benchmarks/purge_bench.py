"""SQLite: what the retention purge costs writers on a large AMP cell store, and whether it
erases every word of the purged cells from the keyword index.

``build``: a SQLite cell store of ``--cells`` cells (``--work``/base/amp.db, kept), written
in one transaction straight into ``cells`` (the store's own `rows.columns` of a template
cell made by `AmpService.create`, FTS5 filled by the store's triggers; no vectors) from the
pieces of a `real_text.py` corpus (cycled past its end). Statuses: ``--deleted`` of the
cells deleted 60 days ago (purgeable under the default 30-day window), ``--archived`` and
``--stale`` as their names, the rest active and read today, spread at random over the ids.
Each deleted cell's text ends with a word no other cell holds (``zqp`` + 16 hex + ``7``:
the final digit keeps the porter stemmer from cutting it), so erasure can be checked.

``run``: a copy of that file (``--work``/run/amp.db) served in this process as `serve`
does (uvicorn in a thread beside the runtime, `AMP_PURGE_RETENTION=1`, the hash embedder,
no lifecycle timer); a writer in another process POSTs ``/amp/v1/memories`` one after
the other, 10 s before the pass, through it and 5 s after. The pass is
`AmpService.run_lifecycle` in a thread of this process, as the timer's. The store's write
lock is wrapped to time every hold (the pass's own and everyone's), and the store's
`purge` (a page) and `erase_purged` (the keyword index's merge; there since session 31)
calls are timed. After the pass: every purged word looked for in the raw bytes of
`cells_fts_data` and `cells_fts_idx`, and by MATCH (a sample of ``--match``), and
FTS5's own ``integrity-check``. Prints one JSON object.

``scheme``: offline ways to erase the words, on a copy of the base (see `scheme`).

Before/after is this script run on two checkouts (their `src` first on PYTHONPATH):

    PYTHONPATH=src:. python -m benchmarks.purge_bench build \\
        --text-file /tmp/purge31/pieces.jsonl --cells 1000000 --work /tmp/purge31/m1
    PYTHONPATH=src:. python -m benchmarks.purge_bench run --work /tmp/purge31/m1 \\
        --out benchmarks/results/purge_1m_s31.json --label after
    PYTHONPATH=src:. python -m benchmarks.purge_bench scheme --work /tmp/purge31/m1 \
        --name merge:-2000 --out benchmarks/results/purge_schemes_1m_s31.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ENV = {"AMP_EMBEDDING_PROVIDER": "hash", "AMP_LIFECYCLE_ENABLED": "false",
       "AMP_PURGE_RETENTION": "1", "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0"}
PURGED_WORD = re.compile(rb"(?=([0-9a-f]{9}7))")  # tails of purged words, overlapping


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(values: list[float]) -> dict[str, float]:
    """min / median / p95 / max in ms."""
    if not values:
        return {}
    return {"n": len(values), "min_ms": round(min(values) * 1e3, 2),
            "median_ms": round(statistics.median(values) * 1e3, 2),
            "p95_ms": round(_pct(values, 0.95) * 1e3, 2),
            "max_ms": round(max(values) * 1e3, 2)}


# -- build -----------------------------------------------------------------------------

def build(text_file: Path, cells: int, work: Path, deleted: float, archived: float,
          stale: float) -> None:
    from ulid import ULID

    from ampup_memory.amp.model import Content, Identity, Status, StoredCell
    from ampup_memory.amp.store.rows import columns
    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings
    from benchmarks.amp_bench import cell_body, owner_of
    from benchmarks.real_text import load_pieces

    path = work / "base" / "amp.db"
    if path.exists():
        raise SystemExit(f"{path} is there already")
    texts = load_pieces(text_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.environ.update(ENV)
    rt = open_runtime(load_settings(home=str(work / "base"), store_uri=f"sqlite:///{path}"))
    template = rt.amp.create("loader", json.dumps(cell_body("template", "user_0")).encode())
    rt.close()
    now = datetime.now(UTC)
    rng = random.Random(31)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("BEGIN")
    conn.execute("DELETE FROM cells")
    started = time.perf_counter()
    counts = {"active": 0, "stale": 0, "archived": 0, "deleted": 0}
    for i in range(cells):
        text = texts[i % len(texts)]
        roll = rng.random()
        life: dict[str, Any]
        extra: dict[str, Any] = {}
        if roll < deleted:
            status, life = Status.deleted, {"last_accessed_at": now - timedelta(days=200),
                                            "last_updated_at": now - timedelta(days=60)}
            extra["deleted_at"] = now - timedelta(days=60)
            text = f"{text} zqp{uuid.UUID(int=rng.getrandbits(128)).hex[:16]}7"
        elif roll < deleted + archived:
            status, life = Status.archived, {"last_accessed_at": now - timedelta(days=150),
                                             "last_updated_at": now - timedelta(days=150)}
            extra["stale_since"] = now - timedelta(days=90)
        elif roll < deleted + archived + stale:
            status, life = Status.stale, {"last_accessed_at": now - timedelta(days=60),
                                          "last_updated_at": now - timedelta(days=60)}
            extra["stale_since"] = now - timedelta(days=5)
        else:
            status, life = Status.active, {"last_accessed_at": now, "last_updated_at": now}
        counts[status.value] += 1
        cell = template.model_copy(update={
            "id": f"mem_{ULID()}", "content": Content(text=text, metadata={}),
            "identity": Identity(owner_id=owner_of(i), owner_type=template.identity.owner_type,
                                 created_by="loader"),
            "lifecycle": template.lifecycle.model_copy(update={"status": status, **life})})
        c = columns(StoredCell(cell=cell, **extra))
        conn.execute(
            "INSERT INTO cells (id, type, owner_id, created_by, status, public, has_readers,"
            " access_count, last_accessed_at, text, doc, stale_since, deleted_at, guard,"
            " importance, confidence, decay_rate, last_updated_at, expires_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (c.id, c.type, c.owner_id, c.created_by, c.status, c.public, c.has_readers,
             c.access_count, c.last_accessed_at, c.text, c.doc, c.stale_since, c.deleted_at,
             c.guard, c.importance, c.confidence, c.decay_rate, c.last_updated_at,
             c.expires_at))
        if i % 100_000 == 99_999:
            print(f"{i + 1} cells, {time.perf_counter() - started:.0f} s", flush=True)
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    words = [w for (t,) in conn.execute("SELECT text FROM cells WHERE status = 'deleted'")
             for w in re.findall(r"zqp[0-9a-f]{16}7", t)]
    conn.close()
    print(json.dumps({"cells": cells, "statuses": counts,
                      "fill_s": round(time.perf_counter() - started, 1),
                      "bytes": path.stat().st_size,
                      "before_any_purge": erasure(path, words, 200)}), flush=True)


# -- run -------------------------------------------------------------------------------

class TimedLock:
    """The store's write lock, timing each hold: (thread name, start, seconds held)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.holds: list[tuple[str, float, float]] = []
        self._since = 0.0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            self._since = time.time()
        return got

    def release(self) -> None:
        since = self._since
        held = time.time() - since
        self._lock.release()
        self.holds.append((threading.current_thread().name, since, held))

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(home: Path, path: Path) -> Iterator[tuple[Any, str]]:
    import uvicorn

    from ampup_memory.runtime import open_runtime
    from ampup_memory.server import create_app
    from ampup_memory.settings import load_settings

    os.environ.update(ENV)
    settings = load_settings(home=str(home), store_uri=f"sqlite:///{path}")
    rt = open_runtime(settings, reembed=False)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings, rt), host="127.0.0.1",
                                           port=port, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield rt, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        rt.close()


def write(url: str, stop_file: Path, out: Path) -> None:
    """The writer process: POST cells one after the other until ``stop_file`` exists."""
    import httpx

    from benchmarks.amp_bench import cell_body

    rows = []
    rng = random.Random(7)
    with httpx.Client(base_url=url, timeout=120, headers={"X-AMP-Agent-ID": "writer"}) as c:
        while not stop_file.exists():
            body = cell_body(f"writer note {rng.randrange(10**9)} about the renewal", "user_1")
            at = time.time()
            r = c.post("/amp/v1/memories", json=body)
            rows.append((at, time.time() - at, r.status_code))
    out.write_text(json.dumps(rows))


def erasure(path: Path, words: list[str], sample: int) -> dict[str, Any]:
    """Of the purged cells' ``words``: how many are left in the raw bytes of the keyword
    index's shadow tables (their last 10 characters: FTS5 stores a term after the prefix
    it shares with the term before it; before any purge at 1M cells all 49,826 were
    found), how many of a sample MATCH still finds, and FTS5's own check."""
    conn = sqlite3.connect(path)
    try:
        tails = {w[-10:].encode() for w in words}
        left: set[bytes] = set()
        for table, column in (("cells_fts_data", "block"), ("cells_fts_idx", "term")):
            for (blob,) in conn.execute(f"SELECT {column} FROM {table}"):
                if blob:
                    left.update(t for t in PURGED_WORD.findall(bytes(blob)) if t in tails)
        found = sum(conn.execute("SELECT count(*) FROM cells_fts WHERE cells_fts MATCH ?",
                                 (f'"{w}"',)).fetchone()[0] for w in words[:sample])
        integrity = "ok"
        try:
            conn.execute("INSERT INTO cells_fts(cells_fts) VALUES ('integrity-check')")
        except sqlite3.DatabaseError as exc:
            integrity = str(exc)
        return {"purged_words": len(words), "left_in_shadow_tables": len(left),
                "matched_of_sample": [found, min(sample, len(words))],
                "integrity": integrity, "structure_levels": structure_levels(conn),
                "fts_data_rows": conn.execute("SELECT count(*) FROM cells_fts_data"
                                              ).fetchone()[0]}
    finally:
        conn.close()


def structure_levels(conn: sqlite3.Connection) -> int:
    """The level count of FTS5's structure record (its 10th row of `_data`)."""
    blob = bytes(conn.execute("SELECT block FROM cells_fts_data WHERE id = 10").fetchone()[0])
    i = 8 if blob[4:8] == b"\xff\x00\x00\x01" else 4
    value = 0
    while True:
        byte = blob[i]
        value = (value << 7) | (byte & 0x7F)
        i += 1
        if not byte & 0x80:
            return value


def timing(method: Any, spans: list[tuple[float, float]]) -> Any:
    """``method``, noting (start, seconds) of each call in ``spans``."""
    def timed(*args: Any) -> Any:
        at = time.time()
        try:
            return method(*args)
        finally:
            spans.append((at, time.time() - at))
    return timed


def run(work: Path, label: str, match: int, before_s: float, after_s: float,
        page: int | None) -> dict[str, Any]:
    from ampup_memory.amp import service
    from ampup_memory.amp.model import LifecycleRunRequest

    if page is not None:  # a lever (service.PURGE_PAGE came in session 31; 500 before)
        service.PURGE_PAGE = page  # type: ignore[attr-defined]

    home = work / "run"
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    path = home / "amp.db"
    shutil.copyfile(work / "base" / "amp.db", path)
    words = [w for (t,) in sqlite3.connect(path).execute(
        "SELECT text FROM cells WHERE status = 'deleted'")
        for w in re.findall(r"zqp[0-9a-f]{16}7", t)]
    out: dict[str, Any] = {"label": label, "load_at_start": os.getloadavg()[0],
                           "purgeable": len(words),
                           "page": getattr(service, "PURGE_PAGE", 500)}
    with served(home, path) as (rt, url):
        lock = TimedLock()
        rt.store._write_lock = lock  # type: ignore[attr-defined]
        calls: dict[str, list[tuple[float, float]]] = {"purge": [], "erase_purged": []}
        for name, spans in calls.items():
            if hasattr(rt.store, name):  # erase_purged came in session 31
                setattr(rt.store, name, timing(getattr(rt.store, name), spans))
        stop, rows = home / "stop", home / "writes.json"
        writer = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.purge_bench", "write", "--url", url,
             "--stop-file", str(stop), "--out", str(rows)],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        time.sleep(before_s)
        pass_start = time.time()
        threading.current_thread().name = "pass"
        report = rt.amp.run_lifecycle(LifecycleRunRequest())
        pass_end = time.time()
        time.sleep(after_s)
        stop.touch()
        writer.wait(120)
    holds = [h for h in lock.holds if h[0] == "pass"]
    first = min((at for at, _ in calls["purge"]), default=pass_end)
    writes = json.loads(rows.read_text())
    during = [w[1] for w in writes if first <= w[0] <= pass_end]
    idle = [w[1] for w in writes if w[0] < pass_start]
    out.update({
        "report": report.wire(), "pass_s": round(pass_end - pass_start, 2),
        "purge_phase_s": round(pass_end - first, 2),
        "purge_pages": spread([d for _, d in calls["purge"]]),
        "erase_purged": spread([d for _, d in calls["erase_purged"]]),
        "longest_hold_s": round(max((h[2] for h in holds), default=0.0), 3),
        "writes_idle": spread(idle), "writes_during_purge": spread(during),
        "writes_failed": sum(1 for w in writes if w[2] != 201),
        "load_at_end": os.getloadavg()[0],
        "erasure": erasure(path, words, match),
    })
    return out


def scheme(work: Path, name: str, page: int) -> dict[str, Any]:
    """Offline, on a copy of the base (``--work``/scheme.db), no server and no writer:
    the purgeable cells deleted ``page`` at a time (one transaction each, as `purge`
    does, `secure_delete` on), then the keyword index's erasure by ``name``: "optimize",
    "rebuild", or "merge:N" (FTS5's 'merge' with N pages: repeated, each its own
    transaction, until it does no work; N < 0 merges every segment). The holds, what is
    left of the words, and the index's levels before and after."""
    path = work / "scheme.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(work / "base" / "amp.db", path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA secure_delete=ON")
    rows = conn.execute("SELECT id, text FROM cells WHERE status = 'deleted' ORDER BY id"
                        ).fetchall()
    words = [w for _, t in rows for w in re.findall(r"zqp[0-9a-f]{16}7", t)]
    holds = []
    started = time.perf_counter()
    for at in range(0, len(rows), page):
        t = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("DELETE FROM cells WHERE id = ?", [(r[0],) for r in rows[at:at + page]])
        conn.execute("COMMIT")
        holds.append(time.perf_counter() - t)
    out: dict[str, Any] = {"scheme": name, "page": page, "pages": spread(holds),
                           "deletes_s": round(time.perf_counter() - started, 2),
                           "levels_before": structure_levels(conn),
                           "load": os.getloadavg()[0]}
    steps = []
    started = time.perf_counter()
    if name in ("optimize", "rebuild"):
        conn.execute(f"INSERT INTO cells_fts(cells_fts) VALUES ('{name}')")
        steps.append(time.perf_counter() - started)
    else:
        pages = int(name.split(":")[1])
        while len(steps) < 10_000:
            t = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            changes = conn.total_changes
            conn.execute("INSERT INTO cells_fts(cells_fts, rank) VALUES ('merge', ?)", (pages,))
            idle = conn.total_changes - changes < 2  # FTS5's sign that nothing was merged
            conn.execute("COMMIT")
            steps.append(time.perf_counter() - t)
            if idle:
                break
    out.update({"erase": spread(steps), "erase_s": round(time.perf_counter() - started, 2),
                "levels_after": structure_levels(conn)})
    conn.close()
    out["erasure"] = erasure(path, words, 300)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--text-file", type=Path, required=True)
    b.add_argument("--cells", type=int, default=1_000_000)
    b.add_argument("--work", type=Path, required=True)
    b.add_argument("--deleted", type=float, default=0.05)
    b.add_argument("--archived", type=float, default=0.08)
    b.add_argument("--stale", type=float, default=0.07)
    r = sub.add_parser("run")
    r.add_argument("--work", type=Path, required=True)
    r.add_argument("--label", default="")
    r.add_argument("--match", type=int, default=2000)
    r.add_argument("--before", type=float, default=10.0)
    r.add_argument("--after", type=float, default=5.0)
    r.add_argument("--out", type=Path)
    r.add_argument("--page", type=int, help="cells a purge page deletes (PURGE_PAGE)")
    o = sub.add_parser("scheme")
    o.add_argument("--work", type=Path, required=True)
    o.add_argument("--name", required=True, help="optimize, rebuild or merge:N")
    o.add_argument("--page", type=int, default=500)
    o.add_argument("--out", type=Path)
    w = sub.add_parser("write")
    w.add_argument("--url", required=True)
    w.add_argument("--stop-file", type=Path, required=True)
    w.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.cmd == "build":
        build(args.text_file, args.cells, args.work, args.deleted, args.archived, args.stale)
    elif args.cmd == "write":
        write(args.url, args.stop_file, args.out)
    elif args.cmd == "scheme":
        line = json.dumps(scheme(args.work, args.name, args.page))
        print(line, flush=True)
        if args.out:
            with args.out.open("a") as fh:
                fh.write(line + "\n")
    else:
        result = run(args.work, args.label, args.match, args.before, args.after, args.page)
        print(json.dumps(result, indent=1), flush=True)
        if args.out:
            old = json.loads(args.out.read_text()) if args.out.exists() else []
            args.out.write_text(json.dumps([*old, result], indent=1) + "\n")


if __name__ == "__main__":
    main()
