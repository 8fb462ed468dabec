"""The situation map: rewarded tasks sorted into categories, then situations, with no labels.

Task texts are embedded (the server's embedder, `search/embed.py`) and clustered by
average linkage on cosine similarity. For unit vectors the average similarity between two
groups is ``sum_a · sum_b / (n_a · n_b)``, so a group is carried as the sum of its vectors
and every merge is exact. The tree is built over *distinct* task texts (a task repeated a
hundred times is one point: how often it recurs says nothing about its kind); above
`MICRO_CLUSTERS` distinct texts, a few Lloyd (k-means) steps from an evenly spaced start
first cut them into that many leaves, which keeps the merging loop short.

How many situations there are is read from the data: the tree is cut where the mean
silhouette of its leaves (computed exactly from the group sums) is highest; no cut above
`MIN_SILHOUETTE` means no structure, one situation. Categories are the best coarser cut of
the same tree, so each situation lies in exactly one category.

Names come from the tasks' own words (the terms most frequent in a group and least outside
it); a model, when given, may name the groups instead, and any failure of it keeps the word
names. A re-clustering given the previous map keeps the ids of the situations (and
categories) that still exist: new groups take the id of the old one they share most
members with, else of the old one whose centre is nearest (above the serving threshold).

`situation_for` serves advice: a new task's situation is the one whose centre is most
similar to it, if at least `advice_situation_min_similarity`; an unrelated task has none.
The same tasks in any order give the same map (new groups get new ULIDs).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Protocol, TypeVar

from pydantic import BaseModel, Field
from ulid import ULID

from ampup_memory.models.chat import ChatModel, ModelUnavailable
from ampup_memory.search.tokenize import STOPWORDS, words
from ampup_memory.timefmt import format_time

if TYPE_CHECKING:
    import numpy as np

    from ampup_memory.search.embed import Embedder

log = logging.getLogger(__name__)

MICRO_CLUSTERS = 400  # above this many distinct texts, k-means first cuts them into leaves
LLOYD_STEPS = 4
NAME_TERMS = 3
# Below this best mean silhouette the situations show no grouping into categories.
MIN_SILHOUETTE = 0.05
NAMING_SAMPLE = 6  # task texts per group shown to a naming model


class TaskRecord(Protocol):
    """A rewarded run or session, as the data plane (advice/runs.py `RewardedTask`) gives it."""

    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...  # "run" | "session"
    @property
    def task(self) -> str: ...
    @property
    def reward(self) -> float: ...
    @property
    def user(self) -> str: ...
    @property
    def trace(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def advice_key(self) -> str | None: ...
    @property
    def at(self) -> datetime: ...


@dataclass(frozen=True)
class Situation:
    id: str  # sit_<ULID>
    category: str  # cat_<ULID>
    name: str
    terms: tuple[str, ...]
    centroid: tuple[float, ...]  # unit length, in the map's embedder's space
    members: tuple[str, ...]  # task ids, sorted


@dataclass(frozen=True)
class Category:
    id: str
    name: str
    terms: tuple[str, ...]
    situations: tuple[str, ...]


@dataclass(frozen=True)
class SituationMap:
    """One scope's map: plain data, serialisable as JSON (`to_json` / `from_json`)."""

    embedder: str  # the vector space of the centroids (search/embed.py `Embedder.name`)
    built_at: str  # ISO-8601 UTC
    categories: tuple[Category, ...] = ()
    situations: tuple[Situation, ...] = ()
    named_by: str = "words"  # "words" or the naming model's name

    @cached_property
    def centres(self) -> np.ndarray:
        """The situations' centroids as one matrix (built once per map, not per request)."""
        import numpy as np

        return np.asarray([s.centroid for s in self.situations], dtype=np.float64)

    def situation(self, situation_id: str) -> Situation | None:
        return next((s for s in self.situations if s.id == situation_id), None)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SituationMap:
        data = json.loads(text)
        return cls(
            embedder=data["embedder"], built_at=data["built_at"],
            named_by=data.get("named_by", "words"),
            categories=tuple(Category(id=c["id"], name=c["name"], terms=tuple(c["terms"]),
                                      situations=tuple(c["situations"]))
                             for c in data["categories"]),
            situations=tuple(Situation(id=s["id"], category=s["category"], name=s["name"],
                                       terms=tuple(s["terms"]),
                                       centroid=tuple(float(x) for x in s["centroid"]),
                                       members=tuple(s["members"]))
                             for s in data["situations"]),
        )


