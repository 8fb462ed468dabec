"""Helpers both index backends share: time text, JSON columns, the in-memory vector matrix."""

from __future__ import annotations

import atexit
import json
import logging
import threading
import weakref
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ampup_memory.search.index.ann import (
    DEFAULT_PARAMS,
    EXACT_SHARE,
    EXPANSION_SEARCH,
    INLINE_ROWS,
    OVERFETCH,
    Ann,
    GraphFile,
    GraphParams,
    GraphStats,
    checkpoint_after,
    fingerprint,
    graph_path,
)
from ampup_memory.timefmt import format_time, parse_time

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("ampup_memory.search")

# `VectorMatrix.top` for one group of rows (an AMP owner, a view's segment) takes the
# cheapest path (`group_candidates`), costed in rows scored in place (about 0.1 us each at
# 256 dimensions): the graph, asked for k / (the group's share of the rows) candidates,
# GROUP_COST per candidate (never fewer than its efSearch floor gives); the group's rows
# gathered, GATHER_COST each; every row scored in place (the group's filtered out after);
# or the group's own block, a contiguous copy of its rows scored in place, BLOCK_COST a
# row (GATHER_COST while not yet built: its first search gathers the rows into it).
# Measured at 100k and 1M rows (docs/performance.md, "AMP cell search at 1M: where the
# time goes"): a row in place 0.10 us, a gathered row 0.42 to 0.50 us, a graph candidate 16
# to 20 us at 100k and 39 to 50 us at 1M (GROUP_COST is between: a large owner at 1M is
# scored exactly, a view's base segment at 100k is not). A block is kept in step with the
# matrix (`VectorMatrix._block`); only a group holding at least one row in BLOCK_SHARE may
# have one, and the blocks together hold at most one row in BLOCK_BUDGET of the matrix (at
# 1M 256-d rows: 256 MB beside the 1 GB matrix; a larger group's block displaces smaller
# ones). Views' segments (`top(seqs=...)`) have no blocks.
GROUP_COST = 300
GATHER_COST = 4
BLOCK_COST = 1
BLOCK_SHARE = 32
BLOCK_BUDGET = 4
# Rows gathered and scored at a time: one small buffer instead of a copy of every row.
GATHER_CHUNK = 1024
# Rows a background build adds between two checks of whether to stop (about a second of
# one core at most).
BUILD_CHUNK = 1024
# Set when the interpreter exits: a background build stops at its next chunk. A daemon
# thread still inside usearch's C++ code while the interpreter tears down aborts the whole
# process ("terminate called without an active exception", exit 134), so exit waits for it.
_EXITING = threading.Event()


GRAPH_THREAD = "ampup-search-graph"  # the prefix of the builders' and savers' names
# The graph threads of matrices dropped (their index or store closed): asked to stop, and
# what `join_graph_threads` waits for. Another runtime's, still open, are not here.
_STOPPING: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def _join(threads: list[threading.Thread], timeout: float) -> int:
    import time

    end = time.monotonic() + timeout
    for thread in threads:
        if thread is not threading.current_thread():
            thread.join(max(0.0, end - time.monotonic()))
    return sum(t.is_alive() for t in threads)


def join_graph_threads(timeout: float) -> int:
    """Wait up to ``timeout`` seconds in all for the graph builders and savers of the
    matrices closed so far (`VectorMatrix.drop`: a build stops at its next chunk, a save
    finishes its file, written whole or not at all); returns how many still run."""
    return _join(list(_STOPPING), timeout)


@atexit.register
def _stop_graph_threads(timeout: float = 10.0) -> None:
    _EXITING.set()
    _join([t for t in threading.enumerate() if t.name.startswith(GRAPH_THREAD)], timeout)


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


GroupWay = Literal["graph", "block", "gather", "scan"]


