"""The schema read behind every typed query, in process on the embedded default.

    python -m benchmarks.schema_read_bench [--opportunities 100] [--runs 300]

A scope with the built-in `sales` schema and N opportunities (`schema_bench.fill`, commits
of its own), then, ``--runs`` times each after one warm-up: the view's schema alone
(`MemoryService.schema`, what `POST /query` reads first: the schema fact, then the
schema it names) and a small typed query (`find: "entities"`, opportunities, first 10, as
a member of ``sales``). Reports min / p50 / p95 wall ms and CPU ms (this thread's) per
call, with the 1-minute load. Run it with another version's ``src`` first on
``PYTHONPATH`` to compare the two.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ampup_memory.memory.query import TypedQuery, run
from ampup_memory.memory.service import MemoryService
from ampup_memory.settings import load_settings

SCOPE = "bench/sales"


def timed(call: Callable[[], object], runs: int) -> dict[str, float]:
    call()
    load = os.getloadavg()[0]
    wall, cpu = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), time.thread_time()
        call()
        cpu.append((time.thread_time() - c) * 1000)
        wall.append((time.perf_counter() - t) * 1000)
    wall.sort()
    cpu.sort()
    return {"min_ms": wall[0], "p50_ms": statistics.median(wall),
            "p95_ms": wall[int(len(wall) * 0.95) - 1], "cpu_min_ms": cpu[0],
            "cpu_p50_ms": statistics.median(cpu), "load1": load}


def main() -> None:
    from benchmarks import schema_bench  # after ampup_memory: the src on PYTHONPATH stays

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opportunities", type=int, default=100)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        svc = MemoryService.open(load_settings(home=Path(home), embedding_provider="hash"))
        try:
            schema_bench.fill(svc, args.opportunities)
            view = svc.view(SCOPE, None, None)
            query = TypedQuery.model_validate({"scope": SCOPE, "find": "entities",
                                               "type": "opportunity", "limit": 10})
            out: dict[str, Any] = {
                "opportunities": args.opportunities,
                "schema": timed(lambda: svc.schema(view), args.runs),
                "typed_query": timed(lambda: run(svc, "reader", query), args.runs),
            }
        finally:
            svc.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
