"""`AmpUpClient`'s methods beyond episodes, facts and the loop, against the shared real
server: pins, snapshots, workspaces, the ledger, the browsing listings, schemas, principals
and the advice listings. Each method once, with its effect read back through another."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ampup_memory.client import (
    AccessDeniedError,
    AmpUpClient,
    ConflictError,
    GoneError,
    NotFoundError,
    ValidationError,
)
from tests.conftest import ADMIN_TOKEN
from tests.memory_support import cli_in_process
from tests.server_process import ServerProcess


@pytest.fixture
def scope(uid: str) -> str:
    return f"ho{uid}/team"


@pytest.fixture
def ana(server: ServerProcess) -> Iterator[AmpUpClient]:
    with AmpUpClient(server.url, "ana") as client:
        yield client


@pytest.fixture
def admin(server: ServerProcess) -> Iterator[AmpUpClient]:
    with AmpUpClient(server.url, "ana", admin_token=ADMIN_TOKEN) as client:
        yield client


def ids(page: list[dict[str, object]]) -> list[object]:
    return [item["id"] for item in page]


def test_a_pin_holds_a_commit_until_released(server: ServerProcess, ana: AmpUpClient,
                                             scope: str) -> None:
    old = ana.remember(scope, "Before the pin.", source="doc:a")
    pin = ana.pin(scope, "15m")
    assert pin["id"].startswith("pin_") and pin["commit"] == old["commit"]
    new = ana.remember(scope, "After the pin.", source="doc:b")

    assert ids(ana.episodes(scope, pin=pin["id"])["episodes"]) == [old["id"]]
    assert ids(list(ana.iter_episodes(scope, pin=pin["id"]))) == [old["id"]]
    assert ana.get_episode(scope, old["id"], pin=pin["id"])["body"] == "Before the pin."
    with pytest.raises(NotFoundError):
        ana.get_episode(scope, new["id"], pin=pin["id"])  # written after the held commit
    assert len(ana.episodes(scope)["episodes"]) == 2

    shown = ana.get_pin(pin["id"])
    assert shown["state"] == "live" and shown["created_by"] == "ana"
    renewed = ana.renew_pin(pin["id"], "2h")
    assert renewed["expires_at"] > pin["expires_at"]
    with AmpUpClient(server.url, "bob") as bob:
        with pytest.raises(AccessDeniedError) as not_his:
            bob.release_pin(pin["id"])
    assert (not_his.value.status_code, not_his.value.code) == (403, "ACCESS_DENIED")

    assert ana.release_pin(pin["id"])["state"] == "released"
    with pytest.raises(GoneError) as gone:
        ana.episodes(scope, pin=pin["id"])
    assert (gone.value.status_code, gone.value.code) == (410, "PIN_RELEASED")
    with pytest.raises(GoneError):
        ana.renew_pin(pin["id"], "1h")
    with pytest.raises(ValidationError) as bad_ttl:
        ana.pin(scope, "1.5h")
    assert bad_ttl.value.errors[0]["loc"] == ["body", "ttl"]
    with pytest.raises(ValidationError):
        ana.get_pin("..")  # never sent: it would name another route


def test_a_snapshot_holds_several_scopes_and_the_ledger_pages(ana: AmpUpClient,
                                                              scope: str) -> None:
    other = scope.replace("/team", "/other")
    first = ana.remember(scope, "Acme has 40 seats.", source="doc:a")
    ana.add_fact(scope, "acme", "seats", 40, quote="40 seats",
                 cites=[{"episode": first["id"], "unit": 1}])
    ana.remember(other, "Elsewhere.", source="doc:a")
    snap = ana.snapshot([scope, other])
    assert snap["id"].startswith("snap_") and set(snap["heads"]) == {f"{scope}@main",
                                                                    f"{other}@main"}
    held = snap["heads"][f"{scope}@main"]
    ana.close_fact(scope, "acme", "seats", "Contract ended.")

    assert ana.facts(scope, "acme")["facts"] == []
    assert [f["value"] for f in ana.facts(scope, "acme", snapshot=snap["id"])["facts"]] == [40]
    assert ana.get_snapshot(snap["id"])["state"] == "live"

    # The ledger: newest first, one page at a time; through the snapshot it starts at the
    # held commit.
    commits = ana.ledger(scope)["commits"]
    assert [c["kind"] for c in commits] == ["commit"] * 3 and commits[1]["id"] == held
    walked = list(ana.iter_ledger(scope, page_size=1))
    assert ids(walked) == ids(commits)
    page = ana.ledger(scope, limit=1)
    assert page["next_before"] == commits[0]["id"]
    assert ids(ana.ledger(scope, before=page["next_before"])["commits"]) == ids(commits[1:])
    assert ids(ana.ledger(scope, snapshot=snap["id"])["commits"]) == ids(commits[1:])

    assert ana.release_snapshot(snap["id"])["state"] == "released"
    with pytest.raises(GoneError) as gone:
        ana.facts(scope, "acme", snapshot=snap["id"])
    assert gone.value.code == "SNAPSHOT_RELEASED"


def test_workspaces(server: ServerProcess, ana: AmpUpClient, uid: str) -> None:
    made = ana.create_workspace(f"trial {uid}", "1h", caps={"episodes": 1})
    ws = made["id"]
    assert made["created_by"] == "ana" and made["caps"]["episodes"] == 1
    scope = f"{ws}/team"
    ana.remember(scope, "In the workspace.", source="doc:a")
    shown = ana.get_workspace(ws)
    assert shown["scopes"] == [scope] and shown["usage"]["episodes"] == 1
    assert ws in ids(ana.workspaces()["workspaces"])
    with pytest.raises(ConflictError) as capped:
        ana.remember(scope, "One too many.", source="doc:b")
    assert capped.value.code == "WORKSPACE_CAP" and capped.value.details["cap"] == "episodes"

    snap = ana.snapshot_workspace(ws)
    assert snap["workspace"] == ws and list(snap["heads"]) == [f"{scope}@main"]
    assert ids(ana.workspace_snapshots(ws)["snapshots"]) == [snap["id"]]
    assert ana.renew_workspace(ws, "2h")["expires_at"] > made["expires_at"]
    with AmpUpClient(server.url, "bob") as bob:
        with pytest.raises(NotFoundError):  # another user's workspace: as if none
            bob.get_workspace(ws)
        with pytest.raises(NotFoundError):
            bob.workspace_snapshots(ws)
        assert ws not in ids(bob.workspaces()["workspaces"])

    dropped = ana.delete_workspace(ws)
    assert dropped["deleted"] is True and dropped["scopes"] == [scope]
    with pytest.raises(NotFoundError) as gone:
        ana.remember(scope, "After the end.", source="doc:c")
    assert gone.value.code == "WORKSPACE_GONE"


def test_browsing_listings(ana: AmpUpClient, scope: str) -> None:
    episode = ana.remember(scope, "Acme and Globex both renew in March.", source="doc:a")
    cite = [{"episode": episode["id"], "unit": 1}]
    ana.add_facts(scope, [
        {"entity": name, "predicate": "renews", "value": "March", "quote": "March",
         "cites": cite} for name in ("globex", "acme")])
    page = ana.entities(scope, limit=1)
    assert [e["entity"] for e in page["entities"]] == ["acme"] and page["total"] == 2
    assert page["next_after"] == "acme"
    assert [e["entity"] for e in ana.entities(scope, after="acme")["entities"]] == ["globex"]
    assert [e["entity"] for e in ana.iter_entities(scope, page_size=1)] == ["acme", "globex"]

    listed = {s["scope"]: s for s in ana.scopes()["scopes"]}
    assert (listed[scope]["episodes"], listed[scope]["entities"]) == (1, 2)
    assert "doc:" in [t["prefix"] for t in ana.episode_types()["types"]]


def test_schemas_and_principals(server: ServerProcess, ana: AmpUpClient,
                                admin: AmpUpClient, scope: str, uid: str) -> None:
    assert "sales" in [s["name"] for s in ana.builtin_schemas()["schemas"]]
    assert ana.schema(scope)["schema"] is None
    with pytest.raises(AccessDeniedError):  # no admin credential
        ana.set_schema(scope, builtin="sales")
    put = admin.set_schema(scope, builtin="sales")
    assert put["changed"] is True and put["name"] == "sales" and put["commit"]
    assert admin.set_schema(scope, builtin="sales")["changed"] is False
    read = ana.schema(scope, history=True)
    assert read["name"] == "sales" and [v["commit"] for v in read["history"]] == [put["commit"]]
    assert ana.ledger(scope)["commits"][0]["id"] == put["commit"]
    held = ana.pin(scope, ttl="1h")["id"]
    assert admin.set_schema(scope, builtin="corpus")["changed"] is True
    assert ana.schema(scope, pin=held)["name"] == "sales"  # the schema at the held commit
    assert ana.schema(scope)["name"] == "corpus"
    with pytest.raises(ValidationError):
        ana.schema("no-team-here")  # not org/team: never sent

    # A group given to a user opens the episodes shared with that group.
    user = f"dora{uid}"
    shared = ana.remember(scope, "For ops.", source="doc:ops", acl=["group:ops"])
    with AmpUpClient(server.url, user) as dora:
        with pytest.raises(NotFoundError):
            dora.get_episode(scope, shared["id"])
        assert admin.principal(user) == {"user": user, "groups": [], "roles": []}
        assert admin.set_principal(user, groups="ops")["groups"] == ["ops"]
        assert dora.get_episode(scope, shared["id"])["body"] == "For ops."
    with pytest.raises(AccessDeniedError):
        ana.principal(user)
    assert "versions" in admin.status()


def test_advice_listings(server: ServerProcess, ana: AmpUpClient, admin: AmpUpClient,
                         scope: str) -> None:
    ana.remember(scope, "Step one: open the ledger.", source="doc:runbook",
                 document="runbook")
    chosen = admin.set_procedure_sources(scope, "runbook")
    assert chosen["documents"] == ["runbook"] and chosen["commit"]
    assert admin.set_procedure_sources(scope, ["runbook"])["commit"] is None
    assert ana.procedures(scope)["procedures"] == []  # no compile model on this server

    runs = [ana.record_run(scope, task, outcome="done")["id"]
            for task in ("reconcile the march invoices", "reconcile the april invoices")]
    for run in runs:
        ana.reward_run(run, 1, "right")
    assert ana.situations(scope)["version"] is None  # not clustered yet
    done = cli_in_process(server.home, {}, "advice", "cluster", "--scope", scope)
    assert done.returncode == 0, done.stderr
    smap = ana.situations(scope)
    assert smap["versions"] == 1 and smap["version"]
    assert sorted(m for s in smap["situations"] for m in s["members"]) == sorted(runs)
    situation = smap["situations"][0]["id"]
    assert ana.notes(scope)["notes"] == []  # nothing learned: no learning model here
    assert ana.notes(scope, situation=situation) == {"scope": scope, "notes": []}

    assert ana.set_aside(scope) == {"scope": scope, "items": [], "next_after": None}
    assert list(ana.iter_set_aside(scope, kind="extract")) == []
    assert ana.extraction_status(scope)["model"] == "no model configured"
    assert ana.extraction_set_aside(scope) == {"items": []}
    with pytest.raises(ValidationError):
        ana.set_aside(scope, kind="nonsense")
