"""Shared by the client tests: a second real server with API keys required, and its keys."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.server_process import ServerProcess


def create_key(server: ServerProcess, agent_id: str) -> str:
    """`ampup-memory keys create --agent ID`; the key is the last line of its output."""
    done = subprocess.run(
        [sys.executable, "-m", "ampup_memory.cli", "keys", "create", "--agent", agent_id],
        env=server.env, capture_output=True, text=True, timeout=60, check=True,
    )
    return done.stdout.strip().splitlines()[-1]


@dataclass
class KeyedServer:
    proc: ServerProcess
    keys: dict[str, str]

    @property
    def url(self) -> str:
        return self.proc.url


KEYED_AGENTS = ("agent_keyed_a", "agent_keyed_b")


@pytest.fixture(scope="session")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyedServer]:
    """A server started with AMP_REQUIRE_KEYS=1 and one key per agent in KEYED_AGENTS."""
    home: Path = tmp_path_factory.mktemp("keyed-home")
    with ServerProcess(home, env={"AMP_REQUIRE_KEYS": "1"}) as proc:
        yield KeyedServer(proc, {agent: create_key(proc, agent) for agent in KEYED_AGENTS})
