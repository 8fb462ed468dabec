"""Search as of a commit (``at_commit``): which index rows were committed by then.

The same cut as core's reads (``View.max_seq`` in `memory/service.py`): a row counts when
the commit that wrote it has a ledger seq at or below the chosen commit's. Facts carry
their commit's seq in the index; an episode (and so its passages) carries the id of the
commit that first wrote it, resolved to a seq through the ledger.

Only *what* was committed is cut. Visibility stays the current ACL: the index keeps
today's bitmaps and no ACL history, so a search as of a commit shows what was committed
then and is readable now (never anything the caller cannot read today).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ampup_memory.search.index.base import EpisodeRow, FactRow

SeqsOf = Callable[[Iterable[str]], dict[str, int]]


@dataclass
class Cutoff:
    commit: str
    seq: int  # ledger seq of ``commit``
    # Ledger seq of commits of this scope and branch (core's ledger); unknown ids are left out.
    seqs_of: SeqsOf
    _known: dict[str, int | None] = field(default_factory=dict, repr=False)

    def holds_fact(self, row: FactRow) -> bool:
        return row.commit_seq <= self.seq

    def episodes(self, rows: Iterable[EpisodeRow]) -> set[int]:
        """Numbers of the listed episodes written at or before the cut."""
        rows = list(rows)
        missing = {r.commit for r in rows} - self._known.keys()
        if missing:
            found = self.seqs_of(missing)
            self._known.update({c: found.get(c) for c in missing})
        return {r.num for r in rows
                if (seq := self._known[r.commit]) is not None and seq <= self.seq}
