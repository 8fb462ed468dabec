"""Helpers both index backends share: time text, JSON columns, the in-memory vector matrix."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ampup_memory.search.index.ann import EXACT_SHARE, Ann
from ampup_memory.timefmt import format_time, parse_time

if TYPE_CHECKING:
    import numpy as np


def time_text(value: datetime | None) -> str | None:
    """Fixed width, UTC (`timefmt.format_time`), so text order is time order in SQL."""
    return None if value is None else format_time(value)


def parse_time_text(text: str | None) -> datetime | None:
    return None if text is None else parse_time(text)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def vector_blob(vector: Sequence[float] | None) -> bytes | None:
    import numpy as np

    if vector is None:
        return None
    return np.asarray(vector, dtype=np.float32).tobytes()


def dots(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each row's dot product with the query, the same float whatever matrix the row is in.

    BLAS matrix-vector products (``matrix @ query``) sum a row in an order that depends on
    where the row sits (rows past the last full block of the kernel take another path), so
    one row's cosine changed in its last bit as its matrix grew or was filled in another
    order: a rebuilt index scored a few results 1e-7 apart from the live one. einsum
    without ``optimize`` never calls BLAS and sums every row alike; on this machine it is
    also faster than gemv (4 ms against 8 ms for 100k × 256). A test pins the property.
    """
    import numpy as np

    result: np.ndarray = np.einsum("ij,j->i", matrix, query)
    return result


