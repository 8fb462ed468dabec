"""Extraction overhead benchmark, in process on the embedded default (SQLite catalog and
read index), against the scripted OpenAI-compatible model server answering instantly.

    python benchmarks/extract_bench.py                    # 1,000 episodes, 3 passes, docs
    python benchmarks/extract_bench.py --episodes 200 --runs 1 --no-docs   # quick

A scope with a small `deals` schema and N `doc` episodes (one commit). Each pass reads every
episode (a new schema version makes them all pending again): one model request per
episode, whose answer is two facts with verbatim quotes, checked and written in commits of
20 episodes with their read marks. Measured per episode: the whole pass (wall time /
episodes) and our overhead, the pass less the time spent inside the model call (the
`openai` client, HTTP to the local scripted server and its answer). min and median over
the passes. Then the same passes with the answer given in process (no client, no HTTP, no
second process competing for the CPU): our code alone.

Results go to benchmarks/results/extract.json and, between markers, into
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.extraction_data import BODY, DEALS, GOOD, WHEN  # noqa: E402
from tests.model_support import ScriptedModel  # noqa: E402

from ampup_memory.memory.episodes import EpisodeIn  # noqa: E402
from ampup_memory.memory.extraction import DEFAULT_BATCH, Extractor, extractor  # noqa: E402
from ampup_memory.memory.schemas import PutSchema, set_schema  # noqa: E402
from ampup_memory.memory.service import MemoryService  # noqa: E402
from ampup_memory.settings import load_settings  # noqa: E402

MARK_START, MARK_END = "<!-- extract-bench:start -->", "<!-- extract-bench:end -->"
SCOPE = "bench/deals"
ANSWER = {"facts": GOOD}  # two facts, one quote with its whitespace changed


class Instant:
    """The same answer at once, in process."""

    name = "instant"

    def ask(self, system: str, user: str, answer: type[Any]) -> Any:
        return answer.model_validate(ANSWER)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    model = ScriptedModel().start()
    try:
        model.script([], default={"reply": ANSWER})
        with tempfile.TemporaryDirectory() as home:
            settings = load_settings(home=Path(home), embedding_provider="hash",
                                     model_base_url=f"{model.url}/v1",
                                     model_name="scripted-1", model_api_key="bench")
            svc = MemoryService.open(settings)
            svc.write_episodes("writer", SCOPE, None, [EpisodeIn.model_validate({
                "source": "doc:note", "acl": ["*"], "body": f"{BODY}\n\nNote {i}.",
                "occurred_at": WHEN}) for i in range(args.episodes)])
            ex = extractor(svc, settings)
            assert ex.model is not None
            asked = ex.model.ask
            in_model = [0.0]

            def timed_ask(*a: Any, **k: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return asked(*a, **k)
                finally:
                    in_model[0] += time.perf_counter() - t0

            ex.model.ask = timed_ask  # type: ignore[method-assign]
            totals, overheads, models = [], [], []
            for run in range(args.runs):
                set_schema(svc, "bench", SCOPE, PutSchema.model_validate(
                    {"schema": {**DEALS, "description": f"pass {run}"}}))
                in_model[0] = 0.0
                t0 = time.perf_counter()
                out = ex.run(SCOPE)
                wall = time.perf_counter() - t0
                assert out.read == args.episodes and out.error is None, out.wire()
                assert out.facts == 2 * args.episodes, out.wire()
                totals.append(wall / args.episodes * 1000)
                models.append(in_model[0] / args.episodes * 1000)
                overheads.append((wall - in_model[0]) / args.episodes * 1000)
            alone, alone_cpu = [], []
            load_before = os.getloadavg()
            for run in range(args.runs):
                set_schema(svc, "bench", SCOPE, PutSchema.model_validate(
                    {"schema": {**DEALS, "description": f"in process {run}"}}))
                t0, c0 = time.perf_counter(), time.process_time()
                out = Extractor(svc, Instant()).run(SCOPE)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                assert out.read == args.episodes and out.facts == 2 * args.episodes
                alone.append(wall / args.episodes * 1000)
                alone_cpu.append(cpu / args.episodes * 1000)
            svc.close()
    finally:
        model.stop()

    def stats(values: list[float]) -> dict[str, float]:
        return {"min": round(min(values), 2), "median": round(statistics.median(values), 2)}

    results = {
        "episodes": args.episodes, "runs": args.runs, "batch": DEFAULT_BATCH,
        "per_episode_ms": {"pass": stats(totals), "model_call": stats(models),
                           "overhead": stats(overheads), "in_process": stats(alone),
                           "in_process_cpu": stats(alone_cpu)},
        "load_average": [round(x, 1) for x in (*load_before, *os.getloadavg())],
        "machine": f"{platform.machine()}, {platform.python_version()}, {platform.system()}",
    }
    print(json.dumps(results, indent=2))
    out_path = ROOT / "benchmarks" / "results" / "extract.json"
    out_path.write_text(json.dumps(results, indent=2) + "\n")
    if not args.no_docs:
        doc = ROOT / "docs" / "performance.md"
        text = doc.read_text()
        p = results["per_episode_ms"]
        table = (f"{MARK_START}\n"
                 f"Extraction (`python benchmarks/extract_bench.py`, {results['machine']}, "
                 f"embedded SQLite; {args.episodes:,} episodes per pass, {args.runs} passes, "
                 f"commits of {DEFAULT_BATCH} episodes, two checked facts per episode; the "
                 "scripted model server answering at once):\n\n"
                 "| per episode | min | median |\n|---|---|---|\n"
                 f"| our overhead (the pass less the model call) | "
                 f"{p['overhead']['min']} ms | {p['overhead']['median']} ms |\n"
                 f"| the model call (`openai` client, local HTTP, scripted answer) | "
                 f"{p['model_call']['min']} ms | {p['model_call']['median']} ms |\n"
                 f"| the whole pass | {p['pass']['min']} ms | {p['pass']['median']} ms |\n"
                 f"| the pass with the answer given in process (our code alone) | "
                 f"{p['in_process']['min']} ms | {p['in_process']['median']} ms |\n"
                 f"| the same, CPU time of our process (what the load does not inflate) | "
                 f"{p['in_process_cpu']['min']} ms | {p['in_process_cpu']['median']} ms |\n"
                 f"\nLoad average (1, 5, 15 min) before the in-process passes "
                 f"{results['load_average'][:3]}, after {results['load_average'][3:]}, on a "
                 "machine shared with other work.\n"
                 f"{MARK_END}")
        if MARK_START in text:
            start, end = text.index(MARK_START), text.index(MARK_END) + len(MARK_END)
            text = text[:start] + table + text[end:]
        else:
            text = text.rstrip() + "\n\n## Extraction\n\n" + table + "\n"
        doc.write_text(text)


if __name__ == "__main__":
    main()
