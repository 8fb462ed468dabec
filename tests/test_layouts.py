"""Layout versions of the stores, through the real CLI and `serve` (`layouts.py`).

Two AmpUp Memory versions sharing a home must not undo each other's work: a read index of
an older layout is rebuilt (and says so), one of a newer layout is refused with one line
unless `index rebuild` is asked for; the AMP cell store records its layout and refuses a
newer one. Each on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, text

from ampup_memory.amp.store.registry import open_store
from ampup_memory.amp.store.rows import SCHEMA_VERSION, SCHEMA_VERSION_KEY
from ampup_memory.errors import ConfigurationError
from ampup_memory.memory.readindex import SCHEMA_VERSION as INDEX_VERSION
from ampup_memory.memory.tables import sqlalchemy_url
from tests.memory_support import QUIET, backend_env, cli_in_process, new_scope
from tests.pg import PostgresFactory

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
# Newer than this version's 3, and older as text: versions compare as integers.
NEWER = "10"


def _index_url(home: Path, env: dict[str, str]) -> str:
    return sqlalchemy_url(env.get("AMPUP_MEMORY_INDEX_URI") or f"sqlite:///{home / 'index.db'}",
                          setting="index")


def _index_query(home: Path, env: dict[str, str], sql: str, **params: str) -> object:
    engine = create_engine(_index_url(home, env))
    try:
        with engine.begin() as conn:
            result = conn.execute(text(sql), params)
            return result.scalar() if result.returns_rows else None
    finally:
        engine.dispose()


def _set_index_layout(home: Path, env: dict[str, str], version: str) -> None:
    _index_query(home, env, "UPDATE mem_meta SET value = :v WHERE key = 'schema'", v=version)


def _index_layout(home: Path, env: dict[str, str]) -> object:
    return _index_query(home, env, "SELECT value FROM mem_meta WHERE key = 'schema'")


def _one_error_line(done: subprocess.CompletedProcess[str], *says: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    for words in says:
        assert words in done.stderr, done.stderr


def _serve(home: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`serve` as a process, which must refuse to start (a timeout here: it started)."""
    return subprocess.run(
        [sys.executable, "-m", "ampup_memory.cli", "serve", "--port", "0"],
        env={**os.environ, "AMPUP_MEMORY_HOME": str(home), **env},
        capture_output=True, text=True, timeout=120)


def _heads(home: Path, env: dict[str, str], scope: str) -> list[str]:
    done = cli_in_process(home, env, "branch", "list", scope)
    assert done.returncode == 0, done.stderr
    return [b["head"] for b in json.loads(done.stdout)["branches"]]


