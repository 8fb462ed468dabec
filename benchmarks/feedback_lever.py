"""Pseudo-relevance feedback as an ablation lever (not shipped: it did not win on both sets).

A question that gathers ("How many model kits have I worked on or bought?") has several
answers, and the ones that share few words with it are the ones a ranking misses; its best
first results often share words with them ("scale", "Tamiya", "paint"). Two classic ways to
use that, both re-ranking the candidates a passage search returned:

- keyword side, RM3-style: the ``terms`` best words of the ``docs`` best first results
  (weight of a result × the word's share of its words, times an inverse document frequency
  over the candidates; words of the query and their plural / "-ed" forms left out) are
  searched again (`keyword_passages`, the index's own BM25), and ``weight`` × that raw score
  is added to each candidate's raw keyword score before the usual normalisation;
- meaning side, Rocchio: the query vector plus ``weight`` × the mean vector of the ``docs``
  best first results (re-embedded), unit length, gives each candidate's cosine.

``FROM`` says which first ranking picks the feedback results: the hybrid blend, or each
side its own (keyword for the words, meaning for the vector). ``MIN_DOCS``: a word must be
in that many of the feedback results. Patched in by `retrieval_ablation.apply` (levers
``prf=D,T,W``, ``rocchio=D,W``, ``feedback_own``, ``feedback_min_docs=N``), so
`POST /query` and the engine rows of both passage benchmarks rank with it; facts and AMP
cells are not touched (`docs/performance.md`, "Search: pseudo-relevance feedback").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

PRF: dict[str, Any] = {"docs": 0, "terms": 8, "weight": 0.3}
ROCCHIO: dict[str, Any] = {"docs": 0, "weight": 0.5}
FROM = {"value": "hybrid"}
MIN_DOCS = {"value": 1}
DISTINCT = {"value": False}  # feedback from distinct episodes
MODE = {"value": "add"}  # "add": raw + weight × raw feedback; "or": see below
MIN_LENGTH = 3


def _content(text: str) -> list[str]:
    from ampup_memory.search.tokenize import STOPWORDS, words

    return [w for w in words(text) if len(w) >= MIN_LENGTH and w.isalpha()
            and w not in STOPWORDS]


def _same(word: str, said: set[str]) -> bool:
    """A plural or "-ed" form of a query word: the index stems both alike."""
    return any(word.rstrip("s") == w.rstrip("s") or word.removesuffix("ed") == w
               or w.removesuffix("ed") == word for w in said)


def expansion_terms(top: Sequence[tuple[str, float]], pool: Sequence[str],
                    query: Sequence[str], n: int) -> list[str]:
    """The ``n`` words that best stand for the ``top`` results (text, weight), not in the
    query; ties by the word, so the choice is deterministic."""
    from ampup_memory.search.tokenize import words

    said = {w for t in query for w in words(t)}
    score: dict[str, float] = {}
    seen_in: Counter[str] = Counter()
    for text, weight in top:
        found = _content(text)
        if not found or weight <= 0:
            continue
        for w, tf in Counter(found).items():
            score[w] = score.get(w, 0.0) + weight * tf / len(found)
            seen_in[w] += 1
    score = {w: s for w, s in score.items() if seen_in[w] >= MIN_DOCS["value"]}
    if not score:
        return []
    df: Counter[str] = Counter()
    for text in pool:
        df.update(set(_content(text)) & score.keys())
    size = len(pool)
    ranked = sorted(((s * math.log((size + 1) / (df[w] + 0.5)), w)
                     for w, s in score.items() if w not in said and not _same(w, said)),
                    key=lambda x: (-x[0], x[1]))
    return [w for s, w in ranked[:n] if s > 0]


def moved(vector: Sequence[float], toward: Sequence[Sequence[float]], weight: float
          ) -> list[float]:
    """Rocchio: the query vector plus ``weight`` × the mean of ``toward``, unit length."""
    mean = [sum(col) / len(toward) for col in zip(*toward, strict=True)]
    out = [q + weight * m for q, m in zip(vector, mean, strict=True)]
    norm = math.sqrt(sum(x * x for x in out)) or 1.0
    return [x / norm for x in out]


def install() -> None:
    """Wrap `SearchEngine.search_passages`: re-rank its candidates with feedback."""
    from ampup_memory.search import engine as eng
    from ampup_memory.search.rank import Parts, score_parts, with_time

    if getattr(eng.SearchEngine.search_passages, "feedback", False):
        return
    original = eng.SearchEngine.search_passages

    def first(ranked: list[Any], by: str, n: int) -> list[tuple[Any, float]]:
        def value(p: Parts) -> float:
            return (p.relevance if by == "hybrid"
                    else p.keyword if by == "keyword" else p.meaning)
        order = sorted(((value(r.parts), r.row.num, r) for r in ranked),
                       key=lambda x: (-x[0], x[1]))
        if DISTINCT["value"]:  # the best passage of each of the n best episodes
            seen: set[int] = set()
            order = [x for x in order if x[2].row.episode_num not in seen
                     and not seen.add(x[2].row.episode_num)]
        return [(r, v) for v, _, r in order[:n] if v > 0]

    def search_passages(self: Any, scope: str, branch: str, query: str, principal: Any,
                        **kw: Any) -> Any:
        res = original(self, scope, branch, query, principal, **kw)
        if not res.passages or (PRF["docs"] <= 0 and ROCCHIO["docs"] <= 0):
            return res
        limit = kw.get("limit", 10)
        k = max(limit * 5, 50)
        rows = [r.row for r in res.passages]
        nums = [p.num for p in rows]
        wanted = set(nums)
        keyword: dict[int, float] = {}
        for b in dict.fromkeys(p.branch for p in rows):  # the engine's first-pass scores
            keyword.update((n, v) for n, v in self.index.keyword_passages(
                scope, b, res.terms, k) if n in wanted)
        cosines = {r.row.num: r.parts.meaning for r in res.passages}
        own = FROM["value"] == "own"
        if PRF["docs"] > 0:
            top = first(res.passages, "keyword" if own else "hybrid", PRF["docs"])
            extra = expansion_terms([(r.row.text, v) for r, v in top],
                                    [p.text for p in rows], res.terms, PRF["terms"])
            second: dict[int, float] = {}
            for b in dict.fromkeys(p.branch for p in rows) if extra else ():
                second.update((n, v) for n, v in self.index.keyword_passages(
                    scope, b, extra, k) if n in wanted)
            if MODE["value"] == "or" and second:
                # Probabilistic OR of the normalised scores: 1 − (1 − k)(1 − w·f) stays in
                # [0, 1] and never passes the best first-pass keyword score's 1.
                top1, top2 = max(keyword.values(), default=0.0), max(second.values())
                keyword = {n: 1.0 - (1.0 - (keyword.get(n, 0.0) / top1 if top1 else 0.0))
                           * (1.0 - PRF["weight"] * second.get(n, 0.0) / top2)
                           for n in nums}
            else:
                for n, raw in second.items():
                    keyword[n] = keyword.get(n, 0.0) + PRF["weight"] * raw
        if ROCCHIO["docs"] > 0:
            top = first(res.passages, "meaning" if own else "hybrid", ROCCHIO["docs"])
            if top:
                from ampup_memory.search.timewindow import find_window

                # The query vector as the engine made it (the query without its window).
                rest = find_window(query, kw.get("now") or eng._now(), kw.get("tz"))[1]
                vector = self.embedder.embed([rest.strip() or query])[0]
                toward = self.embedder.embed([r.row.text for r, _ in top])
                cosines = dict(self.index.passage_cosines(
                    nums, moved(vector, toward, ROCCHIO["weight"])))
        parts = score_parts([keyword.get(n, 0.0) for n in nums],
                            [cosines.get(n) for n in nums])
        ranked = [eng.RankedPassage(r.row, r.episode, with_time(p, r.parts.time))
                  for r, p in zip(res.passages, parts, strict=True)]
        ranked = [r for r in ranked if r.score > 0]
        ranked.sort(key=lambda r: (-r.score, r.episode.id, r.row.first_unit, r.row.num))
        return eng.PassageResults(ranked, res.window, res.terms)

    search_passages.feedback = True  # type: ignore[attr-defined]
    eng.SearchEngine.search_passages = search_passages  # type: ignore[method-assign]
