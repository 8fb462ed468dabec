"""What moving a laptop's memory to PostgreSQL costs: `backup` of an embedded home, then
`restore` into PostgreSQL (cells, catalog, index) and a file warehouse, phase by phase.

The home gets ``--cells`` AMP cells (256-d vectors, ``--owners`` owners, one of them over
the per-owner vector index threshold) written straight into its SQLite store, and
``--episodes`` episodes over HTTP (a real server, batches of 100). Then, timed: the
backup (CLI), the restore's copy of the cells and tables (`ops.backup.restore`), the index
rebuild, and `finish_restore` (the cell store opened with the embedder: HNSW index built
over every cell, the large owners' indexes made). Peak RSS of this process is printed
too: the cells are copied in batches, never all in memory.

    PYTHONPATH=src:. python -m benchmarks.move_bench --cells 100000 --episodes 3000
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from tests.memory_support import QUIET
from tests.pg import postgres_factory
from tests.server_process import ServerProcess

from ampup_memory.amp.model import (
    AccessPolicy,
    Content,
    Identity,
    Lifecycle,
    MemoryCell,
    MemoryType,
    OwnerType,
    Scoring,
    StoredCell,
)
from ampup_memory.amp.store.base import CellCopy
from ampup_memory.amp.store.registry import open_store
from ampup_memory.search.embed import build_embedder, model_info
from ampup_memory.settings import Settings

WORDS = ("acme renewal budget contact prefers email calls plan trial portal team meeting "
         "tuesday march april invoice discount sso lead handbook").split()


def fill_cells(home: Path, n: int, owners: int, dims: int, model: Any) -> None:
    rng = np.random.default_rng(7)
    store = open_store(f"sqlite:///{home / 'amp.db'}", None)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        batch: list[CellCopy] = []
        for i in range(n):
            # one owner in eight holds a large share: over the per-owner index threshold
            owner = "user_big" if i % 8 == 0 else f"user_{i % owners}"
            at = t0 + timedelta(seconds=i)
            text = " ".join(rng.choice(WORDS, 12)) + f" note {i}"
            cell = MemoryCell(
                id=f"mem_{i:026d}", type=MemoryType.semantic,
                content=Content(text=text, metadata={"n": i}),
                identity=Identity(owner_id=owner, owner_type=OwnerType.user,
                                  created_by="agent_a"),
                scoring=Scoring(importance=0.5, confidence=0.9, decay_rate=0.01),
                lifecycle=Lifecycle(created_at=at, last_accessed_at=at, last_updated_at=at),
                access_policy=AccessPolicy(public=i % 3 == 0))
            vec = rng.standard_normal(dims).astype(np.float32)
            batch.append(CellCopy(StoredCell(cell=cell), (vec / np.linalg.norm(vec)).tolist()))
            if len(batch) == 1000:
                store.put_copies(batch)
                batch = []
        store.put_copies(batch)
        store.set_embedding_model(model)
    finally:
        store.close()


def fill_episodes(home: Path, n: int) -> None:
    with ServerProcess(home, env=QUIET) as proc, httpx.Client(base_url=proc.url,
                                                            timeout=300) as c:
        for first in range(0, n, 100):
            r = c.post("/episodes/batch", headers={"X-AmpUp-User": "alice"}, json={
                "scope": f"bench/team{first % 3}", "episodes": [
                    {"source": f"doc:{i}", "acl": ["*"],
                     "body": f"Episode {i}: Acme renewal in March, budget {i}k."}
                    for i in range(first, min(first + 100, n))]})
            assert r.status_code == 201, r.text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=100_000)
    parser.add_argument("--owners", type=int, default=50)
    parser.add_argument("--episodes", type=int, default=3000)
    args = parser.parse_args()
    from ampup_memory.ops import backup as ops
    from ampup_memory.search.cli import rebuild_index

    out: dict[str, Any] = {"cells": args.cells, "episodes": args.episodes}
    with tempfile.TemporaryDirectory(prefix="move-bench-") as tmp, \
            postgres_factory() as pg:
        root = Path(tmp)
        laptop = root / "laptop"
        laptop.mkdir()
        embedder = build_embedder(Settings(**QUIET))
        began = time.perf_counter()
        fill_cells(laptop, args.cells, args.owners, embedder.dimensions, model_info(embedder))
        fill_episodes(laptop, args.episodes)
        out["fill_s"] = round(time.perf_counter() - began, 1)
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "ampup_memory.cli", "backup",
                               str(root / "backup")], capture_output=True, text=True,
                              env={**os.environ, **QUIET, "AMPUP_MEMORY_HOME": str(laptop)})
        assert done.returncode == 0, done.stderr
        out["backup_s"] = round(time.perf_counter() - began, 1)
        out["backup"] = json.loads(done.stdout)
        fleet = {**QUIET, "AMPUP_MEMORY_HOME": str(root / "mover"),
                 "AMP_STORE_URI": pg.new_database("bench_cells"),
                 "AMPUP_MEMORY_CATALOG_URI": pg.new_database("bench_catalog"),
                 "AMPUP_MEMORY_INDEX_URI": pg.new_database("bench_index"),
                 "AMPUP_MEMORY_WAREHOUSE": f"file://{root / 'warehouse'}"}
        os.environ.update(fleet)
        settings = Settings()
        steps: dict[str, float] = {}
        last = [time.perf_counter()]

        def step(what: str, n: int) -> None:
            now = time.perf_counter()
            key = "cells_s" if what == "AMP cells" else "tables_s"
            steps[key] = steps.get(key, 0.0) + now - last[0]
            last[0] = now

        began = time.perf_counter()
        report = ops.restore(settings, root / "backup", step)
        out["restore_copy_s"] = round(time.perf_counter() - began, 1)
        out["cells_s"] = round(steps.get("cells_s", 0.0), 1)
        out["cells_per_s"] = round(args.cells / steps["cells_s"]) if steps.get("cells_s") \
            else None
        out["tables_s"] = round(steps.get("tables_s", 0.0), 1)
        out["table_rows"] = report["rows"]
        began = time.perf_counter()
        rebuild_index(settings)
        out["index_rebuild_s"] = round(time.perf_counter() - began, 1)
        began = time.perf_counter()
        finish = ops.finish_restore(settings)
        out["finish_s"] = round(time.perf_counter() - began, 1)
        out["finish"] = finish
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
