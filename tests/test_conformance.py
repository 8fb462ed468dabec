"""Run the HTTP-only conformance suite (conformance/) against real servers.

It must pass against ours on both stores, and it must fail against deliberately broken
servers: a suite that cannot fail proves nothing.
"""

from __future__ import annotations

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
            passed = int(summary(done).split()[0])
            assert passed >= 150, summary(done)


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
