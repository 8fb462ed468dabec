"""Conditional writes through the Python clients, against the real server: an answer's
``etag``, sent back as ``if_match=``, lets two writers holding one version never overwrite
each other (the second gets `PreconditionFailedError` and changes nothing), and
``if_none_match=`` on a read answers `NotModifiedError` while the version is current."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from ampup_memory.client import (
    AMPClient,
    AmpUpClient,
    AsyncAMPClient,
    NotModifiedError,
    PreconditionFailedError,
)
from tests.conftest import ADMIN_TOKEN
from tests.server_process import ServerProcess


@pytest.fixture
def agent(uid: str) -> str:
    return f"agent_cc_{uid}"


@pytest.fixture
def ana(server: ServerProcess) -> Iterator[AmpUpClient]:
    with AmpUpClient(server.url, "ana") as client:
        yield client


@pytest.fixture
def admin(server: ServerProcess) -> Iterator[AmpUpClient]:
    with AmpUpClient(server.url, "ana", admin_token=ADMIN_TOKEN) as client:
        yield client


def test_two_writers_holding_one_cell_version(server: ServerProcess, agent: str,
                                              uid: str) -> None:
    with AMPClient(server.url, agent) as first, AMPClient(server.url, agent) as second:
        made = first.remember("Meeting on Tuesday.", f"user_{uid}")
        read_a, read_b = first.get_memory(made["id"]), second.get_memory(made["id"])
        assert read_a.etag and read_a.etag == read_b.etag  # reads do not move the tag
        # remember answers the new cell's tag: if_match=made.etag was None, so a write
        # "conditional on the cell as created" went out unconditional.
        assert made.etag == read_a.etag

        moved = first.update(made["id"], if_match=read_a.etag,
                             content={"text": "Meeting on Thursday."})
        assert moved.etag and moved.etag != read_a.etag
        with pytest.raises(PreconditionFailedError) as lost:
            second.update(made["id"], if_match=read_b.etag,
                          content={"text": "Meeting on Friday."})
        assert (lost.value.status_code, lost.value.code) == (412, "PRECONDITION_FAILED")
        again = second.get_memory(made["id"])
        assert again["content"]["text"] == "Meeting on Thursday."  # the loser changed nothing
        assert again.etag == moved.etag

        # A conditional read: 304 while the version is current, the cell once it is not.
        with pytest.raises(NotModifiedError) as same:
            first.get_memory(made["id"], if_none_match=moved.etag)
        assert same.value.status_code == 304 and same.value.etag == moved.etag
        assert str(same.value) == (  # not "HTTP error 304: " (no body to quote)
            "Not modified: the version you named in if_none_match is still the current one.")
        changed = first.get_memory(made["id"], if_none_match=read_a.etag)
        assert changed["content"] == again["content"] and changed.etag == again.etag

        with pytest.raises(PreconditionFailedError):  # forget checks on its archive
            second.forget(made["id"], if_match=read_b.etag)
        assert first.get_memory(made["id"])["lifecycle"]["status"] == "active"
        archived = first.archive(made["id"], if_match=again.etag)
        assert archived["lifecycle"]["status"] == "archived" and archived.etag != again.etag
        assert second.forget(made["id"], if_match=archived.etag) is True


@pytest.mark.parametrize("conditional", [True, False])
def test_forget_deletes_only_the_version_its_archive_wrote(
        server: ServerProcess, agent: str, uid: str, conditional: bool) -> None:
    """`forget` is two requests; a write landing between its archive and its delete was
    deleted over though ``if_match`` was given. With it, the delete now names the version
    the archive wrote: the landed write stands, `PreconditionFailedError`, the cell left
    archived. Without it, forget deletes whatever is there, as before."""
    with AMPClient(server.url, agent) as client, AMPClient(server.url, agent) as other:
        made = client.remember("Rotate the keys monthly.", f"user_{uid}")
        send_one = client._send_one

        def meanwhile(call: Any) -> Any:  # the other writer, just before the delete
            if call.method == "DELETE":
                other.update(made["id"], content={"metadata": {"note": "kept"}})
            return send_one(call)

        client._send_one = meanwhile  # type: ignore[method-assign]
        if not conditional:
            assert client.forget(made["id"]) is True
            return
        with pytest.raises(PreconditionFailedError):
            client.forget(made["id"], if_match=made.etag)
        left = other.get_memory(made["id"])
        assert left["lifecycle"]["status"] == "archived"
        assert left["content"]["metadata"] == {"note": "kept"}


async def test_async_writers_racing_on_one_tag(server: ServerProcess, agent: str,
                                               uid: str) -> None:
    async with AsyncAMPClient(server.url, agent) as client:
        made = await client.remember("Budget 10k.", f"user_{uid}")
        tag = (await client.get_memory(made["id"])).etag
        assert tag
        outcomes = await asyncio.gather(
            *(client.update(made["id"], if_match=tag, content={"text": f"Budget {n}k."})
              for n in (20, 30, 40)),
            return_exceptions=True)
        landed = [o for o in outcomes if not isinstance(o, BaseException)]
        assert len(landed) == 1  # of any number of writers holding one tag, one lands
        assert all(isinstance(o, PreconditionFailedError)
                   for o in outcomes if isinstance(o, BaseException))
        final = await client.get_memory(made["id"])
        assert final["content"] == landed[0]["content"] and final.etag == landed[0].etag


def test_episode_acl_two_writers(ana: AmpUpClient, uid: str) -> None:
    scope = f"cc{uid}/team"
    written = ana.remember(scope, "Shared note.", source="doc:cc")
    read = ana.get_episode(scope, written["id"])
    assert read.etag
    with pytest.raises(NotModifiedError):
        ana.get_episode(scope, written["id"], if_none_match=read.etag)
    changed = ana.set_acl(scope, written["id"], ["user:ana", "group:ops"], if_match=read.etag)
    assert changed.etag and changed.etag != read.etag
    with pytest.raises(PreconditionFailedError) as lost:
        ana.set_acl(scope, written["id"], "*", if_match=read.etag)
    assert lost.value.code == "PRECONDITION_FAILED"
    now = ana.get_episode(scope, written["id"])
    assert now["acl"] == ["group:ops", "user:ana"] and now.etag == changed.etag


def test_schema_create_only_and_replace(ana: AmpUpClient, admin: AmpUpClient,
                                        uid: str) -> None:
    scope = f"cc{uid}/schemas"
    assert ana.schema(scope).etag is None  # no schema, no version
    put = admin.set_schema(scope, builtin="sales", if_none_match="*")
    assert put.etag and put.etag.strip('"') == put["commit"]
    with pytest.raises(PreconditionFailedError):  # create-only: it exists now
        admin.set_schema(scope, builtin="engineering", if_none_match="*")
    read = ana.schema(scope)
    assert read.etag == put.etag
    with pytest.raises(NotModifiedError):
        ana.schema(scope, if_none_match=read.etag)
    replaced = admin.set_schema(scope, builtin="engineering", if_match=read.etag)
    with pytest.raises(PreconditionFailedError):
        admin.set_schema(scope, builtin="corpus", if_match=read.etag)
    assert ana.schema(scope)["name"] == "engineering" and replaced.etag != read.etag


def test_principal_and_procedure_sources(admin: AmpUpClient, uid: str) -> None:
    user = f"erin{uid}"
    first = admin.principal(user)
    assert first.etag  # a user never set has a version too
    admin.set_principal(user, groups="ops", if_match=first.etag)
    with pytest.raises(PreconditionFailedError):
        admin.set_principal(user, groups="sales", if_match=first.etag)
    assert admin.principal(user)["groups"] == ["ops"]

    scope = f"cc{uid}/procs"
    admin.remember(scope, "Step one.", source="doc:runbook", document="runbook")
    sources = admin.procedure_sources(scope)
    assert sources == {"scope": scope, "documents": []} and sources.etag
    chosen = admin.set_procedure_sources(scope, "runbook", if_match=sources.etag)
    assert chosen["documents"] == ["runbook"]
    with pytest.raises(PreconditionFailedError):
        admin.set_procedure_sources(scope, "other", if_match=sources.etag)
    with pytest.raises(NotModifiedError):
        admin.procedure_sources(scope, if_none_match=chosen.etag)
