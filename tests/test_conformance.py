"""Run the HTTP-only conformance suite (conformance/) against real servers.

It must pass against ours on both stores, and it must fail against deliberately broken
servers: a suite that cannot fail proves nothing.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pg import PostgresFactory
from tests.server_process import ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "conformance" / "amp_conformance.py"
TOKEN = "conformance-admin"
VECTOR_COUNT = 172
# With --admin-token and keys off, these are exactly the vectors that can verify nothing:
# ADMIN_DISABLED needs a server with no admin credential, keys_* need --api-key-mode.
EXPECTED_SKIPS = {"admin_disabled_when_unconfigured"} | {f"keys_{n}" for n in (
    "missing_key_401", "wrong_key_401", "other_agents_key_401", "unknown_agent_401",
    "identical_401_bodies", "bearer_accepted", "health_and_spec_open",
    "checked_before_validation")}


def run_suite(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SUITE), "--base-url", url, *args],
                          capture_output=True, text=True, timeout=600)


def summary(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_suite_passes_on_our_server(tmp_path: Path, store: str,
                                    postgres: PostgresFactory) -> None:
    env = {"AMP_ADMIN_TOKEN": TOKEN, "AMP_LIFECYCLE_ENABLED": "0"}
    if store == "postgres":
        env["AMP_STORE_URI"] = postgres.new_database("conf")
    with ServerProcess(tmp_path, env=env) as srv:
        for _ in range(2):  # repeatable against one server: fresh ids every run
            done = run_suite(srv.url, "--admin-token", TOKEN)
            failures = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
            assert done.returncode == 0, failures or done.stderr[-2000:]
            skipped = {line.split()[1].rstrip(":") for line in done.stdout.splitlines()
                       if line.startswith("SKIP")}
            assert skipped == EXPECTED_SKIPS
            assert summary(done) == "163 passed, 0 failed, 9 skipped"


@pytest.mark.parametrize(("broken", "must_fail"), [
    ("listing-after-item", "listing_query_route_answers_as_listing"),
    ("wildcard-blind", "pattern_star_suffix"),
    ("public-grants-write", "write_public_grants_no_write"),
])
def test_suite_catches_broken_servers(tmp_path: Path, broken: str, must_fail: str) -> None:
    port = free_port()
    command = [sys.executable, str(ROOT / "tests" / "broken_server.py"), broken, str(port)]
    env = {"AMP_LIFECYCLE_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with ServerProcess(tmp_path, env=env, port=port, command=command) as srv:
        done = run_suite(srv.url)
    assert done.returncode == 1
    failed = [line.split()[1].rstrip(":") for line in done.stdout.splitlines()
              if line.startswith("FAIL")]
    assert must_fail in failed, (must_fail, failed)


def test_suite_lists_every_vector_once_in_run_order() -> None:
    """The split into area modules keeps one registry: 172 unique vectors, the lifecycle
    group after every group but keys (its passes move every cell on the server)."""
    done = run_suite("http://127.0.0.1:9", "--list")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    names = [name for _, name in rows]
    assert len(names) == VECTOR_COUNT == len(set(names))
    groups = [group for group, _ in rows]
    first = groups.index("lifecycle")
    assert groups[first:] == ["lifecycle"] * 16 + ["keys"] * 9


def test_suite_imports_nothing_but_stdlib_and_httpx() -> None:
    """HTTP only: no module of the suite may import our package, the tests or any other
    server; only the standard library, httpx and the suite's own modules."""
    files = [SUITE, *sorted((ROOT / "conformance" / "amp_suite").glob("*.py"))]
    assert len(files) == 11  # the entry, the package, its runner and eight areas
    own = {"amp_suite"} | {p.stem for p in files}
    allowed = set(sys.stdlib_module_names) | {"httpx"} | own
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                tops = [] if node.level else [(node.module or "").split(".")[0]]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__import__":
                raise AssertionError(f"{path.name}: dynamic import")
            else:
                continue
            assert set(tops) <= allowed, (path.name, tops)
