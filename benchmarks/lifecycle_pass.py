"""What a lifecycle pass costs to read a large AMP cell store.

A pass (`AmpService._pass`, hourly in `serve`) reads every active and stale cell's
standing (`CellStore.lifecycle_batch` through `iter_all`) and judges it with
`lifecycle.evaluate`; only the cells that change are read whole and written. This times
that read-and-judge part on an existing store, with no write (a store at scale, such as
the 960k PostgreSQL database of `pg_cell_keyword.py`, would take hours to move many
cells): per round, wall seconds, this process's CPU seconds, cells read, and how many
would change; min and median over ``--rounds``.

    PYTHONPATH=src:. python -m benchmarks.lifecycle_pass --uri "$(cat /tmp/w960url)"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ampup_memory.amp import lifecycle
from ampup_memory.amp.store.base import iter_all
from ampup_memory.amp.store.registry import open_store


def one_pass(uri: str) -> dict[str, Any]:
    store = open_store(uri, None)
    try:
        now = datetime.now(UTC)
        started, cpu = time.perf_counter(), time.process_time()
        read, changes = 0, Counter[str]()
        for standing in iter_all(store):
            read += 1
            decision = lifecycle.evaluate(standing, now)
            if decision is not None:
                changes[decision.transition.value] += 1
        return {"wall_s": round(time.perf_counter() - started, 2),
                "cpu_s": round(time.process_time() - cpu, 2), "cells": read,
                "would_change": dict(changes), "load": os.getloadavg()[0]}
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uri", required=True, help="the cell store (AMP_STORE_URI)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rounds = []
    for _ in range(args.rounds):
        rounds.append(one_pass(args.uri))
        print(rounds[-1], flush=True)
    summary = {k: {"min": min(r[k] for r in rounds),
                   "median": statistics.median(r[k] for r in rounds)}
               for k in ("wall_s", "cpu_s")}
    print(summary)
    if args.out:
        args.out.write_text(json.dumps({"rounds": rounds, "summary": summary}, indent=1)
                            + "\n")


if __name__ == "__main__":
    main()