class VectorMatrix:
    """The vectors of one (scope, branch) of one table, for cosine.

    Vectors are unit length, so a dot product is the cosine. Rows are appended to a list
    and stacked on the next query, so a run of small writes costs no repeated copying.
    From ``ann_min`` rows on (0: never) an HNSW graph (`ann.py`) proposes the candidates
    of :meth:`top` and the matrix re-scores them exactly; below it every row is scored.
    """

    def __init__(self, dimensions: int, ann_min: int = 0) -> None:
        import numpy as np

        self.dimensions = dimensions
        self.ann_min = ann_min
        self.nums = np.zeros(0, dtype=np.int64)
        self.matrix = np.zeros((0, dimensions), dtype=np.float32)
        self.pos: dict[int, int] = {}
        self._pending: list[tuple[int, np.ndarray]] = []
        self.ann: Ann | None = None
        self._removed: set[int] = set()  # zeroed rows: never proposed by the graph

    def put(self, num: int, vector: np.ndarray) -> None:
        at = self.pos.get(num)
        if at is not None:
            self.matrix[at] = vector
            self._removed.discard(num)
            self.ann = None  # a row of the graph changed: rebuilt on the next query
            return
        self.pos[num] = len(self.nums) + len(self._pending)
        self._pending.append((num, vector))

    def remove(self, num: int) -> None:
        at = self.pos.get(num)
        if at is None:
            return
        self._settle()
        self.matrix[at] = 0.0  # a zero row never ranks above a real match
        self._removed.add(num)
        self.ann = None

    def _settle(self) -> None:
        import numpy as np

        if not self._pending:
            return
        nums = np.asarray([n for n, _ in self._pending], dtype=np.int64)
        rows = np.vstack([v for _, v in self._pending]).astype(np.float32)
        self.nums = np.concatenate([self.nums, nums])
        self.matrix = np.vstack([self.matrix, rows])
        self._pending = []

    def _graph(self) -> Ann | None:
        """The HNSW graph over every row, brought up to date; None below ``ann_min`` rows.

        Rows enter in ascending number, so the graph is the same however the rows came
        (one commit at a time, a rebuild's batches, a reopened file): see `ann.py`."""
        import numpy as np

        live = len(self.nums) - len(self._removed)
        if self.ann_min <= 0 or live < self.ann_min:
            self.ann = None
            return None
        if self.ann is not None and len(self.ann) == live:
            return self.ann
        keep = np.ones(len(self.nums), dtype=bool)
        if self._removed:
            gone = np.fromiter(self._removed, dtype=np.int64, count=len(self._removed))
            keep = ~np.isin(self.nums, gone)
        new = np.flatnonzero((self.nums > (self.ann.last if self.ann else -1)) & keep)
        if self.ann is None or len(self.ann) + len(new) != live:
            # No graph yet, or a row numbered below the graph's last: build it afresh.
            self.ann = Ann(self.dimensions)
            new = np.flatnonzero(keep)
        new = new[np.argsort(self.nums[new], kind="stable")]
        self.ann.add(self.nums[new], self.matrix[new])
        return self.ann

    def top(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        import numpy as np

        self._settle()
        if not len(self.nums) or k <= 0:
            return []
        ann = self._graph() if k * EXACT_SHARE < len(self.nums) else None
        if ann is not None:
            # The graph proposes, the matrix scores: the same float as an exact search
            # gives each row, and the same tie rule at the cut below.
            rows = np.asarray([self.pos[int(n)] for n in ann.candidates(query, k)],
                              dtype=np.int64)
            sims = dots(self.matrix[rows], query)
            nums = self.nums[rows]
        else:
            sims = dots(self.matrix, query)
            nums = self.nums
        if k >= len(sims):
            idx = np.arange(len(sims))
        else:
            # The k best; at the cut, equal scores go to the lower row number, so the same
            # rows make the cut whatever order the matrix was filled in.
            kth = np.partition(sims, len(sims) - k)[len(sims) - k]
            above = np.flatnonzero(sims > kth)
            tied = np.flatnonzero(sims == kth)
            tied = tied[np.argsort(nums[tied], kind="stable")][: k - len(above)]
            idx = np.concatenate([above, tied])
        return [(int(nums[i]), float(sims[i])) for i in idx]

    def cosines(self, query: np.ndarray, nums: Sequence[int]) -> dict[int, float]:
        self._settle()
        found = [(n, self.pos[n]) for n in nums if n in self.pos]
        if not found:
            return {}
        sims = dots(self.matrix[[p for _, p in found]], query)
        return {n: float(v) for (n, _), v in zip(found, sims, strict=True)}


class VectorCache:
    """Per-(scope, branch) matrices of one table, kept in step with the table by a
    high-water mark on the table's ``vec_seq`` column and an index generation number."""

    def __init__(self, ann_min: int = 0) -> None:
        self.lock = threading.Lock()
        self.ann_min = ann_min  # rows of a matrix from which an HNSW graph proposes
        self.generation: int | None = None
        self.high_water = 0
        self.by_key: dict[tuple[str, str], VectorMatrix] = {}
        self.key_of: dict[int, tuple[str, str]] = {}

    def reset(self, generation: int) -> None:
        self.generation = generation
        self.high_water = 0
        self.by_key = {}
        self.key_of = {}

    def apply(self, rows: Sequence[tuple[int, str, str, bytes | None, int]], dims: int) -> None:
        """Rows of (num, scope, branch, vec, vec_seq) changed since the high-water mark."""
        import numpy as np

        for num, scope, branch, blob, vec_seq in rows:
            self.high_water = max(self.high_water, int(vec_seq))
            key = (scope, branch)
            matrix = self.by_key.get(key)
            if blob is None:
                if matrix is not None:
                    matrix.remove(num)
                continue
            vector = np.frombuffer(blob, dtype=np.float32)
            if vector.shape[0] != dims:
                continue  # written under another model: re-embedding will replace it
            if matrix is None:
                matrix = self.by_key[key] = VectorMatrix(dims, self.ann_min)
            matrix.put(num, vector)
            self.key_of[num] = key

    def top(self, scope: str, branch: str, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        matrix = self.by_key.get((scope, branch))
        return matrix.top(query, k) if matrix is not None else []

    def cosines(self, nums: Sequence[int], query: np.ndarray) -> dict[int, float]:
        found: dict[int, float] = {}
        groups: dict[tuple[str, str], list[int]] = {}
        for n in nums:
            key = self.key_of.get(n)
            if key is not None:
                groups.setdefault(key, []).append(n)
        for key, members in groups.items():
            found.update(self.by_key[key].cosines(query, members))
        return found
