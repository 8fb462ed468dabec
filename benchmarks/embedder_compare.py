"""Embedders side by side on the LongMemEval_S subset (see retrieval_quality.py).

For each embedder (an AMP_EMBEDDING_PROVIDER name): its cost, measured in a fresh
process (load time, resident memory added by loading it and embedding, CPU time per
passage over 200 real passages of the benchmark, one thread), and its quality: every
session's passages at the shipped 300-byte cut with their raw keyword score and cosine
(`retrieval_levers.gather`), ranked by each lever. The keyword side is the same for all
embedders; only the cosines (and so the meaning-only and fused rows) differ.

    python -m benchmarks.embedder_compare [--embedders wordllama minilm] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.retrieval_levers import (
    gather,
    linear_minmax,
    linear_today,
    metrics,
    rank_sessions,
    rrf,
)
from benchmarks.retrieval_quality import write_section

COST = r"""
import json, resource, sys, time
from pathlib import Path
from ampup_memory.search.passages import cut, passage_text
from benchmarks.retrieval_quality import embedder_for, episodes, load

provider, cache = sys.argv[1], Path(sys.argv[2])
_, sessions = load(cache)
docs, _ = episodes(sessions)
texts = [passage_text(p) for d in docs for p in cut(d.units)][:200]
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
embedder = embedder_for(provider)
embedder.embed(["warm up"])
load_s = time.perf_counter() - started
cpu, wall = time.process_time(), time.perf_counter()
for text in texts:
    embedder.embed([text])
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"name": embedder.name, "load_s": round(load_s, 2),
                  "rss_mb": round((rss - rss0) / 1024), "passages": len(texts),
                  "mean_bytes": round(sum(len(t.encode()) for t in texts) / len(texts)),
                  "cpu_ms": round(cpu / len(texts) * 1000, 2),
                  "wall_ms": round(wall / len(texts) * 1000, 2)}))
"""


def cost(provider: str, cache: Path) -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", COST, provider, str(cache)], cwd=root,
                          env={"OMP_NUM_THREADS": "1", **os.environ},
                          capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def quality(provider: str, cache: Path) -> dict[str, dict[str, float]]:
    pools, gold = gather(cache, 300, provider)
    levers = {
        "keyword only": (linear_today(1.0), 1),
        "meaning only": (linear_today(0.0), 1),
        "hybrid 0.6/0.4 (shipped)": (linear_today(0.6), 1),
        "min-max both, 0.6/0.4": (linear_minmax(0.6), 1),
        "RRF k=60, 0.5/0.5": (rrf(0.5), 1),
        "hybrid 0.6/0.4, session = sum of top-2": (linear_today(0.6), 2),
    }
    return {name: metrics([rank_sessions(p, fusion, 500, agg) for p in pools], gold)
            for name, (fusion, agg) in levers.items()}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "## Search: a stronger embedder",
        "",
        "`python -m benchmarks.embedder_compare`: the 16 questions and 82 sessions of the "
        "LongMemEval_S subset (retrieval quality, above), passages of about 300 bytes "
        "(the shipped cut), every passage ranked (keyword top-500 ∪ vector top-500), a "
        "session scoring its best passage unless the row says otherwise; all rows from "
        "one run. Cost: a fresh process per embedder, 200 real passages of the benchmark "
        "embedded one by one on one thread.",
        "",
        "| embedder | ranking | recall@1 | recall@5 | recall@10 | MRR |",
        "|---|---|---|---|---|---|",
    ]
    for provider, rows in result["quality"].items():
        for name, m in rows.items():
            lines.append(f"| `{provider}` | {name} | {m['recall@1']:.3f} | "
                         f"{m['recall@5']:.3f} | {m['recall@10']:.3f} | {m['mrr']:.3f} |")
    lines += ["", "| embedder | model | CPU per passage | wall per passage | load | "
              "memory added |", "|---|---|---|---|---|---|"]
    for provider, c in result["cost"].items():
        lines.append(f"| `{provider}` | `{c['name']}` | {c['cpu_ms']} ms | {c['wall_ms']} ms "
                     f"| {c['load_s']} s | {c['rss_mb']} MB |")
    lines.append("")
    lines.append(f"Machine load during the run (1-minute load average on 2 cores): "
                 f"{result['load_before']} before, {result['load_after']} after.")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ampup-bench")
    parser.add_argument("--embedders", nargs="+", default=["wordllama", "minilm"])
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    load_before = round(os.getloadavg()[0], 1)
    result: dict[str, Any] = {"load_before": load_before, "cost": {}, "quality": {}}
    for provider in args.embedders:
        result["cost"][provider] = cost(provider, args.cache)
        result["quality"][provider] = quality(provider, args.cache)
    result["load_after"] = round(os.getloadavg()[0], 1)
    print(json.dumps(result, indent=1))
    print(markdown(result))
    if args.write_docs:
        write_section(Path(__file__).resolve().parent.parent / "docs" / "performance.md",
                      markdown(result))


if __name__ == "__main__":
    main()
