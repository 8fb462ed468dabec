"""The OpenAI-compatible embeddings provider against a real (scripted) HTTP endpoint.

The endpoint is the one edge we do not own, so the test runs a small real HTTP server
that answers `POST /v1/embeddings` deterministically; the AMP server talks to it over
the network like it would to Ollama or vLLM.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.server_process import ServerProcess, free_port

DIMS = 8


def _vector(text: str) -> list[float]:
    # Bag of hashed words: texts sharing words get similar vectors.
    vec = [0.0] * DIMS
    for word in text.lower().split():
        vec[hashlib.sha256(word.encode()).digest()[0] % DIMS] += 1.0
    return vec


class _Handler(BaseHTTPRequestHandler):
    calls: list[dict[str, object]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.calls.append({"path": self.path, "auth": self.headers.get("Authorization"),
                               "body": body})
        if self.path != "/v1/embeddings" or body.get("model") != "tiny-embed":
            self.send_response(404)
            self.end_headers()
            return
        data = [{"index": i, "embedding": _vector(t)} for i, t in enumerate(body["input"])]
        payload = json.dumps({"data": data, "model": "tiny-embed"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_openai_compatible_embeddings_power_search(tmp_path: Path, endpoint: str) -> None:
    env = {"AMP_EMBEDDING_PROVIDER": "openai-compatible", "AMP_EMBEDDING_BASE_URL": endpoint,
           "AMP_EMBEDDING_MODEL": "tiny-embed", "AMP_EMBEDDING_API_KEY": "sk-test"}
    with ServerProcess(tmp_path, env=env) as srv:
        base = srv.url + "/amp/v1"
        spec = httpx.get(f"{base}/spec").json()["capabilities"]["embedding"]
        assert spec["provider"] == "openai-compatible" and spec["dimensions"] == DIMS
        me = {"X-AMP-Agent-ID": "a"}
        for text in ("invoice email preference", "mountain weather report"):
            httpx.post(f"{base}/memories", headers=me, json={
                "type": "semantic", "content": {"text": text},
                "identity": {"owner_id": "o", "owner_type": "user"}}).raise_for_status()
        found = httpx.post(f"{base}/memories/search", headers=me,
                           json={"query": "weather", "owner_id": "o"}).json()["results"]
        assert found[0]["content"]["text"] == "mountain weather report"
    assert all(c["auth"] == "Bearer sk-test" for c in _Handler.calls)
    embedded = [t for c in _Handler.calls for t in c["body"]["input"]]  # type: ignore[index]
    assert "invoice email preference" in embedded and "weather" in embedded


@pytest.mark.parametrize("env", [
    {"AMP_EMBEDDING_PROVIDER": "openai-compatible"},  # no URL, no model
    {"AMP_EMBEDDING_PROVIDER": "openai-compatible", "AMP_EMBEDDING_MODEL": "tiny-embed",
     "AMP_EMBEDDING_BASE_URL": "http://127.0.0.1:9/v1"},  # nothing listens there
    {"AMP_EMBEDDING_PROVIDER": "no-such-provider"},
])
def test_misconfigured_embedder_stops_start_up(tmp_path: Path, env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ampup_memory.cli", "serve", "--port", str(free_port())],
        env={**os.environ, "AMPUP_MEMORY_HOME": str(tmp_path), **env},
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "error" in done.stderr.lower()
