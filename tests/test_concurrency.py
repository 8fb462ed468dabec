"""Concurrent clients lose nothing; a kill -9 loses no acknowledged write."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.server_process import ServerProcess


def _cell(base: str, agent: str, owner: str, text: str = "shared") -> str:
    r = httpx.post(f"{base}/memories", headers={"X-AMP-Agent-ID": agent}, json={
        "type": "semantic", "content": {"text": text},
        "identity": {"owner_id": owner, "owner_type": "user"}}, timeout=30)
    assert r.status_code == 201, r.text
    cell_id: str = r.json()["id"]
    return cell_id


def test_fifty_concurrent_gets_lose_no_access_count(server: ServerProcess, uid: str) -> None:
    base = server.url + "/amp/v1"
    agent = f"a_{uid}"
    cell_id = _cell(base, agent, f"u_{uid}")
    barrier = threading.Barrier(50)

    def read(_: int) -> int:
        with httpx.Client(timeout=60) as c:
            barrier.wait()
            r = c.get(f"{base}/memories/{cell_id}", headers={"X-AMP-Agent-ID": agent})
            return r.status_code

    with ThreadPoolExecutor(50) as pool:
        codes = list(pool.map(read, range(50)))
    assert codes == [200] * 50
    final = httpx.get(f"{base}/memories/{cell_id}", headers={"X-AMP-Agent-ID": agent}).json()
    assert final["scoring"]["access_count"] == 51


def test_concurrent_patches_of_different_fields_lose_none(server: ServerProcess, uid: str) -> None:
    base = server.url + "/amp/v1"
    agent = f"a_{uid}"
    cell_id = _cell(base, agent, f"u_{uid}")
    bodies = [
        {"content": {"metadata": {"topic": "billing"}}},
        {"access_policy": {"readable_by": ["agent_billing_*"]}},
        {"access_policy": {"writable_by": ["agent_ops"]}},
        {"provenance": {"source_type": "conversation"}},
        {"scoring": {"importance": 0.8}},
        {"scoring": {"confidence": 0.7}},
        {"lifecycle": {"expires_at": "2031-01-01T00:00:00Z"}},
        {"type": "episodic"},
    ]
    barrier = threading.Barrier(len(bodies))

    def patch(body: dict[str, object]) -> int:
        with httpx.Client(timeout=60) as c:
            barrier.wait()
            return c.patch(f"{base}/memories/{cell_id}", headers={"X-AMP-Agent-ID": agent},
                           json=body).status_code

    with ThreadPoolExecutor(len(bodies)) as pool:
        assert list(pool.map(patch, bodies)) == [200] * len(bodies)
    cell = httpx.get(f"{base}/memories/{cell_id}", headers={"X-AMP-Agent-ID": agent}).json()
    assert cell["content"]["metadata"] == {"topic": "billing"}
    assert cell["access_policy"]["readable_by"] == ["agent_billing_*"]
    assert cell["access_policy"]["writable_by"] == ["agent_ops"]
    assert cell["provenance"]["source_type"] == "conversation"
    assert cell["scoring"]["importance"] == 0.8 and cell["scoring"]["confidence"] == 0.7
    assert cell["lifecycle"]["expires_at"].startswith("2031-01-01")
    assert cell["type"] == "episodic"


def test_kill_9_loses_no_acknowledged_write(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, env={"AMP_LIFECYCLE_ENABLED": "0"}).start()
    base = server.url + "/amp/v1"
    acknowledged: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        with httpx.Client(timeout=10) as c:
            i = 0
            while not stop.is_set():
                try:
                    r = c.post(f"{base}/memories", headers={"X-AMP-Agent-ID": "writer"}, json={
                        "type": "episodic", "content": {"text": f"event {n}-{i}"},
                        "identity": {"owner_id": "crash_owner", "owner_type": "user"}})
                except httpx.HTTPError:
                    return  # the server died mid-request: this write was never acknowledged
                if r.status_code == 201:
                    with lock:
                        acknowledged.append(r.json()["id"])
                i += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(acknowledged) < 150 and time.monotonic() < deadline:
        time.sleep(0.05)
    server.kill()
    stop.set()
    for t in threads:
        t.join()
    assert len(acknowledged) >= 50
    with ServerProcess(tmp_path, env={"AMP_LIFECYCLE_ENABLED": "0"}, port=server.port) as again:
        base = again.url + "/amp/v1"
        with httpx.Client(timeout=30) as c:
            for cell_id in acknowledged:
                r = c.get(f"{base}/memories/{cell_id}", headers={"X-AMP-Agent-ID": "writer"})
                assert r.status_code == 200, cell_id
