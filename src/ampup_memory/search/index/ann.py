"""An approximate nearest-neighbour index (HNSW, usearch) beside one vector matrix.

It only proposes candidates: `common.VectorMatrix` re-scores every one of them exactly
(`common.dots`), so a score never depends on the graph, and applies its own tie rule at
the cut. What the graph can change is which rows are proposed; to keep that the same for
a live index, a reopened one and a rebuilt one, the graph is a function of the rows:

* rows enter one at a time, on one thread, in ascending row number (the order the feed
  numbers them in, the same live and rebuilt: docs/search.md), with the same vectors;
* usearch draws each node's level from a generator that starts from a fixed seed when an
  index is created or loaded, and that state is not saved with it. So that a graph saved,
  loaded after a restart and then grown is the very graph a process that never stopped
  holds, every graph is *sealed* at fixed sizes (:func:`checkpoint_after`, about eight
  per doubling): serialised and loaded back, which restarts the generator. A graph built
  in one go is sealed at the same sizes, so all three paths give one graph;
* a change to a row already in the graph (its vector replaced or removed) drops it and
  it is built again from the matrix as it then is.

Sealed graphs are what is saved (:class:`GraphFile`): at a checkpoint, beside the index
file, written to a temporary file and renamed. A saved graph is used only if its bytes
are intact and the rows it covers (row numbers and float32 vectors, fingerprinted) are
the rows the matrix now holds up to its last row number; rows numbered above that are
then added. Anything else (a torn, corrupt, foreign or stale file) is rebuilt, not
trusted.

Below `AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS` rows (per scope and branch, per table) there
is no graph: the matrix answers exactly, as before. The graph's links per node (M) and
build-time breadth (efConstruction) are settings (:class:`GraphParams`); a saved graph
records them and one made with others is rebuilt, so one setting gives one graph.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("ampup_memory.search")

ANN_MIN_VECTORS = 50_000  # the default of AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS
CONNECTIVITY = 32  # the embedded graphs' default HNSW M (links per node)
EXPANSION_ADD = 128  # ... and efConstruction (docs/performance.md: recall on real text)
PGVECTOR_DEFAULTS = (16, 64)  # pgvector's m and ef_construction when an index names none
EXPANSION_SEARCH = 512  # efSearch floor; a query asking for more candidates widens it
PG_EF_SEARCH = (400, 1000)  # pgvector's hnsw.ef_search: floor and ceiling (`pg_ef_search`)
PG_CELL_EF_FLOOR = 300  # ... the AMP cell store's, but an owner's filtered whole-table scan
OVERFETCH = 2  # the graph proposes k × this, the matrix keeps the exact k best of them
EXACT_SHARE = 4  # a query asking for at least rows/4 candidates is answered exactly
DTYPE = "i8"  # the graph's copy of the (unit) vectors; candidates are re-scored in float32
CHECKPOINT_MIN = 256  # below 8 × this, a graph is sealed every this many rows
INLINE_ROWS = 2_000  # more new rows than this are added by the background thread
FILE_FORMAT = 1
MAGIC = b"AMPUP-ANN\n"


@dataclass(frozen=True)
class GraphParams:
    """The HNSW build parameters of the vector graphs (the embedded passages', facts' and
    AMP cells' graphs, and pgvector's HNSW indexes on PostgreSQL): M (``connectivity``)
    and efConstruction (``expansion_add``), as the settings give them. Recall on text
    spread over many words rises with both, and so do build time and memory
    (docs/search.md, "When to change M").

    A value not given is 32 / 128 on both backends (recall@10 0.99 on 960k cells of real
    text embedded, where 16 / 64 gave 0.954; 0.9845 at 300k on pgvector with ef_search 200,
    where 16 / 64 stayed under 0.98 below ef_search 1,000). On PostgreSQL an index that
    already exists is kept as it was built while no value is given, so an upgrade rebuilds
    no index at start (that build holds the schema lock); set the values to apply them to
    existing indexes too."""

    connectivity: int | None = None
    expansion_add: int | None = None

    @property
    def given(self) -> bool:
        """Whether the settings name either value (else every default applies)."""
        return self.connectivity is not None or self.expansion_add is not None

    def values(self) -> tuple[int, int]:
        """(M, efConstruction) of the embedded (usearch) graphs and of pgvector's HNSW
        indexes built from now on: one pair for both backends."""
        return (self.connectivity or CONNECTIVITY, self.expansion_add or EXPANSION_ADD)

    def pg_storage(self) -> str:
        """pgvector's HNSW storage parameters for these values (ints: safe in DDL)."""
        m, ef = self.values()
        return f"WITH (m = {int(m)}, ef_construction = {int(ef)})"

    def pg_built_with(self, reloptions: list[str] | None) -> bool:
        """Whether a pgvector HNSW index whose ``pg_class.reloptions`` are these was built
        with these values (pgvector's defaults, 16 and 64, where one is not given)."""
        given = dict(o.split("=", 1) for o in reloptions or [] if "=" in o)
        return (int(given.get("m", PGVECTOR_DEFAULTS[0])),
                int(given.get("ef_construction", PGVECTOR_DEFAULTS[1]))) == self.values()

    def pg_match(self, conn: Any, name: str, target: str, where: str = "") -> None:
        """Make pgvector's HNSW index ``name`` on ``target`` (``table USING hnsw (expr)
        opclass``, then ``where``) if it is missing, and, when the settings name values,
        make it again if it was built with others, as an embedded graph file made with
        others is: one setting gives one graph, whichever process built it. With no value
        named, an existing index is kept as built (an older version's 16 / 64 included).
        ``conn``: a psycopg connection holding the caller's schema lock; the SQL is
        trusted DDL."""
        found = conn.execute("SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)",
                             (name,)).fetchone()
        if found is not None:
            if not self.given or self.pg_built_with(found[0]):
                return
            log.warning("rebuilding the HNSW index %s with m = %d, ef_construction = %d",
                        name, *self.values())
            conn.execute(f"DROP INDEX {name}")
        conn.execute(f"CREATE INDEX {name} ON {target} {self.pg_storage()}{where}")


