"""Start and script the OpenAI-compatible test model server (tests/scripted_model.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.server_process import free_port, plain_client

ROOT = Path(__file__).resolve().parent.parent


class ScriptedModel:
    """One scripted model server process; ``env`` points our server's settings at it."""

    name = "scripted-1"

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ScriptedModel:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.scripted_model", "--port", str(self.port)], cwd=ROOT)
        deadline = time.monotonic() + 30
        with plain_client(timeout=1) as probe:  # one client for every probe, no CA bundle
            while time.monotonic() < deadline:
                try:
                    if probe.get(f"{self.url}/_health").status_code == 200:
                        return self
                except httpx.HTTPError:
                    time.sleep(0.05)
        self.stop()
        raise RuntimeError("scripted model server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def env(self, prefix: str = "") -> dict[str, str]:
        """Settings for our server: ``prefix`` ``EXTRACT_`` etc. sets one role only."""
        return {f"AMPUP_MEMORY_{prefix}MODEL_BASE_URL": f"{self.url}/v1",
                f"AMPUP_MEMORY_{prefix}MODEL": self.name,
                f"AMPUP_MEMORY_{prefix}MODEL_API_KEY": "test-key"}

    def script(self, rules: list[dict[str, Any]], default: dict[str, Any] | None = None,
               append: bool = False) -> None:
        body: dict[str, Any] = {"rules": rules, "append": append}
        if default is not None or not append:
            body["default"] = default
        httpx.post(f"{self.url}/_script", json=body, timeout=10).raise_for_status()

    def calls(self) -> list[dict[str, Any]]:
        calls: list[dict[str, Any]] = httpx.get(f"{self.url}/_calls", timeout=10).json()
        return calls

    def reset(self) -> None:
        self.script([])
        httpx.delete(f"{self.url}/_calls", timeout=10).raise_for_status()
