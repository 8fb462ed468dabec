"""Episode context and query expansion as ranking levers, on both conversational sets.

Levers measured here (none shipped unless docs/performance.md says so):

- ``centroid_blend=L``: meaning side, a passage's vector blended with its episode's
  centroid (the normalised mean of the episode's passage vectors): the cosine of the query
  with ``normalise(v + L · c)``; document-side context, fixed once the episode is indexed.
- ``centroid_mix=M``: meaning side, ``(1 − M) · cos(q, v) + M · cos(q, c)``: a
  session-level meaning score added to the passage's.
- ``episode_field=B`` / ``first_field=B``: keyword side, BM25 per field summed with
  weights (the form the fact index uses for its BM25F): the passage's own BM25 plus
  ``B`` × the BM25 of its episode's whole text (``episode_field``, episodes as documents of
  their own) or of its episode's first unit (``first_field``).
- ``episode_norm=B``: as ``episode_field``, but each field divided by its own best score
  first: ``(1 − B) · passage / best passage + B · episode / best episode``.
- ``proximity=W,D``: term proximity (the sequential dependence model's ordered-pair
  idea): each pair of adjacent query words within ``D`` tokens of each other adds ``W`` ×
  the BM25 of that pair (an FTS5 ``NEAR`` query) to the raw keyword score.
- ``bm25=K1,B``: keyword side, BM25 with other saturation (``k1``) and length
  normalisation (``b``) than FTS5's fixed 1.2 / 0.75, computed from the same FTS5 table's
  tokens (an ``fts5vocab`` instance table: term frequencies and row lengths) with FTS5's
  own IDF; ``bm25=1.2,0.75`` reproduces the shipped scores.
- ``candidates=K``: rank only the engine's candidates (the passages' own keyword top K ∪
  vector top K), to check that scoring every passage of a scope changes nothing.
- ``expand=N,S,W``: query side, each query word's ``N`` nearest whole-word tokens in
  WordLlama's own token-embedding table (cosine ≥ ``S``; not a form of a query word),
  searched with BM25 and added to the passage's raw keyword score as ``W`` × Σ cosine ×
  BM25; no model at ingest.

Method: every passage of a scope is scored (the engine's cut and embedder; BM25 from an
FTS5 table per scope with the index's tokenizer, `porter unicode61`, as the SQLite index
keeps keyword statistics per scope and branch); the pool of a row is its own hybrid top
100 (as `POST /query` returns), and keyword-only and meaning-only re-rank that pool, as in
`retrieval_quality.py`. The ``shipped`` row reproduces the engine's ranking. Time parts
are left out: neither set's questions name a window that separates its sessions.

    python -m benchmarks.context_levers [--embedder minilm] [--json FILE] [LEVER ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ampup_memory.search.embed import Embedder
from ampup_memory.search.index.base import EpisodeDoc
from ampup_memory.search.passages import cut, passage_text
from ampup_memory.search.tokenize import STOPWORDS, fts5_match, query_terms

POOL = 100
KW, MW = 0.6, 0.4


@dataclass
class Scope:
    """One scope's passages, vectors and keyword tables."""

    episode: list[str] = field(default_factory=list)  # per passage: episode id
    units: list[tuple[int, ...]] = field(default_factory=list)  # per passage: unit numbers
    texts: list[str] = field(default_factory=list)
    vectors: Any = None
    centroids: Any = None  # per passage: its episode's centroid
    ep_index: list[int] = field(default_factory=list)  # per passage: its episode's row
    episodes: int = 0  # episode rows (one with no passage too)


