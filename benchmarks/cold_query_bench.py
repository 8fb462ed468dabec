"""The first typed query after a restart, repeated: open the home again (nothing kept), then
ask; with and without the warm-up a server runs at start (``memory.query.warm``).

    python -m benchmarks.cold_query_bench --home /tmp/x/cold10k          # 10k opportunities
    python -m benchmarks.cold_query_bench --home /tmp/x/cold2k --opportunities 2000 --repeats 3

The data are schema_bench's (the built-in `sales` schema, N opportunities of 5 facts citing
20 episodes under 5 ACLs), written once into ``--home`` and read by every repetition. Each
repetition opens a new MemoryService on the home (what a restart keeps: nothing of typed
queries), optionally runs ``warm`` (timed on its own: the server runs it in a worker thread
before any request needs it), then times, in this order:
- ``first``: the sales question (schema_bench's) for `reader`, who may not read 8 of the 20
  episodes (about 2/5 of the facts' citations);
- ``everyone``: the same question for `x`, who reads every episode;
- ``other``: every opportunity, first 50, for `reader` (another query of the same type).
Wall and process CPU time, min and median over ``--repeats``; the 1-minute load average
before and after. The answers of the warmed runs are compared with the cold ones.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from ampup_memory.memory.query import TypedQuery, run
from ampup_memory.memory.service import MemoryService
from ampup_memory.settings import load_settings
from benchmarks.schema_bench import SALES_QUESTION, SCOPE, fill

QUESTION = SALES_QUESTION
EVERY = {"find": "entities", "type": "opportunity", "limit": 50}
STEPS = (("first", "reader", QUESTION), ("everyone", "x", QUESTION), ("other", "reader", EVERY))


def open_home(home: Path) -> MemoryService:
    return MemoryService.open(load_settings(home=home, embedding_provider="hash"))


def timed(fn: Any) -> tuple[Any, float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def one(home: Path, warmed: bool) -> tuple[dict[str, tuple[float, float]], list[Any]]:
    svc = open_home(home)
    try:
        times: dict[str, tuple[float, float]] = {}
        if warmed:
            # imported here: `one` (cold) also times the code from before `warm` existed
            from ampup_memory.memory.query import warm
            _, wall, cpu = timed(lambda: warm(svc, SCOPE))
            times["warm"] = (wall, cpu)
        answers = []
        for name, user, body in STEPS:
            req = TypedQuery.model_validate({"scope": SCOPE, **body})
            answer, wall, cpu = timed(lambda u=user, r=req: run(svc, u, r))
            answer.pop("as_of")
            answers.append(answer)
            times[name] = (wall, cpu)
        return times, answers
    finally:
        svc.close()


def summary(runs: list[dict[str, tuple[float, float]]]) -> dict[str, Any]:
    ms = lambda x: round(x * 1000, 1)  # noqa: E731
    out = {}
    for name in runs[0]:
        wall = [r[name][0] for r in runs]
        cpu = [r[name][1] for r in runs]
        out[name] = {"wall_min_ms": ms(min(wall)), "wall_median_ms": ms(statistics.median(wall)),
                     "cpu_min_ms": ms(min(cpu)), "cpu_median_ms": ms(statistics.median(cpu))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--opportunities", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if not args.home.exists():
        svc = open_home(args.home)
        fill(svc, args.opportunities)
        svc.set_principal("x", ["sales", "emea"], [], "bench")  # x reads every episode
        svc.close()
    load_before = [round(x, 2) for x in os.getloadavg()]
    results: dict[str, Any] = {"opportunities": args.opportunities,
                               "facts": args.opportunities * 5, "repeats": args.repeats,
                               "load_before": load_before}
    reference: list[Any] | None = None
    for mode in ("cold", "warmed"):
        runs = []
        for _ in range(args.repeats):
            times, answers = one(args.home, mode == "warmed")
            if reference is None:
                reference = answers
            assert answers == reference, "a warmed answer differs from the cold one"
            runs.append(times)
        results[mode] = summary(runs)
        results[f"load_after_{mode}"] = [round(x, 2) for x in os.getloadavg()]
    results["matched"] = [a["total"] for a in reference or []]
    results["machine"] = (f"{platform.machine()}, {os.cpu_count()} cores, "
                          f"Python {platform.python_version()}, {platform.system()}")
    print(json.dumps(results, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
