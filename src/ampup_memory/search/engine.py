"""The search engine over one index: ingest documents, rank facts and passages.

Everything that must agree across backends lives here, above the backend: passage
cutting, embedding, visibility (`search/visibility.py`), newest-wins (core's, `memory/facts.py`),
the time window (`search/timewindow.py`), the ranker (`search/rank.py`) and, for a search
on a branch or as of a commit, the view's segments (`search/cutoff.py`): candidates come
from each segment's (scope, branch), cut to its commit range, and meet in one ranking.

Candidates come from the backend's keyword and vector top-k (facts: of those begun at
``as_of`` when the query names no window, as only those can be current). When visibility
or newest-wins leaves fewer than ``limit`` of them, k grows (×4) until enough survive or
the index has no more, so a caller who may see little (or searches as of an early
commit) still gets its best matches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from pyroaring import BitMap

from ampup_memory.errors import STORAGE_RETRY_AFTER_SECONDS, ServiceUnavailable
from ampup_memory.memory.facts import CLOSURE, begun, current, newest_order, timelines
from ampup_memory.memory.schemas import SCHEMA_ENTITY
from ampup_memory.memory.segments import NO_LIMIT, Segment
from ampup_memory.search.cutoff import Cutoff
from ampup_memory.search.embed import Embedder, model_info
from ampup_memory.search.index.base import (
    DocumentBatch,
    EpisodeRow,
    FactRow,
    Hit,
    NewFact,
    NewPassage,
    PassageRow,
    SearchIndex,
    SeqRange,
    Terms,
    fact_text,
)
from ampup_memory.search.passages import CUT, cut, passage_text
from ampup_memory.search.rank import (
    Parts,
    overlaps,
    reranked,
    score_parts,
    time_part,
    with_time,
)
from ampup_memory.search.rerank import Rerank
from ampup_memory.search.timewindow import Window, find_window
from ampup_memory.search.tokenize import keyword_terms
from ampup_memory.search.visibility import Principal, may_read_fact, visible_episodes

log = logging.getLogger("ampup_memory.search")

MAX_K = 20_000  # the widest candidate list one query fetches per source
EMBED_BATCH = 256
Progress = Callable[[int], None]
_R = TypeVar("_R", "RankedFact", "RankedPassage")  # what a reranker reorders


@dataclass(frozen=True)
class RankedFact:
    row: FactRow
    parts: Parts
    end: datetime | None = None  # where its validity ends, given the versions after it

    @property
    def score(self) -> float:
        return self.parts.relevance


@dataclass(frozen=True)
class RankedPassage:
    row: PassageRow
    episode: EpisodeRow
    parts: Parts

    @property
    def score(self) -> float:
        return self.parts.relevance


@dataclass
class FactResults:
    facts: list[RankedFact]
    window: Window | None
    terms: list[str]
    episodes: dict[int, EpisodeRow] = field(default_factory=dict)


@dataclass
class PassageResults:
    passages: list[RankedPassage]
    window: Window | None
    terms: list[str]


@dataclass
class IngestReport:
    episodes: int = 0
    passages: int = 0
    facts: int = 0
    unresolved: int = 0  # facts citing an episode the index does not hold


def _now() -> datetime:
    return datetime.now(UTC)


class SearchEngine:
    def __init__(self, index: SearchIndex, embedder: Embedder,
                 rerank: Rerank | None = None) -> None:
        self.index = index
        self.embedder = embedder
        self.model = model_info(embedder)
        self.rerank = rerank  # the optional reranker of passage and fact search (rerank.py)

    # -- embeddings -----------------------------------------------------------------------

    def ensure_cut(self) -> bool:
        """Record how passages are cut; an index holding passages cut another way is
        emptied (True) and refills from the tables as a deleted index does (each search
        and the ``serve`` timer catch up), so two passage sizes never meet in one ranking
        and a rebuild scores exactly alike."""
        found = self.index.passage_cut()
        if found == CUT:
            return False
        stale = found is not None or bool(self.index.scopes()) or (
            self.index.counts()["passages"] > 0)
        if stale:
            log.warning("search index passages were cut as %s, this version cuts %s:"
                        " emptying it; it refills from the tables", found or "units/1500/2000",
                        CUT)
            self.index.clear()
        self.index.set_passage_cut(CUT)
        return stale

    def ensure_model(self, progress: Progress | None = None) -> int:
        """Record the passage cut (:meth:`ensure_cut`) and the embedder in the index;
        re-embed rows from another model (or none)."""
        self.ensure_cut()
        self.index.set_model(self.model)
        done = 0
        for kind in ("facts", "passages"):
            while True:
                rows = self.index.missing_vectors(kind, EMBED_BATCH)
                if not rows:
                    break
                vectors = self.embedder.embed([text for _, text in rows])
                with self.index.transaction():
                    self.index.set_vectors(
                        kind, [(n, v) for (n, _), v in zip(rows, vectors, strict=True)]
                    )
                done += len(rows)
                if progress:
                    progress(len(rows))
        return done

    def require_model(self) -> None:
        """503 when the index records another embedder than this process's: another server
        sharing it started with other embedder settings and re-embedded it, so this one's
        vectors are of another space (PostgreSQL refused them: every search and every
        commit's feed was a 500). Inside an index transaction the check is ordered with
        ``set_model``'s (both hold the index's write lock)."""
        found = self.index.model()
        if found is None or found == self.model:
            return
        raise ServiceUnavailable(
            f"The search index now holds vectors of the embedder {found.name} ({found.dimensions} "
            f"dimensions), set by another server sharing it; this server embeds with "
            f"{self.model.name} ({self.model.dimensions}). Restart it with the same embedder "
            "settings as the others; another server may answer meanwhile.",
            details={"index_embedder": found.name, "server_embedder": self.model.name},
            headers={"Retry-After": str(STORAGE_RETRY_AFTER_SECONDS)})

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        found: list[list[float]] = []
        for start in range(0, len(texts), EMBED_BATCH):
            found += self.embedder.embed(texts[start:start + EMBED_BATCH])
        return found

    # -- ingest ---------------------------------------------------------------------------

    def ingest(
        self, batch: DocumentBatch, cursor: tuple[str, str, str] | None = None,
        lineage: Sequence[str] = (),
    ) -> IngestReport:
        """Add one batch of committed documents (and move a cursor) in one transaction.

        Re-ingesting a document changes nothing except an episode's ACL, which moves its
        bits between bitmaps. A fact cites episodes of its own (scope, branch); one not
        held there is looked up on ``lineage`` (the branch's ancestors, nearest first): a
        fact written on a branch may cite an episode of the commit it forked from."""
        report = IngestReport()
        known: dict[tuple[str, str], dict[str, int]] = {}
        for doc in batch.episodes:
            known.setdefault((doc.scope, doc.branch), {})
        for (scope, branch), found in known.items():
            found.update(self.index.episode_numbers(
                scope, branch, [e.id for e in batch.episodes
                                if (e.scope, e.branch) == (scope, branch)]))
        # Cut and embed outside the write lock: it is the slow part.
        cuts = {
            (d.scope, d.branch, d.id): cut(d.units)
            for d in batch.episodes if d.id not in known[(d.scope, d.branch)]
        }
        texts = [passage_text(p) for pieces in cuts.values() for p in pieces]
        passage_vectors = iter(self._embed(texts))
        vectors_by_doc = {
            key: [next(passage_vectors) for _ in pieces] for key, pieces in cuts.items()
        }
        fact_vectors = self._embed([
            fact_text(f.entity, f.predicate, f.value, f.quote) for f in batch.facts
        ])
        with self.index.transaction():
            self.require_model()
            new_passages: list[NewPassage] = []
            numbers = self.index.upsert_episodes(batch.episodes)
            for doc, (num, new) in zip(batch.episodes, numbers, strict=True):
                key = (doc.scope, doc.branch, doc.id)
                if not new or key not in cuts:
                    continue
                report.episodes += 1
                new_passages += [
                    NewPassage(num, doc.scope, doc.branch, pieces[0][0], pieces[-1][0],
                               pieces, vec, doc.seq)
                    for pieces, vec in zip(cuts[key], vectors_by_doc[key], strict=True)
                ]
            # One insert for the batch, in the same order (a call per episode cost two
            # lookups each: the keyword space and the vector sequence).
            self.index.add_passages(new_passages)
            report.passages += len(new_passages)
            new_facts: list[NewFact] = []
            cited = self._cited(batch, lineage)
            for fact, vec in zip(batch.facts, fact_vectors, strict=True):
                nums = cited[(fact.scope, fact.branch)]
                if not fact.cites or any(c.episode not in nums for c in fact.cites):
                    report.unresolved += 1
                    log.warning("fact %s cites an episode the index lacks; skipped", fact.id)
                    continue
                cites = tuple((nums[c.episode], c.unit) for c in fact.cites)
                new_facts.append(NewFact(fact, cites, vec))
            self.index.upsert_facts(new_facts)
            report.facts = len(new_facts)
            if cursor is not None:
                self.index.set_cursor(*cursor)
        return report

    def drop_branch(self, scope: str, branch: str, cursor: str) -> None:
        """Forget every row of a deleted branch, and note its delete marker as applied."""
        with self.index.transaction():
            self.index.clear_branch(scope, branch)
            self.index.set_cursor(scope, branch, cursor)

    def _cited(self, batch: DocumentBatch, lineage: Sequence[str],
               ) -> dict[tuple[str, str], dict[str, int]]:
        """Per (scope, branch) of the batch's facts: the number of each episode they cite,
        held on that branch or else on the nearest ancestor in ``lineage`` that holds it
        (one lookup per branch, not one per fact)."""
        wanted: dict[tuple[str, str], set[str]] = {}
        for f in batch.facts:
            wanted.setdefault((f.scope, f.branch), set()).update(c.episode for c in f.cites)
        found: dict[tuple[str, str], dict[str, int]] = {}
        for (scope, branch), ids in wanted.items():
            nums = found[(scope, branch)] = self.index.episode_numbers(scope, branch, ids)
            for ancestor in lineage:
                missing = ids - nums.keys()
                if not missing:
                    break
                nums.update(self.index.episode_numbers(scope, ancestor, missing))
        return found

    # -- search ---------------------------------------------------------------------------

    def visible(self, principal: Principal) -> BitMap:
        return visible_episodes(principal, self.index.acl_bitmap)

    def _query(self, query: str, now: datetime, tz: str | None
               ) -> tuple[Window | None, list[str], str]:
        window, rest = find_window(query, now, tz)
        # A written date is a window and words: "closes on 2025-11-20" also matches the
        # fact whose value is that date (timewindow.py, ``Window.words``).
        said = " ".join([rest, *window.words]) if window is not None else rest
        terms = keyword_terms(said) if said.strip() else []
        return window, terms, rest.strip()

    def _owners(self, scope: str, branch: str, cutoff: Cutoff | None) -> _Owners:
        segs = cutoff.segments if cutoff is not None else (Segment(branch),)
        # Held (at_commit, a pin, a snapshot): every segment's rows count in the keyword
        # statistics up to its last commit, so later commits move no score. A branch's
        # plain view counts all its base's current rows (docs/search.md).
        held = cutoff is not None and cutoff.commit is not None
        return _Owners(self.index, scope, tuple(s.branch for s in segs),
                       {s.branch: s.upto for s in segs if held and s.upto < NO_LIMIT})

    def _words(self, kind: str, scope: str, owners: _Owners, terms: list[str]) -> Terms:
        """The terms keyword lists rank by: a view of several segments is one space, so
        the postings budget keeps the terms its segments' rows afford together (a word
        common on the base is dropped on the branch too, as on a main holding the view),
        and every segment's rows are scored with the view's keyword statistics.

        A fact search takes a view of its one space too: it scores in two steps (its
        lists, then the facts found otherwise, `fact_keyword`), and with the statistics
        taken once a write landing between them cannot weigh the two a commit apart. A
        passage search takes one too: its wider rounds (a reader who sees few passages)
        list again by the statistics taken once, not counted again per round, and a write
        landing between two rounds moves no score of the answer."""
        if not terms:
            return terms
        return self.index.keyword_view(kind, scope, [(b, owners.upto.get(b))
                                                     for b in owners.branches], terms)

    def search_facts(
        self,
        scope: str,
        branch: str,
        query: str,
        principal: Principal,
        *,
        as_of: datetime | None = None,
        limit: int = 10,
        tz: str | None = None,
        now: datetime | None = None,
        cutoff: Cutoff | None = None,
        rerank: bool = False,
    ) -> FactResults:
        now = now or _now()
        as_of = as_of or now
        self.require_model()
        window, terms, rest = self._query(query, now, tz)
        span = (window.start, window.end) if window else None
        vector = self.embedder.embed([rest])[0] if rest else None
        visible = self.visible(principal)
        owners = self._owners(scope, branch, cutoff)
        said = self._words("facts", scope, owners, terms)
        k = max(limit * 5, 50)
        seen: dict[int, FactRow] = {}  # rows read so far (once per search; a view cuts)
        # Without a named window only a current version is an answer, and one not begun at
        # as_of never is (`_eligible`): the lists hold begun facts only, so a search at an
        # instant before most facts begin needs no wider rounds to find enough.
        begun_at = as_of if span is None else None

        def read(nums: Iterable[int]) -> None:
            missing = [n for n in nums if n not in seen]
            seen.update((r.num, r) for r in self.index.facts(missing))

        def held(nums: list[int]) -> set[int]:
            read(nums)
            return {n for n in nums if n in seen and cutoff is not None
                    and cutoff.holds_fact(seen[n])}

        while True:
            keyword: dict[int, float] = {}
            nearest: dict[int, float] = {}
            overlap: list[int] = []
            more = False  # a list came back full: the index may hold more candidates
            if cutoff is None:  # main: one space, the index's own top k
                for b in owners.branches:
                    found = self.index.keyword_facts(scope, b, said, k, owners.upto.get(b),
                                                     begun_at=begun_at)
                    near = (self.index.nearest_facts(scope, b, vector, k, begun_at=begun_at)
                            if vector else [])
                    keyword.update(found)
                    nearest.update(near)
                    more |= len(found) >= k or len(near) >= k
                    if span is not None and not rest:
                        over = self.index.facts_overlapping(scope, b, span[0], span[1], k)
                        overlap += over
                        more |= len(over) >= k
                nums = set(keyword) | set(nearest) | set(overlap)
                read(nums)  # the rows an earlier round did not read
                rows = [seen[n] for n in nums if n in seen and _answer(seen[n])]
            else:
                # A view is one space, as main is: its k best of each kind among the rows
                # it holds. Each segment gives its k best held rows (asking its index for
                # more when the cut removed some), and the view keeps the k best of all.
                kinds: dict[str, list[Callable[[int], list[Hit]]]] = {}
                for seg in cutoff.segments:
                    for source, into in self._fact_sources(scope, seg, owners.upto.get(
                            seg.branch), said, vector, span, rest, begun_at):
                        kinds.setdefault(into, []).append(source)
                for into, sources in kinds.items():
                    got, full = _view_hits(sources, held, k,
                                           None if into != "overlap"
                                           else lambda n: _instant(seen[n].valid_from) if n in seen
                                           else float("-inf"))
                    more |= full
                    if into == "overlap":
                        overlap += list(got)
                    else:
                        (keyword if into == "keyword" else nearest).update(got)
                keep = set(_best(keyword, k)) | set(_best(nearest, k))
                keep.update(sorted(overlap, key=lambda n: (
                    -_instant(seen[n].valid_from), n))[:k])
                rows = [seen[n] for n in keep if _answer(seen[n])]
            rows = owners.readable_facts(rows, visible)
            ends = self._eligible(scope, owners, rows, visible, as_of, span, cutoff)
            rows = [r for r in rows if r.num in ends]
            if len(rows) >= limit or not more or k >= MAX_K:
                break
            k *= 4
        for b in dict.fromkeys(r.branch for r in rows):  # keyword scores are per branch
            keyword.update(self.index.fact_keyword(
                scope, b, [r.num for r in rows if r.branch == b and r.num not in keyword],
                said, owners.upto.get(b)))
        cosines: dict[int, float] = dict(nearest)
        if vector is not None:
            cosines.update(self.index.fact_cosines(
                [r.num for r in rows if r.num not in cosines], vector))
        parts = score_parts([keyword.get(r.num, 0.0) for r in rows],
                            [cosines.get(r.num) for r in rows])
        ranked = [
            RankedFact(r, with_time(p, time_part(r.valid_from, ends[r.num], span)), ends[r.num])
            for r, p in zip(rows, parts, strict=True)
        ]
        # No shared word, no meaning, no window: not an answer, however few facts there are.
        ranked = [f for f in ranked if f.score > 0]
        ranked.sort(key=_fact_order)
        if rerank and self.rerank is not None and limit > 1:  # else the first is all
            ranked = self._reranked(query, ranked, self.rerank, lambda f: fact_text(
                f.row.entity, f.row.predicate, f.row.value, f.row.quote), _fact_order)
        ranked = ranked[:limit]
        episodes = {
            e.num: e for e in self.index.episodes(
                n for f in ranked for n in f.row.episode_nums)
        }
        return FactResults(ranked, window, terms, episodes)

    def _fact_sources(self, scope: str, seg: Segment, upto: int | None, terms: Terms,
                      vector: list[float] | None, span: tuple[datetime, datetime] | None,
                      rest: str, begun_at: datetime | None
                      ) -> list[tuple[Callable[[int], list[Hit]], str]]:
        """A segment's candidate lists, each as ``n`` → its ``n`` best hits (of the rows
        of its commits, where the backend can bound a list; begun at ``begun_at``)."""
        b, seqs = seg.branch, _seqs(seg)
        found: list[tuple[Callable[[int], list[Hit]], str]] = [
            (lambda n: self.index.keyword_facts(scope, b, terms, n, upto, seqs, begun_at),
             "keyword")]
        if vector:
            found.append((lambda n: self.index.nearest_facts(scope, b, vector, n, seqs,
                                                             begun_at), "nearest"))
        if span is not None and not rest:
            start, end = span
            found.append((lambda n: [(x, 0.0) for x in self.index.facts_overlapping(
                scope, b, start, end, n)], "overlap"))
        return found

    def _eligible(
        self,
        scope: str,
        owners: _Owners,
        rows: list[FactRow],
        visible: BitMap,
        as_of: datetime,
        span: tuple[datetime, datetime] | None,
        cutoff: Cutoff | None = None,
    ) -> dict[int, datetime | None]:
        """Rows worth ranking, with their effective end: the current version of each key
        (newest visible wins at ``as_of``), plus, when the query names a window, any
        visible version whose effective validity overlaps it. With a cutoff, only versions
        (and closures) its segments hold take part, as in ``GET /facts`` on the same view;
        versions of a later segment come after an earlier one's (`cutoff.py`)."""
        if span is None:  # only a current version counts: one not begun never is
            rows = [r for r in rows if begun(r, as_of)]
        if not rows:
            return {}
        keys = {(r.entity, r.predicate) for r in rows}
        # On main, only the versions at or after a key's oldest candidate can decide
        # whether a candidate is current and where its validity ends (newest-wins looks
        # at the versions after it), so older ones are not read.
        since: dict[tuple[str, str], tuple[datetime, int, int]] | None = None
        if cutoff is None:
            since = {}
            for r in rows:
                at = newest_order(r)
                since[(r.entity, r.predicate)] = min(since.get((r.entity, r.predicate), at), at)
        versions = [v for b in owners.branches
                    for v in self.index.versions(scope, b, keys, since)
                    if cutoff is None or cutoff.holds_fact(v)]
        versions = owners.readable_facts(versions, visible)
        if cutoff is not None and cutoff.layered:
            versions = [cutoff.along_chain(v) for v in versions]
        wanted = {r.num for r in rows}
        eligible: dict[int, datetime | None] = {}
        for line in timelines(versions).values():
            now_held = current(line, as_of)
            for held in line:
                v = held.version
                if v.num not in wanted:
                    continue
                if (now_held is not None and now_held.version.num == v.num) or (
                    span is not None and v.valid_from is not None
                    and overlaps(v.valid_from, held.end, *span)
                ):
                    eligible[v.num] = held.end
        return eligible

    def search_passages(
        self,
        scope: str,
        branch: str,
        query: str,
        principal: Principal,
        *,
        limit: int = 10,
        tz: str | None = None,
        now: datetime | None = None,
        cutoff: Cutoff | None = None,
        rerank: bool = False,
    ) -> PassageResults:
        """The passages of the view that best match ``query``, best first. With
        ``rerank`` (and a reranker configured) the top ones are reordered by it."""
        now = now or _now()
        self.require_model()
        window, terms, rest = self._query(query, now, tz)
        span = (window.start, window.end) if window else None
        text = rest or query
        terms = terms or keyword_terms(text)
        vector = self.embedder.embed([text])[0]
        visible = self.visible(principal)
        owners = self._owners(scope, branch, cutoff)
        said = self._words("passages", scope, owners, terms)
        k = max(limit * 5, 50)
        read: dict[int, PassageRow] = {}

        def held_passages(nums: list[int]) -> set[int]:
            assert cutoff is not None
            read.update((p.num, p) for p in self.index.passages(
                n for n in nums if n not in read))
            rows = [read[n] for n in nums if n in read]
            refs = owners.refs(p.episode_num for p in rows)  # one_copy needs them too
            return cutoff.holds_passages(rows, {n: c for n, (_, c) in refs.items()})

        while True:
            keyword: dict[int, float] = {}
            nearest: dict[int, float] = {}
            more = False
            if cutoff is None:
                for b in owners.branches:
                    found = self.index.keyword_passages(scope, b, said, k,
                                                        owners.upto.get(b))
                    near = self.index.nearest_passages(scope, b, vector, k)
                    keyword.update(found)
                    nearest.update(near)
                    more |= len(found) >= k or len(near) >= k
                rows = self.index.passages(set(keyword) | set(nearest))
            else:
                # As for facts: each segment's k best held rows, then the view's k best.
                by_words: list[Callable[[int], list[Hit]]] = []
                by_meaning: list[Callable[[int], list[Hit]]] = []
                for seg in cutoff.segments:
                    b, upto, seqs = seg.branch, owners.upto.get(seg.branch), _seqs(seg)

                    def words(n: int, b: str = b, upto: int | None = upto,
                              seqs: SeqRange | None = seqs) -> list[Hit]:
                        return self.index.keyword_passages(scope, b, said, n, upto, seqs)

                    def meaning(n: int, b: str = b, seqs: SeqRange | None = seqs
                                ) -> list[Hit]:
                        return self.index.nearest_passages(scope, b, vector, n, seqs)

                    by_words.append(words)
                    by_meaning.append(meaning)
                got, full = _view_hits(by_words, held_passages, k)
                keyword.update(got)
                got, full2 = _view_hits(by_meaning, held_passages, k)
                nearest.update(got)
                more |= full or full2
                rows = [read[n] for n in dict.fromkeys([*keyword, *nearest])]
                if cutoff.layered:  # one copy of a passage held on two layers
                    rows = owners.one_copy(rows, cutoff)
                    there = {p.num for p in rows}
                    keyword = {n: v for n, v in keyword.items() if n in there}
                    nearest = {n: v for n, v in nearest.items() if n in there}
                keep = set(_best(keyword, k)) | set(_best(nearest, k))
                rows = [p for p in rows if p.num in keep]
            rows = owners.readable_passages(rows, visible)
            if len(rows) >= limit or not more or k >= MAX_K:
                break
            k *= 4
        cosines = dict(nearest)
        cosines.update(self.index.passage_cosines(
            [p.num for p in rows if p.num not in cosines], vector))
        episodes = {e.num: e for e in self.index.episodes(p.episode_num for p in rows)}
        parts = score_parts([keyword.get(p.num, 0.0) for p in rows],
                            [cosines.get(p.num) for p in rows])
        ranked = []
        for p, part in zip(rows, parts, strict=True):
            episode = episodes[p.episode_num]
            # A passage "holds" at its episode's time: that instant in the window counts.
            boost = time_part(episode.occurred_at, None, span) if span and (
                span[0] <= episode.occurred_at < span[1]) else 0.0
            ranked.append(RankedPassage(p, episode, with_time(part, boost)))
        ranked = [r for r in ranked if r.score > 0]
        ranked.sort(key=_passage_order)
        if rerank and self.rerank is not None and limit > 1:  # else the first is all
            ranked = self._reranked(query, ranked, self.rerank, lambda r: r.row.text,
                                    _passage_order)
        return PassageResults(ranked[:limit], window, terms)

    @staticmethod
    def _reranked(query: str, ranked: list[_R], plan: Rerank, text: Callable[[_R], str],
                  order: Callable[[_R], tuple[Any, ...]]) -> list[_R]:
        """The hybrid's first result stays first; the next ``plan.top - 1`` are scored by
        the reranker (reading the question as asked, and each one's ``text``) and
        reordered by the blend of search/rank.py; the rest keep their places below. The
        first is kept: reranking it too moved a right first passage down on the
        LongMemEval subset (MRR 1.000 → 0.938), and kept, the gain in the places after it
        stays (docs/performance.md)."""
        head = ranked[1:plan.top]
        if len(head) < 2:
            return ranked
        logits = plan.reranker.score(query, [text(r) for r in head])
        scored: list[_R] = [replace(r, parts=p) for r, p in zip(
            head, reranked([r.parts for r in head], logits, plan.weight), strict=True)]
        scored.sort(key=order)
        return ranked[:1] + scored + ranked[plan.top:]


