"""MCP sessions over streamable HTTP that clients never end are closed once idle, and
their number is capped (`AMPUP_MEMORY_MCP_SESSION_IDLE_SECONDS`,
`AMPUP_MEMORY_MCP_MAX_SESSIONS`). Most clients go away without `DELETE /mcp`, some in the
middle of a call or with their GET stream open; each session held about 36 KB and two
tasks until then (tools/leak_audit.py, workload ``mcp``)."""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.memory_support import QUIET
from tests.server_process import ServerProcess, plain_client

VERSION = "2025-06-18"
HEADERS = {"X-AMP-Agent-ID": "idle_agent", "X-AmpUp-User": "idle.user",
           "Accept": "application/json, text/event-stream", "Content-Type": "application/json",
           "MCP-Protocol-Version": VERSION}
IDLE = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home: Path = tmp_path_factory.mktemp("mcp-sessions")
    env = {**QUIET, "AMPUP_MEMORY_MCP_SESSION_IDLE_SECONDS": str(IDLE),
           "AMPUP_MEMORY_MCP_MAX_SESSIONS": "3"}
    with ServerProcess(home, env=env) as proc:
        yield proc


def _open(http: httpx.Client) -> httpx.Response:
    return http.post("/mcp", headers=HEADERS, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": VERSION, "capabilities": {},
            "clientInfo": {"name": "idle-test", "version": "1"}}})


def _session(http: httpx.Client) -> str:
    r = _open(http)
    assert r.status_code == 200, r.text
    session = r.headers["mcp-session-id"]
    r = http.post("/mcp", headers={**HEADERS, "Mcp-Session-Id": session},
                  json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert r.status_code == 202, r.text
    return session


def _send_and_vanish(server: ServerProcess, method: str, headers: dict[str, str],
                     body: bytes = b"", read: int = 0) -> None:
    """A request on its own socket, ended by a reset after ``read`` bytes of the answer."""
    head = {"Host": f"127.0.0.1:{server.port}", **headers, "Content-Length": str(len(body))}
    raw = f"{method} /mcp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items())
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
        conn.sendall(raw.encode() + b"\r\n" + body)
        if read:
            conn.recv(read)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_sessions_left_open_are_capped_then_closed_once_idle(server: ServerProcess) -> None:
    with plain_client(base_url=server.url, timeout=30) as http:
        left = _session(http)  # initialized, then the client is gone
        streaming = _session(http)  # its GET stream opened, then the client is gone
        _send_and_vanish(server, "GET", {**HEADERS, "Accept": "text/event-stream",
                                         "Mcp-Session-Id": streaming}, read=16)
        cut = _session(http)  # a call sent, the client gone before the answer
        _send_and_vanish(server, "POST", {**HEADERS, "Mcp-Session-Id": cut}, json.dumps({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "amp_list_memories", "arguments": {}}}).encode())
        full = _open(http)
        assert full.status_code == 503, full.text  # the cap: open ones unaffected
        r = http.post("/mcp", headers={**HEADERS, "Mcp-Session-Id": left},
                      json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        assert r.status_code == 200, r.text
        # Idle past the limit (asking about a session is a request: not meanwhile), each
        # is closed: its id answers 404, and there is room again.
        time.sleep(IDLE * 2)
        for session in (left, streaming, cut):
            r = http.post("/mcp", headers={**HEADERS, "Mcp-Session-Id": session},
                          json={"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
            assert r.status_code == 404, r.text
        _session(http)
