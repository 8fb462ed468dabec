"""An index rebuild never runs under a server, nor a server under a rebuild (`serving.py`):
on the embedded default (a lock beside the SQLite index) and with the read index on
PostgreSQL (an advisory lock every server sharing it sees), through the real commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ampup_memory.serving import REBUILD_RUNNING, SERVERS_RUNNING, alone
from ampup_memory.settings import Settings
from tests.memory_support import BACKENDS, QUIET, backend_env, cli_in_process, run_cli, serving


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rebuild_is_refused_while_a_server_runs_and_a_server_while_a_rebuild_does(
        backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    env = backend_env(backend, request)
    home = tmp_path_factory.mktemp(f"lease-{backend}")
    with serving(home, env) as first, serving(home, env) as second:  # many servers at once
        assert first.url != second.url
        for args in (["index", "rebuild"], ["index", "rebuild", "--scope", "acme/sales"],
                     ["maintenance", "--rebuild-index"]):
            refused = cli_in_process(home, env, *args)
            assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
            assert SERVERS_RUNNING in refused.stderr, refused.stderr
            assert refused.stdout == "", refused.stdout  # nothing done, no report
        second.kill()  # a killed server holds nothing
        assert cli_in_process(home, env, "index", "rebuild").returncode == 2
    assert cli_in_process(home, env, "maintenance", "--rebuild-index").returncode == 0

    settings = Settings.model_validate({**env, "AMPUP_MEMORY_HOME": str(home)})
    with alone(settings):  # as a rebuild holds it
        started = run_cli(home, env, "serve", "--port", "0")
        assert started.returncode == 2, started.stderr
        assert REBUILD_RUNNING in started.stderr, started.stderr
    done = cli_in_process(home, env, "index", "rebuild")
    assert done.returncode == 0, done.stderr


def test_a_stdio_mcp_process_holds_the_lease_too(tmp_path: Path) -> None:
    """A desktop agent's `ampup-memory mcp` shares the store as a server does."""
    env = {**os.environ, **QUIET,
           "AMPUP_MEMORY_HOME": str(tmp_path), "AMP_MCP_AGENT_ID": "agent_desk"}
    mcp = subprocess.Popen([sys.executable, "-m", "ampup_memory.cli", "mcp"], env=env,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    try:
        assert mcp.stdin is not None and mcp.stdout is not None
        # Once it answers, it serves (the lease is taken before the store opens).
        mcp.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                    "params": {"protocolVersion": "2025-06-18",
                                               "capabilities": {},
                                               "clientInfo": {"name": "t", "version": "1"}}
                                    }).encode() + b"\n")
        mcp.stdin.flush()
        assert b'"result"' in mcp.stdout.readline()
        refused = cli_in_process(tmp_path, {}, "index", "rebuild")
        assert refused.returncode == 2 and SERVERS_RUNNING in refused.stderr, refused.stderr
    finally:
        assert mcp.stdin is not None
        mcp.stdin.close()  # the client went away: the process ends, and its lease
        mcp.wait(timeout=60)
    assert cli_in_process(tmp_path, {}, "index", "rebuild").returncode == 0


@pytest.mark.postgres
def test_a_server_takes_its_lease_again_after_its_connection_ends(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A database restart (here: the lease's own backend terminated, as a restart or an
    operator's pg_terminate_backend ends it) ended a server's PostgreSQL lease for good,
    so a rebuild could then run under the server. It takes the lease again on a new
    connection within `KEEP_SECONDS`, and a rebuild is refused as before."""
    import time

    import psycopg

    from ampup_memory.serving import KEEP_SECONDS
    from tests.pg import PostgresFactory

    pg: PostgresFactory = request.getfixturevalue("postgres")
    url = pg.new_database("lease")
    env = {**QUIET, "AMPUP_MEMORY_CATALOG_URI": url, "AMPUP_MEMORY_INDEX_URI": url}
    database = urlsplit(url).path.lstrip("/")
    holders = ("SELECT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
               "WHERE l.locktype = 'advisory' AND l.mode = 'ShareLock' AND l.granted "
               "AND d.datname = %s")
    with serving(tmp_path, env) as server, \
            psycopg.connect(pg.admin_url, autocommit=True) as admin:
        (first,) = [pid for (pid,) in admin.execute(holders, (database,))]
        admin.execute("SELECT pg_terminate_backend(%s)", (first,))
        deadline = time.monotonic() + KEEP_SECONDS * 4
        again: list[int] = []
        while time.monotonic() < deadline and not again:
            time.sleep(0.2)
            again = [pid for (pid,) in admin.execute(holders, (database,)) if pid != first]
        assert again, "the server did not take its lease again"
        refused = cli_in_process(tmp_path, env, "index", "rebuild")
        assert refused.returncode == 2 and SERVERS_RUNNING in refused.stderr, refused.stderr
        assert "took the server's lease on the read index's database again" \
            in server.log_path.read_text(), server.log_path.read_text()