class Corpus:
    def __init__(self, docs: Sequence[EpisodeDoc], embedder: Embedder) -> None:
        self.db = sqlite3.connect(":memory:")
        self.embedder = embedder
        self._lengths: dict[str, Any] = {}  # per vocabulary table: row lengths in tokens
        self.scopes: dict[str, Scope] = {}
        by_scope: dict[str, list[EpisodeDoc]] = defaultdict(list)
        for d in docs:
            by_scope[d.scope].append(d)
        for name, group in by_scope.items():
            s = Scope()
            ep_text, ep_first = [], []
            for i, d in enumerate(group):
                pieces = cut(d.units)
                for p in pieces:
                    s.episode.append(d.id)
                    s.units.append(tuple(n for n, _, _ in p))
                    s.texts.append(passage_text(p))
                    s.ep_index.append(i)
                ep_text.append("\n".join(u.text for u in d.units))
                ep_first.append(d.units[0].text if d.units else "")
            s.episodes = len(group)
            s.vectors = np.asarray(embedder.embed(s.texts), dtype=np.float64)
            ep = np.asarray(s.ep_index)
            sums = np.zeros((len(group), s.vectors.shape[1]))
            np.add.at(sums, ep, s.vectors)
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            s.centroids = (sums / np.where(norms > 0, norms, 1.0))[ep]
            key = self._key(name)
            for table, rows in (("p", s.texts), ("e", ep_text), ("f", ep_first)):
                self.db.execute(f"CREATE VIRTUAL TABLE {table}_{key} USING fts5(x,"
                                " tokenize='porter unicode61')")
                self.db.executemany(f"INSERT INTO {table}_{key}(rowid, x) VALUES (?, ?)",
                                    list(enumerate(rows)))
            self.scopes[name] = s

    @staticmethod
    def _key(scope: str) -> str:
        return hashlib.sha1(scope.encode()).hexdigest()[:10]

    def bm25(self, table: str, scope: str, terms: Sequence[str], n: int,
             raw_match: bool = False) -> Any:
        """Raw BM25 (higher is better) of each of the ``n`` rows for ``terms`` (OR), or
        for ``terms[0]`` as an FTS5 expression when ``raw_match``."""
        out = np.zeros(n)
        if not terms:
            return out
        name = f"{table}_{self._key(scope)}"
        match = terms[0] if raw_match else fts5_match(list(terms))
        for rowid, score in self.db.execute(
                f"SELECT rowid, -bm25({name}) FROM {name} WHERE {name} MATCH ?", (match,)):
            out[rowid] = score
        return out


    def bm25_params(self, scope: str, terms: Sequence[str], n: int, k1: float,
                    b: float) -> Any:
        """BM25 of each of the ``n`` passages for ``terms`` (OR) with ``k1`` and ``b``, as
        FTS5's ``bm25()`` computes it (its IDF, row lengths in tokens) but with these two
        parameters instead of its fixed 1.2 and 0.75."""
        out = np.zeros(n)
        key = self._key(scope)
        vocab = f"pv_{key}"
        if vocab not in self._lengths:
            self.db.execute(f"CREATE VIRTUAL TABLE {vocab} USING fts5vocab(p_{key}, 'instance')")
            lengths = np.zeros(n)
            for doc, count in self.db.execute(f"SELECT doc, count(*) FROM {vocab} GROUP BY doc"):
                lengths[doc] = count
            self._lengths[vocab] = lengths
        lengths = self._lengths[vocab]
        avg = lengths.mean() if n else 1.0
        for term in terms:
            tokens = self._tokens(term)
            if len(tokens) != 1:  # a phrase of several tokens: FTS5's own score
                out += self.bm25("p", scope, [term], n) if tokens else 0.0
                continue
            tf = np.zeros(n)
            for doc, count in self.db.execute(
                    f"SELECT doc, count(*) FROM {vocab} WHERE term = ? GROUP BY doc", tokens):
                tf[doc] = count
            hits = int((tf > 0).sum())
            if not hits:
                continue
            idf = np.log((n - hits + 0.5) / (hits + 0.5))
            idf = idf if idf > 0 else 1e-6
            out += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths / avg))
        return out

    def _tokens(self, text: str) -> list[str]:
        """``text`` as the passages' tokenizer cuts and stems it."""
        if not self._lengths.get("stem"):
            self.db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS stem_t USING fts5(x,"
                            " tokenize='porter unicode61')")
            self.db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS stem_v USING"
                            " fts5vocab(stem_t, 'instance')")
            self._lengths["stem"] = np.ones(1)
        self.db.execute("DELETE FROM stem_t")
        self.db.execute("INSERT INTO stem_t(rowid, x) VALUES (1, ?)", (text,))
        return [t for (t,) in self.db.execute('SELECT term FROM stem_v ORDER BY "offset"')]


