from __future__ import annotations

import psycopg

from tests.pg import PostgresFactory


def test_postgres_has_pgvector(postgres: PostgresFactory) -> None:
    url = postgres.new_database()
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        version = row.fetchone()
    assert version is not None and version[0].startswith("0.8")
