"""The read index's browsing reads (episode_acls, episode_page, document_counts,
fact_counts, entity_page) against both index backends, SQLite and PostgreSQL: each must
answer exactly what the per-row reads (``episodes`` + ``acl.may_read``, ``facts`` with
every cited episode readable) answer, on main, on a branch whose own commits change an
ACL, and as of an older commit."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ampup_memory.memory.acl import Principal, may_read
from ampup_memory.memory.episodes import EpisodeRecord
from ampup_memory.memory.facts import FactRecord
from ampup_memory.memory.ledger import LedgerEntry
from ampup_memory.memory.readindex import ReadIndex
from ampup_memory.memory.segments import Segment, Segments

S = "acme__sales"
T0 = datetime(2026, 3, 1, tzinfo=UTC)
PEOPLE = [Principal("alice"), Principal("bob", groups=("x",)), Principal("carol")]
MAIN: Segments = (Segment("main"),)
BRANCH: Segments = (Segment("main", 0, 3), Segment("rev"))
AS_OF_2: Segments = (Segment("main", 0, 2),)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ReadIndex]:
    url = (request.getfixturevalue("postgres").new_database("browse")
           if request.param == "postgres" else f"sqlite:///{tmp_path / 'index.db'}")
    idx = ReadIndex(url)
    yield idx
    idx.close()


def _entry(branch: str, seq: int) -> LedgerEntry:
    return LedgerEntry(f"{branch}{seq}".ljust(40, "0"), None, S, branch, seq, "t",
                       T0, "m")


def _ep(i: str, acl: tuple[str, ...], hours: int, branch: str = "main",
        document: str | None = None) -> EpisodeRecord:
    return EpisodeRecord(i, f"doc:{i}", "doc", T0 + timedelta(hours=hours), (), acl,
                         document, f"body-{i}", branch)


def _fact(i: str, entity: str, predicate: str, cites: list[str],
          branch: str = "main") -> FactRecord:
    return FactRecord(i, "value", entity, predicate, "1", T0, None, "q",
                      tuple((c, 1) for c in cites), "posted", branch)


def _seed(index: ReadIndex) -> None:
    eps = [_ep("e1", ("*",), 1), _ep("e2", ("user:alice",), 1), _ep("e3", ("group:x",), 2,
           document="d"), _ep("e4", ("*",), 3, document="d"), _ep("e6", ("*",), 0)]
    index.apply(_entry("main", 1), eps, [], [])
    index.apply(_entry("main", 2), [], [], [
        _fact("f1", "a", "p", ["e1"]), _fact("f2", "a", "q", ["e1", "e2"]),
        _fact("f3", "b", "p", ["e3"]), _fact("f4", "c", "p", []),
        _fact("f5", "d", "p", ["e4", "e4"]), _fact("f6", "é", "p", ["gone"]),
        _fact("f7", "Z", "p", ["e6"])])
    # A narrowing after the facts: every view reads the current ACL, as of commit 2 too.
    index.apply(_entry("main", 3), [], [], [], acl_changes=[_ep("e6", ("user:carol",), 0)])
    index.apply(_entry("rev", 1), [_ep("e5", ("*",), 5, "rev")], [], [
        _fact("f8", "a", "p", ["e5", "e2"], "rev")],
        acl_changes=[_ep("e2", ("*",), 1, "rev")])
    index.apply(_entry("main", 4), [_ep("e7", ("user:bob",), 9)], [], [])  # after the fork


def _reference(index: ReadIndex, segs: Segments, who: Principal,
               ) -> tuple[list[EpisodeRecord], list[FactRecord]]:
    eps = index.episodes(S, segs, index.episodes_in(S, segs))
    readable = {i: e for i, e in eps.items() if may_read(who, e.acl)}
    facts = [f for f in index.facts(S, segs, None, None)
             if all(e in readable for e, _ in f.cites)]
    return sorted(readable.values(), key=lambda e: (-e.occurred_at.timestamp(), e.id)), facts


T = TypeVar("T")


def _all_pages(fetch: Callable[[Any], list[T]], cursor_of: Callable[[T], Any]) -> list[T]:
    """Every row of a listing read two at a time, each page after the last row's cursor."""
    rows: list[T] = []
    cursor = None
    while True:
        page = fetch(cursor)
        rows += page
        if len(page) < 2:
            return rows
        cursor = cursor_of(page[-1])


