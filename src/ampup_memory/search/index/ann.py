"""An approximate nearest-neighbour index (HNSW, usearch) beside one vector matrix.

It only proposes candidates: `common.VectorMatrix` re-scores every one of them exactly
(`common.dots`), so a score never depends on the graph, and applies its own tie rule at
the cut. What the graph can change is which rows are proposed; to keep that the same for
a live index, a reopened one and a rebuilt one, rows enter the graph one at a time, on
one thread, in ascending row number (the order the feed numbers them in, the same live
and rebuilt: docs/search.md) and with the same vectors, and usearch draws each node's
level from a generator with a fixed seed. A change to a row already in the graph (its
vector replaced or removed) drops the graph, and the next query builds it again in that
same order from the matrix as it then is, so the graph is a function of the rows alone.

Below `AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS` rows (per scope and branch, per table) there
is no graph: the matrix answers exactly, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

ANN_MIN_VECTORS = 0  # the default of AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS: off
CONNECTIVITY = 16  # HNSW M: links per node
EXPANSION_ADD = 128  # efConstruction
EXPANSION_SEARCH = 128  # efSearch floor; a query asking for more candidates widens it
OVERFETCH = 2  # the graph proposes k × this, the matrix keeps the exact k best of them
EXACT_SHARE = 4  # a query asking for at least rows/4 candidates is answered exactly
DTYPE = "f16"  # the graph's copy of the vectors; candidates are re-scored in float32


class Ann:
    """HNSW graph over the rows of one matrix, keyed by row number (inner product)."""

    def __init__(self, dimensions: int) -> None:
        from usearch.index import Index

        self._index: Any = Index(
            ndim=dimensions, metric="ip", dtype=DTYPE, connectivity=CONNECTIVITY,
            expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH,
        )
        self.last = -1  # the highest row number in the graph: rows enter in ascending order

    def __len__(self) -> int:
        return len(self._index)

    def add(self, nums: np.ndarray, vectors: np.ndarray) -> None:
        """Add rows numbered above every row already in (ascending ``nums``)."""
        import numpy as np

        if not len(nums):
            return
        self._index.add(nums.astype(np.uint64), vectors, threads=1)
        self.last = int(nums[-1])

    def candidates(self, query: np.ndarray, k: int) -> np.ndarray:
        """Row numbers of (about) the ``OVERFETCH`` × k nearest rows, by the graph: more
        than k, so rows tied with the k-th (or a float apart) are among them and the
        exact cut can pick the lower row number as exact search does."""
        import numpy as np

        count = OVERFETCH * k
        self._index.expansion_search = max(EXPANSION_SEARCH, count)
        found = self._index.search(query, count, threads=1)
        keys: np.ndarray = np.asarray(found.keys, dtype=np.int64)
        return keys

    @property
    def memory_bytes(self) -> int:
        return int(self._index.memory_usage)