# -- clustering ------------------------------------------------------------------------------

@dataclass
class _Tree:
    """Average-linkage merges over leaf groups (each a sum of unit vectors and a count)."""

    leaves: list[int]  # per task: its leaf group
    leaf_sums: np.ndarray  # per leaf: the sum of its distinct tasks' vectors
    n_leaves: int = 0
    # (kept, absorbed, average similarity) in merge order; the similarity never rises.
    merges: list[tuple[int, int, float]] = field(default_factory=list)

    def cut(self, k: int) -> list[int]:
        """Per leaf: its group label (0..k-1, in order of first leaf) with ``k`` groups."""
        parent = list(range(self.n_leaves))
        for kept, absorbed, _ in self.merges[: max(0, self.n_leaves - k)]:
            parent[absorbed] = kept

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        labels: dict[int, int] = {}
        return [labels.setdefault(root(i), len(labels)) for i in range(self.n_leaves)]


def _group_sums(labels: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    import numpy as np

    result = np.zeros((k, rows.shape[1]), dtype=rows.dtype)
    if len(labels) == 0:
        return result
    order = np.argsort(labels, kind="stable")
    ordered = labels[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    result[ordered[starts]] = np.add.reduceat(rows[order], starts, axis=0)
    return result


def _micro_groups(x: np.ndarray) -> list[int]:
    """Per row: a micro-group (k-means, evenly spaced start, a few Lloyd steps)."""
    import numpy as np

    n = x.shape[0]
    if n <= MICRO_CLUSTERS:
        return list(range(n))
    x = x.astype(np.float32)  # leaves need no more precision; the merges are in float64
    centres = x[np.linspace(0, n - 1, MICRO_CLUSTERS).astype(int)].copy()
    labels = np.zeros(n, dtype=np.int64)
    for _ in range(LLOYD_STEPS):
        labels = np.argmax(x @ centres.T, axis=1)
        sums = _group_sums(labels, x, MICRO_CLUSTERS)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        empty = norms[:, 0] == 0
        sums[~empty] /= norms[~empty]
        sums[empty] = centres[empty]
        centres = sums
    # Renumber the used groups densely, in order of first row.
    dense: dict[int, int] = {}
    return [dense.setdefault(int(label), len(dense)) for label in labels]


def _linkage(x: np.ndarray, texts: Sequence[str]) -> _Tree:
    """The tree over distinct task texts (the same words twice are one point: how often a
    task recurs says nothing about its kind); above `MICRO_CLUSTERS` distinct texts,
    k-means first cuts them into that many leaves."""
    import numpy as np

    first: dict[str, int] = {}
    distinct_of = [first.setdefault(" ".join(t.lower().split()), len(first)) for t in texts]
    first_row: dict[int, int] = {}
    for i, d in enumerate(distinct_of):
        first_row.setdefault(d, i)
    distinct = x[np.asarray([first_row[d] for d in range(len(first))])]
    micro = _micro_groups(distinct)
    leaves = [micro[d] for d in distinct_of]
    m = max(micro) + 1
    sums = _group_sums(np.asarray(micro), distinct.astype(np.float64), m)
    counts = np.bincount(np.asarray(micro), minlength=m).astype(np.float64)
    tree = _Tree(leaves=leaves, leaf_sums=sums.copy(), n_leaves=m)
    sim = (sums @ sums.T) / np.outer(counts, counts)
    np.fill_diagonal(sim, -np.inf)
    alive = np.ones(m, dtype=bool)
    for _ in range(m - 1):
        flat = int(np.argmax(sim))
        a, b = divmod(flat, m)
        kept, absorbed = min(a, b), max(a, b)  # ties break the same way every time
        tree.merges.append((kept, absorbed, float(sim[a, b])))
        sums[kept] += sums[absorbed]
        counts[kept] += counts[absorbed]
        alive[absorbed] = False
        row = (sums @ sums[kept]) / (counts * counts[kept])
        row[~alive] = -np.inf
        row[kept] = -np.inf
        sim[kept, :] = row
        sim[:, kept] = row
        sim[absorbed, :] = -np.inf
        sim[:, absorbed] = -np.inf
    return tree


def _silhouette(points: np.ndarray, labels: np.ndarray, k: int) -> float:
    """Mean silhouette (distance = 1 - cosine) of unit-length ``points`` grouped by
    ``labels``, exact, from the groups' vector sums."""
    import numpy as np

    sums = _group_sums(labels, points, k)
    counts = np.bincount(labels, minlength=k).astype(points.dtype)
    dots = points @ sums.T  # point i, group c: summed similarity to c's members
    rows = np.arange(points.shape[0])
    own_n = counts[labels]
    own_sum = dots[rows, labels].copy()
    mean_sim = dots / counts
    mean_sim[rows, labels] = -np.inf
    b = 1.0 - mean_sim.max(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):  # a one-member group scores 0
        a = 1.0 - (own_sum - 1.0) / (own_n - 1)
        s = np.where(own_n > 1, (b - a) / np.maximum(np.maximum(a, b), 1e-12), 0.0)
    return float(np.mean(s))


def _candidate_ks(upper: int) -> list[int]:
    """2..40 groups, then about 10 % apart up to ``upper``."""
    ks = set(range(2, min(upper, 40) + 1))
    k = 40.0
    while k < upper:
        k *= 1.1
        ks.add(min(upper, round(k)))
    return sorted(ks)


def _best_cut(tree: _Tree, upper: int) -> list[int]:
    """Per leaf: its group in the cut of 2..``upper`` groups with the highest mean
    silhouette of the leaves (distinct tasks, or k-means groups of them: many copies of one
    task make one tight point, not a reason to split); one group when no cut scores above
    `MIN_SILHOUETTE` (no structure)."""
    import numpy as np

    norms = np.linalg.norm(tree.leaf_sums, axis=1, keepdims=True)
    points = (tree.leaf_sums / np.where(norms == 0, 1.0, norms)).astype(np.float32)
    best, result = MIN_SILHOUETTE, [0] * tree.n_leaves
    for k in _candidate_ks(min(upper, tree.n_leaves - 1)):
        cut = tree.cut(k)
        score = _silhouette(points, np.asarray(cut), k)
        if score > best + 1e-9:
            best, result = score, cut
    return result


# -- names -----------------------------------------------------------------------------------

def _content_words(text: str) -> set[str]:
    return {w for w in words(text) if w not in STOPWORDS and len(w) > 1 and not w.isdigit()}


def word_names(groups: Sequence[Sequence[str]], cache: dict[str, frozenset[str]] | None = None
               ) -> list[tuple[str, ...]]:
    """Per group of texts: its most distinctive terms (share of the group's texts that use
    a word, minus its share among all other texts; ties by word). ``cache`` keeps each
    text's words between calls."""
    cache = {} if cache is None else cache
    bags = [[cache.get(t) or cache.setdefault(t, frozenset(_content_words(t))) for t in texts]
            for texts in groups]
    inside = [Counter(w for bag in group for w in bag) for group in bags]
    total: Counter[str] = Counter()
    for counter in inside:
        total.update(counter)
    sizes = [len(group) for group in bags]
    n_all = sum(sizes)
    names: list[tuple[str, ...]] = []
    for counter, size in zip(inside, sizes, strict=True):
        rest = max(1, n_all - size)

        def score(word: str, counter: Counter[str] = counter, size: int = size,
                  rest: int = rest) -> float:
            return counter[word] / max(1, size) - (total[word] - counter[word]) / rest

        ranked = sorted(counter, key=lambda w: (-score(w), w))
        names.append(tuple(ranked[:NAME_TERMS]))
    return names


class _GroupName(BaseModel):
    id: str
    name: str = Field(min_length=1, max_length=80)


class _Names(BaseModel):
    situations: list[_GroupName]
    categories: list[_GroupName]


NAMING_SYSTEM = (
    "You name groups of tasks for a team's memory. Each situation is a kind of work; each "
    "category groups related situations. Give each a short name (2-6 words) saying the kind "
    "of work, from the tasks shown. Answer JSON: "
    '{"situations": [{"id": "...", "name": "..."}], "categories": [{"id": "...", "name": "..."}]}'
)


def _model_names(model: ChatModel, situations: Sequence[Situation],
                 categories: Sequence[Category], texts: dict[str, str]
                 ) -> tuple[dict[str, str], dict[str, str]] | None:
    lines = ["Situations:"]
    for s in situations:
        sample = [texts[m] for m in s.members[:NAMING_SAMPLE] if m in texts]
        lines.append(f"- id {s.id} (terms: {', '.join(s.terms)})")
        lines.extend(f"    task: {t[:200]}" for t in sample)
    lines.append("Categories:")
    for c in categories:
        lines.append(f"- id {c.id}: situations {', '.join(c.situations)}")
    try:
        answer = model.ask(NAMING_SYSTEM, "\n".join(lines), _Names)
    except ModelUnavailable as exc:
        log.warning("situation naming: %s; keeping word names", exc)
        return None
    return ({n.id: n.name.strip() for n in answer.situations},
            {n.id: n.name.strip() for n in answer.categories})


# -- the map ---------------------------------------------------------------------------------

def _match_ids(new_members: Sequence[set[str]], new_centroids: np.ndarray | None,
               old_members: Sequence[set[str]], old_centroids: np.ndarray | None,
               old_ids: Sequence[str], min_similarity: float) -> list[str | None]:
    """Per new group: the old id it keeps (one-to-one), or None. Largest member overlap
    first; groups sharing no member fall back to the nearest old centre."""
    result: list[str | None] = [None] * len(new_members)
    taken: set[int] = set()
    pairs = sorted(((len(nm & om), -ni, -oi) for ni, nm in enumerate(new_members)
                    for oi, om in enumerate(old_members) if nm & om), reverse=True)
    for _, neg_ni, neg_oi in pairs:
        ni, oi = -neg_ni, -neg_oi
        if result[ni] is None and oi not in taken:
            result[ni] = old_ids[oi]
            taken.add(oi)
    if new_centroids is not None and old_centroids is not None and len(old_ids):
        sims = new_centroids @ old_centroids.T
        close = sorted(((float(sims[ni, oi]), -ni, -oi) for ni in range(len(new_members))
                        for oi in range(len(old_ids)) if float(sims[ni, oi]) >= min_similarity),
                       reverse=True)
        for _, neg_ni, neg_oi in close:
            ni, oi = -neg_ni, -neg_oi
            if result[ni] is None and oi not in taken:
                result[ni] = old_ids[oi]
                taken.add(oi)
    return result


def _unit(v: np.ndarray) -> np.ndarray:
    import numpy as np

    norm = float(np.linalg.norm(v))
    return v / norm if norm else v


def build_map(tasks: Sequence[TaskRecord], embedder: Embedder, *,
              previous: SituationMap | None = None, model: ChatModel | None = None,
              min_similarity: float = 0.35, vectors: Sequence[Sequence[float]] | None = None,
              now: datetime | None = None) -> SituationMap:
    """The situation map of ``tasks`` (ids must be unique).

    ``vectors`` are the tasks' embeddings when the caller already has them (in ``tasks``'
    order, from ``embedder``); otherwise the task texts are embedded here. ``previous``
    keeps the ids of situations and categories that still exist; ``min_similarity`` is the
    serving threshold (`situation_for`), here the least centre similarity by which a group
    sharing no member with an old situation keeps its id. ``model`` (Role.LEARN) names the
    groups; with none, or when it fails, the names are the tasks' own distinctive words."""
    import numpy as np

    built_at = format_time(now or datetime.now(UTC))
    if previous is not None and previous.embedder != embedder.name:
        previous = None  # another vector space: nothing to compare centres with
    order = sorted(range(len(tasks)), key=lambda i: tasks[i].id)
    if not order:
        return SituationMap(embedder=embedder.name, built_at=built_at)
    ids = [tasks[i].id for i in order]
    if len(set(ids)) != len(ids):
        raise ValueError("task ids must be unique")
    texts = [tasks[i].task for i in order]
    raw = vectors if vectors is not None else embedder.embed([t.task for t in tasks])
    if len(raw) != len(tasks):
        raise ValueError("one vector per task is needed")
    x = np.asarray(raw, dtype=np.float64)[order]

    tree = _linkage(x, texts)
    leaf_labels = _best_cut(tree, tree.n_leaves - 1)
    k = max(leaf_labels) + 1
    labels = [leaf_labels[leaf] for leaf in tree.leaves]
    groups: list[list[int]] = [[] for _ in range(k)]
    for i, label in enumerate(labels):
        groups[label].append(i)
    # Categories: the best coarser cut of the same tree (each situation in one category).
    cat_leaf_labels = _best_cut(tree, k - 1) if k > 2 else leaf_labels
    relabel: dict[int, int] = {}
    cat_of_situation = [relabel.setdefault(cat_leaf_labels[tree.leaves[g[0]]], len(relabel))
                        for g in groups]
    cat_k = len(relabel)

    centroids = np.asarray([_unit(x[g].sum(axis=0)) for g in groups])
    members = [{ids[i] for i in g} for g in groups]
    word_cache: dict[str, frozenset[str]] = {}
    sit_terms = word_names([[texts[i] for i in g] for g in groups], word_cache)
    cat_groups = [[i for s, g in enumerate(groups) if cat_of_situation[s] == c for i in g]
                  for c in range(cat_k)]
    cat_terms = word_names([[texts[i] for i in g] for g in cat_groups], word_cache)

    old_sits = previous.situations if previous else ()
    old_cats = previous.categories if previous else ()
    kept = _match_ids(members, centroids, [set(s.members) for s in old_sits],
                      np.asarray([s.centroid for s in old_sits]) if old_sits else None,
                      [s.id for s in old_sits], min_similarity)
    sit_ids = [kid or f"sit_{ULID()}" for kid in kept]
    cat_members = [{ids[i] for i in g} for g in cat_groups]
    old_cat_members = [set().union(*(set(s.members) for s in old_sits
                                     if s.category == c.id)) for c in old_cats]
    kept_cats = _match_ids(cat_members, None, old_cat_members, None,
                           [c.id for c in old_cats], min_similarity)
    cat_ids = [kid or f"cat_{ULID()}" for kid in kept_cats]

    situations = tuple(Situation(
        id=sit_ids[s], category=cat_ids[cat_of_situation[s]],
        name=" ".join(sit_terms[s]) or "tasks", terms=sit_terms[s],
        centroid=tuple(round(float(v), 6) for v in centroids[s]),
        members=tuple(sorted(members[s]))) for s in range(k))
    categories = tuple(Category(
        id=cat_ids[c], name=" ".join(cat_terms[c]) or "tasks", terms=cat_terms[c],
        situations=tuple(situations[s].id for s in range(k) if cat_of_situation[s] == c))
        for c in range(cat_k))
    named_by = "words"
    if model is not None:
        names = _model_names(model, situations, categories, dict(zip(ids, texts, strict=True)))
        if names is not None:
            sit_names, cat_names = names
            situations = tuple(_renamed(s, sit_names.get(s.id)) for s in situations)
            categories = tuple(_renamed(c, cat_names.get(c.id)) for c in categories)
            named_by = model.name
    return SituationMap(embedder=embedder.name, built_at=built_at, categories=categories,
                        situations=situations, named_by=named_by)


_G = TypeVar("_G", Situation, Category)


def _renamed(group: _G, name: str | None) -> _G:
    return replace(group, name=name) if name else group


def situation_for(task_embedding: Sequence[float], smap: SituationMap, *,
                  min_similarity: float, embedder: str | None = None) -> Situation | None:
    """The situation whose centre is most similar to ``task_embedding`` if at least
    ``min_similarity`` (`advice_situation_min_similarity`), else None: an unrelated task
    gets no advice. A vector from another embedder (name or width) matches nothing."""
    import numpy as np

    if not smap.situations or (embedder is not None and embedder != smap.embedder):
        return None
    centres = smap.centres
    v = np.asarray(task_embedding, dtype=np.float64)
    if v.shape != (centres.shape[1],):
        return None
    sims = centres @ _unit(v)
    best = int(np.argmax(sims))
    return smap.situations[best] if float(sims[best]) >= min_similarity else None


def members_of(smap: SituationMap, situation_id: str, tasks: Iterable[TaskRecord]
               ) -> list[TaskRecord]:
    """The tasks of one situation (by the map's member ids), for note learning."""
    situation = smap.situation(situation_id)
    wanted = set(situation.members) if situation else set()
    return [t for t in tasks if t.id in wanted]
