"""The multi-agent demo runs green on our server and red on a broken one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.server_process import ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "multi_agent_demo.py"


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(DEMO), *args], capture_output=True, text=True,
                          timeout=300)


def test_demo_starts_its_own_server_and_passes() -> None:
    done = run_demo()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WRONG" not in done.stdout and "cannot tell whether the memory exists" in done.stdout


def test_demo_fails_when_the_read_rule_forgets_wildcards(tmp_path: Path) -> None:
    port = free_port()
    command = [sys.executable, str(ROOT / "tests" / "broken_server.py"), "wildcard-blind",
               str(port)]
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with ServerProcess(tmp_path, env=env, port=port, command=command) as srv:
        done = run_demo("--url", srv.url)
    assert done.returncode == 1
    assert "WRONG" in done.stdout
