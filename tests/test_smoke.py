from __future__ import annotations

import httpx


def test_health_and_create_read(http: httpx.Client, uid: str) -> None:
    assert http.get("/health").json() == {"status": "ok", "amp_version": "0.1.0"}
    h = {"X-AMP-Agent-ID": f"agent_{uid}"}
    r = http.post("/memories", headers=h, json={
        "type": "semantic", "content": {"text": "likes tea"},
        "identity": {"owner_id": f"user_{uid}", "owner_type": "user"}})
    assert r.status_code == 201, r.text
    cell = r.json()
    got = http.get(f"/memories/{cell['id']}", headers=h).json()
    assert got["scoring"]["access_count"] == 1
    assert got["content"]["text"] == "likes tea"
