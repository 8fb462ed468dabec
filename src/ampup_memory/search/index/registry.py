"""Which search index a URI names: one lazy loader per URI prefix, beside the contract.

`base.py` declares the contract and knows no implementation; this module maps a URI
prefix to a loader that imports its backend only when chosen (as pyiceberg's catalog
loaders do), so SQLite users never import psycopg and ``base`` never imports its backends.
"""

from __future__ import annotations

from collections.abc import Callable

from ampup_memory.errors import ConfigurationError
from ampup_memory.search.index.ann import ANN_MIN_VECTORS, DEFAULT_PARAMS, GraphParams
from ampup_memory.search.index.base import SearchIndex

# (uri, ann_min_vectors, ann_params) -> index. The threshold is the SQLite index's (its
# HNSW graph, `ann.py`); PostgreSQL's pgvector HNSW index answers at every size. The
# graph's M and efConstruction apply to both.
IndexFactory = Callable[[str, int, GraphParams], SearchIndex]


def _sqlite() -> IndexFactory:
    from ampup_memory.search.index.sqlite import SQLiteIndex

    return lambda uri, ann_min, params: SQLiteIndex(uri, ann_min_vectors=ann_min,
                                                    ann_params=params)


def _postgres() -> IndexFactory:
    from ampup_memory.search.index.postgres import PostgresIndex

    return lambda uri, _ann_min, params: PostgresIndex(uri, params)


# URI prefix -> loader of the class that opens it. The SQLite prefix includes the path's
# slashes: an index file is always named by a path.
INDEX_LOADERS: dict[str, Callable[[], IndexFactory]] = {
    "sqlite:///": _sqlite,
    "postgresql://": _postgres,
    "postgres://": _postgres,
}


def open_index(uri: str, ann_min_vectors: int = ANN_MIN_VECTORS,
               ann_params: GraphParams = DEFAULT_PARAMS) -> SearchIndex:
    """The backend the URI names; a backend's driver is imported only when chosen.
    ``ann_min_vectors``: `AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS` (SQLite only);
    ``ann_params``: the HNSW graph's M and efConstruction (`Settings.ann_params`)."""
    for prefix, loader in INDEX_LOADERS.items():
        if uri.startswith(prefix):
            return loader()(uri, ann_min_vectors, ann_params)
    raise ConfigurationError(
        f"AMPUP_MEMORY_INDEX_URI must start with sqlite:/// or postgresql://, got {uri!r}"
    )