def _answer(row: FactRow) -> bool:
    """Whether a fact row may be a search answer. A closure only ends a value. The schema
    fact is the scope's typing, not memory: listings and typed queries leave it out too.
    It stays in the index (dropping it at ingest would change BM25's statistics for every
    index fed before, and a rebuilt index must score as the live one)."""
    return row.kind != CLOSURE and row.entity != SCHEMA_ENTITY


def _passage_order(r: RankedPassage) -> tuple[float, str, int, int]:
    return (-r.score, r.episode.id, r.row.first_unit, r.row.num)


def _fact_order(f: RankedFact) -> tuple[float, str, str, str]:
    return (-f.score, f.row.entity, f.row.predicate, f.row.id)


def _best(hits: dict[int, float], k: int) -> list[int]:
    """The ``k`` best hits (ties: the lower row number, as each backend breaks them
    within one space)."""
    found = list(hits.items())
    if len(found) > k:
        found = sorted(found, key=lambda h: (-h[1], h[0]))[:k]
    return [n for n, _ in found]


def _seqs(seg: Segment) -> SeqRange | None:
    """The commit seqs a segment holds, to bound its candidate lists (None: all of its
    branch's rows, as main's plain path)."""
    return (seg.after, seg.upto) if seg.after > 0 or seg.upto < NO_LIMIT else None


