"""Which cell store a URI names: one lazy loader per URI scheme, beside the contract.

`base.py` declares the contract and knows no implementation; this module maps a scheme to
a loader that imports its implementation only when chosen (as pyiceberg's catalog loaders
do), so SQLite users never import psycopg and ``base`` never imports its own backends.
"""

from __future__ import annotations

from collections.abc import Callable

from ampup_memory.amp.store.base import CellStore
from ampup_memory.errors import ConfigurationError

StoreFactory = Callable[[str, int | None, float], CellStore]


def _sqlite() -> StoreFactory:
    from ampup_memory.amp.store.sqlite import SQLiteStore

    return lambda uri, dimensions, _pool_wait: SQLiteStore(uri, dimensions)  # no pool


def _postgres() -> StoreFactory:
    from ampup_memory.amp.store.postgres import PostgresStore

    return PostgresStore


# URI scheme (lower-cased) -> loader of the class that opens it.
STORE_LOADERS: dict[str, Callable[[], StoreFactory]] = {
    "sqlite": _sqlite,
    "postgresql": _postgres,
    "postgres": _postgres,
    "postgresql+psycopg": _postgres,
}


def open_store(uri: str, dimensions: int | None, *, create: bool = True,
               pool_wait_seconds: float = 30.0) -> CellStore:
    """Open the store a URI names. Drivers load lazily, so SQLite users never import psycopg.
    ``pool_wait_seconds``: how long a request waits for a pooled connection (PostgreSQL)."""
    scheme = uri.split(":", 1)[0].lower()
    loader = STORE_LOADERS.get(scheme)
    if loader is None:
        raise ConfigurationError(
            f"unsupported store URI scheme {scheme!r}: use sqlite:///path or postgresql://…"
        )
    return loader()(uri, dimensions, pool_wait_seconds)
