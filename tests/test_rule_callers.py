"""Every caller of the read and write rules agrees with the rule, over real HTTP.

The reference server once had two read checks that disagreed for one kind of agent id;
here GET, listing (both routes) and search must give the answer `access.can_read` gives,
and PATCH/DELETE the answer `access.can_write` gives, for the same agents and patterns.
A PATCH sending `access_policy` passes exactly when `access.can_manage` says so, and a
PATCH answers the whole cell exactly when `access.can_read` does.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from ampup_memory.amp.access import can_manage, can_read, can_write
from ampup_memory.amp.model import MemoryCell


def _policies(uid: str) -> list[dict[str, Any]]:
    return [
        {"public": True},
        {"readable_by": [f"billing_{uid}_*"]},
        {"readable_by": [f"billing_{uid}_v1"]},
        {"readable_by": [f"*_{uid}_ops"]},
        {"readable_by": [f"bill*{uid}*"]},
        {"readable_by": [f"billing.{uid}"]},  # '.' is literal, not "any character"
        {"readable_by": [f"billing?{uid}"]},  # '?' is literal too
        {"readable_by": ["*"]},
        {"writable_by": [f"billing_{uid}_*"]},  # grants write, not read
        {"readable_by": [], "writable_by": [], "public": False},
    ]


def _agents(uid: str) -> list[str]:
    return [
        f"creator_{uid}",
        f"owner_{uid}",
        f"billing_{uid}_v1",
        f"billing_{uid}_",
        f"billing_{uid}_v2",
        f"x_{uid}_ops",
        f"billingX{uid}",
        f"billing.{uid}",
        f"billing?{uid}",
        f"marketing_{uid}",
    ]


@pytest.mark.parametrize("owner_type", ["user", "agent", "organization"])
def test_read_rule_callers_agree(http: httpx.Client, uid: str, owner_type: str) -> None:
    creator, owner = f"creator_{uid}", f"owner_{uid}"
    cells: list[MemoryCell] = []
    for i, policy in enumerate(_policies(uid)):
        r = http.post("/memories", headers={"X-AMP-Agent-ID": creator}, json={
            "type": "semantic",
            "content": {"text": f"zebra{uid} fact number {i}"},
            "identity": {"owner_id": owner, "owner_type": owner_type},
            "access_policy": policy,
        })
        assert r.status_code == 201, r.text
        cells.append(MemoryCell.model_validate(r.json()))

    for agent in _agents(uid):
        h = {"X-AMP-Agent-ID": agent}
        params = {"owner_id": owner, "limit": 100}
        listed = {c["id"] for c in http.get("/memories", params=params,
                                            headers=h).json()["results"]}
        queried = {c["id"] for c in http.get("/memories/query", params=params,
                                             headers=h).json()["results"]}
        found = {c["id"] for c in http.post("/memories/search", headers=h, json={
            "query": f"zebra{uid} fact", "owner_id": owner, "limit": 100}).json()["results"]}
        for cell in cells:
            expected = can_read(cell, agent)
            got = http.get(f"/memories/{cell.id}", headers=h).status_code == 200
            assert got == expected, (agent, cell.access_policy)
            assert (cell.id in listed) == expected, (agent, cell.access_policy)
            assert (cell.id in queried) == expected, (agent, cell.access_policy)
            assert (cell.id in found) == expected, (agent, cell.access_policy)


def test_write_rule_callers_agree(http: httpx.Client, uid: str) -> None:
    creator, owner = f"creator_{uid}", f"owner_{uid}"
    for policy in _policies(uid):
        for agent in _agents(uid):
            r = http.post("/memories", headers={"X-AMP-Agent-ID": creator}, json={
                "type": "procedural", "content": {"text": "deploy after tests"},
                "identity": {"owner_id": owner, "owner_type": "agent"},
                "access_policy": policy,
            })
            cell = MemoryCell.model_validate(r.json())
            expected = can_write(cell, agent)
            h = {"X-AMP-Agent-ID": agent}
            # A non-scoring PATCH so the scoring budget never interferes.
            patched = http.patch(f"/memories/{cell.id}", headers=h,
                                 json={"lifecycle": {"status": "archived"}})
            assert (patched.status_code == 200) == expected, (agent, policy, patched.text)
            if not expected:
                assert patched.status_code == 403
                # Archive as the creator so DELETE's precondition holds for everyone.
                http.patch(f"/memories/{cell.id}", headers={"X-AMP-Agent-ID": creator},
                           json={"lifecycle": {"status": "archived"}})
            deleted = http.delete(f"/memories/{cell.id}", headers=h)
            assert (deleted.status_code == 204) == expected, (agent, policy, deleted.text)


def test_manage_rule_and_patch_answers_agree(http: httpx.Client, uid: str) -> None:
    creator, owner = f"creator_{uid}", f"owner_{uid}"
    for policy in _policies(uid):
        r = http.post("/memories", headers={"X-AMP-Agent-ID": creator}, json={
            "type": "semantic", "content": {"text": f"hidden {uid}"},
            "identity": {"owner_id": owner, "owner_type": "agent"},
            "access_policy": policy,
        })
        cell = MemoryCell.model_validate(r.json())
        url = f"/memories/{cell.id}"
        for agent in _agents(uid):
            h = {"X-AMP-Agent-ID": agent}
            # The stored policy sent back unchanged: still only for those who may manage.
            sent = http.patch(url, headers=h,
                              json={"access_policy": cell.access_policy.model_dump()})
            assert (sent.status_code == 200) == can_manage(cell, agent), (agent, policy)
            if sent.status_code != 200:
                assert sent.status_code == 403
            touched = http.patch(url, headers=h, json={"content": {"metadata": {"by": agent}}})
            assert (touched.status_code == 200) == can_write(cell, agent), (agent, policy)
            if touched.status_code == 200:
                whole = touched.json() != {"id": cell.id}
                assert whole == can_read(cell, agent), (agent, policy, touched.text)
                assert (f"hidden {uid}" in touched.text) == can_read(cell, agent)
