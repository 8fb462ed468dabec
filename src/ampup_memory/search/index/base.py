"""The index contract: what goes in, what a backend must answer.

Input: *index documents* derived from committed data only (a row whose commit is not in
the ledger never becomes one). An :class:`EpisodeDoc` carries its units; a
:class:`FactDoc` carries its citations by episode id. The shared engine
(`search/engine.py`) turns documents into rows (episode numbers, passages, vectors) and
calls a backend; a backend stores rows and answers candidate queries. Every rule (ranking,
visibility, newest-wins) stays above the backend, so both backends answer alike.

Backends are picked by URI scheme (`registry.open_index`): ``sqlite:///path`` (default)
or ``postgresql://…``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from pyroaring import BitMap

from ampup_memory.search.budget import space_terms
from ampup_memory.search.embed import ModelInfo as ModelInfo  # re-exported for backends

# The unit kinds episode types split bodies into, and the letter a citation label uses.
UNIT_LETTERS = {
    "turn": "t",
    "message": "m",
    "paragraph": "p",
    "field": "f",
    "note": "n",
    "reason": "r",
}


@dataclass(frozen=True)
class Unit:
    n: int  # numbered from 1 within the episode
    kind: str  # one of UNIT_LETTERS
    text: str


@dataclass(frozen=True)
class EpisodeDoc:
    id: str
    scope: str
    branch: str
    commit: str
    occurred_at: datetime
    acl: tuple[str, ...]
    units: tuple[Unit, ...]
    source: str = ""
    seq: int = 0  # ledger seq of the commit that put it on this branch (its passages')


@dataclass(frozen=True)
class Cite:
    episode: str
    unit: int


@dataclass(frozen=True)
class FactDoc:
    id: str
    scope: str
    branch: str
    commit: str
    entity: str
    predicate: str
    value: str
    quote: str
    valid_from: datetime | None
    valid_to: datetime | None
    cites: tuple[Cite, ...]
    written_by: str
    # Ledger order of the commit, then position in it: newest-wins tie-breaks.
    commit_seq: int = 0
    ord: int = 0
    kind: str = "value"  # or "closure": ends the version before it, never a result


@dataclass
class DocumentBatch:
    """What one ledger commit (or one rebuild chunk) contributes to the index."""

    episodes: list[EpisodeDoc] = field(default_factory=list)
    facts: list[FactDoc] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.episodes) + len(self.facts)


# ---- rows a backend stores ----------------------------------------------------------


@dataclass(frozen=True)
class EpisodeRow:
    num: int  # the episode's number in every ACL bitmap
    id: str
    scope: str
    branch: str
    commit: str
    occurred_at: datetime
    acl: tuple[str, ...]
    source: str
    unit_kinds: tuple[str, ...]  # kind of unit n at index n-1


@dataclass(frozen=True)
class PassageRow:
    num: int
    episode_num: int
    scope: str
    branch: str
    first_unit: int
    last_unit: int
    # (unit n, kind, text) pieces; a unit longer than a passage appears in several rows.
    units: tuple[tuple[int, str, str], ...]
    # The seq of the commit that put it on its branch (its episode's ``seq``); None: the
    # backend keeps none.
    seq: int | None = None

    @property
    def text(self) -> str:
        return "\n\n".join(t for _, _, t in self.units)


@dataclass(frozen=True)
class FactRow:
    num: int
    id: str
    scope: str
    branch: str
    commit: str
    commit_seq: int
    entity: str
    predicate: str
    value: str
    quote: str
    valid_from: datetime | None
    valid_to: datetime | None
    written_by: str
    cites: tuple[tuple[int, int], ...]  # (episode number, unit n)
    ord: int = 0
    kind: str = "value"

    @property
    def episode_nums(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(e for e, _ in self.cites))


@dataclass(frozen=True)
class NewPassage:
    episode_num: int
    scope: str
    branch: str
    first_unit: int
    last_unit: int
    units: tuple[tuple[int, str, str], ...]
    vector: list[float] | None
    seq: int = 0  # its episode's ``seq``


@dataclass(frozen=True)
class NewFact:
    doc: FactDoc
    cites: tuple[tuple[int, int], ...]
    vector: list[float] | None


@dataclass(frozen=True)
class IndexInfo:
    backend: str
    details: dict[str, str]


Hit = tuple[int, float]  # (row number, raw score): higher is better for both kinds
# (after, upto]: the commit seqs (on the row's own branch) of the rows a candidate list may
# name; a view's segment passes its own, so it lists only rows it holds.
SeqRange = tuple[int, int]


@dataclass(frozen=True)
class Statistics:
    """What BM25 weighs a query's words by: the row count, the token count (with it the
    average length; on PostgreSQL the rows' distinct words) and, per query term in
    order, the rows holding it."""

    rows: int
    tokens: int
    hits: Sequence[int]


@dataclass(frozen=True)
class ViewWords:
    """The query terms a view of several segments ranks by, and the keyword statistics
    that score its rows: both decided once for the view, its segments' rows counted
    together (`SearchIndex.keyword_view`), as on a main holding the view.

    Passed as the ``terms`` of a segment's keyword lists and scores, every term is ranked
    (none is dropped for being absent from that segment alone) and, where the keyword
    score has collection statistics (SQLite's BM25), each segment's rows are scored with
    the view's: on a branch of a few rows a word is then weighed as in the whole view, not
    near zero for being in all of them (both backends' BM25)."""

    terms: tuple[str, ...]
    stats: Statistics | None = None  # the view's rows, tokens and rows holding each term
    # (branch, mark) of each space whose rows were counted: how far they were counted, in
    # the backend's own measure (PostgreSQL: the seq of the space's newest row's commit;
    # SQLite: the row its keyword file was applied up to). Passed as ``terms``, a space is
    # taken at its mark (its budget's counts, and on SQLite the rows listed), not at its
    # newest rows again: a search's steps count the same rows of it, whatever is written
    # between them.
    marks: tuple[tuple[str, int], ...] = ()

    def mark(self, branch: str) -> int | None:
        """How far this view counted the rows of ``branch``'s space (None: not at all)."""
        return dict(self.marks).get(branch)


# A query's terms: one space's own (that space's budget and statistics), or a view's.
Terms = Sequence[str] | ViewWords


def words_of(terms: Terms) -> list[str]:
    """The terms themselves, of a space's own or of a view's."""
    return list(terms.terms) if isinstance(terms, ViewWords) else list(terms)


def own_terms(terms: Terms, branch: str) -> tuple[list[str], bool] | None:
    """For the words of a view of ``branch``'s space alone (a fact search's, taken once,
    `SearchIndex.keyword_view`): the terms to rank, and whether their postings are over
    the budget (`space_terms`), from the counts the view took; its statistics are the
    space's own at its mark. None for a space's own terms or a view of other spaces too."""
    if not isinstance(terms, ViewWords) or terms.stats is None or (
            [b for b, _ in terms.marks] != [branch]):
        return None
    counted = dict(zip(terms.terms, terms.stats.hits, strict=True))
    return space_terms(terms.terms, counted.__getitem__, view=True)



class SearchIndex(Protocol):
    """One derived index. Higher raw scores are better; callers normalise them."""

    info: IndexInfo

    # -- model and bookkeeping ---------------------------------------------------------
    def model(self) -> ModelInfo | None:
        """The embedding model the stored vectors came from (None: empty index)."""
        ...

    def set_model(self, model: ModelInfo) -> None:
        """Record the model; drops every stored vector when name or dimension changed."""
        ...

    def passage_cut(self) -> str | None:
        """How the stored passages were cut (`search/passages.py` ``CUT``); None: not
        recorded (an empty index, or one from before the cut was recorded)."""
        ...

    def set_passage_cut(self, cut: str) -> None:
        """Record how passages are cut (the caller empties an index cut another way)."""
        ...

    def cursor(self, scope: str, branch: str) -> str | None:
        """The last ledger commit applied for this scope and branch."""
        ...

    def set_cursor(self, scope: str, branch: str, commit: str) -> None: ...

    def scopes(self) -> list[tuple[str, str]]:
        """Every (scope, branch) that has a cursor."""
        ...

    def clear(self, scope: str | None = None) -> None:
        """Forget everything (or one scope: its rows, cursors and bitmap bits)."""
        ...

    def clear_branch(self, scope: str, branch: str) -> None:
        """Forget one (scope, branch): its rows, cursor, keyword statistics and bitmap
        bits (a deleted branch; a branch made later under its name starts empty)."""
        ...

    # -- writes ------------------------------------------------------------------------
    # Every write below is called inside ``transaction()``.
    def upsert_episodes(self, docs: Sequence[EpisodeDoc]) -> list[tuple[int, bool]]:
        """Each episode's number, and whether it is new (else its ACL/metadata is refreshed
        and its bitmap bits moved to the new ACL entries), in the order given; new ones
        are numbered in that order."""
        ...

    def episode_numbers(self, scope: str, branch: str, ids: Iterable[str]) -> dict[str, int]:
        """Numbers of the listed episodes that the index holds."""
        ...

    def add_passages(self, passages: Sequence[NewPassage]) -> None:
        """Passages of episodes just numbered (only for new episodes)."""
        ...

    def upsert_facts(self, facts: Sequence[NewFact]) -> None:
        """Insert facts; one already present (same id, scope, branch) is left alone."""
        ...

    def transaction(self) -> AbstractContextManager[None]:
        """Writes inside land together or not at all; one writer at a time."""
        ...

    # -- visibility --------------------------------------------------------------------
    def acl_bitmap(self, entry: str) -> BitMap:
        """Episode numbers whose ACL holds this entry (a copy; empty if none)."""
        ...

    # -- candidates --------------------------------------------------------------------
    # Keyword scores of one (scope, branch) depend on its own rows only: nothing written
    # to another scope or branch may change them (tests/test_scope_isolation.py); only a
    # view's `ViewWords`, passed as ``terms``, carry the statistics of the view's other
    # segments of the same scope.
    # ``upto`` (a held search: a pin, a snapshot, ``at_commit``, a branch's base) is a
    # ledger seq of the branch: each held row's score then depends only on the rows its
    # commits up to that seq put there, so later commits move no held score
    # (tests/test_pins.py). ``seqs`` bounds which rows are listed (the k best of the rows
    # whose commit seq is in it), not how they are scored; a backend that cannot bound a
    # list may name other rows too: the engine still cuts candidates to the view.
    # ``begun_at``: the k best of the facts whose validity has begun then
    # (`memory.facts.begun`, which the engine still applies to every candidate), so a
    # search at an instant before most facts begin needs no wider rounds.
    def keyword_facts(self, scope: str, branch: str, terms: Terms, k: int,
                      upto: int | None = None, seqs: SeqRange | None = None,
                      begun_at: datetime | None = None) -> list[Hit]:
        ...

    def nearest_facts(self, scope: str, branch: str, vector: Sequence[float], k: int,
                      seqs: SeqRange | None = None, begun_at: datetime | None = None
                      ) -> list[Hit]:
        ...

    def keyword_view(self, kind: str, scope: str, spaces: Sequence[tuple[str, int | None]],
                     terms: Sequence[str]) -> ViewWords:
        """The query terms a keyword pass over several (branch, ``upto``) spaces of one
        scope ranks by, as if they were one space (a view's segments: ``kind`` is
        ``facts`` or ``passages``), with the statistics of their rows together (each
        space's rows up to ``upto``; None: all it holds now). Both backends keep the terms
        by the one budget (`search/budget.py`), each term's rows counted in the spaces
        together, and record how far each space's rows were counted (``marks``).

        A fact search takes them for its one space too: it scores in two steps (its
        candidate lists, then `fact_keyword` for facts found otherwise), and with the
        statistics taken here once, a write landing between the steps cannot weigh the
        two by statistics a commit apart, nor make the second count them again."""
        ...

    def keyword_passages(
        self, scope: str, branch: str, terms: Terms, k: int, upto: int | None = None,
        seqs: SeqRange | None = None,
    ) -> list[Hit]: ...

    def nearest_passages(
        self, scope: str, branch: str, vector: Sequence[float], k: int,
        seqs: SeqRange | None = None,
    ) -> list[Hit]: ...

    def fact_cosines(self, nums: Sequence[int], vector: Sequence[float]) -> dict[int, float]:
        """Cosine of the query with each listed fact (those that have a vector)."""
        ...

    def passage_cosines(self, nums: Sequence[int], vector: Sequence[float]) -> dict[int, float]:
        ...

    def fact_keyword(
        self, scope: str, branch: str, nums: Sequence[int], terms: Terms,
        upto: int | None = None,
    ) -> dict[int, float]:
        """Raw keyword score of each listed fact of (scope, branch) that matches the terms
        at all, on the same scale as :meth:`keyword_facts` given the same ``terms``: with a
        view's words, the same statistics, however many rows were written since."""
        ...

    # -- rows --------------------------------------------------------------------------
    def facts(self, nums: Iterable[int]) -> list[FactRow]: ...

    def versions(
        self, scope: str, branch: str, keys: Iterable[tuple[str, str]],
        since: Mapping[tuple[str, str], tuple[datetime, int, int]] | None = None,
    ) -> list[FactRow]:
        """Every version of each (entity, predicate) key; with ``since``, of a key it
        names only the versions at or after that place in newest-wins' order
        (`memory.facts.newest_order`: ``valid_from``, none counting as its epoch, then
        commit seq, then position), so older versions are neither read nor parsed."""
        ...

    def facts_overlapping(
        self, scope: str, branch: str, start: datetime, end: datetime, limit: int
    ) -> list[int]:
        """Facts whose validity [valid_from, valid_to) overlaps [start, end)."""
        ...

    def passages(self, nums: Iterable[int]) -> list[PassageRow]: ...

    def episodes(self, nums: Iterable[int]) -> list[EpisodeRow]: ...

    def episode_refs(self, nums: Iterable[int]) -> dict[int, tuple[str, str]]:
        """(id, commit) of each listed episode the index holds: what a search on a
        branch needs of its candidates' episodes, without reading the rows whole."""
        ...

    def missing_vectors(self, kind: str, limit: int) -> list[tuple[int, str]]:
        """Up to ``limit`` (num, text) rows of ``facts``/``passages`` with no vector."""
        ...

    def set_vectors(self, kind: str, vectors: Sequence[tuple[int, list[float]]]) -> None: ...

    def counts(self, scope: str | None = None) -> dict[str, int]:
        """Rows per kind: episodes, passages, facts."""
        ...

    def graphs(self) -> dict[str, int] | None:
        """Counters of this process's saved HNSW graphs (embedded index); None if the
        backend keeps none (PostgreSQL: pgvector's index lives in the database)."""
        ...

    def close(self) -> None: ...


def fact_text(entity: str, predicate: str, value: str, quote: str) -> str:
    """What a fact's embedding is computed from."""
    text = f"{entity} {predicate.replace('_', ' ')} {value}"
    return f"{text}. {quote}" if quote else text