class Expander:
    """Nearest whole-word tokens of a word in WordLlama's token-embedding table."""

    def __init__(self) -> None:
        from pathlib import Path as P

        import wordllama
        from wordllama import WordLlama

        m = WordLlama.load(cache_dir=P(wordllama.__file__).parent, disable_download=True,
                           dim=256)
        table = np.asarray(m.embedding, dtype=np.float64)
        self.raw = table
        self.table = table / np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-12)
        self.tokenizer = m.tokenizer
        # Whole English words only: a token that starts a word, ASCII letters, 3 or more.
        self.word_of = {i: tok[1:].lower() for tok, i in m.tokenizer.get_vocab().items()
                        if tok.startswith("▁") and tok[1:].isascii() and tok[1:].isalpha()
                        and len(tok) >= 4}
        ids = np.asarray(sorted(self.word_of))
        self.word_ids = ids
        self.word_table = self.table[ids]

    def neighbours(self, word: str, n: int, floor: float, said: set[str]
                   ) -> list[tuple[str, float]]:
        # Only a word that is one token has a row of its own: the mean of a split word's
        # pieces ("kits" → k + its) finds words that look alike ("kentucky"), not
        # words that mean alike (measured), so such a word is not expanded.
        ids = self.tokenizer.encode(word, add_special_tokens=False).ids
        if len(ids) != 1:
            return []
        vec = self.raw[ids].mean(axis=0)
        vec = vec / max(float(np.linalg.norm(vec)), 1e-12)
        sims = self.word_table @ vec
        order = np.argsort(-sims, kind="stable")
        out: list[tuple[str, float]] = []
        seen: set[str] = set()
        for j in order[:200]:
            w = self.word_of[int(self.word_ids[j])]
            s = float(sims[j])
            if s < floor or len(out) >= n:
                break
            if w in said or w in seen or w in STOPWORDS or _same(w, said):
                continue
            seen.add(w)
            out.append((w, s))
        return out


def _same(word: str, said: set[str]) -> bool:
    """A form of a query word (the index stems both alike): same first five letters of a
    shared stem, or a plural / "-ed" / "-ing" form."""
    for w in said:
        a, b = word.rstrip("s"), w.rstrip("s")
        if a == b or a.startswith(b) and len(a) - len(b) <= 3 or \
                b.startswith(a) and len(b) - len(a) <= 3:
            return True
    return False


@dataclass
class Question:
    scope: str
    text: str
    terms: list[str]
    vector: Any
    gold_sessions: set[str]
    gold_turns: set[str] = field(default_factory=set)
    category: str = "all"