@pytest.mark.parametrize("segs", [MAIN, BRANCH, AS_OF_2], ids=["main", "branch", "as_of"])
def test_browsing_reads_answer_what_the_row_reads_answer(index: ReadIndex,
                                                         segs: Segments) -> None:
    _seed(index)
    for who in PEOPLE:
        want_eps, want_facts = _reference(index, segs, who)
        classes = index.episode_acls(S, segs)
        acls = {a for a in classes if may_read(who, json.loads(a))}
        assert sum(classes[a] for a in acls) == len(want_eps), who
        # Pages of two, by cursor, give the reference order, each with its current ACL.
        got: list[EpisodeRecord] = _all_pages(
            lambda cursor, acls=acls: index.episode_page(S, segs, acls, 2, cursor), lambda e: e)
        assert [(e.id, e.acl) for e in got] == [(e.id, e.acl) for e in want_eps], who
        docs = Counter(e.document for e in want_eps if e.document)
        assert index.document_counts(S, segs, acls, ["d", "none"]) == dict(docs), who
        assert index.fact_counts(S, segs, acls) == (
            len(want_facts), len({f.entity for f in want_facts})), who
        per: dict[str, Counter[str]] = {}
        for f in want_facts:
            per.setdefault(f.entity, Counter())[f.predicate] += 1
        names: list[tuple[str, dict[str, int]]] = _all_pages(
            lambda after, acls=acls: index.entity_page(S, segs, acls, 2, after), lambda row: row[0])
        assert names == [(n, dict(per[n])) for n in sorted(per)], who
    assert index.episode_page(S, segs, [], 5) == []
    assert index.fact_counts(S, segs, []) == (0, 0)


def test_a_deleted_branch_leaves_no_cites(index: ReadIndex) -> None:
    _seed(index)
    everyone = set(index.episode_acls(S, BRANCH))
    assert index.fact_counts(S, BRANCH, everyone)[0] > index.fact_counts(S, MAIN, everyone)[0]
    index.apply(LedgerEntry("x".ljust(40, "0"), None, S, "rev", 2, "t", T0, "drop",
                            kind="delete"), [], [], [])
    from sqlalchemy import select

    from ampup_memory.memory.readindex import cites_t
    with index.engine.connect() as conn:
        assert not conn.execute(select(cites_t).where(cites_t.c.branch == "rev")).first()


def test_a_missing_episode_costs_the_queries_a_found_one_does(index: ReadIndex) -> None:
    """An unreadable episode and a missing one answer alike (404), and must take alike: a
    missing id skipped the ACL query, a round trip a caller could time (about 1 ms on
    PostgreSQL, found by tools/http_audit.py's timing probe)."""
    from sqlalchemy import event

    _seed(index)
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(index.engine, "before_cursor_execute", count)
    try:
        per_lookup = []
        for ids in (["e2"], ["e404"], ["e2", "e404"]):
            statements.clear()
            index.episodes(S, MAIN, ids)
            per_lookup.append(len(statements))
    finally:
        event.remove(index.engine, "before_cursor_execute", count)
    assert per_lookup[0] == per_lookup[1] == per_lookup[2], per_lookup
    # Looking up the ACLs of ids not found changes no answer (e6 was narrowed on main).
    got = index.episodes(S, MAIN, ["e6", "e404", "e2"])
    assert {i: e.acl for i, e in got.items()} == {"e6": ("user:carol",),
                                                   "e2": ("user:alice",)}
