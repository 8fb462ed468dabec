"""PostgreSQL advisory-lock keys shared by every store on one server (cells, catalog, index).

They live here, beside `sqlite_connections`, so the AMP store, the Iceberg tables and the
search index can agree on one key per name without importing each other's layers.
"""

from __future__ import annotations

import hashlib


def advisory_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for a name (same in every process)."""
    digest = hashlib.blake2b(f"ampup-memory:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


# Held while any store creates or alters its tables, so servers starting together on one
# fresh database never race (pyiceberg's catalog tables, the read index, the AMP cells).
SCHEMA_LOCK = advisory_key("schema")

# Held while the read index's principals are replaced by the principals table's newest
# rows, so processes sharing one index copy them one at a time (`ReadIndex.replace_principals`).
PRINCIPALS_LOCK = advisory_key("principals")
