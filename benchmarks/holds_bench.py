"""Pins as holds accumulate: does a pin's cost follow the holds ever made, or the live ones?

    python benchmarks/holds_bench.py                          # SQLite, 100 1000 10000
    python benchmarks/holds_bench.py --backends sqlite,postgres --sizes 100,1000,10000,50000

In process, two services on one home (two "servers": A writes, B reads, so B folds
whatever A changed, as a second server on one catalog does). Each size seeds the holds
table with N ended pins (made and released: two rows each, as the API writes them) and
N/10 live ones, in one append, then times ``--reps`` rounds of: pin create (A), a read
at that pin (B, `read_view` with `pin=`), renew (A), release (A), and a read without a
pin (B). Then three times: a pin made and read by B, the holds table compacted (its
small files, the seeded one among them, rewritten into one), and timed: B's next fold
(B had folded every rewritten file: it reads none), a renew of that pin through A and
its release; then a pin made through A, compacted again, and B's next fold (B was a
write behind: it reads the rewritten file whole). Last, 10 ended pins asked for through
B (each a first lookup by id, then kept) and 10 ids never made whose time falls among the
seeded ones (a lookup reads the compacted file).
Min and median in ms. The workspace registry likewise: N dropped workspaces seeded,
then a workspace made through A and shown through B. PostgreSQL: an embedded server
(tests/pg.py) holds the catalog and the read index. Results go to benchmarks/results/holds.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))
from ampup_memory.errors import Gone, NotFound  # noqa: E402
from ampup_memory.memory import snapshots  # noqa: E402
from ampup_memory.memory.episodes import EpisodeIn  # noqa: E402
from ampup_memory.memory.maintenance import compact  # noqa: E402
from ampup_memory.memory.scopes import SYSTEM_NAMESPACE  # noqa: E402
from ampup_memory.memory.service import MemoryService  # noqa: E402
from ampup_memory.memory.tables import HOLDS, arrow  # noqa: E402
from ampup_memory.settings import load_settings  # noqa: E402

SCOPE = "bench/holds"
USER = "bench"


def ms(v: float) -> float:
    return round(v * 1000, 2)


def summary(times: list[float]) -> dict[str, float]:
    return {"min_ms": ms(min(times)), "median_ms": ms(statistics.median(times)), "n": len(times)}


def seed(svc: MemoryService, commit: str, ended: int, live: int) -> list[str]:
    """``ended`` released pins (a create row and a release row each) and ``live`` ones;
    the ended ones' ids."""
    now = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    for i in range(ended + live):
        made = now - timedelta(hours=2, seconds=-i / 1000)
        hold = snapshots.Hold(id=snapshots.new_id(snapshots.PIN), kind=snapshots.PIN,
                              created_by=USER, created_at=made,
                              heads={snapshots.head_key(SCOPE, "main"): commit},
                              expires_at=now + timedelta(days=1), updated_at=made)
        rows.append(hold.row())
        if i < ended:
            rows.append({**hold.row(), "released": True,
                         "updated_at": made + timedelta(seconds=1)})
    svc.tables.append_anew(SYSTEM_NAMESPACE, snapshots.TABLE, arrow(HOLDS, rows))
    return [r["id"] for r in rows if r["released"]]


def _answer(svc: MemoryService, pin_id: str) -> str:
    try:
        svc.holds.live(pin_id, snapshots.PIN)
    except (Gone, NotFound) as exc:
        return exc.code
    return "live"


def timed(fn: Callable[[], Any], into: list[float]) -> Any:
    t = time.perf_counter()
    out = fn()
    into.append(time.perf_counter() - t)
    return out