def _view_hits(sources: list[Callable[[int], list[Hit]]],
               held: Callable[[list[int]], set[int]], k: int,
               score: Callable[[int], float] | None = None,
               ) -> tuple[dict[int, float], bool]:
    """The view's ``k`` best hits of one kind, from its segments' lists (``source(n)``: a
    segment's ``n`` best rows, best first), and whether a list came back full.

    Each list names the rows of its segment's commits where the backend can bound it
    (`SeqRange`); ``held`` decides (a passage's episode commit is looked up in the
    ledger), and only for the rows that can still make the view's k best: the lists
    merged, from the top down until k are held. A segment whose list came back full is
    asked for more while a row it did not list could still be among the view's k best:
    while its last listed score is not below the k-th best held one. The hits' order is
    ``score`` (a row number's; every row listed is read first) when given, else the
    scores listed."""
    n = [k] * len(sources)
    lists: list[list[Hit]] = [[] for _ in sources]
    lasts: list[float | None] = [None] * len(sources)  # a full list's last score
    todo = list(range(len(sources)))
    while True:
        for i in todo:
            hits = sources[i](n[i])
            if score is not None:
                held(list(dict.fromkeys(h for h, _ in hits)))  # read, to be ordered
                hits = [(h, score(h)) for h, _ in hits]
            lists[i] = hits
            lasts[i] = hits[-1][1] if hits and len(hits) >= n[i] else None
        merged = sorted(((h, v, i) for i, found in enumerate(lists) for h, v in found),
                        key=lambda x: (-x[1], x[0]))
        pool: list[tuple[int, float, int]] = []
        at = 0
        while len(pool) < k and at < len(merged):
            batch = merged[at:at + k - len(pool)]
            at += len(batch)
            keep = held([h for h, _, _ in batch])
            pool += [hit for hit in batch if hit[0] in keep]
        bar = pool[k - 1][1] if len(pool) >= k else float("-inf")
        # A segment with k held rows listed has given all it can to the view's k best.
        # Its rows above the k-th held one were all checked on the way down; only its
        # rows tied with it may not have been.
        counts = [0] * len(sources)
        for _, _, i in pool:
            counts[i] += 1
        mine = {i: counts[i] if last > bar else len(held([h for h, _ in lists[i]]))
                for i, last in enumerate(lasts)
                if last is not None and last >= bar and n[i] < MAX_K}
        todo = [i for i, count in mine.items() if count < k]
        if not todo:
            return {h: v for h, v, _ in pool}, any(last is not None for last in lasts)
        for i in todo:
            # As many as the share held so far says k held rows need, and some more (rows
            # already read are not read again).
            held_now = mine[i]
            grow = n[i] * 4 if held_now == 0 else int(n[i] * k / held_now * 1.25) + 8
            n[i] = min(MAX_K, max(n[i] + 8, grow))