LEVERS = ["shipped",
          "centroid_blend=0.25", "centroid_blend=0.5", "centroid_blend=1.0",
          "centroid_mix=0.2", "centroid_mix=0.3", "centroid_mix=0.5",
          "episode_field=0.1", "episode_field=0.2", "episode_field=0.3", "episode_field=0.5",
          "first_field=0.2", "first_field=0.5",
          "expand=3,0.5,0.3", "expand=3,0.5,0.5", "expand=5,0.4,0.3", "expand=5,0.4,0.5",
          "episode_field=0.2+centroid_mix=0.3", "episode_field=0.3+centroid_blend=0.5",
          "first_field=0.3", "first_field=0.4", "first_field=0.7", "first_field=1.0",
          "first_field=0.5+centroid_mix=0.2", "first_field=0.5+centroid_mix=0.3",
          "first_field=0.5+centroid_blend=0.25", "first_field=0.5+episode_field=0.2",
          "expand=3,0.6,0.3", "expand=2,0.5,0.2",
          "first_field=0.3+episode_field=0.1", "first_field=0.3+episode_field=0.2",
          "first_field=0.3+episode_field=0.3", "first_field=0.4+episode_field=0.1",
          "first_field=0.4+episode_field=0.2", "first_field=0.4+episode_field=0.3",
          "first_field=0.5+episode_field=0.1", "first_field=0.5+episode_field=0.3",
          "first_field=0.7+episode_field=0.2", "first_field=0.7+episode_field=0.3",
          "candidates=500", "first_field=0.4+episode_field=0.3+candidates=500",
          "episode_norm=0.1", "episode_norm=0.2", "episode_norm=0.3",
          "episode_norm=0.2+centroid_mix=0.2"]


def signals(corpus: Corpus, q: Question, lever: str, expander: Expander | None
            ) -> tuple[Any, Any]:
    """Raw keyword scores and cosines of every passage of the question's scope."""
    s = corpus.scopes[q.scope]
    n = len(s.texts)
    raw = corpus.bm25("p", q.scope, q.terms, n)
    cos = s.vectors @ q.vector
    # The engine's candidates: the passages' own keyword top k ∪ vector top k.
    own, near = raw.copy(), cos.copy()
    within: Any = None
    for part in lever.split("+"):
        name, _, value = part.partition("=")
        if name == "candidates":
            k = int(value)
            within = np.zeros(n, dtype=bool)
            within[[i for i in np.argsort(-own, kind="stable")[:k] if own[i] > 0]] = True
            within[np.argsort(-near, kind="stable")[:k]] = True
        elif name == "bm25":
            k1, b = (float(v) for v in value.split(","))
            raw = corpus.bm25_params(q.scope, q.terms, n, k1, b)
            own = raw.copy()
        elif name == "centroid_blend":
            blended = s.vectors + float(value) * s.centroids
            blended /= np.linalg.norm(blended, axis=1, keepdims=True)
            cos = blended @ q.vector
        elif name == "centroid_mix":
            m = float(value)
            cos = (1 - m) * cos + m * (s.centroids @ q.vector)
        elif name in ("episode_field", "first_field"):
            table = "e" if name == "episode_field" else "f"
            eps = corpus.bm25(table, q.scope, q.terms, s.episodes)
            raw = raw + float(value) * eps[np.asarray(s.ep_index)]
        elif name == "episode_norm":
            # Each field normalised by its own best before the mix, so the weight is a
            # share of the keyword part whatever the fields' BM25 scales.
            b = float(value)
            eps = corpus.bm25("e", q.scope, q.terms, s.episodes)
            top_p, top_e = raw.max(initial=0.0), eps.max(initial=0.0)
            if top_p > 0 and top_e > 0:
                raw = (1 - b) * raw / top_p + b * eps[np.asarray(s.ep_index)] / top_e
        elif name == "proximity":
            # Term proximity, as the sequential dependence model: each pair of adjacent
            # query words found within D tokens of each other scores BM25 once more.
            weight, _, near = value.partition(",")
            span = int(near or 8)
            for a, b in zip(q.terms, q.terms[1:], strict=False):
                pair = f'NEAR("{a}" "{b}", {span})'
                raw = raw + float(weight) * corpus.bm25("p", q.scope, [pair], n, raw_match=True)
        elif name == "expand":
            assert expander is not None
            count, floor, weight = value.split(",")
            said = set(q.terms)
            for t in q.terms:
                for w, sim in expander.neighbours(t, int(count), float(floor), said):
                    raw = raw + float(weight) * sim * corpus.bm25("p", q.scope, [w], n)
        elif name in ("agent_kw", "agent_both"):
            w = float(value)
            agent = np.asarray([t.lower().startswith(("assistant:",)) for t in s.texts])
            raw = np.where(agent, raw * w, raw)
            if name == "agent_both":
                cos = np.where(agent, cos * w, cos)
        elif name != "shipped":
            raise SystemExit(f"unknown lever {part!r}")
    if within is not None:  # a passage outside the candidates is not ranked
        raw, cos = np.where(within, raw, 0.0), np.where(within, cos, -1.0)
    return raw, cos