def run_size(env: dict[str, str], size: int, reps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="holds-bench-") as home:
        settings = load_settings(home=home, embedding_provider="hash", **env)
        a = MemoryService.open(settings)
        b = MemoryService.open(settings)
        try:
            a.write_episodes(USER, SCOPE, None, [EpisodeIn.model_validate(
                {"source": "doc:holds", "acl": ["*"], "body": "held text"})])
            head = a.index.head(SCOPE, "main")
            assert head is not None
            t = time.perf_counter()
            ended = seed(a, head.commit_id, size, max(1, size // 10))
            seeded = time.perf_counter() - t
            b.view(SCOPE)  # both have read the seeded table once before timing
            snapshots.read_view(a, SCOPE)
            times: dict[str, list[float]] = {k: [] for k in
                                             ("create", "read_pinned", "renew", "release",
                                              "read_plain")}
            ttl = timedelta(hours=1)
            for _ in range(reps):
                pin = timed(lambda: snapshots.create_pin(a, USER, SCOPE, None, None, ttl),
                            times["create"])
                timed(lambda: snapshots.read_view(b, SCOPE, pin=pin["id"]),  # noqa: B023
                      times["read_pinned"])
                timed(lambda: snapshots.renew_pin(a, USER, pin["id"], ttl),  # noqa: B023
                      times["renew"])
                timed(lambda: snapshots.release(a, USER, pin["id"], "pin"),  # noqa: B023
                      times["release"])
                timed(lambda: snapshots.read_view(b, SCOPE), times["read_plain"])
            # Compaction rewrites the table's small files into one (the seeded rows with
            # them). A server that had folded every file it rewrote reads none of it
            # (B "current", and A, the writer); one a write behind folds all of it.
            after: dict[str, list[float]] = {"fold_after_compaction_current": [],
                                             "fold_after_compaction_behind": [],
                                             "renew_after_compaction": [],
                                             "release_after_compaction": []}
            for _ in range(3):
                pin = snapshots.create_pin(a, USER, SCOPE, None, None, ttl)
                b.holds.all()
                compact(a.tables.private(SYSTEM_NAMESPACE, snapshots.TABLE))
                timed(b.holds.all, after["fold_after_compaction_current"])
                timed(lambda: snapshots.renew_pin(a, USER, pin["id"], ttl),  # noqa: B023
                      after["renew_after_compaction"])
                timed(lambda: snapshots.release(a, USER, pin["id"], "pin"),  # noqa: B023
                      after["release_after_compaction"])
                snapshots.create_pin(a, USER, SCOPE, None, None, ttl)
                compact(a.tables.private(SYSTEM_NAMESPACE, snapshots.TABLE))
                timed(b.holds.all, after["fold_after_compaction_behind"])
            # An ended id, first asked for (then kept), and an id never made whose time
            # falls among the seeded ones: each a lookup in the compacted file.
            for k in range(10):
                gone = ended[(k * 7919) % len(ended)]
                timed(lambda: _answer(b, gone), after.setdefault(  # noqa: B023
                    "ended_id_first_lookup", []))
                timed(lambda: _answer(b, gone[:-6] + "ZZZZZZ"), after.setdefault(  # noqa: B023
                    "unknown_id_lookup", []))
            return {"ended": size, "live": max(1, size // 10), "seed_s": round(seeded, 2),
                    **{k: summary(v) for k, v in {**times, **after}.items()}}
        finally:
            a.close()
            b.close()


def run_workspaces(env: dict[str, str], size: int, reps: int) -> dict[str, Any]:
    """``size`` dropped workspaces seeded (live, deleted, dropped: three rows each, as the
    API writes them); then a workspace made through A and shown through B, ``reps`` times."""
    import secrets

    from ampup_memory.memory.tables import WORKSPACES
    from ampup_memory.memory.workspaces import DEFAULT_CAPS, CreateWorkspace, Workspace

    with tempfile.TemporaryDirectory(prefix="holds-bench-") as home:
        settings = load_settings(home=home, embedding_provider="hash", **env)
        a = MemoryService.open(settings)
        b = MemoryService.open(settings)
        try:
            then = datetime.now(UTC) - timedelta(hours=1)
            rows: list[dict[str, Any]] = []
            for _ in range(size):
                ws = Workspace(id="ws_" + secrets.token_hex(8), name="old", created_by=USER,
                               created_at=then, expires_at=then + timedelta(days=1),
                               caps=dict(DEFAULT_CAPS), state="live", updated_at=then,
                               updated_by=USER)
                rows += [ws.row(), *({**ws.row(), "state": state,
                                      "updated_at": then + timedelta(seconds=n)}
                                     for n, state in ((1, "deleted"), (2, "dropped")))]
            a.tables.append_anew(SYSTEM_NAMESPACE, "workspaces", arrow(WORKSPACES, rows))
            a.workspaces.all()
            b.workspaces.all()
            times: dict[str, list[float]] = {"ws_create": [], "ws_show_other_server": []}
            req = CreateWorkspace.model_validate({"name": "bench", "ttl": "1h"})
            for _ in range(reps):
                made = timed(lambda: a.workspaces.create(USER, req), times["ws_create"])
                timed(lambda: b.workspaces.show(USER, made["id"], False),  # noqa: B023
                      times["ws_show_other_server"])
            return {"dropped_workspaces": size, **{k: summary(v) for k, v in times.items()}}
        finally:
            a.close()
            b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backends", default="sqlite")
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--parts", default="holds,workspaces")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/holds.json"))
    ap.add_argument("--label", default="latest")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    parts = {"holds": run_size, "workspaces": run_workspaces}
    out = Path(args.out)
    results: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    for backend in args.backends.split(","):
        for part in args.parts.split(","):
            rows: list[dict[str, Any]] = []
            for size in sizes:
                if backend == "postgres":
                    from tests.pg import postgres_factory

                    with postgres_factory() as pg:
                        url = pg.new_database("holds")
                        rows.append(parts[part]({"catalog_uri": url, "index_uri": url},
                                                size, args.reps))
                else:
                    rows.append(parts[part]({}, size, args.reps))
                print(json.dumps(rows[-1]), flush=True)
            # Kept per label, backend and part: a run of one part leaves the others.
            results.setdefault(args.label, {"python": platform.python_version()}
                               ).setdefault(backend, {})[part] = rows
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
