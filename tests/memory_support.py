"""Shared pieces of the AmpUp Memory tests: backends, real servers, a thin HTTP client."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.pg import PostgresFactory
from tests.server_process import ServerProcess, plain_client

ADMIN_TOKEN = "memory-admin-token"
BACKENDS = ["sqlite", "postgres"]
QUIET = {
    "AMP_ADMIN_TOKEN": ADMIN_TOKEN,
    "AMP_EMBEDDING_PROVIDER": "hash",
    "AMP_LIFECYCLE_ENABLED": "false",
    "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0",
}


def backend_env(kind: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """Catalog (and read index) on SQLite in the home folder, or on a fresh PostgreSQL DB."""
    if kind == "sqlite":
        return dict(QUIET)
    pg: PostgresFactory = request.getfixturevalue("postgres")
    url = pg.new_database("mem")
    return {**QUIET, "AMPUP_MEMORY_CATALOG_URI": url, "AMPUP_MEMORY_INDEX_URI": url}


def bar_line(stderr: str, description: str) -> str:
    """The line a command's progress bar left on stderr (rich draws its last state once
    when stderr is no terminal), or a failed assertion naming what was there."""
    lines = [line for line in stderr.splitlines() if line.startswith(description)]
    assert len(lines) == 1, stderr
    return lines[0]


def new_scope() -> str:
    return f"t{uuid.uuid4().hex[:10]}/team_1"


class Memory:
    """The AmpUp routes of one server, as one user."""

    def __init__(self, url: str, user: str = "alice") -> None:
        self.url = url
        self.user = user
        self.http = plain_client(base_url=url, timeout=120, headers={"X-AmpUp-User": user})

    def as_user(self, user: str) -> Memory:
        return Memory(self.url, user)

    def close(self) -> None:
        self.http.close()

    def write(self, scope: str, body: str, acl: list[str] | None = None,
              source: str = "doc:note", **extra: Any) -> httpx.Response:
        return self.http.post("/episodes", json={
            "scope": scope, "source": source, "body": body, "acl": acl or ["*"], **extra})

    def episode(self, scope: str, episode_id: str, **params: Any) -> httpx.Response:
        return self.http.get(f"/episodes/{episode_id}", params={"scope": scope, **params})

    def fact(self, scope: str, entity: str, predicate: str, value: Any, quote: str,
             cites: list[tuple[str, int]], **extra: Any) -> httpx.Response:
        return self.http.post("/facts", json={
            "scope": scope, "entity": entity, "predicate": predicate, "value": value,
            "quote": quote, "cites": [{"episode": e, "unit": u} for e, u in cites], **extra})

    def facts(self, scope: str, entity: str, **params: Any) -> httpx.Response:
        return self.http.get("/facts", params={"scope": scope, "entity": entity, **params})

    def ledger(self, scope: str) -> list[dict[str, Any]]:
        """Every commit of the scope's main branch, newest first, across pages."""
        out: list[dict[str, Any]] = []
        before = None
        while True:
            params: dict[str, Any] = {"scope": scope, "limit": 1000}
            if before:
                params["before"] = before
            r = self.http.get("/ledger", params=params)
            assert r.status_code == 200, r.text
            page = r.json()
            out += page["commits"]
            before = page["next_before"]
            if not before:
                return out

    def set_principal(self, user: str, groups: list[str] = [],  # noqa: B006
                      roles: list[str] = []) -> httpx.Response:  # noqa: B006
        return self.http.put(f"/principals/{user}", json={"groups": groups, "roles": roles},
                             headers={"X-AMP-Admin-Token": ADMIN_TOKEN})


def start(home: Path, env: dict[str, str]) -> ServerProcess:
    """A started server; the caller stops it."""
    return ServerProcess(home, env=env).start(timeout=90)


@contextmanager
def serving(home: Path, env: dict[str, str]) -> Iterator[ServerProcess]:
    proc = start(home, env)
    try:
        yield proc
    finally:
        proc.stop()


def run_cli(home: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "AMPUP_MEMORY_HOME": str(home), **env}
    return subprocess.run([sys.executable, "-m", "ampup_memory.cli", *args], env=full,
                          capture_output=True, text=True, timeout=300)


def cli_in_process(home: Path | None, env: dict[str, str],
                   *args: str) -> subprocess.CompletedProcess[str]:
    """`run_cli` without a new Python process: the same command line through the CLI's own
    entry (`ampup_memory.cli.run`: its exit codes and one-line errors), in this process,
    with ``env`` set for the call and restored after (``home`` as AMPUP_MEMORY_HOME; None
    leaves the home to the environment). An exception the CLI does not turn
    into an exit code propagates (a subprocess would have printed its traceback).
    For tests of what a command does; tests of the installed command use `run_cli`."""
    import contextlib
    import io
    import logging

    from ampup_memory import cli

    out, err = io.StringIO(), io.StringIO()
    saved_env = dict(os.environ)
    loggers = [logging.getLogger(name) for name in ("", *logging.root.manager.loggerDict)]
    saved_logs = [(lg, lg.handlers[:], lg.level, lg.propagate, lg.disabled) for lg in loggers
                  if isinstance(lg, logging.Logger)]
    os.environ.update({**({"AMPUP_MEMORY_HOME": str(home)} if home else {}), **env})
    code: int = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.run(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        for lg, handlers, level, propagate, disabled in saved_logs:
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate, lg.disabled = propagate, disabled
    return subprocess.CompletedProcess(["ampup-memory", *args], code, out.getvalue(),
                                       err.getvalue())


LEASE = 6  # AMPUP_MEMORY_LEASE_SECONDS of a process killed while it holds a lease


def maintenance_lease_free(home: Path, env: dict[str, str]) -> bool:
    """Whether another process gets the maintenance lease now (given back at once)."""
    from ampup_memory.memory.readindex import ReadIndex
    from ampup_memory.memory.service import MAINTENANCE_LEASE

    index = ReadIndex(env.get("AMPUP_MEMORY_INDEX_URI") or f"sqlite:///{home / 'index.db'}")
    try:
        got = index.take_lease(MAINTENANCE_LEASE, "probe", datetime.now(UTC),
                               timedelta(seconds=1))
        if got:
            index.release_lease(MAINTENANCE_LEASE, "probe")
        return got
    finally:
        index.close()


def wait_until_lease_free(home: Path, env: dict[str, str], died: float) -> float:
    """Seconds from ``died`` (a monotonic time) until the maintenance lease is free; fails
    past one lease and a few seconds."""
    while not maintenance_lease_free(home, env):
        assert time.monotonic() - died < LEASE + 5, "the dead holder's lease did not run out"
        time.sleep(0.2)
    return time.monotonic() - died