def hybrid_pool(raw: Any, cos: Any) -> tuple[list[int], Any, Any, Any]:
    """The hybrid's top `POOL` passages as the engine ranks them, and the three modes'
    scores: (pool, hybrid, keyword only, meaning only)."""
    best = raw.max() if raw.size else 0.0
    kw = np.maximum(raw, 0) / best if best > 0 else np.zeros_like(raw)
    mn = np.clip(cos, 0.0, 1.0)
    hy = KW * kw + MW * mn
    order = [int(i) for i in np.argsort(-hy, kind="stable") if hy[i] > 0][:POOL]
    return order, hy, kw, mn


def lists(s: Scope, ranked: list[int]) -> tuple[list[str], list[frozenset[tuple[str, int]]]]:
    """Sessions in order of their first passage in ``ranked``, and the passages as
    (episode, unit) sets."""
    sessions: list[str] = []
    for i in ranked:
        if s.episode[i] not in sessions:
            sessions.append(s.episode[i])
    return sessions, [frozenset((s.episode[i], u) for u in s.units[i]) for i in ranked]


def rank(corpus: Corpus, q: Question, raw: Any, cos: Any
         ) -> dict[str, tuple[list[str], list[frozenset[tuple[str, int]]]]]:
    """Per mode: sessions best first, and passages (as (episode, unit) sets) best first."""
    order, hy, kw, mn = hybrid_pool(raw, cos)
    return {mode: lists(corpus.scopes[q.scope], sorted(order, key=lambda i: (-score[i], i)))
            for mode, score in (("hybrid", hy), ("keyword only", kw), ("meaning only", mn))}


def questions_lme(cache: Path, embedder: Embedder, engine_query: Any
                  ) -> tuple[list[EpisodeDoc], list[Question], dict[str, str]]:
    from benchmarks.retrieval_quality import SCOPE, episodes, load

    qs, sessions = load(cache)
    docs, session_of = episodes(sessions)
    out = []
    for q in qs:
        terms, vec = engine_query(q["question"], None)
        out.append(Question(SCOPE, q["question"], terms, vec,
                            set(q["ground_truth"]["supporting_session_ids"])))
    return docs, out, session_of


def questions_locomo(cache: Path, embedder: Embedder, engine_query: Any
                     ) -> tuple[list[EpisodeDoc], list[Question], dict[str, str],
                                dict[tuple[str, int], str]]:
    from benchmarks.locomo_retrieval import WHEN, episodes, load, scope_of

    data = load(cache)
    docs, session_of, turn_of = episodes(data)
    out = []
    for conv in data["conversations"]:
        scope = scope_of(conv)
        for q in conv["queries"]:
            terms, vec = engine_query(q["query"], WHEN)
            out.append(Question(scope, q["query"], terms, vec, set(q["gold_sessions"]),
                                set(q["gold_turns"]), q["question_type"]))
    return docs, out, session_of, turn_of


def both_sets(cache: Path, embedder: Embedder) -> tuple[
        list[EpisodeDoc], list[Question], dict[str, str],
        list[EpisodeDoc], list[Question], dict[str, str], dict[tuple[str, int], str]]:
    """Both conversational sets read as the engine reads a query (window out, date words
    in, stop words out), the question embedded by ``embedder``: LongMemEval's documents,
    questions and sessions, then LoCoMo's, and LoCoMo's turn of each (episode, unit)."""
    from datetime import UTC, datetime

    from ampup_memory.search.engine import SearchEngine

    def engine_query(text: str, now: datetime | None) -> tuple[list[str], Any]:
        _, terms, rest = SearchEngine._query(None, text, now or datetime.now(UTC), None)  # type: ignore[arg-type]
        body = rest or text
        terms = terms or query_terms(body)
        return terms, np.asarray(embedder.embed([body])[0], dtype=np.float64)

    lme_docs, lme_q, lme_sess = questions_lme(cache, embedder, engine_query)
    lo_docs, lo_q, lo_sess, turn_of = questions_locomo(cache, embedder, engine_query)
    return lme_docs, lme_q, lme_sess, lo_docs, lo_q, lo_sess, turn_of


