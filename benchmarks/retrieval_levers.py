"""Ablation of the retrieval levers on the LongMemEval_S subset (see retrieval_quality.py).

Every row ranks the same questions over the same sessions; a row changes one lever:

- fusion: today's linear blend (keyword ÷ best keyword, cosine clamped to [0, 1]), the same
  blend after min-max or z-score normalisation of both sides, reciprocal-rank fusion;
- candidate pool: keyword top-k ∪ vector top-k, k per source;
- session aggregation: a session scores its best passage, or the sum of its top-n;
- passage size: the byte target episodes are cut to (on unit boundaries).

    python -m benchmarks.retrieval_levers [--write-docs]

Rows above the passage-size block use the former 1,500-byte passages, so each changes one
lever against what shipped before; ranking is by best passage unless a row says otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import ampup_memory.search.engine as engine_module
from ampup_memory.search.passages import cut
from ampup_memory.search.tokenize import query_terms
from benchmarks.retrieval_quality import SCOPE, episodes, ingested, load, write_section

# One candidate: (session, raw keyword score or None, cosine)
Candidate = tuple[str, float | None, float]


def gather(cache: Path, target: int, provider: str = "wordllama",
           ) -> tuple[list[list[Candidate]], list[set[str]]]:
    """Every passage of every session with its raw keyword score and cosine, per question
    (``provider``: the AMP_EMBEDDING_PROVIDER that embeds passages and questions)."""
    questions, sessions = load(cache)
    docs, session_of = episodes(sessions)
    original = engine_module.cut
    engine_module.cut = partial(cut, target=target, limit=max(target, 2000))  # type: ignore[assignment]
    try:
        with ingested(docs, provider) as got:
            engine = got.engine
            index = engine.index
            probe = [1.0] * engine.embedder.dimensions
            nums = [n for n, _ in index.nearest_passages(SCOPE, "main", probe, 10**6)]
            rows = index.passages(nums)
            eps = {e.num: e for e in index.episodes(r.episode_num for r in rows)}
            owner = {r.num: session_of[eps[r.episode_num].id] for r in rows}
            out = []
            for q in questions:
                text = q["question"]
                vector = engine.embedder.embed([text])[0]
                keyword = dict(index.keyword_passages(SCOPE, "main", query_terms(text),
                                                      10**6))
                cosines = index.passage_cosines(nums, vector)
                out.append([(owner[n], keyword.get(n), cosines[n]) for n in nums])
    finally:
        engine_module.cut = original  # type: ignore[assignment]
    gold = [set(q["ground_truth"]["supporting_session_ids"]) for q in questions]
    return out, gold


def _minmax(xs: list[float]) -> list[float]:
    lo, hi = min(xs, default=0.0), max(xs, default=0.0)
    return [(x - lo) / (hi - lo) if hi > lo else 0.0 for x in xs]


def _z(xs: list[float]) -> list[float]:
    if len(xs) < 2:
        return [0.0 for _ in xs]
    mu, sd = statistics.fmean(xs), statistics.pstdev(xs)
    return [(x - mu) / sd if sd > 0 else 0.0 for x in xs]


def _ranks(xs: list[float | None]) -> list[int | None]:
    order = sorted((i for i, x in enumerate(xs) if x is not None), key=lambda i: -xs[i])  # type: ignore[operator]
    ranks: list[int | None] = [None] * len(xs)
    for r, i in enumerate(order):
        ranks[i] = r + 1
    return ranks


Fusion = Callable[[list[float | None], list[float]], list[float]]


def linear_today(w: float) -> Fusion:
    def f(kw: list[float | None], cos: list[float]) -> list[float]:
        best = max((k for k in kw if k is not None), default=0.0)
        return [w * ((k or 0.0) / best if best > 0 else 0.0) + (1 - w) * max(0.0, min(1.0, c))
                for k, c in zip(kw, cos, strict=True)]
    return f


def linear_minmax(w: float) -> Fusion:
    def f(kw: list[float | None], cos: list[float]) -> list[float]:
        k = _minmax([k or 0.0 for k in kw])
        c = _minmax(cos)
        return [w * a + (1 - w) * b for a, b in zip(k, c, strict=True)]
    return f


def linear_z(w: float) -> Fusion:
    def f(kw: list[float | None], cos: list[float]) -> list[float]:
        k = _z([k or 0.0 for k in kw])
        c = _z(cos)
        return [w * a + (1 - w) * b for a, b in zip(k, c, strict=True)]
    return f


def rrf(w: float, k0: int = 60) -> Fusion:
    def f(kw: list[float | None], cos: list[float]) -> list[float]:
        rk = _ranks([k if k else None for k in kw])
        rc = _ranks(list(cos))
        return [(w / (k0 + a) if a else 0.0) + ((1 - w) / (k0 + b) if b else 0.0)
                for a, b in zip(rk, rc, strict=True)]
    return f


def rank_sessions(pool: list[Candidate], fusion: Fusion, k: int, agg: int) -> list[str]:
    """Sessions by fused score over keyword top-k ∪ vector top-k; a session sums its
    top ``agg`` passages (1 = best passage)."""
    kw_top = set(sorted((i for i, c in enumerate(pool) if c[1]), key=lambda i: -pool[i][1])[:k])  # type: ignore[operator]
    vec_top = set(sorted(range(len(pool)), key=lambda i: -pool[i][2])[:k])
    chosen = sorted(kw_top | vec_top)
    cands = [pool[i] for i in chosen]
    scores = fusion([c[1] for c in cands], [c[2] for c in cands])
    per: dict[str, list[float]] = {}
    for c, s in zip(cands, scores, strict=True):
        per.setdefault(c[0], []).append(s)
    total = {s: sum(sorted(v, reverse=True)[:agg]) for s, v in per.items()}
    return sorted(total, key=lambda s: (-total[s], s))


def metrics(ranked: list[list[str]], gold: list[set[str]]) -> dict[str, float]:
    out = {"recall@1": 0.0, "recall@5": 0.0, "recall@10": 0.0, "mrr": 0.0}
    for sessions, want in zip(ranked, gold, strict=True):
        for n in (1, 5, 10):
            out[f"recall@{n}"] += len(set(sessions[:n]) & want) / len(want)
        out["mrr"] += next((1.0 / (i + 1) for i, s in enumerate(sessions) if s in want), 0.0)
    return {key: round(v / len(gold), 3) for key, v in out.items()}


def run(cache: Path) -> dict[str, Any]:
    rows: dict[str, dict[str, float]] = {}
    base, gold = gather(cache, 1500)

    def row(name: str, pools: list[list[Candidate]], fusion: Fusion, k: int = 500,
            agg: int = 1) -> None:
        rows[name] = metrics([rank_sessions(p, fusion, k, agg) for p in pools], gold)

    row("keyword only", base, linear_today(1.0))
    row("meaning only", base, linear_today(0.0))
    row("today: keyword÷best, 0.6/0.4, best passage", base, linear_today(0.6))
    for w in (0.4, 0.5, 0.6, 0.7):
        row(f"min-max both, {w:.1f}/{1 - w:.1f}", base, linear_minmax(w))
        row(f"z-score both, {w:.1f}/{1 - w:.1f}", base, linear_z(w))
        row(f"RRF k=60, {w:.1f}/{1 - w:.1f}", base, rrf(w))
    for k in (20, 50, 100):
        row(f"today, pool top-{k} per source", base, linear_today(0.6), k=k)
        row(f"min-max 0.6/0.4, pool top-{k} per source", base, linear_minmax(0.6), k=k)
    for agg in (2, 3, 5):
        row(f"today, session = sum of top-{agg} passages", base, linear_today(0.6), agg=agg)
        row(f"min-max 0.6/0.4, session = sum of top-{agg}", base, linear_minmax(0.6), agg=agg)
    for target in (200, 300, 400, 700, 3000):
        pools, _ = gather(cache, target)
        row(f"passages of ~{target} bytes: keyword only", pools, linear_today(1.0))
        row(f"passages of ~{target} bytes: meaning only", pools, linear_today(0.0))
        row(f"passages of ~{target} bytes: today", pools, linear_today(0.6))
        row(f"passages of ~{target} bytes: min-max 0.6/0.4", pools, linear_minmax(0.6))
        row(f"passages of ~{target} bytes: RRF 0.5/0.5", pools, rrf(0.5))
        row(f"passages of ~{target} bytes: today, sum of top-2", pools, linear_today(0.6),
            agg=2)
    return rows


def markdown(result: dict[str, dict[str, float]]) -> str:
    lines = [
        "## Search: retrieval levers (LongMemEval_S subset)",
        "",
        "`python -m benchmarks.retrieval_levers`: the 16 questions and 82 sessions of the "
        "section above, one lever changed per row, all rows from one run. Rows before the "
        "passage-size block use the former 1,500-byte passages and rank every passage "
        "(keyword top-500 ∪ vector top-500 unless the row names a pool); a session scores "
        "its best passage unless the row says otherwise. \"today\" is the shipped blend: "
        "keyword ÷ best keyword, cosine clamped to [0, 1], 0.6 / 0.4.",
        "",
        "| lever | recall@1 | recall@5 | recall@10 | MRR |",
        "|---|---|---|---|---|",
    ]
    for name, m in result.items():
        lines.append(f"| {name} | {m['recall@1']:.3f} | {m['recall@5']:.3f} | "
                     f"{m['recall@10']:.3f} | {m['mrr']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ampup-bench")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    result = run(args.cache)
    print(json.dumps(result, indent=1))
    print(markdown(result))
    if args.write_docs:
        write_section(Path(__file__).resolve().parent.parent / "docs" / "performance.md",
                      markdown(result))


if __name__ == "__main__":
    main()