def group_candidates(k: int, held: int, rows: int, *, graph: bool = True,
                     block: bool | None = None) -> tuple[GroupWay, int]:
    """The cheapest way to the ``k`` nearest of a group of ``held`` of the ``rows`` rows,
    costed in rows scored in place (the costs beside `GROUP_COST`), and for ``"graph"``
    how many candidates to ask it for (k / the group's share). ``graph``: a graph is
    ready; ``block``: the group's block is built (True), may be built (False, its first
    search gathers the rows once), or may not (None)."""
    want = -(-k * rows // held)
    costs: dict[GroupWay, int] = {"scan": rows, "gather": held * GATHER_COST}
    if block is not None:
        costs["block"] = held * (BLOCK_COST if block else GATHER_COST)
    # At equal cost: a block before a gather (the gather builds it), a scan before one.
    order: tuple[GroupWay, ...] = ("block", "scan", "gather")
    way = min(order, key=lambda w: costs.get(w, rows + 1))
    if graph and GROUP_COST * max(want, EXPANSION_SEARCH // OVERFETCH) <= costs[way]:
        return "graph", want
    return way, 0


def dots_at(matrix: np.ndarray, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``dots(matrix[rows], query)``, the same floats, without copying the rows all at once:
    `GATHER_CHUNK` rows at a time through one small buffer (a copy of an 80,000-row group
    is 80 MB per query; the chunks are about 5 % faster, and use 1 MB)."""
    import numpy as np

    if len(rows) <= GATHER_CHUNK:
        return dots(matrix[rows], query)
    out = np.empty(len(rows), dtype=np.float32)
    buf = np.empty((GATHER_CHUNK, matrix.shape[1]), dtype=matrix.dtype)
    for start in range(0, len(rows), GATHER_CHUNK):
        part = rows[start:start + GATHER_CHUNK]
        block = buf[:len(part)]
        np.take(matrix, part, axis=0, out=block)
        out[start:start + len(part)] = dots(block, query)
    return out


class _Block:
    """One group's rows copied into one contiguous buffer (`group_candidates`, "block"):
    ``pos`` their positions in the matrix, ascending, ``rows[:len(pos)]`` their vectors,
    the same floats; ``covered``: the matrix rows looked at, later ones are the group's
    rows still to append."""

    def __init__(self, pos: np.ndarray, rows: np.ndarray, covered: int) -> None:
        self.pos = pos
        self.rows = rows
        self.covered = covered

    def __len__(self) -> int:
        return len(self.pos)

    @property
    def bytes(self) -> int:
        return int(self.rows.nbytes + self.pos.nbytes)

    def append(self, pos: np.ndarray, vectors: np.ndarray) -> None:
        """Add rows past the last; the buffer grows by a quarter when full."""
        import numpy as np

        have, need = len(self.pos), len(self.pos) + len(pos)
        if need > len(self.rows):
            rows = np.empty((need + need // 4, self.rows.shape[1]), dtype=self.rows.dtype)
            rows[:have] = self.rows[:have]
            self.rows = rows
        self.rows[have:need] = vectors
        self.pos = np.concatenate([self.pos, pos])


class VectorMatrix:
    """The vectors of one (scope, branch) of one table, for cosine.

    Vectors are unit length, so a dot product is the cosine. Rows are appended to a list
    and stacked on the next query, so a run of small writes costs no repeated copying.
    From ``ann_min`` rows on (0: never) an HNSW graph (`ann.py`) proposes the candidates
    of :meth:`top` and the matrix re-scores them exactly; below it every row is scored.

    The graph is loaded (``file``, when saved and still the rows') or built by a
    background thread while exact search answers, and swapped in when it has every row;
    a query adds the few rows written since (more than `INLINE_ROWS` go back to the
    thread). Every method is called with ``lock`` held (the owning cache's), which the
    thread takes too to read and swap.
    """

    def __init__(self, dimensions: int, ann_min: int = 0,
                 lock: threading.RLock | None = None, file: GraphFile | None = None,
                 stats: GraphStats | None = None, params: GraphParams = DEFAULT_PARAMS
                 ) -> None:
        import numpy as np

        self.dimensions = dimensions
        self.ann_min = ann_min
        self.params = params  # the graph's M and efConstruction (settings)
        self.nums = np.zeros(0, dtype=np.int64)
        self.seqs = np.zeros(0, dtype=np.int64)  # each row's commit seq on its branch
        self.matrix = np.zeros((0, dimensions), dtype=np.float32)
        # Each row's group (the AMP cell store: its owner), for `top(group=...)`.
        self.groups = np.zeros(0, dtype=np.int32)
        # Where each row's validity begins (`memory.facts.begin_instant`; rows with no
        # validity, passages and cells, begin at its epoch), for `top(begun_at=...)`.
        self.starts = np.zeros(0, dtype=np.int64)
        # The arrays above are views of the first rows of these, grown by a quarter when
        # full: appending a few rows copies nothing (a million rows are a gigabyte).
        self._bufs = (self.nums, self.matrix, self.groups, self.seqs, self.starts)
        self.pos: dict[int, int] = {}
        self._pending: list[tuple[int, np.ndarray, int, int, int]] = []
        self.ann: Ann | None = None
        self._removed: set[int] = set()  # zeroed rows: never proposed by the graph
        self.version = 0  # moves when a row of the graph changes: its graph is dropped
        self._lock = lock if lock is not None else threading.RLock()
        self.file = file
        self.stats = stats if stats is not None else GraphStats()
        self._job: threading.Thread | None = None  # building, loading or catching up
        self._saver: threading.Thread | None = None
        self._latest: int | None = None  # `latest_start`, until the rows change
        # (positions in row-number order, the row numbers in that order), for `begun_mask`
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None
        self._to_save: tuple[bytes, Any] | None = None  # the latest sealed graph to write
        # Large groups' own contiguous copies of their rows, by group (`_block`).
        self._blocks: dict[int, _Block] = {}

    def put(self, num: int, vector: np.ndarray, *, group: int = 0, seq: int = 0,
            start: int = 0) -> None:
        """Add or change row ``num``. ``group``: the row's group for `top(group=...)` (an
        AMP cell's owner: it never changes); ``seq``: the commit seq that put the row on its
        branch, for `top(seqs=...)`; ``start``: where its validity begins, for
        `top(begun_at=...)`."""
        at = self.pos.get(num)
        if at is not None:
            self._settle()  # the row may still be pending
            self.version += 1
            self.matrix[at] = vector
            self._mirror(at)
            self.seqs[at] = seq
            self.starts[at] = start
            self._latest, self._sorted = None, None
            self._removed.discard(num)
            self.ann = None  # a row of the graph changed: rebuilt from the rows
            return
        self.pos[num] = len(self.nums) + len(self._pending)
        self._pending.append((num, vector, group, seq, start))

    def remove(self, num: int) -> None:
        at = self.pos.get(num)
        if at is None:
            return
        self._settle()
        self.version += 1
        self.matrix[at] = 0.0  # a zero row never ranks above a real match
        self._mirror(at)
        self._removed.add(num)
        self.ann = None

    def drop(self) -> None:
        """Stop this matrix's background work (its cache was reset or closed)."""
        self.version += 1
        self.ann = None
        self._blocks = {}
        _STOPPING.update(t for t in (self._job, self._saver) if t is not None)

    def _mirror(self, at: int) -> None:
        """Row ``at`` of the matrix changed: its group's block, if it holds the row, takes
        the same floats."""
        import numpy as np

        block = self._blocks.get(int(self.groups[at]))
        if block is not None and at < block.covered:
            i = int(np.searchsorted(block.pos, at))
            block.rows[i] = self.matrix[at]

    def _block(self, group: int, held: int, build: bool) -> _Block | None:
        """``group``'s block with the rows written since appended; with ``build``, made
        (its rows gathered once) where it has none, displacing smaller groups' blocks
        if the budget needs their room. ``held``: the group's rows now."""
        import numpy as np

        block = self._blocks.get(group)
        if block is not None:
            if block.covered < len(self.nums):
                new = block.covered + np.flatnonzero(self.groups[block.covered:] == group)
                block.append(new, self.matrix[new])
                block.covered = len(self.nums)
            return block
        if not build:
            return None
        pos = np.flatnonzero(self.groups == group)
        # Room for a sixteenth more rows: a few new cells are appended without a copy.
        rows = np.empty((len(pos) + len(pos) // 16 + 64, self.dimensions), dtype=np.float32)
        np.take(self.matrix, pos, axis=0, out=rows[:len(pos)])
        for other in self._evicted(held) or []:
            del self._blocks[other]
        block = self._blocks[group] = _Block(pos, rows, len(self.nums))
        return block

    def _evicted(self, held: int) -> list[int] | None:
        """The groups whose blocks (smallest first, each smaller than ``held`` rows) make
        room within `BLOCK_BUDGET` for a block of ``held`` rows; None: no room."""
        budget = len(self.nums) // BLOCK_BUDGET
        used = sum(len(b) for b in self._blocks.values())
        out: list[int] = []
        for group, block in sorted(self._blocks.items(), key=lambda gb: len(gb[1])):
            if used + held <= budget or len(block) >= held:
                break
            out.append(group)
            used -= len(block)
        return out if used + held <= budget else None

    def _may_block(self, held: int) -> bool:
        """Whether a group of ``held`` rows, without a block, may have one."""
        return held * BLOCK_SHARE >= len(self.nums) and self._evicted(held) is not None

    def block_memory(self) -> int:
        """Bytes the groups' blocks hold (0: none)."""
        return sum(b.bytes for b in self._blocks.values())

    def buffer_memory(self) -> int:
        """Bytes of the rows' buffers (the vectors, their numbers, groups and seqs, with
        the room grown ahead)."""
        return sum(int(b.nbytes) for b in self._bufs)

    def _settle(self) -> None:
        """Append the pending rows. ``nums`` and ``matrix`` are views of buffers with room
        to spare (doubled when full), so a write followed by a query copies the new rows,
        not the whole matrix (1 GB at 1M 256-d rows). Views handed out earlier (to the
        background thread, the saver) keep their length and rows: appending writes past
        them."""
        import numpy as np

        if not self._pending:
            return
        have, need = len(self.nums), len(self.nums) + len(self._pending)
        nums, matrix, groups, seqs, starts = self._bufs
        if need > len(nums):
            # Views taken before (a background build holds some) keep the old buffers;
            # rows are only ever appended past a view's end, or changed with a version move.
            cap = max(need, len(nums) + len(nums) // 4 + 1024)
            nums = np.concatenate([nums[:have], np.zeros(cap - have, dtype=np.int64)])
            matrix = np.empty((cap, self.dimensions), dtype=np.float32)
            matrix[:have] = self.matrix
            groups = np.concatenate([groups[:have], np.zeros(cap - have, dtype=np.int32)])
            seqs = np.concatenate([seqs[:have], np.zeros(cap - have, dtype=np.int64)])
            starts = np.concatenate([starts[:have], np.zeros(cap - have, dtype=np.int64)])
            self._bufs = (nums, matrix, groups, seqs, starts)
        nums[have:need] = [n for n, _, _, _, _ in self._pending]
        matrix[have:need] = np.vstack([v for _, v, _, _, _ in self._pending])
        groups[have:need] = [g for _, _, g, _, _ in self._pending]
        seqs[have:need] = [q for _, _, _, q, _ in self._pending]
        starts[have:need] = [b for _, _, _, _, b in self._pending]
        self.nums, self.matrix = nums[:need], matrix[:need]
        self.groups, self.seqs, self.starts = groups[:need], seqs[:need], starts[:need]
        self._latest, self._sorted = None, None
        self._pending = []

    def _live(self, after: int = -1) -> np.ndarray:
        """Positions of the rows not removed and numbered above ``after``, in ascending
        row number (the graph's order)."""
        import numpy as np

        keep = self.nums > after
        if self._removed:
            gone = np.fromiter(self._removed, dtype=np.int64, count=len(self._removed))
            keep &= ~np.isin(self.nums, gone)
        idx = np.flatnonzero(keep)
        ordered: np.ndarray = idx[np.argsort(self.nums[idx], kind="stable")]
        return ordered

    def _graph(self) -> Ann | None:
        """The HNSW graph over every row, brought up to date; None below ``ann_min`` rows
        or while the background thread prepares it (exact search answers meanwhile)."""
        live = len(self.nums) - len(self._removed)
        if self.ann_min <= 0 or live < self.ann_min:
            self.ann = None
            return None
        ann = self.ann
        if ann is not None:
            if len(ann) == live:
                return ann  # the usual query: nothing written since
            new = self._live(ann.last)
            if len(ann) + len(new) == live and len(new) <= INLINE_ROWS:
                ann.add(self.nums[new], self.matrix[new], self._sealed)
                return ann
            # Many rows to add (the thread adds them), or rows below the graph's last
            # (cannot happen without a version move; built afresh to be safe).
            self.ann = None
            if len(ann) + len(new) != live:
                ann = None
        if self._job is None:
            self._job = threading.Thread(target=self._prepare, args=(ann, self.version),
                                         name=GRAPH_THREAD, daemon=True)
            self._job.start()
        return None

    def _prepare(self, graph: Ann | None, version: int) -> None:
        """Background: load the saved graph (or start one, or take ``graph``), add every
        row in ascending number, swap it in. Gives up when a row of it changes."""
        self.stats.bump("building")
        counted = False
        try:
            fresh = False
            if graph is None:
                graph = self._load(version)
            if graph is None:
                graph, fresh = Ann(self.dimensions, params=self.params), True
            # Only the last seal this thread passes is saved (a build from nothing passes
            # about eight per doubling: writing each would write the graph many times).
            last_seal: list[tuple[int, int, bytes]] = []

            def keep(count: int, last: int, data: bytes) -> None:
                last_seal[:] = [(count, last, data)]

            while True:
                with self._lock:
                    if self.version != version:
                        return
                    self._settle()
                    nums, matrix = self.nums, self.matrix
                    new = self._live(graph.last)
                    live = len(nums) - len(self._removed)
                    if len(graph) + len(new) != live or live < self.ann_min:
                        return
                    if len(new) <= INLINE_ROWS:
                        graph.add(nums[new], matrix[new], keep)
                        # Counted before the job is released: wait() returns as soon as
                        # it is, and a count bumped after that raced the caller's read.
                        if fresh:
                            self.stats.bump("built")
                        self.stats.bump("building", -1)
                        counted = True
                        self.ann = graph
                        self._job = None  # swapped in: a later query may start another
                        if last_seal:
                            self._sealed(*last_seal[0])
                        break
                # Outside the lock: queries answer exactly meanwhile. The arrays held
                # here stay valid (stacking makes new ones); a row changed in place
                # moves the version, checked between chunks.
                for start in range(0, len(new), BUILD_CHUNK):
                    if self.version != version or _EXITING.is_set():
                        return
                    chunk = new[start:start + BUILD_CHUNK]
                    graph.add(nums[chunk], matrix[chunk], keep)
        except Exception:  # a failed build leaves exact search answering
            log.exception("building a search graph failed; exact search answers")
        finally:
            if not counted:
                self.stats.bump("building", -1)
            with self._lock:
                if self._job is threading.current_thread():
                    self._job = None

    def _load(self, version: int) -> Ann | None:
        """The saved graph, if whole, sealed, and built from exactly the rows this matrix
        now holds up to its last row number (fingerprinted); otherwise None."""
        if self.file is None:
            return None
        found = self.file.read(self.dimensions)
        if found is None:
            return None
        header, data = found
        with self._lock:
            if self.version != version:
                return None
            self._settle()
            order = self._live()
            nums, matrix = self.nums, self.matrix
        count, last = int(header["count"]), int(header["last"])
        rows = order[nums[order] <= last]
        if (count < 1 or checkpoint_after(count - 1) != count or len(rows) != count
                or fingerprint(nums, matrix, rows) != header["rows"]):
            self.file.reject("stale: built from other rows than the index holds")
            return None
        graph = Ann(self.dimensions, data, last, self.params)
        if len(graph) != count:
            self.file.reject("holds another number of rows than its header")
            return None
        self.stats.bump("loaded")
        return graph

    def _sealed(self, count: int, last: int, data: bytes) -> None:
        """A graph was sealed at a checkpoint: queue its bytes for the saver thread (the
        latest only: a build passing several checkpoints writes the last it reached)."""
        if self.file is None:
            return
        with self._lock:
            self._to_save = (data, (self.nums, self.matrix, set(self._removed),
                                    self.version, last, count))
            if self._saver is None:
                self._saver = threading.Thread(target=self._save_loop, daemon=True,
                                               name=f"{GRAPH_THREAD}-save")
                self._saver.start()

    def _save_loop(self) -> None:
        import numpy as np

        assert self.file is not None
        while True:
            with self._lock:
                item, self._to_save = self._to_save, None
                if item is None:
                    self._saver = None
                    return
            data, (nums, matrix, removed, version, last, count) = item
            try:
                keep = nums <= last
                if removed:
                    keep &= ~np.isin(nums, np.fromiter(removed, dtype=np.int64))
                rows = np.flatnonzero(keep)
                rows = rows[np.argsort(nums[rows], kind="stable")]
                if len(rows) != count or self.version != version:
                    continue  # the rows moved on: the next seal is saved instead
                digest = fingerprint(nums, matrix, rows)
                if self.version == version:
                    self.file.write(data, self.dimensions, count, last, digest)
            except Exception:
                log.exception("saving a search graph failed; it is built again if needed")

    def wait(self, timeout: float) -> None:
        """Until no background work is left (tests, benchmarks)."""
        import time

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                jobs = [t for t in (self._job, self._saver) if t is not None]
            if not jobs:
                return
            for t in jobs:
                t.join(max(0.0, end - time.monotonic()))

    def latest_start(self) -> int:
        """The latest ``start`` of any row (0 when empty), remembered until rows change."""
        self._settle()
        if self._latest is None:
            self._latest = int(self.starts.max()) if len(self.starts) else 0
        return self._latest

    def live_rows(self) -> int:
        """Rows held and not removed."""
        self._settle()
        return len(self.nums) - len(self._removed)

    def begun_span(self, at: int) -> tuple[int, int]:
        """The lowest and highest row number among the rows begun at ``at`` ((1, 0):
        none)."""
        import numpy as np

        self._settle()
        begun_nums = self.nums[self.starts <= at]
        if not len(begun_nums):
            return 1, 0
        return int(np.min(begun_nums)), int(np.max(begun_nums))

    def begun_mask(self, nums: np.ndarray, at: int) -> tuple[np.ndarray, np.ndarray]:
        """For each listed row number: whether its row has begun at ``at`` (``start <=``
        it), and whether this matrix holds it at all (a row it does not hold is decided
        elsewhere). Vectorised: a ranked keyword list of thousands of rows is checked at
        once (a dict lookup per row cost about 8 ms per 7,000 rows here)."""
        import numpy as np

        self._settle()
        if not len(self.nums):
            none = np.zeros(len(nums), dtype=bool)
            return none, none.copy()
        if self._sorted is None:
            order = np.argsort(self.nums, kind="stable")
            self._sorted = (order, self.nums[order])
        order, ordered = self._sorted
        at_sorted = np.minimum(np.searchsorted(ordered, nums), len(ordered) - 1)
        held: np.ndarray = ordered[at_sorted] == nums
        ok: np.ndarray = held & (self.starts[order[at_sorted]] <= at)
        return ok, held

    def top(self, query: np.ndarray, k: int, *, group: int | None = None,
            seqs: tuple[int, int] | None = None, begun_at: int | None = None
            ) -> list[tuple[int, float]]:
        """The ``k`` rows nearest ``query`` (row number, cosine). With ``group``, the ``k``
        nearest among that group's rows; with ``seqs`` = (after, upto], among the rows whose
        commit seq is in it (a view's segment: rows it does not hold are never listed);
        with ``begun_at``, among the rows whose validity has begun then (``start <=``
        it). Each filter goes through the one cost rule below (graph asked for more, the
        group's block, the kept rows gathered, or every row scored)."""
        import numpy as np

        self._settle()
        total = len(self.nums)
        if not total or k <= 0:
            return []
        # A group with a block counts its rows there (brought up to date): no pass over
        # every row's group. Facts: only the rows begun at ``begun_at`` when some have not;
        # a block holds its group's every row, so it serves no such filter.
        late = begun_at is not None and self.latest_start() > begun_at
        blockable = seqs is None and not late  # a group's block can serve this search
        block = (self._block(group, 0, build=False)
                 if group is not None and blockable else None)
        inside: np.ndarray | None = None
        if block is not None:
            held = len(block)
        else:
            if group is not None:
                inside = self.groups == group
            if seqs is not None:
                bound = (self.seqs > seqs[0]) & (self.seqs <= seqs[1])
                inside = bound if inside is None else inside & bound
            if late:
                assert begun_at is not None
                started = self.starts <= begun_at
                inside = started if inside is None else inside & started
            held = total if inside is None else int(np.count_nonzero(inside))
        if not held:
            return []
        if held == total:
            inside = block = None  # every row is kept: the plain path
            group = seqs = None
        ann = self._graph() if k * EXACT_SHARE < held else None
        rows: np.ndarray | None = None
        way: GroupWay = "scan"
        if inside is None and block is None:
            if ann is not None:
                # The graph proposes, the matrix scores: the same float as an exact search
                # gives each row, and the same tie rule at the cut below.
                rows, way = self._positions(ann.candidates(query, k)), "graph"
        else:
            # The graph cannot filter (usearch's Python binding takes no predicate): it is
            # asked for as many more rows as the kept rows are rarer, and the kept ones
            # stay. Where that costs more than scoring the kept rows exactly (gathered, in
            # the group's block, or every row in place), or finds fewer than k of them,
            # the kept rows are scored.
            blocked = self._block_state(block is not None, group is not None and blockable,
                                        held)
            way, want = group_candidates(k, held, total, graph=ann is not None,
                                         block=blocked)
            if way == "graph":
                assert ann is not None
                found = self._positions(ann.candidates(query, want))
                kept = inside[found] if inside is not None else self.groups[found] == group
                rows = found[kept]
                if len(rows) < min(k, held):
                    rows = None
                    way, _ = group_candidates(k, held, total, graph=False, block=blocked)
            if way in ("gather", "scan") and inside is None:
                inside = self.groups == group
        if way == "block":
            assert group is not None
            block = self._block(group, held, build=True)
            assert block is not None
            sims = dots(block.rows[:len(block)], query)
            nums = self.nums[block.pos]
        elif way == "gather":
            assert inside is not None
            rows = np.flatnonzero(inside)  # few rows kept: gather them, score those alone
            sims = dots_at(self.matrix, rows, query)
            nums = self.nums[rows]
        elif rows is not None:
            sims = dots_at(self.matrix, rows, query)
            nums = self.nums[rows]
        else:
            # Every row scored in place; gathering most of them would first copy them.
            sims = dots(self.matrix, query)
            nums = self.nums
            if inside is not None:
                sims, nums = sims[inside], nums[inside]
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

    def _block_state(self, built: bool, blockable: bool, held: int) -> bool | None:
        """`group_candidates`'s ``block``: the group's block is built (True), may be built
        by this search (False), or may not (None: a view's segment or a begun filter keeps
        rows a block does not tell apart; or the group is too small a share of the rows,
        or its block would not fit the blocks' memory budget)."""
        if built:
            return True
        return False if blockable and self._may_block(held) else None

    def _positions(self, nums: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.asarray([self.pos[int(n)] for n in nums], dtype=np.int64)

    def cosines(self, query: np.ndarray, nums: Sequence[int]) -> dict[int, float]:
        self._settle()
        found = [(n, self.pos[n]) for n in nums if n in self.pos]
        if not found:
            return {}
        sims = dots(self.matrix[[p for _, p in found]], query)
        return {n: float(v) for (n, _), v in zip(found, sims, strict=True)}


class VectorCache:
    """Per-(scope, branch) matrices of one table, kept in step with the table by a
    high-water mark on the table's ``vec_seq`` column and an index generation number.
    ``graphs``: the folder their HNSW graphs are saved in (None: not saved)."""

    def __init__(self, ann_min: int = 0, graphs: Path | None = None, table: str = "",
                 stats: GraphStats | None = None, params: GraphParams = DEFAULT_PARAMS
                 ) -> None:
        self.lock = threading.RLock()
        self.ann_min = ann_min  # rows of a matrix from which an HNSW graph proposes
        self.params = params
        self.graphs = graphs
        self.table = table
        self.stats = stats if stats is not None else GraphStats()
        self.generation: int | None = None
        self.high_water = 0
        self.by_key: dict[tuple[str, str], VectorMatrix] = {}
        self.key_of: dict[int, tuple[str, str]] = {}

    def reset(self, generation: int) -> None:
        for matrix in self.by_key.values():
            matrix.drop()
        self.generation = generation
        self.high_water = 0
        self.by_key = {}
        self.key_of = {}

    def _file(self, key: tuple[str, str]) -> GraphFile | None:
        if self.graphs is None:
            return None
        return GraphFile(graph_path(self.graphs, self.table, *key), self.stats, self.params)

    def apply(self, rows: Sequence[tuple[int, str, str, bytes | None, int, int]],
              dims: int, starts: Sequence[int] | None = None) -> None:
        """Rows of (num, scope, branch, vec, vec_seq, seq) changed since the high-water
        mark; ``seq``: the commit seq that put the row on its branch; ``starts``: where
        each row's validity begins (`memory.facts.begin_instant`), for facts."""
        import numpy as np

        for i, (num, scope, branch, blob, vec_seq, seq) in enumerate(rows):
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
                matrix = self.by_key[key] = VectorMatrix(dims, self.ann_min, self.lock,
                                                         self._file(key), self.stats,
                                                         self.params)
            matrix.put(num, vector, seq=int(seq), start=starts[i] if starts is not None else 0)
            self.key_of[num] = key

    def wait(self, timeout: float = 600.0) -> None:
        """Until every matrix's graph work is done (tests, benchmarks)."""
        with self.lock:
            matrices = list(self.by_key.values())
        for matrix in matrices:
            matrix.wait(timeout)

    def close(self) -> None:
        with self.lock:
            for matrix in self.by_key.values():
                matrix.drop()

    def top(self, scope: str, branch: str, query: np.ndarray, k: int,
            seqs: tuple[int, int] | None = None, begun_at: int | None = None
            ) -> list[tuple[int, float]]:
        matrix = self.by_key.get((scope, branch))
        return (matrix.top(query, k, seqs=seqs, begun_at=begun_at) if matrix is not None
                else [])

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
