"""Which cell store a URI names: one lazy loader per URI scheme, beside the contract.

`base.py` declares the contract and knows no implementation; this module maps a scheme to
a loader that imports its implementation only when chosen (as pyiceberg's catalog loaders
do), so SQLite users never import psycopg and ``base`` never imports its own backends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ampup_memory.amp.store.base import CellStore
from ampup_memory.errors import ConfigurationError
from ampup_memory.search.index.ann import ANN_MIN_VECTORS, DEFAULT_PARAMS, GraphParams

if TYPE_CHECKING:
    from ampup_memory.settings import Settings

# (uri, dimensions, ann_min_vectors, pool_wait_seconds, ann_params) -> store. Each store
# takes what is its own: the SQLite store the threshold of its HNSW graph over the cell
# vectors (PostgreSQL has pgvector's HNSW index at any size), the PostgreSQL store its
# pool's wait; both the graph's M and efConstruction.
StoreFactory = Callable[[str, int | None, int, float, GraphParams], CellStore]


@dataclass(frozen=True)
class Backend:
    open: StoreFactory  # opens the store, making its tables if missing
    exists: Callable[[str], bool]  # whether a store was made at the URI (makes nothing)


def _sqlite() -> Backend:
    from ampup_memory.amp.store.sqlite import SQLiteStore, store_exists

    return Backend(lambda uri, dimensions, ann_min, _pool_wait, params: SQLiteStore(
        uri, dimensions, ann_min, params), store_exists)


def _postgres() -> Backend:
    from ampup_memory.amp.store.postgres import PostgresStore, store_exists

    return Backend(lambda uri, dimensions, _ann_min, pool_wait, params: PostgresStore(
        uri, dimensions, pool_wait, params), store_exists)


# URI scheme (lower-cased) -> loader of the backend that opens it.
STORE_LOADERS: dict[str, Callable[[], Backend]] = {
    "sqlite": _sqlite,
    "postgresql": _postgres,
    "postgres": _postgres,
    "postgresql+psycopg": _postgres,
}


def _backend(uri: str) -> Backend:
    scheme = uri.split(":", 1)[0].lower()
    loader = STORE_LOADERS.get(scheme)
    if loader is None:
        raise ConfigurationError(
            f"unsupported store URI scheme {scheme!r}: use sqlite:///path or postgresql://…"
        )
    return loader()


def open_store(uri: str, dimensions: int | None, *,
               ann_min_vectors: int = ANN_MIN_VECTORS,
               pool_wait_seconds: float = 30.0,
               ann_params: GraphParams = DEFAULT_PARAMS) -> CellStore:
    """Open the store a URI names, making it if missing. Drivers load lazily, so SQLite
    users never import psycopg.
    ``ann_min_vectors``: `AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS` (SQLite only);
    ``pool_wait_seconds``: how long a request waits for a pooled connection (PostgreSQL);
    ``ann_params``: the HNSW graph's M and efConstruction (`Settings.ann_params`)."""
    return _backend(uri).open(uri, dimensions, ann_min_vectors, pool_wait_seconds, ann_params)


def open_configured_store(settings: Settings, dimensions: int | None) -> CellStore:
    """The configured cell store as a server opens it: its URI and the settings of its
    vector graph and connection pool (``dimensions``: the embedder's)."""
    return open_store(settings.resolved_store_uri, dimensions,
                      ann_min_vectors=settings.search_ann_min_vectors,
                      ann_params=settings.ann_params,
                      pool_wait_seconds=settings.store_pool_wait_seconds)


def open_existing_store(uri: str, *, ann_params: GraphParams = DEFAULT_PARAMS
                        ) -> CellStore | None:
    """The store a URI names without vectors, or None when none was made there yet: for
    commands that only read (``keys list``), which should not leave a store behind."""
    backend = _backend(uri)
    if not backend.exists(uri):
        return None
    return backend.open(uri, None, ANN_MIN_VECTORS, 30.0, ann_params)