DEFAULT_PARAMS = GraphParams()


def pg_ef_search(k: int, floor: int | None = None) -> int:
    """pgvector's ``hnsw.ef_search`` for a query asking for ``k`` rows, the AMP cell
    store's and the search index's alike: at least ``k`` (an iterative scan stops at
    ef_search candidates per round), at most pgvector's ceiling of 1,000, and at least
    the floor: 400 unless the caller names another, because on real text (100k rows,
    pgvector's default 16 / 64) the 10 best of 100 cells found 0.946 of the exact 10 at
    100 and 0.9835 at 400, 50 passages 0.919 at 50 (docs/performance.md, "PostgreSQL:
    pgvector HNSW recall on real text"). The AMP cell store names `PG_CELL_EF_FLOOR`
    (300) for a search that names no owner: at 960k real-text cells and 32 / 128 that
    finds 0.985 of the exact 10 in two index builds (0.987 at 400), every final page of
    100 held-out searches is the one an exact vector step gives, and the vector step costs
    17 against 23 ms of server CPU (docs/performance.md, session 24), and so does a
    search of an owner with an index of its own (0.996 of the exact 10 at 960k, session
    25). An owner's filtered scan of the whole-table index keeps 400: its recall has the
    least margin there (0.981 at 300, 0.983 at 400), and its cost is set by its rounds,
    not the floor."""
    low, high = PG_EF_SEARCH
    return min(high, max(low if floor is None else floor, k))