MODES = ("hybrid", "keyword only", "meaning only")


def lme_scores(ranked: Sequence[dict[str, Any]], qs: Sequence[Question],
               session_of: dict[str, str]) -> dict[str, Any]:
    """A row's LongMemEval cells: per mode the session metrics, and per question the ranks
    of its gold sessions in the hybrid (``lme_first``)."""
    from benchmarks.retrieval_quality import metrics

    gold = [q.gold_sessions for q in qs]
    return {"lme": {mode: metrics([[session_of[e] for e in r[mode][0]] for r in ranked], gold)
                    for mode in MODES},
            "lme_first": [[i + 1 for i, e in enumerate(r["hybrid"][0])
                           if session_of[e] in q.gold_sessions]
                          for r, q in zip(ranked, qs, strict=True)]}


def locomo_scores(ranked: Sequence[dict[str, Any]], qs: Sequence[Question],
                  session_of: dict[str, str], turn_of: dict[tuple[str, int], str]
                  ) -> dict[str, Any]:
    """A row's LoCoMo cells: per mode and category (and "all") session and turn metrics."""
    from benchmarks.locomo_retrieval import turn_metrics
    from benchmarks.retrieval_quality import metrics

    out: dict[str, Any] = {}
    for mode in MODES:
        cats: dict[str, Any] = {}
        for cat in [*sorted({q.category for q in qs}), "all"]:
            idx = [i for i, q in enumerate(qs) if cat in ("all", q.category)]
            cats[cat] = {
                "n": len(idx),
                "session": metrics([[session_of[e] for e in ranked[i][mode][0]] for i in idx],
                                   [qs[i].gold_sessions for i in idx]),
                "turn": turn_metrics(
                    [[frozenset(turn_of[x] for x in p) for p in ranked[i][mode][1]]
                     for i in idx], [qs[i].gold_turns for i in idx])}
        out[mode] = cats
    return out


# One benchmark: its passages, its questions, and the session of each episode.
QuestionSet = tuple[Corpus, list[Question], dict[str, str]]


def timed_row(rank_one: Callable[[Corpus, Question], Any], lme: QuestionSet,
              locomo: QuestionSet, turn_of: dict[Any, str]) -> dict[str, Any]:
    """One lever's row: ``rank_one`` over every question of both sets, its CPU and wall
    time per question, and the scores of what it ranked."""
    row: dict[str, Any] = {}
    for key, (corpus, qs, session_of) in (("lme", lme), ("locomo", locomo)):
        c0, w0 = time.process_time(), time.perf_counter()
        ranked = [rank_one(corpus, q) for q in qs]
        row[f"{key}_cpu_ms"] = round((time.process_time() - c0) * 1000 / len(qs), 2)
        row[f"{key}_wall_ms"] = round((time.perf_counter() - w0) * 1000 / len(qs), 2)
        if key == "lme":
            row.update(lme_scores(ranked, qs, session_of))
        else:
            row["locomo"] = locomo_scores(ranked, qs, session_of, turn_of)
    return row


def run_totals(started: float, cpu0: float, load_before: float) -> dict[str, Any]:
    """A run's wall and CPU seconds since ``started`` / ``cpu0`` and the load around it."""
    return {"seconds": round(time.perf_counter() - started, 1),
            "cpu_seconds": round(time.process_time() - cpu0, 1),
            "load_before": load_before, "load_after": os.getloadavg()[0]}