def _instant(at: datetime | None) -> float:
    return at.timestamp() if at is not None else float("-inf")


class _Owners:
    """Which row of an episode decides who may read it in a view.

    On main (one segment) every episode has one row and its bits decide. Across a branch's
    chain an episode can have a row on several layers: the one that wrote it, and the one of
    any branch of the chain that changed its ACL (the feed indexes it there with that
    branch's ACL). The row on the latest layer decides, as core's ``_current_acl`` lets a
    later layer's ACL change come after its ancestors'. Facts cite episodes by number, so a
    fact's citations are mapped to their deciding rows first; the visibility rule itself is
    unchanged (`visibility.py`)."""

    def __init__(self, index: SearchIndex, scope: str, branches: tuple[str, ...],
                 upto: dict[str, int]) -> None:
        self.index = index
        self.scope = scope
        self.branches = branches
        self.upto = upto  # branch → the last commit seq its segment holds (held ones)
        self._of: dict[int, int] = {}  # episode number → number of its deciding row
        self._refs: dict[int, tuple[str, str]] = {}  # episode number → (id, commit)

    @property
    def single(self) -> bool:
        return len(self.branches) == 1

    def refs(self, nums: Iterable[int]) -> dict[int, tuple[str, str]]:
        """(id, commit) of the listed episodes, read once per search."""
        wanted = set(nums)
        missing = wanted - self._refs.keys()
        if missing:
            self._refs.update(self.index.episode_refs(missing))
        return {n: self._refs[n] for n in wanted if n in self._refs}

    def _resolve(self, nums: Iterable[int]) -> None:
        missing = set(nums) - self._of.keys()
        if not missing:
            return
        refs = self.refs(missing)
        ids = {i for i, _ in refs.values()}
        latest: dict[str, int] = {}
        # Only a later layer can take an episode over: the first layer's rows decide for
        # themselves unless one holds the id too (a later layer's row replaces an earlier's).
        for b in self.branches[1:]:
            latest.update(self.index.episode_numbers(self.scope, b, ids))
        for n in missing:
            ref = refs.get(n)
            self._of[n] = latest.get(ref[0], n) if ref is not None else n

    def readable_facts(self, rows: list[FactRow], visible: BitMap) -> list[FactRow]:
        if self.single:
            return [r for r in rows if may_read_fact(r.episode_nums, visible)]
        self._resolve(n for r in rows for n in r.episode_nums)
        return [r for r in rows
                if may_read_fact([self._of[n] for n in r.episode_nums], visible)]

    def readable_passages(self, rows: list[PassageRow], visible: BitMap) -> list[PassageRow]:
        if self.single:
            return [p for p in rows if p.episode_num in visible]
        self._resolve(p.episode_num for p in rows)
        return [p for p in rows if self._of[p.episode_num] in visible]

    def one_copy(self, rows: list[PassageRow], cutoff: Cutoff) -> list[PassageRow]:
        """A passage of an episode held on two layers counts once: its latest layer's copy
        (the text is the same; the keyword score is that layer's)."""
        best: dict[tuple[str, int, int], PassageRow] = {}
        for p in rows:
            ref = self._refs.get(p.episode_num)
            key = (ref[0] if ref else str(p.episode_num), p.first_unit, p.last_unit)
            have = best.get(key)
            if have is None or cutoff.layer(p.branch) > cutoff.layer(have.branch):
                best[key] = p
        keep = {p.num for p in best.values()}
        return [p for p in rows if p.num in keep]
