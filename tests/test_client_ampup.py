"""`AmpUpClient` against a real server process: each method once, against the server's own
answer (the shared session server; the keyed one only for the keys-on test)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from ampup_memory.client import (
    AccessDeniedError,
    AmpUpClient,
    AsyncAmpUpClient,
    AuthenticationError,
    ConflictError,
    NotFoundError,
    ValidationError,
)
from tests.server_process import ServerProcess


@pytest.fixture
def scope(uid: str) -> str:
    return f"cl{uid}/team"


@pytest.fixture
def ana(server: ServerProcess) -> Iterator[AmpUpClient]:
    with AmpUpClient(server.url, "ana") as client:
        yield client


def test_episodes(server: ServerProcess, ana: AmpUpClient, scope: str) -> None:
    written = ana.remember(scope, "Acme renews on 2027-03-01.\n\nBilling by invoice.",
                           source="doc:acme-notes", about="customer:acme",
                           occurred_at=datetime(2026, 11, 1, 9, tzinfo=UTC))
    assert written["created"] is True and written["commit"]
    again = ana.remember(scope, "Acme renews on 2027-03-01.\n\nBilling by invoice.",
                         source="doc:acme-notes")
    assert again == {**written, "created": False}

    episode = ana.get_episode(scope, written["id"])
    assert episode["acl"] == ["user:ana"]  # the client's default: only its user
    assert episode["about"] == ["customer:acme"]  # one string is one entry
    assert episode["occurred_at"] == "2026-11-01T09:00:00Z"
    assert [u["text"] for u in episode["units"]] == ["Acme renews on 2027-03-01.",
                                                     "Billing by invoice."]
    with AmpUpClient(server.url + "/amp/v1/", "ana") as same:  # the AMP client's URL works
        assert same.get_episode(scope, written["id"]) == episode

    second = ana.remember(scope, "Second note.", source="doc:ana", acl="*")
    assert ana.get_episode(scope, second["id"])["acl"] == ["*"]
    narrowed = ana.set_acl(scope, second["id"], ["group:ops", "user:ana"])
    assert narrowed["acl"] == ["group:ops", "user:ana"] and narrowed["commit"]
    assert ana.get_episode(scope, second["id"])["acl"] == ["group:ops", "user:ana"]
    page = ana.episodes(scope, limit=1)
    assert [e["id"] for e in page["episodes"]] == [second["id"]] and page["total"] == 2
    assert [e["id"] for e in ana.iter_episodes(scope, page_size=1)] == [second["id"],
                                                                        written["id"]]

    batch = ana.remember_batch(scope, [
        {"source": "doc:policy", "body": "Policy v1.", "document": "policy",
         "occurred_at": "2026-01-01T00:00:00Z"},
        {"source": "doc:policy", "body": "Policy v2.", "document": "policy",
         "occurred_at": "2026-06-01T00:00:00Z", "acl": ["*"]}])
    assert [e["status"] for e in batch["episodes"]] == ["created", "created"]
    assert ana.document(scope, "policy")["body"] == "Policy v2."
    first = ana.document(scope, "policy", as_of="2026-03-01T00:00:00Z")
    assert (first["body"], first["acl"]) == ("Policy v1.", ["user:ana"])


def test_facts_search_query_close(ana: AmpUpClient, scope: str) -> None:
    episode = ana.remember(scope, "Acme renews on 2027-03-01 with 40 seats.",
                           source="doc:renewals")["id"]
    cite = [{"episode": episode, "unit": 1}]
    fact = ana.add_fact(scope, "acme", "renewal_date", "2027-03-01", quote="2027-03-01",
                        cites=cite)
    assert fact["id"] and fact["commit"]
    batch = ana.add_facts(scope, [
        {"entity": "acme", "predicate": "seats", "value": 40, "quote": "40 seats",
         "cites": cite}])
    assert len(batch["ids"]) == 1

    current = ana.facts(scope, "acme")["facts"]
    assert {f["predicate"]: f["value"] for f in current} == {"renewal_date": "2027-03-01",
                                                             "seats": 40}
    assert [f["value"] for f in ana.facts(scope, "acme", predicate="seats")["facts"]] == [40]

    found = ana.search(scope, "when does acme renew", limit=5)
    assert found["results"][0]["entity"] == "acme"
    assert found["results"][0]["cites"] == cite
    passages = ana.query(scope, "acme seats", limit=3)
    assert passages["results"][0]["episode"] == episode
    typed = ana.query(scope, find="facts", entity="acme", predicate=["seats"])
    assert [f["value"] for f in typed["facts"]] == [40] and typed["total"] == 1

    closed = ana.close_fact(scope, "acme", "seats", "Contract ended.")
    assert closed["closed"] == batch["ids"][0]  # the seats fact's id
    assert ana.get_episode(scope, closed["episode"])["body"] == "Contract ended."
    assert [f["predicate"] for f in ana.facts(scope, "acme")["facts"]] == ["renewal_date"]
    history = ana.facts(scope, "acme", predicate="seats", history=True)["facts"]
    assert [f["kind"] for f in history] == ["value", "closure"]


def test_learning_loop(ana: AmpUpClient, scope: str) -> None:
    ana.remember(scope, "Scope exists.", source="doc:setup")  # a scope is made by a write
    session = ana.start_session(scope, "reconcile the invoices")["id"]
    assert session.startswith("ses_")
    advice = ana.advice(scope, "reconcile the invoices", session=session)
    assert advice["advice"] is None  # nothing learned yet in a fresh scope
    ended = ana.end_session(session, "matched 12 invoices", "done", reward=0.8)
    assert ended["state"] == "ended" and ended["reward"]["value"] == 0.8
    read = ana.get_session(session)
    assert read["state"] == "ended" and read["judging"] == "not needed"
    assert read["transcript"] == "matched 12 invoices" and read["steps"] == []
    with pytest.raises(ConflictError) as ended_twice:
        ana.end_session(session, "again", "done")
    assert ended_twice.value.status_code == 409 and ended_twice.value.code == "SESSION_ENDED"

    later = ana.start_session(scope, "close the month")["id"]
    page = ana.sessions(scope, limit=1)
    assert [s["id"] for s in page["sessions"]] == [later] and page["next_before"] == later
    assert [s["id"] for s in ana.iter_sessions(scope, page_size=1)] == [later, session]

    run = ana.record_run(scope, "send the dunning letters", outcome="sent 3",
                         trace="looked up overdue accounts")["id"]
    rewarded = ana.reward_run(run, -0.5, "one went to the wrong address")
    assert rewarded["id"] == run and rewarded["reward"]["value"] == -0.5
    got = ana.get_run(run)
    assert got["reward"]["value"] == -0.5 and got["trace"] == "looked up overdue accounts"
    assert [r["id"] for r in ana.runs(scope)["runs"]] == [run]
    assert [r["id"] for r in ana.iter_runs(scope, page_size=1)] == [run]


def test_branches(ana: AmpUpClient, scope: str) -> None:
    ana.remember(scope, "On main.", source="doc:a")
    branch = ana.create_branch(scope, "try/one")
    assert branch["name"] == "try/one" and branch["from"] == "main"
    on_branch = ana.remember(scope, "On the branch.", source="doc:a", branch="try/one")
    with pytest.raises(NotFoundError):
        ana.get_episode(scope, on_branch["id"])  # not on main yet
    assert [b["name"] for b in ana.branches(scope)["branches"]] == ["main", "try/one"]
    assert ana.merge(scope, "try/one", dry_run=True)["commit"] is None
    merged = ana.merge(scope, "try/one", message="take the note")
    assert merged["merged"] is True and merged["changes"]["episodes"] == 1
    assert ana.get_episode(scope, on_branch["id"])["body"] == "On the branch."
    assert ana.delete_branch(scope, "try/one")["deleted"] is True


def test_errors_carry_the_servers_answer(server: ServerProcess, ana: AmpUpClient,
                                         scope: str) -> None:
    with pytest.raises(ValidationError) as bad:
        ana.remember("Not A Scope", "text", source="doc:x")
    assert bad.value.status_code == 422 and bad.value.code == "VALIDATION_ERROR"
    assert bad.value.errors[0]["loc"] == ["body", "scope"]
    assert bad.value.message == bad.value.errors[0]["msg"]
    assert bad.value.message.startswith("invalid scope 'Not A Scope': use org/team")
    assert str(bad.value) == f"VALIDATION_ERROR: {bad.value.message}"

    private = ana.remember(scope, "Ana's own note.", source="doc:ana")["id"]
    with AmpUpClient(server.url, "bob") as bob:
        with pytest.raises(NotFoundError) as hidden:
            bob.get_episode(scope, private)
        with pytest.raises(NotFoundError) as missing:
            bob.get_episode(scope, "0" * 64)
    assert hidden.value.status_code == missing.value.status_code == 404
    assert (hidden.value.code, hidden.value.message, hidden.value.details) == (
        missing.value.code, missing.value.message, missing.value.details) == (
        "NOT_FOUND", "No such episode.", {})

    with AmpUpClient(server.url) as nobody:
        with pytest.raises(AuthenticationError) as anonymous:
            nobody.facts(scope, "acme")
        assert anonymous.value.code == "MISSING_USER"
        with pytest.raises(ValidationError) as no_acl:  # no user to default the ACL to
            nobody.remember(scope, "text", source="doc:x")
        assert no_acl.value.status_code is None
    with pytest.raises(ValidationError):
        ana.get_session("..")  # would resolve to another route


def _key(proc: ServerProcess, *args: str) -> str:
    """`ampup-memory keys create ARGS`; the key is the last line of its output."""
    return subprocess.run(
        [sys.executable, "-m", "ampup_memory.cli", "keys", "create", *args],
        env=proc.env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip().splitlines()[-1]


async def test_keys_on_identity(tmp_path_factory: pytest.TempPathFactory, uid: str) -> None:
    home = tmp_path_factory.mktemp("ampup-keys")
    with ServerProcess(home, env={"AMP_REQUIRE_KEYS": "1"}) as proc:
        key = _key(proc, "--agent", "agent_cara", "--user", "cara")
        dan_key = _key(proc, "--agent", "agent_dan", "--user", "dan")
        admin_key = _key(proc, "--agent", "agent_root", "--admin")
        scope = f"cl{uid}/keys"
        with AmpUpClient(proc.url, "cara", agent_id="agent_cara", api_key=key) as cara:
            written = cara.remember(scope, "Keyed note.", source="doc:cara")
            assert cara.get_episode(scope, written["id"])["acl"] == ["user:cara"]
            with pytest.raises(AccessDeniedError):  # a user's key is no admin credential
                cara.set_schema(scope, builtin="sales")
        # X-AmpUp-User is not read with keys on: naming a user is no credential.
        with AmpUpClient(proc.url, "cara") as claim:
            with pytest.raises(AuthenticationError) as refused:
                claim.get_episode(scope, written["id"])
        assert (refused.value.status_code, refused.value.code) == (401, "UNAUTHENTICATED")

        # The async client: the key's user is the pin's creator; a `user` naming anyone
        # else is refused, not read.
        async with AsyncAmpUpClient(proc.url, "cara", agent_id="agent_cara",
                                    api_key=key) as cara_async:
            pin = await cara_async.pin(scope, "10m")
            assert pin["created_by"] == "cara"
            async with AsyncAmpUpClient(proc.url, "cara", agent_id="agent_dan",
                                        api_key=dan_key) as posing:
                with pytest.raises(AuthenticationError) as mismatch:
                    await posing.release_pin(pin["id"])
                assert "another user" in str(mismatch.value)
            async with AsyncAmpUpClient(proc.url, "dan", agent_id="agent_dan",
                                        api_key=dan_key) as dan:
                with pytest.raises(AccessDeniedError):
                    await dan.release_pin(pin["id"])
                with pytest.raises(NotFoundError):  # cara's alone
                    await dan.get_episode(scope, written["id"], pin=pin["id"])
            assert (await cara_async.release_pin(pin["id"]))["state"] == "released"
        async with AsyncAmpUpClient(proc.url, agent_id="agent_root",
                                    api_key=admin_key) as root:
            assert (await root.set_schema(scope, builtin="sales"))["changed"] is True
            assert (await root.principal("cara"))["user"] == "cara"


def test_a_merge_conflict_is_data_the_caller_can_act_on(server: ServerProcess,
                                                        ana: AmpUpClient, scope: str) -> None:
    def budget(value: str, branch: str | None = None) -> None:
        said = ana.remember(scope, f"Acme budget is {value}.", source=f"doc:{value}",
                            branch=branch)["id"]
        ana.add_fact(scope, "acme", "budget", value, quote=f"budget is {value}",
                     cites=[{"episode": said, "unit": 1}], branch=branch)

    budget("50k")
    ana.create_branch(scope, "plan")
    budget("90k", branch="plan")
    budget("60k")
    head = ana.ledger(scope, limit=1)["commits"][0]["id"]

    with pytest.raises(ConflictError) as refused:
        ana.merge(scope, "plan")
    assert (refused.value.status_code, refused.value.code) == (409, "MERGE_CONFLICT")
    assert refused.value.details["conflicts"] == [
        {"entity": "acme", "predicate": "budget", "base": "50k", "ours": "60k",
         "theirs": "90k"}]
    assert ana.ledger(scope, limit=1)["commits"][0]["id"] == head  # nothing written
    with AmpUpClient(server.url, "bob") as bob, pytest.raises(ConflictError) as blind:
        bob.merge(scope, "plan")  # bob may read no side: nothing of it is named
    assert blind.value.details["conflicts"] == [
        {"entity": "hidden", "predicate": "hidden", "base": "hidden", "ours": "hidden",
         "theirs": "hidden"}]

    budget("60k", branch="plan")  # resolved on the branch: it takes main's value
    merged = ana.merge(scope, "plan")
    assert merged["merged"] is True and merged["commit"]
    assert [f["value"] for f in ana.facts(scope, "acme", predicate="budget")["facts"]] == [
        "60k"]


def test_batches_take_datetimes_as_their_single_writes_do(ana: AmpUpClient, scope: str) -> None:
    """`remember` and `add_fact` take a datetime for a time; the same field in an item of
    `remember_batch` or `add_facts` raised "Object of type datetime is not JSON
    serializable" and sent nothing (the Node client sends a Date there as its ISO string)."""
    plus_two = timezone(timedelta(hours=2))
    written = ana.remember_batch(scope, [
        {"source": "doc:renewal", "body": "Acme renews in March with 40 seats.",
         "occurred_at": datetime(2026, 1, 1, 12, tzinfo=plus_two)}])
    episode = written["episodes"][0]["id"]
    assert ana.get_episode(scope, episode)["occurred_at"] == "2026-01-01T10:00:00Z"
    ana.add_facts(scope, [
        {"entity": "acme", "predicate": "seats", "value": 40, "quote": "40 seats",
         "cites": [{"episode": episode, "unit": 1}],
         "valid_from": datetime(2026, 1, 1, tzinfo=UTC),
         "valid_to": datetime(2026, 7, 1, 2, tzinfo=plus_two)}])
    [fact] = ana.facts(scope, "acme", history=True)["facts"]
    assert (fact["valid_from"], fact["valid_to"]) == ("2026-01-01T00:00:00Z",
                                                      "2026-07-01T00:00:00Z")