def main() -> None:
    from benchmarks.retrieval_quality import embedder_for

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ampup-bench")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--embedder", default="wordllama",
                        help="AMP_EMBEDDING_PROVIDER of the meaning side (wordllama, minilm),"
                             " or bge-small (benchmarks/bge_small.py)")
    parser.add_argument("levers", nargs="*", default=LEVERS)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    started, cpu0 = time.perf_counter(), time.process_time()
    embedder = embedder_for(args.embedder)
    lme_docs, lme_q, lme_sess, lo_docs, lo_q, lo_sess, turn_of = both_sets(args.cache, embedder)
    t0 = time.process_time()
    lme = Corpus(lme_docs, embedder)
    lo = Corpus(lo_docs, embedder)
    build_cpu = time.process_time() - t0
    expander = Expander() if any("expand" in lv for lv in args.levers) else None
    result: dict[str, Any] = {"embedder": embedder.name,
                              "build_cpu_seconds": round(build_cpu, 2), "rows": {}}
    for lever in args.levers:
        def ranked(corpus: Corpus, q: Question, lever: str = lever) -> Any:
            return rank(corpus, q, *signals(corpus, q, lever, expander))
        row = timed_row(ranked, (lme, lme_q, lme_sess), (lo, lo_q, lo_sess), turn_of)
        result["rows"][lever] = row
        print(lever, json.dumps(summary(row)), flush=True)
    result.update(run_totals(started, cpu0, load_before))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(markdown(result))


def markdown(result: dict[str, Any]) -> str:
    """One row per lever: recall@5 / MRR cells, LoCoMo over all questions and multi-hop."""
    lines = ["| lever | LME hybrid | LME keyword only | LME meaning only | LoCoMo hybrid session"
             " | LoCoMo hybrid turn | LoCoMo keyword session | LoCoMo keyword turn | LoCoMo"
             " hybrid cat1 / cat2 / cat3 / cat4 session r@5 | CPU (wall) ms per query,"
             " LME / LoCoMo |", "|---|---|---|---|---|---|---|---|---|---|"]

    def cell(m: dict[str, float]) -> str:
        return f"{m['recall@5']:.3f} / {m['mrr']:.3f}"

    for lever, row in result["rows"].items():
        lo = row["locomo"]
        cats = " / ".join(f"{lo['hybrid'][c]['session']['recall@5']:.3f}"
                          for c in ("cat1", "cat2", "cat3", "cat4"))
        lines.append(" | ".join([
            f"| {lever}", cell(row["lme"]["hybrid"]), cell(row["lme"]["keyword only"]),
            cell(row["lme"]["meaning only"]), cell(lo["hybrid"]["all"]["session"]),
            cell(lo["hybrid"]["all"]["turn"]), cell(lo["keyword only"]["all"]["session"]),
            cell(lo["keyword only"]["all"]["turn"]), cats,
            f"{row['lme_cpu_ms']} ({row['lme_wall_ms']}) / {row['locomo_cpu_ms']}"
            f" ({row['locomo_wall_ms']}) |"]))
    return "\n".join(lines)


def summary(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode, short in (("hybrid", "hy"), ("keyword only", "kw"), ("meaning only", "mo")):
        m = row["lme"][mode]
        out[f"lme {short}"] = f"{m['recall@5']:.3f}/{m['mrr']:.3f}"
    for mode, short in (("hybrid", "hy"), ("keyword only", "kw")):
        a = row["locomo"][mode]["all"]
        out[f"lo {short} sess"] = f"{a['session']['recall@5']:.3f}/{a['session']['mrr']:.3f}"
        out[f"lo {short} turn"] = f"{a['turn']['recall@5']:.3f}/{a['turn']['mrr']:.3f}"
    out["cpu ms lme/lo"] = f"{row['lme_cpu_ms']}/{row['locomo_cpu_ms']}"
    return out


if __name__ == "__main__":
    main()
