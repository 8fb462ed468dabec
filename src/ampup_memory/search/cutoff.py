"""What a search reads of a view other than the whole of main: a branch, a commit, or both.

A search on main reads every row of (scope, main) and takes the engine's plain path. Any
other read is a view of core's (`memory/segments.py`, resolved by ``MemoryService.view``
alone): a chain of segments, oldest ancestor first, each the rows of one branch whose commit
seq is in ``(after, upto]`` (``at_commit`` caps the last one). The search index keeps its
rows per (scope, branch), so the engine takes candidates from each segment's branch and
keeps a row only when its segment holds the commit that wrote it, the same cut as core's
reads:

* a fact carries its commit's seq on its own branch;
* an episode (and so its passages) carries the id of the commit that wrote it, resolved
  to a seq through the ledger on the branch of the chain that made it. A branch's copy of
  an ancestor's episode (its ACL was changed on the branch, which indexes it there too)
  keeps the ancestor's commit, so it is in the view exactly when the ancestor's row is.

Facts of later segments come after every fact of earlier ones (:func:`layer_order`, as
``FactRecord.commit_seq``), so a branch's own version beats its base's at equal valid
time. Only *what* was committed is cut. Visibility stays the current ACL: the index keeps
today's bitmaps and no ACL history, so a search as of a commit shows what was committed
then and is readable now (never anything the caller cannot read today).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from ampup_memory.memory.segments import Segments, layer_order, layers
from ampup_memory.search.index.base import FactRow, PassageRow

# Commit ids → (branch, ledger seq) of those that are commits of this scope.
PlacesOf = Callable[[Iterable[str]], dict[str, tuple[str, int]]]


@dataclass
class Cutoff:
    segments: Segments
    places_of: PlacesOf
    commit: str | None = None  # the ``at_commit`` asked for, echoed in the answer
    _layers: dict[str, int] = field(default_factory=dict, repr=False)
    _known: dict[str, bool] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._layers = layers(self.segments)

    @property
    def layered(self) -> bool:
        """More than one segment: rows of several branches meet in one answer."""
        return len(self.segments) > 1

    def holds_fact(self, row: FactRow) -> bool:
        layer = self._layers.get(row.branch)
        return layer is not None and self.segments[layer].holds(row.commit_seq)

    def along_chain(self, row: FactRow) -> FactRow:
        """The row with its commit seq ordered along the chain (newest-wins' tie-break)."""
        layer = self._layers[row.branch]
        return row if layer == 0 else replace(row, commit_seq=layer_order(layer,
                                                                          row.commit_seq))

    def layer(self, branch: str) -> int:
        return self._layers.get(branch, -1)

    def episodes(self, commits: dict[int, str]) -> set[int]:
        """Of episode numbers → the commit that wrote each, those a segment holds."""
        missing = set(commits.values()) - self._known.keys()
        if missing:
            found = self.places_of(missing)
            for c in missing:
                branch, seq = found.get(c, ("", 0))
                layer = self._layers.get(branch)
                self._known[c] = layer is not None and self.segments[layer].holds(seq)
        return {n for n, c in commits.items() if self._known[c]}

    def holds_passages(self, rows: Iterable[PassageRow], commits: dict[int, str]) -> set[int]:
        """Of passage rows (``commits``: episode number → the commit that wrote it), the
        numbers of those a segment holds. A row of the oldest ancestor is decided by its
        own seq when the index keeps one: that branch holds no copy of another's episode,
        so the seq is its commit's (no ledger look-up); any other row by its episode's
        commit (a branch's copy of an ancestor's episode keeps the ancestor's commit)."""
        found: set[int] = set()
        rest: list[PassageRow] = []
        first = self.segments[0]
        for p in rows:
            if p.seq is not None and p.branch == first.branch:
                if first.holds(p.seq):
                    found.add(p.num)
            else:
                rest.append(p)
        if rest:
            cut = self.episodes({p.episode_num: commits[p.episode_num] for p in rest
                                 if p.episode_num in commits})
            found.update(p.num for p in rest if p.episode_num in cut)
        return found
