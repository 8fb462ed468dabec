"""`AsyncAmpUpClient` against the shared real server: the same methods as `AmpUpClient`
(the very same definitions), its walkers as async iterators, and every error status
mapped to the package's exception classes."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import pytest

from ampup_memory.client import (
    AccessDeniedError,
    AmpUpClient,
    AsyncAmpUpClient,
    ConflictError,
    GoneError,
    NotFoundError,
    ValidationError,
)
from tests.server_process import ServerProcess


@pytest.fixture
def scope(uid: str) -> str:
    return f"as{uid}/team"


@pytest.fixture
async def ana(server: ServerProcess) -> AsyncIterator[AsyncAmpUpClient]:
    async with AsyncAmpUpClient(server.url, "ana") as client:
        yield client


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_the_two_clients_have_the_same_methods() -> None:
    sync, wait = public(AmpUpClient), public(AsyncAmpUpClient)
    assert sync - {"close"} == wait - {"aclose"}
    for name in sync - {"close", "base_url"}:
        # One definition serves both: nothing to drift apart.
        assert getattr(AmpUpClient, name) is getattr(AsyncAmpUpClient, name), name
    assert len(sync) > 60


async def test_walkers_and_reads(ana: AsyncAmpUpClient, scope: str) -> None:
    written = [await ana.remember(scope, f"Note {n}.", source=f"doc:n{n}") for n in range(3)]
    episode = await ana.get_episode(scope, written[0]["id"])
    assert episode["acl"] == ["user:ana"] and episode["body"] == "Note 0."
    walked = [e["id"] async for e in ana.iter_episodes(scope, page_size=2)]
    assert sorted(walked) == sorted(w["id"] for w in written) and len(walked) == 3

    cite = [{"episode": written[0]["id"], "unit": 1}]
    await ana.add_facts(scope, [{"entity": name, "predicate": "noted", "value": "yes",
                                 "quote": "Note", "cites": cite} for name in ("b", "a", "c")])
    assert [e["entity"] async for e in ana.iter_entities(scope, page_size=2)] == ["a", "b", "c"]
    commits = (await ana.ledger(scope))["commits"]
    assert [c["id"] async for c in ana.iter_ledger(scope, page_size=1)] == [
        c["id"] for c in commits] and len(commits) == 4

    runs = [(await ana.record_run(scope, f"task {n}"))["id"] for n in range(3)]
    assert [r["id"] async for r in ana.iter_runs(scope, page_size=2)] == runs[::-1]
    sessions = [(await ana.start_session(scope, f"task {n}"))["id"] for n in range(3)]
    assert [s["id"] async for s in ana.iter_sessions(scope, page_size=2)] == sessions[::-1]
    assert [i async for i in ana.iter_set_aside(scope, page_size=2)] == []

    pin = await ana.pin(scope, "10m")
    await ana.remember(scope, "After the pin.", source="doc:late")
    held = (await ana.episodes(scope, pin=pin["id"]))["episodes"]
    assert sorted(e["id"] for e in held) == sorted(w["id"] for w in written)
    assert (await ana.release_pin(pin["id"]))["state"] == "released"

    schema = await ana.schema(scope)
    assert schema["schema"] is None


async def test_errors_map_to_the_packages_classes(server: ServerProcess,
                                                  ana: AsyncAmpUpClient, scope: str) -> None:
    written = await ana.remember(scope, "Ana's own.", source="doc:a")
    pin = await ana.pin(scope, "10m")
    await ana.create_branch(scope, "try")
    # Outside `async with`: each call opens its own connection, with the same errors.
    bob = AsyncAmpUpClient(server.url, "bob")
    with pytest.raises(NotFoundError) as hidden:
        await bob.get_episode(scope, written["id"])
    assert (hidden.value.status_code, hidden.value.code) == (404, "NOT_FOUND")
    with pytest.raises(AccessDeniedError) as denied:
        await bob.release_pin(pin["id"])
    assert (denied.value.status_code, denied.value.code) == (403, "ACCESS_DENIED")
    with pytest.raises(ConflictError) as taken:
        await ana.create_branch(scope, "try")
    assert (taken.value.status_code, taken.value.code) == (409, "BRANCH_EXISTS")
    await ana.release_pin(pin["id"])
    with pytest.raises(GoneError) as gone:
        await ana.get_episode(scope, written["id"], pin=pin["id"])
    assert (gone.value.status_code, gone.value.code) == (410, "PIN_RELEASED")
    with pytest.raises(ValidationError) as invalid:
        await ana.pin(scope, "0s")
    assert (invalid.value.status_code, invalid.value.code) == (422, "VALIDATION_ERROR")
    assert invalid.value.errors[0]["loc"] == ["body", "ttl"]
    with pytest.raises(ValidationError) as unsent:
        await ana.get_snapshot("..")
    assert unsent.value.status_code is None
    nan = ana.add_fact(scope, "acme", "seats", float("nan"), quote="x", cites=[])
    with pytest.raises(ValidationError) as not_json:  # found when the request is built
        await nan
    assert not_json.value.status_code is None
    call = ana.get_pin(pin["id"])
    assert inspect.iscoroutine(call)
    assert (await call)["state"] == "released"