def checkpoint_after(count: int) -> int:
    """The first size above ``count`` at which a graph is sealed (and may be saved):
    multiples of an eighth of the power of two below it (at least `CHECKPOINT_MIN`),
    so a graph is never more than about 12 % past its last seal."""
    step = max(CHECKPOINT_MIN, 1 << max(0, count.bit_length() - 4))
    return (count // step + 1) * step


def fingerprint(nums: np.ndarray, matrix: np.ndarray, rows: np.ndarray) -> str:
    """A digest of the rows at positions ``rows`` (in that order, ascending row number):
    their numbers and float32 vectors, what a saved graph was built from, compared with
    the matrix before the graph is used."""
    import numpy as np

    h = hashlib.blake2b(digest_size=20)
    h.update(np.ascontiguousarray(nums[rows], dtype=np.int64).tobytes())
    for start in range(0, len(rows), 65_536):
        h.update(np.ascontiguousarray(matrix[rows[start:start + 65_536]],
                                      dtype=np.float32).tobytes())
    return h.hexdigest()


def _new_index(dimensions: int, params: GraphParams) -> Any:
    from usearch.index import Index

    m, ef = params.values()
    return Index(ndim=dimensions, metric="ip", dtype=DTYPE, connectivity=m,
                 expansion_add=ef, expansion_search=EXPANSION_SEARCH)


Sealed = Callable[[int, int, bytes], None]  # a sealed graph: its size, last row, bytes


class Ann:
    """HNSW graph over the rows of one matrix, keyed by row number (inner product)."""

    def __init__(self, dimensions: int, data: bytes | None = None, last: int = -1,
                 params: GraphParams = DEFAULT_PARAMS) -> None:
        self.dimensions = dimensions
        self.params = params
        self._index: Any = _new_index(dimensions, params)
        if data is not None:
            self._index.load(data)
        self.last = last  # the highest row number in the graph: rows enter in ascending order

    def __len__(self) -> int:
        return len(self._index)

    def add(self, nums: np.ndarray, vectors: np.ndarray, sealed: Sealed | None = None) -> None:
        """Add rows numbered above every row already in (ascending ``nums``), sealing the
        graph at each checkpoint size it passes (``sealed`` gets the sealed bytes)."""
        import numpy as np

        done = 0
        while done < len(nums):
            size = len(self._index)
            take = min(len(nums) - done, checkpoint_after(size) - size)
            self._index.add(nums[done:done + take].astype(np.uint64),
                            vectors[done:done + take], threads=1)
            done += take
            self.last = int(nums[done - 1])
            if len(self._index) == checkpoint_after(size):
                data = bytes(self._index.save())
                self._index = _new_index(self.dimensions, self.params)
                self._index.load(data)  # a fresh level generator, as after a restart
                if sealed is not None:
                    sealed(len(self._index), self.last, data)

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


_GRAPH_FILE = re.compile(r"((?:facts|passages)-[0-9a-f]{32}\.ann)(?:\.(\d+)\.\d+\.tmp)?")


def graph_path(folder: Path, table: str, scope: str, branch: str) -> Path:
    """Where the graph of ``table``'s (scope, branch) matrix is saved (a hash names it)."""
    name = hashlib.sha256(f"{scope}\0{branch}".encode()).hexdigest()[:32]
    return folder / f"{table}-{name}.ann"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process: alive
    return True


def remove_graphs(paths: list[Path]) -> None:
    """Delete these saved graphs (their scope or branch was cleared). A file a saver
    writes again meanwhile is harmless (its rows are gone, so it is never loaded) and
    :func:`keep_only_graphs` removes it at the next open."""
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            log.warning("could not delete search graph %s; the next open does", path,
                        exc_info=True)


def keep_only_graphs(folder: Path, keep: list[Path]) -> None:
    """Delete every graph file in ``folder`` not in ``keep`` (a scope or branch cleared by
    a process that died first, or by another process), and their temporary files of
    processes no longer running."""
    if not folder.is_dir():
        return
    names = {p.name for p in keep}
    for path in folder.iterdir():
        found = _GRAPH_FILE.fullmatch(path.name)
        if found is None or found.group(1) in names:
            continue
        if found.group(2) is not None and _pid_alive(int(found.group(2))):
            continue
        remove_graphs([path])


class GraphStats:
    """Counters of one index's graphs, shown by ``GET /status`` (``search_graphs``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts = {"built": 0, "loaded": 0, "rejected": 0, "saved": 0, "building": 0}

    def bump(self, name: str, by: int = 1) -> None:
        with self._lock:
            self.counts[name] += by

    def wire(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


class GraphFile:
    """One saved, sealed graph: ``MAGIC``, a JSON header's length and the header (format,
    dimensions, HNSW parameters, size, last row number, the rows' fingerprint, the graph
    bytes' digest), then the graph bytes usearch wrote. Written whole to a temporary
    file, flushed and renamed over the old one, so a crash leaves the old file or the new
    one, and a torn or edited file fails its digest."""

    def __init__(self, path: Path, stats: GraphStats,
                 params: GraphParams = DEFAULT_PARAMS) -> None:
        self.path = path
        self.stats = stats
        self.params = params

    def _params(self, dimensions: int) -> dict[str, Any]:
        return {"format": FILE_FORMAT, "dimensions": dimensions, "dtype": DTYPE,
                "connectivity": self.params.values()[0],
                "expansion_add": self.params.values()[1],
                "checkpoint_min": CHECKPOINT_MIN}

    def write(self, data: bytes, dimensions: int, count: int, last: int, rows: str) -> None:
        header = json.dumps({**self._params(dimensions), "count": count, "last": last,
                             "rows": rows,
                             "digest": hashlib.blake2b(data, digest_size=20).hexdigest()}
                            ).encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._remove_orphans()
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(MAGIC + struct.pack(">I", len(header)) + header)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)
        self.stats.bump("saved")

    def _remove_orphans(self) -> None:
        """Temporary files of this graph left by a process that died while saving."""
        for tmp in self.path.parent.glob(f"{self.path.name}.*.tmp"):
            try:
                os.kill(int(tmp.name.split(".")[-3]), 0)
            except ProcessLookupError:
                tmp.unlink(missing_ok=True)
            except (ValueError, OSError):
                pass

    def read(self, dimensions: int) -> tuple[dict[str, Any], bytes] | None:
        """The header and graph bytes, if the file is whole and made with these
        parameters; None (and a log line) otherwise."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            self.reject(f"unreadable ({e})")
            return None
        if not raw.startswith(MAGIC) or len(raw) < len(MAGIC) + 4:
            self.reject("not a graph file")
            return None
        (size,) = struct.unpack(">I", raw[len(MAGIC):len(MAGIC) + 4])
        start = len(MAGIC) + 4
        try:
            header = json.loads(raw[start:start + size])
        except ValueError:
            self.reject("unreadable header")
            return None
        if not isinstance(header, dict) or any(
                header.get(k) != v for k, v in self._params(dimensions).items()):
            self.reject("made with other parameters")
            return None
        data = raw[start + size:]
        if hashlib.blake2b(data, digest_size=20).hexdigest() != header.get("digest"):
            self.reject("digest does not match (torn or corrupt)")
            return None
        return header, data

    def reject(self, why: str) -> None:
        log.warning("search graph %s %s: building it again", self.path, why)
        self.stats.bump("rejected")
        return None