@pytest.mark.parametrize("kind", BACKENDS)
def test_read_index_layouts_older_rebuilt_newer_refused(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    env, home, scope = backend_env(kind, request), tmp_path / "home", new_scope()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# Alpha\n\nThe alpha plan.\n")
    assert cli_in_process(home, env, "load", str(corpus), "--scope", scope).returncode == 0
    heads = _heads(home, env, scope)
    assert _index_layout(home, env) == str(INDEX_VERSION)

    # An older layout: rebuilt from the tables, said once, nothing lost.
    _set_index_layout(home, env, "2")
    done = cli_in_process(home, env, "branch", "list", scope)
    assert done.returncode == 0, done.stderr
    assert [b["head"] for b in json.loads(done.stdout)["branches"]] == heads
    said = [line for line in done.stderr.splitlines() if "read index" in line]
    assert len(said) == 1 and "layout version 2" in said[0] and "rebuilding" in said[0], said
    assert _index_layout(home, env) == str(INDEX_VERSION)
    again = cli_in_process(home, env, "branch", "list", scope)
    assert "read index" not in again.stderr, again.stderr

    # A newer layout: refused in one line by every command and by `serve`, left untouched.
    _set_index_layout(home, env, NEWER)
    ledger_rows = _index_query(home, env, "SELECT count(*) FROM mem_ledger")
    assert ledger_rows
    for args in (["branch", "list", scope], ["principal", "show", "alice"],
                 ["index", "rebuild", "--scope", scope], ["maintenance"]):
        _one_error_line(cli_in_process(home, env, *args), "read index",
                        "newer AmpUp Memory", f"layout version {NEWER}",
                        "upgrade AmpUp Memory", "ampup-memory index rebuild")
    _one_error_line(_serve(home, env), "newer AmpUp Memory")
    assert _index_layout(home, env) == NEWER
    assert _index_query(home, env, "SELECT count(*) FROM mem_ledger") == ledger_rows

    # Going back on purpose: the rebuild command replaces it for this version.
    rebuilt = cli_in_process(home, env, "index", "rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["read_index_commits"] == 1
    assert _index_layout(home, env) == str(INDEX_VERSION)
    assert _heads(home, env, scope) == heads


@pytest.fixture(params=BACKENDS)
def cell_store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A URI no store was made at yet, and the environment that points the CLI at it."""
    if request.param == "sqlite":
        (tmp_path / "home").mkdir()
        return f"sqlite:///{tmp_path / 'home' / 'amp.db'}", dict(QUIET)
    factory: PostgresFactory = request.getfixturevalue("postgres")
    url = factory.new_database("layout")
    return url, {**QUIET, "AMP_STORE_URI": url}


def _store_meta(uri: str, sql: str, *params: str) -> object:
    if uri.startswith("sqlite"):
        with sqlite3.connect(uri[len("sqlite:///"):]) as lite:
            row = lite.execute(sql.replace("%s", "?"), params).fetchone()
        return None if row is None else row[0]
    with psycopg.connect(uri, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        found = cur.fetchone() if cur.description else None
    return None if found is None else found[0]


def test_cell_store_records_its_layout_and_refuses_a_newer_one(
        cell_store: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    uri, env = cell_store
    home = tmp_path / "home"
    read = "SELECT value FROM meta WHERE key = %s"
    open_store(uri, None).close()
    assert _store_meta(uri, read, SCHEMA_VERSION_KEY) == str(SCHEMA_VERSION)

    # A store made before stores recorded it: recorded on its next open.
    _store_meta(uri, "DELETE FROM meta WHERE key = %s", SCHEMA_VERSION_KEY)
    assert _store_meta(uri, read, SCHEMA_VERSION_KEY) is None
    done = cli_in_process(home, env, "keys", "create", "--agent", "agent_a")
    assert done.returncode == 0, done.stderr
    assert _store_meta(uri, read, SCHEMA_VERSION_KEY) == str(SCHEMA_VERSION)

    # A newer one: refused before anything touches it.
    _store_meta(uri, "UPDATE meta SET value = %s WHERE key = %s", NEWER, SCHEMA_VERSION_KEY)
    with pytest.raises(ConfigurationError, match="newer AmpUp Memory"):
        open_store(uri, None)
    for args in (["keys", "list"], ["keys", "create", "--agent", "agent_b"],
                 ["lifecycle", "run"]):
        _one_error_line(cli_in_process(home, env, *args), "AMP cell store",
                        f"layout version {NEWER}", "upgrade AmpUp Memory")
    _one_error_line(_serve(home, env), "AMP cell store", "newer AmpUp Memory")
    assert _store_meta(uri, read, SCHEMA_VERSION_KEY) == NEWER
    assert _store_meta(uri, "SELECT count(*) FROM api_keys") == 1  # agent_b was not added


def test_a_newer_cell_store_is_left_as_it_was(tmp_path: Path) -> None:
    """The version is read before any table is made: a newer layout gets none of ours."""
    path = tmp_path / "amp.db"
    with sqlite3.connect(path) as lite:
        lite.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        lite.execute("INSERT INTO meta VALUES (?, ?)", (SCHEMA_VERSION_KEY, NEWER))
    lite.close()
    with pytest.raises(ConfigurationError, match=f"layout version {NEWER}"):
        open_store(f"sqlite:///{path}", 8)
    with sqlite3.connect(path) as lite:
        tables = [r[0] for r in lite.execute("SELECT name FROM sqlite_master")]
    lite.close()
    assert tables == ["meta", "sqlite_autoindex_meta_1"]
