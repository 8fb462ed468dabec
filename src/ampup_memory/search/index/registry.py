"""Which search index a URI names: one lazy loader per URI prefix, beside the contract.

`base.py` declares the contract and knows no implementation; this module maps a URI
prefix to a loader that imports its backend only when chosen (as pyiceberg's catalog
loaders do), so SQLite users never import psycopg and ``base`` never imports its backends.
"""

from __future__ import annotations

from collections.abc import Callable

from ampup_memory.errors import ConfigurationError
from ampup_memory.search.index.base import SearchIndex

IndexFactory = Callable[[str], SearchIndex]


def _sqlite() -> IndexFactory:
    from ampup_memory.search.index.sqlite import SQLiteIndex

    return SQLiteIndex


def _postgres() -> IndexFactory:
    from ampup_memory.search.index.postgres import PostgresIndex

    return PostgresIndex


# URI prefix -> loader of the class that opens it. The SQLite prefix includes the path's
# slashes: an index file is always named by a path.
INDEX_LOADERS: dict[str, Callable[[], IndexFactory]] = {
    "sqlite:///": _sqlite,
    "postgresql://": _postgres,
    "postgres://": _postgres,
}


def open_index(uri: str) -> SearchIndex:
    """The backend the URI names; a backend's driver is imported only when chosen."""
    for prefix, loader in INDEX_LOADERS.items():
        if uri.startswith(prefix):
            return loader()(uri)
    raise ConfigurationError(
        f"AMPUP_MEMORY_INDEX_URI must start with sqlite:/// or postgresql://, got {uri!r}"
    )
