"""Conditional writes on AMP cells (ETag / If-Match / If-None-Match, 412), over real HTTP on
both cell stores: the embedded SQLite server and two servers sharing one PostgreSQL."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.pg import PostgresFactory
from tests.server_process import ServerProcess, plain_client, start_together


@pytest.fixture(scope="module")
def pg_servers(postgres: PostgresFactory,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    env = {"AMP_STORE_URI": postgres.new_database("ifmatch")}
    procs = [ServerProcess(tmp_path_factory.mktemp(f"ifm{i}"), env=env) for i in range(2)]
    errors = start_together(procs, timeout=120)
    try:
        assert not errors, errors
        yield procs
    finally:
        for p in procs:
            p.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def urls(request: pytest.FixtureRequest) -> list[str]:
    """Base URLs of servers sharing one store: the SQLite server twice, or two servers on
    one PostgreSQL (a tag one server gave holds on the other)."""
    if request.param == "sqlite":
        server: ServerProcess = request.getfixturevalue("server")
        return [server.url + "/amp/v1"] * 2
    procs: list[ServerProcess] = request.getfixturevalue("pg_servers")
    return [p.url + "/amp/v1" for p in procs]


@pytest.fixture
def clients(urls: list[str]) -> Iterator[list[httpx.Client]]:
    cs = [plain_client(base_url=u, timeout=60) for u in urls]
    yield cs
    for c in cs:
        c.close()


def me() -> dict[str, str]:
    return {"X-AMP-Agent-ID": f"agent_{uuid.uuid4().hex[:10]}"}


def create(client: httpx.Client, who: dict[str, str], **extra: Any) -> dict[str, Any]:
    body = {"type": "semantic", "content": {"text": "the deploy window is Tuesday"},
            "identity": {"owner_id": who["X-AMP-Agent-ID"], "owner_type": "agent"}, **extra}
    r = client.post("/memories", headers=who, json=body)
    assert r.status_code == 201, r.text
    cell: dict[str, Any] = r.json()
    return cell


def etag(client: httpx.Client, who: dict[str, str], cell_id: str) -> str:
    r = client.get(f"/memories/{cell_id}", headers=who)
    assert r.status_code == 200, r.text
    tag = r.headers["ETag"]
    assert tag.startswith('"') and tag.endswith('"') and len(tag) > 10
    return tag


def text_of(client: httpx.Client, who: dict[str, str], cell_id: str) -> str:
    r = client.get(f"/memories/{cell_id}", headers=who)
    assert r.status_code == 200, r.text
    text: str = r.json()["content"]["text"]
    return text


def test_tag_is_stable_across_reads_and_servers_and_moves_on_write(
        clients: list[httpx.Client]) -> None:
    a, b = clients
    who = me()
    cell = create(a, who)
    first = etag(a, who, cell["id"])
    # A read counts an access (access_count moves) but is no write: same tag, and the
    # other server (same store) answers the same one.
    assert etag(b, who, cell["id"]) == first == etag(a, who, cell["id"])
    r = b.patch(f"/memories/{cell['id']}", headers={**who, "If-Match": first},
                json={"content": {"text": "the deploy window is Thursday"}})
    assert r.status_code == 200, r.text
    second = r.headers["ETag"]
    assert second != first
    assert etag(a, who, cell["id"]) == second  # the write's tag is the stored version's


def test_stale_if_match_is_412_and_changes_nothing(clients: list[httpx.Client]) -> None:
    a, b = clients
    who = me()
    cell = create(a, who)
    old = etag(a, who, cell["id"])
    assert b.patch(f"/memories/{cell['id']}", headers=who,  # unconditional: unaffected
                   json={"content": {"text": "moved to Friday"}}).status_code == 200
    before = a.get(f"/memories/{cell['id']}", headers=who).json()
    for method, body in (("PATCH", {"content": {"text": "lost update"}}), ("DELETE", None)):
        r = a.request(method, f"/memories/{cell['id']}", json=body,
                      headers={**who, "If-Match": old})
        assert r.status_code == 412, r.text
        assert r.json()["error"]["code"] == "PRECONDITION_FAILED"
        assert set(r.json()) == {"error"}
    after = a.get(f"/memories/{cell['id']}", headers=who).json()
    assert after["content"] == before["content"] == {"text": "moved to Friday",
                                                     "metadata": {}}
    assert after["lifecycle"]["last_updated_at"] == before["lifecycle"]["last_updated_at"]


def test_412_comes_before_body_validation(clients: list[httpx.Client]) -> None:
    a, _ = clients
    who = me()
    cell = create(a, who)
    r = a.patch(f"/memories/{cell['id']}", headers={**who, "If-Match": '"nope"'},
                json={"id": "mem_other"})  # would be a 422 (id cannot be changed)
    assert r.status_code == 412, r.text


def test_star_weak_lists_and_if_none_match(clients: list[httpx.Client]) -> None:
    a, b = clients
    who = me()
    cell = create(a, who)
    tag = etag(a, who, cell["id"])
    path = f"/memories/{cell['id']}"
    # A weak tag never passes If-Match (strong comparison, RFC 9110 13.1.1).
    assert a.patch(path, headers={**who, "If-Match": "W/" + tag},
                   json={"scoring": {"importance": 0.9}}).status_code == 412
    # Garbage is no tag: it matches nothing (never read as "no condition").
    assert a.patch(path, headers={**who, "If-Match": "garbage"},
                   json={"scoring": {"importance": 0.9}}).status_code == 412
    # If-None-Match: * on an existing cell: refused.
    assert a.patch(path, headers={**who, "If-None-Match": "*"},
                   json={"scoring": {"importance": 0.9}}).status_code == 412
    # A list holding the current tag passes; so does *.
    r = a.patch(path, headers={**who, "If-Match": f'"x", {tag}'},
                json={"scoring": {"importance": 0.8}})
    assert r.status_code == 200, r.text
    new = r.headers["ETag"]
    r = b.patch(path, headers={**who, "If-Match": "*"}, json={"scoring": {"importance": 0.7}})
    assert r.status_code == 200, r.text
    newest = r.headers["ETag"]
    # A conditional read: 304 while current, the body when not.
    r = a.get(path, headers={**who, "If-None-Match": newest})
    assert r.status_code == 304 and r.headers["ETag"] == newest and not r.content
    r = a.get(path, headers={**who, "If-None-Match": new})
    assert r.status_code == 200 and r.json()["scoring"]["importance"] == 0.7


def test_header_lists_as_rfc_9110_reads_them(clients: list[httpx.Client]) -> None:
    """A header on two lines is one list, and empty list elements are ignored (RFC 9110
    5.3, 5.6.1.2): only the first line was read, and a tag after `,,` was lost, so a write
    naming the current tag was refused and a read holding it got the body again. A value
    with anything that is no tag matches nothing, even after a good tag."""
    a, _ = clients
    who = me()
    cell = create(a, who)
    path = f"/memories/{cell['id']}"
    importance = iter([0.5 + n / 100 for n in range(20)])

    def patch(*headers: tuple[str, str]) -> httpx.Response:
        return a.patch(path, headers=[*who.items(), *headers],
                       json={"scoring": {"importance": next(importance)}})

    tag = etag(a, who, cell["id"])
    r = patch(("If-Match", '"x"'), ("If-Match", tag))
    assert r.status_code == 200, r.text
    tag = r.headers["ETag"]
    r = patch(("If-Match", f'"x",, {tag},'))
    assert r.status_code == 200, r.text
    tag = r.headers["ETag"]
    for malformed in (f"{tag}, garbage", f"*, {tag}", f"{tag}{tag}"):
        assert patch(("If-Match", malformed)).status_code == 412, malformed
    # The current tag on If-None-Match's second line, or after an empty element: refused.
    assert patch(("If-None-Match", '"x"'), ("If-None-Match", tag)).status_code == 412
    assert patch(("If-None-Match", f',,"x",,W/{tag}')).status_code == 412
    for held in (f'"x",,{tag}', f", {tag}"):
        r = a.get(path, headers={**who, "If-None-Match": held})
        assert r.status_code == 304 and r.headers["ETag"] == tag, (held, r.status_code)
    r = a.get(path, headers=[*who.items(), ("If-None-Match", '"x"'), ("If-None-Match", tag)])
    assert r.status_code == 304, r.status_code
    assert text_of(a, who, cell["id"]) == "the deploy window is Tuesday"


def test_a_read_judges_if_match_first(clients: list[httpx.Client]) -> None:
    """If-Match on GET (RFC 9110 13.1.1) was ignored: a read naming a version the cell no
    longer had got the new one as a 200. Now 412, before If-None-Match's 304; a caller
    who may not read the cell gets the one 403 whatever it sends."""
    a, b = clients
    who = me()
    cell = create(a, who)
    path = f"/memories/{cell['id']}"
    tag = etag(a, who, cell["id"])
    for held in (tag, "*"):
        r = b.get(path, headers={**who, "If-Match": held})
        assert (r.status_code, r.headers["ETag"]) == (200, tag), r.text
    for stale in ('"stale"', "W/" + tag):
        r = b.get(path, headers={**who, "If-Match": stale})
        assert r.status_code == 412, r.text
        assert r.json()["error"]["code"] == "PRECONDITION_FAILED"
    r = a.get(path, headers={**who, "If-Match": '"stale"', "If-None-Match": tag})
    assert r.status_code == 412, r.status_code
    assert a.get(path, headers={**who, "If-Match": tag, "If-None-Match": tag}
                 ).status_code == 304
    assert a.head(path, headers={**who, "If-Match": '"stale"'}).status_code == 412
    stranger = {**me(), "If-Match": '"stale"'}
    answers = [a.get(f"/memories/{cid}", headers=stranger)
               for cid in (cell["id"], "mem_01J00000000000000000000000")]
    assert [r.status_code for r in answers] == [403, 403]
    assert answers[0].text == answers[1].text


def test_only_a_read_that_hands_over_the_cell_counts_an_access(
        clients: list[httpx.Client]) -> None:
    """A 412 and a HEAD deliver no cell, so they count no access (both did: a GET with a
    stale If-Match moved access_count and last_accessed_at, and so did every HEAD); a 304
    counts one, as documented (the agent used its cached copy)."""
    a, b = clients
    who = me()
    cell = create(a, who)
    path = f"/memories/{cell['id']}"
    first = a.get(path, headers=who)
    tag, seen = first.headers["ETag"], first.json()
    assert seen["scoring"]["access_count"] == 1
    for client in (a, b):
        assert client.get(path, headers={**who, "If-Match": '"stale"'}).status_code == 412
        head = client.head(path, headers=who)
        assert (head.status_code, head.headers["ETag"], head.content) == (200, tag, b"")
        assert client.head(path, headers={**who, "If-None-Match": tag}).status_code == 304
    assert a.get(path, headers={**who, "If-None-Match": tag}).status_code == 304
    after = b.get(path, headers=who).json()
    assert after["scoring"]["access_count"] == 3  # the first GET, the 304 and this one
    assert after["lifecycle"]["last_accessed_at"] > seen["lifecycle"]["last_accessed_at"]


def test_archive_then_delete_under_if_match(clients: list[httpx.Client]) -> None:
    a, b = clients
    who = me()
    cell = create(a, who)
    path = f"/memories/{cell['id']}"
    r = a.patch(path, headers={**who, "If-Match": etag(a, who, cell["id"])},
                json={"lifecycle": {"status": "archived"}})
    assert r.status_code == 200, r.text
    archived = r.headers["ETag"]
    assert b.delete(path, headers={**who, "If-Match": '"stale"'}).status_code == 412
    assert b.delete(path, headers={**who, "If-Match": archived}).status_code == 204
    # Deleted reads as unknown: 403 whatever the condition, never 412.
    assert b.patch(path, headers={**who, "If-Match": "*"}, json={}).status_code == 403


def test_no_412_for_a_cell_the_caller_may_not_see(clients: list[httpx.Client]) -> None:
    a, _ = clients
    owner, stranger = me(), me()
    cell = create(a, owner)
    unknown = "mem_01J00000000000000000000000"
    answers = [
        a.patch(f"/memories/{cid}", headers={**stranger, "If-Match": cond},
                json={"scoring": {"importance": 0.1}})
        for cid in (cell["id"], unknown) for cond in ('"stale"', "*")
    ] + [a.delete(f"/memories/{cid}", headers={**stranger, "If-Match": '"stale"'})
         for cid in (cell["id"], unknown)]
    assert {r.status_code for r in answers} == {403}
    assert len({r.text for r in answers}) == 1
    r = a.get(f"/memories/{cell['id']}", headers={**stranger, "If-None-Match": "*"})
    assert r.status_code == 403 and "ETag" not in r.headers


def test_blind_writer_gets_no_tag(clients: list[httpx.Client]) -> None:
    a, _ = clients
    owner, writer = me(), me()
    cell = create(a, owner, access_policy={"writable_by": [writer["X-AMP-Agent-ID"]]})
    r = a.patch(f"/memories/{cell['id']}", headers={**writer, "If-Match": "*"},
                json={"scoring": {"importance": 0.2}})
    assert r.status_code == 200, r.text
    assert r.json() == {"id": cell["id"]} and "ETag" not in r.headers


@pytest.mark.parametrize("writers", [6])
def test_writers_holding_one_tag_exactly_one_wins(clients: list[httpx.Client],
                                                  writers: int) -> None:
    """The check runs in the write's own transaction (SQLite BEGIN IMMEDIATE, PostgreSQL
    SELECT ... FOR UPDATE): of writers racing with one ETag, across two servers on
    PostgreSQL, exactly one lands; every other gets 412 and its text is nowhere."""
    who = me()
    cell = create(clients[0], who)
    tag = etag(clients[0], who, cell["id"])
    start = threading.Barrier(writers)
    codes: list[int] = [0] * writers

    def write(i: int) -> None:
        client = clients[i % 2]
        start.wait()
        r = client.patch(f"/memories/{cell['id']}", headers={**who, "If-Match": tag},
                         json={"content": {"text": f"writer {i}"}})
        codes[i] = r.status_code

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200] + [412] * (writers - 1), codes
    winner = codes.index(200)
    assert text_of(clients[1], who, cell["id"]) == f"writer {winner}"


def test_the_api_doc_conditional_write_example_runs(server: ServerProcess) -> None:
    """docs/api.md's `sh` example (create, read the ETag, PATCH with If-Match) runs as
    written against a real server and lands the edit."""
    doc = Path(__file__).resolve().parent.parent / "docs" / "api.md"
    (block,) = re.findall(r"^```sh\n(.*?)^```", doc.read_text(), re.S | re.M)
    script = "set -e -o pipefail\n" + block.replace("localhost:8765",
                                                     server.url.removeprefix("http://"))
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    cell = json.loads(ran.stdout)
    assert cell["content"]["text"] == "moved to Thursday", ran.stdout
