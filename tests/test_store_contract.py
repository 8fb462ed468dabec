"""The cell-store contract: every `CellStore` method, run against every store.

The `store` fixture is parametrized over SQLite (a temporary file) and PostgreSQL (a fresh
database on the session's real server, or `TEST_POSTGRES_URL`). A second instance on the
same URI stands in for a second server process.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql

from ampup_memory.amp.access import Guard
from ampup_memory.amp.lifecycle import DecayInputs, Standing
from ampup_memory.amp.model import (
    AccessPolicy,
    Content,
    Identity,
    Lifecycle,
    LifecycleRunRequest,
    MemoryCell,
    MemoryType,
    OwnerType,
    Scoring,
    Status,
    StoredCell,
)
from ampup_memory.amp.reembed import ensure_embedding_model
from ampup_memory.amp.service import AmpService, ScoringLimit, cell_etag
from ampup_memory.amp.store.base import (
    CellFilter,
    CellStore,
    EmbeddingSource,
    Hit,
    KeyRecord,
    PassRecord,
    StatusMove,
    UpdateOutcome,
    UpdateTx,
)
from ampup_memory.amp.store.postgres import CELLS_FILLFACTOR
from ampup_memory.amp.store.registry import open_store
from ampup_memory.search.embed import Embedder, HashEmbedder, ModelInfo, WordLlamaEmbedder
from tests.pg import PostgresFactory

DIMS = 256
EMBED = HashEmbedder(DIMS)
EMBED_MODEL = ModelInfo(EMBED.name, DIMS)
T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.fixture(scope="module")
def pg_url(postgres: PostgresFactory) -> str:
    """One database for the module (creating one per test costs more than the tests)."""
    return postgres.new_database("contract")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'amp.db'}"
    url: str = request.getfixturevalue("pg_url")
    with psycopg.connect(url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT string_agg(quote_ident(tablename), ', ') FROM pg_tables"
            " WHERE schemaname = current_schema()"
        ).fetchone()
        if tables and tables[0]:  # the store's own tables, left by the previous test
            conn.execute(f"TRUNCATE {tables[0]}")
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Storage no store has opened yet (schema creation is part of the test)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    factory: PostgresFactory = request.getfixturevalue("postgres")
    return factory.new_database("fresh")


@pytest.fixture
def opened(store_uri: str) -> Iterator[Callable[[], CellStore]]:
    """Opens more stores on the same URI (another process, as far as the store knows)."""
    stores: list[CellStore] = []

    def open_one(dimensions: int = DIMS) -> CellStore:
        stores.append(open_store(store_uri, dimensions))
        return stores[-1]

    yield open_one
    for s in stores:
        s.close()


@pytest.fixture
def store(opened: Callable[[], CellStore]) -> CellStore:
    return opened()


def make(
    n: int,
    text: str = "a memory",
    *,
    owner: str = "user_1",
    by: str = "agent_a",
    type_: MemoryType = MemoryType.semantic,
    status: Status = Status.active,
    public: bool = False,
    readable_by: list[str] | None = None,
    at: datetime = T0,
    metadata: dict[str, object] | None = None,
    deleted_at: datetime | None = None,
) -> StoredCell:
    cell = MemoryCell(
        id=f"mem_{n:026d}",  # digits are Crockford characters; order is numeric order
        type=type_,
        content=Content(text=text, metadata=metadata or {}),
        identity=Identity(owner_id=owner, owner_type=OwnerType.user, created_by=by),
        scoring=Scoring(importance=0.7, confidence=0.9, decay_rate=0.02),
        lifecycle=Lifecycle(created_at=at, last_accessed_at=at, last_updated_at=at,
                            status=status),
        access_policy=AccessPolicy(public=public, readable_by=readable_by or []),
    )
    return StoredCell(cell=cell, deleted_at=deleted_at,
                      stale_since=at if status is Status.stale else None)


def add(store: CellStore, stored: StoredCell) -> StoredCell:
    store.create(stored, EMBED.embed([stored.cell.content.text])[0])
    return stored


def wire_json(stored: StoredCell | None) -> str:
    assert stored is not None
    return json.dumps(stored.cell.wire(), separators=(",", ":"), ensure_ascii=False)


def ids(cells: list[StoredCell]) -> list[str]:
    return [c.cell.id for c in cells]


def search(store: CellStore, flt: CellFilter, terms: list[str],
           vector: list[float] | None, k: int) -> list[Hit]:
    """`search_candidates`, checking that every hit's guard and decay inputs are exactly
    what the rules would read from the whole cell."""
    found = store.search_candidates(flt, terms, vector, k)
    for hit in found:
        stored = store.get(hit.cell_id)
        assert stored is not None
        full = Guard.of(stored.cell)
        assert (hit.guard.created_by, hit.guard.owner_id, hit.guard.public,
                hit.guard.readable_by) == (full.created_by, full.owner_id, full.public,
                                           full.readable_by)
        assert hit.decay == DecayInputs.of(stored.cell)
    return found


def set_text(text: str) -> Callable[[StoredCell, UpdateTx], UpdateOutcome]:
    def change(stored: StoredCell, tx: UpdateTx) -> UpdateOutcome:
        cell = stored.cell
        new = cell.model_copy(update={
            "content": Content(text=text, metadata=cell.content.metadata),
            "lifecycle": cell.lifecycle.model_copy(update={"last_updated_at": T0 + timedelta(1)}),
        })
        return UpdateOutcome(StoredCell(cell=new), vector=EMBED.embed([text])[0])
    return change


# ---- create / get / touch --------------------------------------------------------------

RICH_METADATA: dict[str, object] = {
    "zeta": 1, "alpha": [1.5, 2.0, "x"], "nested": {"b": None, "a": True},
    "unicode": "thé vert 🍵", "nul": "a\x00b", "big": 12345678901234567890, "neg": -0.0,
}


def test_create_get_round_trip(store: CellStore) -> None:
    stored = add(store, make(1, "likes green tea", metadata=RICH_METADATA, public=True,
                             readable_by=["agent_*"]))
    got = store.get(stored.cell.id)
    assert got is not None
    assert wire_json(got) == wire_json(stored)
    assert got.cell == stored.cell
    assert list(got.cell.content.metadata) == list(RICH_METADATA)  # key order kept
    assert store.get("mem_missing") is None
    assert store.get("mem_\x00") is None  # a NUL in an id is just an unknown id
    assert store.count() == 1


def test_wire_identical_across_stores(tmp_path: Path, postgres: PostgresFactory) -> None:
    lite = open_store(f"sqlite:///{tmp_path / 'a.db'}", DIMS)
    pg = open_store(postgres.new_database("wire"), DIMS)
    try:
        for s in (lite, pg):
            add(s, make(7, "same cell", metadata=RICH_METADATA, owner="o\x00wner"))
        assert wire_json(lite.get(make(7).cell.id)) == wire_json(pg.get(make(7).cell.id))
        later = T0 + timedelta(seconds=5, microseconds=7)
        assert wire_json(lite.touch(make(7).cell.id, later)) == wire_json(
            pg.touch(make(7).cell.id, later)
        )
    finally:
        lite.close()
        pg.close()


@pytest.mark.postgres
def test_postgres_reports_its_hnsw_index_beside_shared_buffers(
        postgres: PostgresFactory) -> None:
    """What decides whether a search reads outside PostgreSQL's buffers (the default
    128 MB holds the HNSW index of only about 80,000 cells of 256 dimensions): the
    index's and the table's bytes beside the server's ``shared_buffers``, which
    `GET /status` shows as ``stores.amp.vector_memory``."""
    url = postgres.new_database("buffers")
    pg = open_store(url, DIMS)
    try:
        empty = pg.vector_memory()
        assert empty is not None
        for n in range(1, 301):
            add(pg, make(n, f"cell number {n} about tea and trains"))
        memory = pg.vector_memory()
        with psycopg.connect(url) as conn:
            shown = str(conn.execute("SHOW shared_buffers").fetchone()[0])  # type: ignore[index]
            index = conn.execute(
                "SELECT pg_relation_size('cells_embedding_hnsw_256')").fetchone()
    finally:
        pg.close()
    number, unit = int(shown.rstrip("kMGB")), shown.lstrip("0123456789")
    assert memory is not None
    assert memory["shared_buffers"] == number * {"kB": 1 << 10, "MB": 1 << 20,
                                                 "GB": 1 << 30}[unit]
    assert index is not None and memory["hnsw_index"] == index[0]
    assert memory["hnsw_index"] > empty["hnsw_index"] > 0  # 300 vectors in the graph
    assert memory["table"] > empty["table"]
    assert memory["owner_indexes"] == 0  # no owner has an index of its own


def test_a_postgres_read_writes_no_index_entry(postgres: PostgresFactory) -> None:
    """A read's `touch` changes no indexed column, so with room left on the page
    (`CELLS_FILLFACTOR`) PostgreSQL writes it as a heap-only (HOT) update: no entry in
    the HNSW graph, the GIN index or the b-trees. On full pages (the default fillfactor of
    100) rows of this size made half the touches whole new row versions. A store made
    before gets the fillfactor when it is next opened."""
    url = postgres.new_database("hot")
    pg = open_store(url, DIMS)
    _no_autovacuum(url)  # as in the test below: its ANALYZE's snapshot forbids pruning
    filler = " ".join(f"word{n}" for n in range(160))  # rows of about 2.3 kB, as at scale
    try:
        for n in range(1, 61):
            add(pg, make(n, f"cell {n} {filler}"))
        for n in range(1, 61):
            assert pg.touch(make(n).cell.id, T0 + timedelta(seconds=n)) is not None
    finally:
        pg.close()  # its connections end, and report their counts
    assert _updates(url, 60) == (60, 60)
    with psycopg.connect(url, autocommit=True) as conn:
        pages = conn.execute("SELECT pg_relation_size('cells') / 8192").fetchone()
        assert pages is not None and pages[0] >= 60 / 3  # rows of this size: four fill a page
        conn.execute("ALTER TABLE cells RESET (fillfactor)")  # as a store made before
    open_store(url, DIMS).close()
    with psycopg.connect(url) as conn:
        options = conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'cells'"
                               ).fetchone()
    assert options is not None and f"fillfactor={CELLS_FILLFACTOR}" in options[0], options


def _updates(url: str, n: int) -> tuple[int, int]:
    """``cells``' updates and HOT updates once ``n`` have reached the statistics (a
    backend reports them when it ends, or within a second)."""
    with psycopg.connect(url, autocommit=True) as conn:
        deadline = time.monotonic() + 30
        while True:
            row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                               " WHERE relname = 'cells'").fetchone()
            assert row is not None
            if row[0] >= n or time.monotonic() > deadline:
                return int(row[0]), int(row[1])
            time.sleep(0.2)


@pytest.mark.postgres
def test_a_postgres_status_move_writes_no_index_entry(postgres: PostgresFactory) -> None:
    """No index of ``cells`` holds ``status``, so a lifecycle move (status, document,
    stale clock) is a heap-only (HOT) update, as a read is: no entry in the HNSW graph,
    the GIN index or the b-trees (an index holding it made each move cost 1.2-2.2 ms of
    server CPU at 20k cells). A store made before, with ``status`` in two b-trees, has
    it taken out when it is next opened."""
    url = postgres.new_database("hotmove")
    open_store(url, DIMS).close()
    with psycopg.connect(url, autocommit=True) as conn:  # the layout before this release
        conn.execute("DROP INDEX cells_owner_filter")
        conn.execute("CREATE INDEX cells_owner_filter ON cells (owner_id, status, id)"
                     " INCLUDE (type, public, has_readers, created_by)")
        conn.execute("CREATE INDEX cells_status_id ON cells (status, id)")
        _drop_filters_table(conn)
    pg = open_store(url, DIMS)
    # A move is heap-only only when its page can be pruned of the last move's old row,
    # and a snapshot held anywhere in this database (autovacuum's ANALYZE, which 80
    # writes set off) forbids that: under load 3 of 40 moves went to the indexes.
    _no_autovacuum(url)
    filler = " ".join(f"word{n}" for n in range(160))  # rows of about 2.3 kB, as at scale
    try:
        for n in range(1, 41):
            add(pg, make(n, f"cell {n} {filler}"))
        cells = pg.get_many([make(n).cell.id for n in range(1, 41)])
        moved = pg.set_statuses([StatusMove(c, Status.stale, T0) for c in cells])
        assert moved == {c.cell.id for c in cells}
    finally:
        pg.close()  # its connections end, and report their counts
    assert _updates(url, 40) == (40, 40)
    with psycopg.connect(url, autocommit=True) as conn:
        indexes = dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes"
                                    " WHERE tablename = 'cells'").fetchall())
    assert not [name for name, d in indexes.items() if "status" in d]
    assert indexes["cells_owner_filter"].endswith(
        "(owner_id, id) INCLUDE (type, public, has_readers, created_by)")


def _no_autovacuum(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        for (table,) in tables.fetchall():
            conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = off)")
                         .format(sql.Identifier(table)))


_FILTERED = "id, type, owner_id, created_by, status, public, has_readers"


def _drop_filters_table(conn: psycopg.Connection[Any]) -> None:
    """A store as a version before `pg_filters` made it."""
    for trigger in ("written", "rewritten", "emptied"):
        conn.execute(f"DROP TRIGGER cell_filters_{trigger} ON cells")
    conn.execute("DROP TABLE cell_filters")


def _filters_follow(conn: psycopg.Connection[Any]) -> None:
    cells = conn.execute(f"SELECT {_FILTERED} FROM cells ORDER BY id").fetchall()
    kept = conn.execute(f"SELECT {_FILTERED} FROM cell_filters ORDER BY id").fetchall()
    assert kept == cells


@pytest.mark.postgres
def test_postgres_filtered_columns_follow_every_write(postgres: PostgresFactory) -> None:
    """`pg_filters`' narrow table, which the listings, the vector step's size probe and
    the lifecycle pass read instead of an index of ``cells`` holding ``status``, holds
    each cell's filtered columns through every write; a store made without it gets it
    written when opened."""
    url = postgres.new_database("filters")
    pg = open_store(url, DIMS)
    try:
        for n in range(1, 6):
            add(pg, make(n, f"cell {n}", owner=f"u{n % 2}"))
        assert pg.touch(make(1).cell.id, T0 + timedelta(days=1)) is not None
        [cell] = pg.get_many([make(2).cell.id])
        assert pg.set_statuses([StatusMove(cell, Status.stale, T0)]) == {cell.cell.id}
        assert pg.purge([make(3).cell.id]) == 1
    finally:
        pg.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE cells SET status = 'deleted', has_readers = true WHERE id = %s",
                     (make(4).cell.id,))
        _filters_follow(conn)
        assert conn.execute("SELECT status FROM cell_filters WHERE id = %s",
                            (make(2).cell.id,)).fetchone() == ("stale",)
        _drop_filters_table(conn)
    open_store(url, DIMS).close()
    with psycopg.connect(url, autocommit=True) as conn:
        _filters_follow(conn)
        assert conn.execute("SELECT count(*) FROM cell_filters").fetchone() == (4,)
        conn.execute("TRUNCATE cells")
        assert conn.execute("SELECT count(*) FROM cell_filters").fetchone() == (0,)


def test_get_many(store: CellStore) -> None:
    for n in (1, 2, 3):
        add(store, make(n, f"cell {n}"))
    got = store.get_many([make(3).cell.id, make(1).cell.id, "mem_missing", "mem_\x00"])
    assert sorted(wire_json(g) for g in got) == sorted(
        wire_json(make(n, f"cell {n}")) for n in (1, 3))
    assert store.get_many([]) == []


def test_cells_with_nul_characters_work_everywhere(store: CellStore) -> None:
    """A NUL may sit in any string of a cell (text, metadata, ids of owners); PostgreSQL's
    text and JSON types refuse it, so this pins that no operation trips over it."""
    stored = make(1, "tea with a \x00 inside", owner="o\x00wner", metadata=RICH_METADATA,
                  readable_by=["agent_\x00*"])
    stored = stored.model_copy(update={"cell": stored.cell.model_copy(update={
        "lifecycle": stored.cell.lifecycle.model_copy(
            update={"expires_at": T0 + timedelta(days=400)})})})
    add(store, stored)
    cell_id = stored.cell.id
    assert wire_json(store.get(cell_id)) == wire_json(stored)
    touched = store.touch(cell_id, T0 + timedelta(seconds=1))
    assert touched is not None
    flt = CellFilter(agent_id="agent_a", owner_id="o\x00wner")
    assert [h.cell_id for h in search(store, flt, ["tea"], EMBED.embed(["tea"])[0], 5)] == [
        cell_id]
    assert ids(store.list_candidates(flt, None, 5)) == [cell_id]
    assert move(store, touched, Status.stale, T0 + timedelta(days=1))
    updated = store.update(cell_id, set_text("now \x00 coffee"))
    assert updated is not None
    assert wire_json(store.get(cell_id)) == wire_json(updated.model_copy(update={
        "cell": updated.cell.model_copy(update={
            "scoring": updated.cell.scoring.model_copy(update={"access_count": 1}),
            "lifecycle": updated.cell.lifecycle.model_copy(
                update={"last_accessed_at": T0 + timedelta(seconds=1)})})}))
    assert store.purge([cell_id]) == 1


def test_touch_counts_each_read_and_refuses_deleted(store: CellStore) -> None:
    cell_id = add(store, make(1)).cell.id
    later = T0 + timedelta(hours=2)
    touched = store.touch(cell_id, later)
    assert touched is not None
    assert touched.cell.scoring.access_count == 1
    assert touched.cell.lifecycle.last_accessed_at == later
    assert touched.cell.lifecycle.last_updated_at == T0  # a read is not a write
    got = store.get(cell_id)
    assert got is not None and got.cell.scoring.access_count == 1

    gone = add(store, make(2, status=Status.deleted, deleted_at=T0)).cell.id
    assert store.touch(gone, later) is None
    assert store.touch("mem_missing", later) is None
    got = store.get(gone)
    assert got is not None and got.cell.scoring.access_count == 0


def test_concurrent_touches_lose_no_increment(opened: Callable[[], CellStore]) -> None:
    first, second = opened(), opened()
    cell_id = add(first, make(1)).cell.id
    with ThreadPoolExecutor(8) as pool:
        counts = list(pool.map(
            lambda i: (first if i % 2 else second).touch(cell_id, T0 + timedelta(seconds=i)),
            range(40),
        ))
    assert sorted(c.cell.scoring.access_count for c in counts if c) == list(range(1, 41))
    final = first.get(cell_id)
    assert final is not None and final.cell.scoring.access_count == 40


def test_first_open_is_safe_when_processes_start_together(fresh_uri: str) -> None:
    with ThreadPoolExecutor(4) as pool:
        stores = list(pool.map(lambda _: open_store(fresh_uri, DIMS), range(4)))
    try:
        add(stores[0], make(1, "made by the first"))
        assert all(wire_json(s.get(make(1).cell.id)) == wire_json(make(1, "made by the first"))
                   for s in stores)
    finally:
        for s in stores:
            s.close()


def test_a_new_embedding_width_never_mixes_vector_spaces(fresh_uri: str) -> None:
    wide, narrow = HashEmbedder(DIMS), HashEmbedder(32)
    old = open_store(fresh_uri, DIMS)
    try:
        old.create(make(1, "green tea"), wide.embed(["green tea"])[0])
    finally:
        old.close()
    new = open_store(fresh_uri, 32)  # the operator switched to a 32-dimension embedder
    try:
        new.create(make(2, "green tea"), narrow.embed(["green tea"])[0])
        hits = search(new, CellFilter(agent_id="agent_a"), ["tea"],
                                     narrow.embed(["green tea"])[0], 10)
        cosine = {h.cell_id: h.cosine for h in hits}
        assert cosine[make(1).cell.id] is None  # found by keyword, no comparable vector
        assert cosine[make(2).cell.id] == pytest.approx(1.0, abs=1e-5)
    finally:
        new.close()


# ---- update ----------------------------------------------------------------------------


def test_update_writes_the_outcome_and_reindexes(store: CellStore) -> None:
    cell_id = add(store, make(1, "likes green tea")).cell.id
    result = store.update(cell_id, set_text("prefers black coffee"))
    assert result is not None and result.cell.content.text == "prefers black coffee"
    got = store.get(cell_id)
    assert got is not None and wire_json(got) == wire_json(result)
    flt = CellFilter(agent_id="agent_a")
    assert search(store, flt, ["tea"], None, 10) == []
    hits = search(store, flt, ["coffee"], None, 10)
    assert [h.cell_id for h in hits] == [cell_id] and hits[0].keyword > 0
    near = search(store, flt, [], EMBED.embed(["black coffee"])[0], 10)
    assert near[0].cosine is not None and near[0].cosine > 0.5
    assert store.update("mem_missing", set_text("x")) is None


def test_update_that_raises_changes_nothing(store: CellStore) -> None:
    cell_id = add(store, make(1, "likes green tea")).cell.id
    before = wire_json(store.get(cell_id))
    seen: list[int] = []

    def failing(stored: StoredCell, tx: UpdateTx) -> UpdateOutcome:
        seen.append(len(tx.scoring_patches_since(T0 - timedelta(days=1))))
        raise RuntimeError("refused half-way")

    with pytest.raises(RuntimeError, match="half-way"):
        store.update(cell_id, failing)
    assert wire_json(store.get(cell_id)) == before
    assert search(store, CellFilter(agent_id="agent_a"), ["tea"], None, 5)

    # a failed scoring PATCH is not counted
    def scoring_then_fail(stored: StoredCell, tx: UpdateTx) -> UpdateOutcome:
        seen.append(len(tx.scoring_patches_since(T0 - timedelta(days=1))))
        raise RuntimeError("over budget")

    with pytest.raises(RuntimeError):
        store.update(cell_id, scoring_then_fail)
    with pytest.raises(RuntimeError):
        store.update(cell_id, scoring_then_fail)
    assert seen == [0, 0, 0]


Change = Callable[[StoredCell, UpdateTx], UpdateOutcome]


def _scoring_patch(at: datetime, limit: int | None = None,
                   since: datetime | None = None) -> Change:
    def change(stored: StoredCell, tx: UpdateTx) -> UpdateOutcome:
        used = tx.scoring_patches_since(since or at - timedelta(hours=1))
        if limit is not None and len(used) >= limit:
            raise PermissionError("budget spent")
        cell = stored.cell
        new = cell.model_copy(update={
            "scoring": cell.scoring.model_copy(update={"importance": 0.1 + 0.01 * len(used)}),
            "lifecycle": cell.lifecycle.model_copy(update={"last_updated_at": at}),
        })
        return UpdateOutcome(StoredCell(cell=new), count_scoring_patch=True)
    return change


def test_scoring_patches_are_counted_in_the_transaction(store: CellStore) -> None:
    cell_id = add(store, make(1)).cell.id
    times = [T0 + timedelta(minutes=m) for m in (1, 2, 3)]
    for t in times:
        store.update(cell_id, _scoring_patch(t))
    seen: dict[str, list[datetime]] = {}

    def look(stored: StoredCell, tx: UpdateTx) -> UpdateOutcome:
        seen["all"] = tx.scoring_patches_since(T0)
        seen["late"] = tx.scoring_patches_since(times[1])
        return UpdateOutcome(stored)  # not a scoring patch: not counted

    store.update(cell_id, look)
    store.update(cell_id, look)
    assert seen["all"] == times  # oldest first, exact instants
    assert seen["late"] == times[1:]  # `since` is inclusive
    other = add(store, make(2)).cell.id
    store.update(other, look)
    assert seen["all"] == []  # counted per cell


def test_concurrent_scoring_patches_share_one_budget(opened: Callable[[], CellStore]) -> None:
    stores = [opened(), opened()]  # two "processes" on one database
    cell_id = add(stores[0], make(1)).cell.id

    def attempt(i: int) -> bool:
        try:
            stores[i % 2].update(cell_id, _scoring_patch(T0 + timedelta(seconds=i), limit=5,
                                                         since=T0))
            return True
        except PermissionError:
            return False

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(attempt, range(24)))
    assert sum(results) == 5


def test_a_version_checked_in_update_lets_one_of_many_writers_win(
        opened: Callable[[], CellStore]) -> None:
    """If-Match's guarantee (amp/service.py `_check_condition`) rests on this: ``update``
    hands ``change`` the cell as it is under the write's lock, so of writers that read one
    version and check it there, exactly one lands, across store instances; and the tag of
    what a write returns is the tag a later read computes (no precision lost in storage)."""
    stores = [opened(), opened()]
    cell_id = add(stores[0], make(1, "version zero")).cell.id
    got = stores[0].get(cell_id)
    assert got is not None
    read = cell_etag(got.cell)

    def attempt(i: int) -> StoredCell | None:
        def change(stored: StoredCell, tx: UpdateTx) -> UpdateOutcome:
            if cell_etag(stored.cell) != read:
                raise PermissionError("precondition failed")
            new = stored.cell.model_copy(update={
                "content": stored.cell.content.model_copy(update={"text": f"writer {i}"}),
                "lifecycle": stored.cell.lifecycle.model_copy(
                    update={"last_updated_at": T0 + timedelta(seconds=i + 1)})})
            return UpdateOutcome(StoredCell(cell=new))
        try:
            return stores[i % 2].update(cell_id, change)
        except PermissionError:
            return None

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(attempt, range(8)))
    won = [r for r in results if r is not None]
    assert len(won) == 1
    after = stores[1].get(cell_id)
    assert after is not None and after.cell.content.text == won[0].cell.content.text
    assert cell_etag(after.cell) == cell_etag(won[0].cell) != read


# ---- listing and search ------------------------------------------------------------------


def _population(store: CellStore) -> dict[str, StoredCell]:
    cells = {
        "mine": make(1, "green tea in the morning"),
        "other_private": make(2, "green tea secret", owner="user_2", by="agent_b"),
        "public": make(3, "public tea notes", owner="user_2", by="agent_b", public=True),
        "shared": make(4, "tea shared by pattern", owner="user_2", by="agent_b",
                       readable_by=["agent_*"]),
        "owned": make(5, "tea owned by me", owner="agent_a", by="agent_b"),
        "procedure": make(6, "how to brew tea", type_=MemoryType.procedural),
        "stale": make(7, "stale tea memory", status=Status.stale),
        "archived": make(8, "archived tea memory", status=Status.archived),
        "deleted": make(9, "deleted tea memory", status=Status.deleted, deleted_at=T0),
        "coffee": make(10, "strong black coffee"),
        "other_owner": make(11, "tea for user three", owner="user_3"),
    }
    for c in cells.values():
        add(store, c)
    return cells


def test_list_candidates_filters_and_orders(store: CellStore) -> None:
    c = _population(store)
    idof = {k: v.cell.id for k, v in c.items()}
    got = ids(store.list_candidates(CellFilter(agent_id="agent_a"), None, 50))
    # newest id first; the private cell of another agent with no readers is never a candidate
    assert got == [idof[k] for k in ("other_owner", "coffee", "procedure", "owned", "shared",
                                     "public", "mine")]
    assert ids(store.list_candidates(CellFilter(agent_id="agent_b"), None, 50)) == [
        idof[k] for k in ("owned", "shared", "public", "other_private")
    ]  # agent_b: what it created, public, and what has readers; not agent_a's private ones

    by_owner = CellFilter(agent_id="agent_a", owner_id="user_1")
    assert ids(store.list_candidates(by_owner, None, 50)) == [idof["coffee"],
                                                              idof["procedure"], idof["mine"]]
    procedural = CellFilter(agent_id="agent_a", types=[MemoryType.procedural])
    assert ids(store.list_candidates(procedural, None, 50)) == [idof["procedure"]]
    for status in (Status.stale, Status.archived, Status.deleted):
        flt = CellFilter(agent_id="agent_a", statuses=[status])
        assert ids(store.list_candidates(flt, None, 50)) == [idof[status.value]]
    both = CellFilter(agent_id="agent_a", statuses=[Status.stale, Status.archived])
    assert ids(store.list_candidates(both, None, 50)) == [idof["archived"], idof["stale"]]
    assert store.list_candidates(CellFilter(agent_id="agent_a", statuses=[]), None, 50) == []

    # paging: batch size and strictly-older-than
    first = ids(store.list_candidates(CellFilter(agent_id="agent_a"), None, 3))
    assert first == got[:3]
    rest = ids(store.list_candidates(CellFilter(agent_id="agent_a"), first[-1], 50))
    assert rest == got[3:]


def test_list_candidates_owner_with_odd_characters(store: CellStore) -> None:
    add(store, make(1, owner="o\x00wner"))
    add(store, make(2, owner="o'; DROP TABLE cells; --"))
    for owner, n in (("o\x00wner", 1), ("o'; DROP TABLE cells; --", 2)):
        flt = CellFilter(agent_id="agent_a", owner_id=owner)
        assert ids(store.list_candidates(flt, None, 10)) == [make(n).cell.id]
    assert store.count() == 2


def test_search_keyword_hits(store: CellStore) -> None:
    c = _population(store)
    flt = CellFilter(agent_id="agent_a")
    hits = {h.cell_id: h for h in search(store, flt, ["tea"], None, 50)}
    expected = {c[k].cell.id for k in ("mine", "public", "shared", "owned", "procedure",
                                       "other_owner")}
    assert set(hits) == expected  # not coffee, not stale/archived/deleted, not private
    assert all(h.keyword > 0 and h.cosine is None for h in hits.values())
    # stemming on both stores: "brewing" finds "brew"
    brewed = search(store, flt, ["brewing"], None, 10)
    assert [h.cell_id for h in brewed] == [c["procedure"].cell.id]
    # any of the terms matches
    either = search(store, flt, ["coffee", "morning"], None, 10)
    assert {h.cell_id for h in either} == {c["coffee"].cell.id, c["mine"].cell.id}
    # terms are data, never syntax
    for odd in (["'", "\\", "\"", "a&b|c", ":*", "(", "NEAR"], ["' OR 1=1 --"]):
        assert search(store, flt, odd, None, 10) == []


def test_search_keyword_score_prefers_more_matches(store: CellStore) -> None:
    add(store, make(1, "tea tea tea, green tea and more tea"))
    add(store, make(2, "one tea among many other words about mountains rivers and trains"))
    hits = search(store, CellFilter(agent_id="agent_a"), ["tea"], None, 10)
    score = {h.cell_id: h.keyword for h in hits}
    assert score[make(1).cell.id] > score[make(2).cell.id] > 0


def test_search_keyword_ranks_by_bm25(store: CellStore) -> None:
    """Both stores rank keyword matches by BM25 (FTS5's ``bm25()`` on SQLite, the same
    formula in SQL on PostgreSQL): a rarer word weighs more than a common one, and of two
    cells holding a word once the shorter ranks first. ``ts_rank_cd`` (PostgreSQL's before)
    scored each pair alike."""
    for n in range(1, 9):
        add(store, make(n, f"kettle filler{n} padding{n}"))  # "kettle" in 8 of 11 cells
    add(store, make(20, "teapot filler20 padding20"))
    add(store, make(21, "teapot"))
    add(store, make(22, "teapot lid spout handle ceramic glaze porcelain"))
    score = {h.cell_id: h.keyword for h in search(
        store, CellFilter(agent_id="agent_a"), ["kettle", "teapot"], None, 50)}
    assert score.keys() == {make(n).cell.id for n in (*range(1, 9), 20, 21, 22)}
    assert score[make(20).cell.id] > score[make(1).cell.id] > 0  # rarer, same length
    assert score[make(21).cell.id] > score[make(20).cell.id] > score[make(22).cell.id]
    assert len({score[make(n).cell.id] for n in range(1, 9)}) == 1  # alike cells, alike


@pytest.mark.postgres
def test_keyword_scores_agree_across_stores(
    tmp_path: Path, postgres: PostgresFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same cells score the same on both stores, to rounding: BM25 with FTS5's IDF,
    k1 and b over every cell (deleted, other owners' and filtered-out ones included, as
    FTS5 counts every row), with and without an owner filter. The texts repeat no word
    and hold no stop word, so PostgreSQL's length (distinct words) is FTS5's (tokens).
    The postings budget is lowered so one query's words are all over it: then exact
    counts pick the rarest, on both stores. A date's numbers match on both."""
    monkeypatch.setattr("ampup_memory.search.budget.POSTINGS_BUDGET", 4)
    lite = open_store(f"sqlite:///{tmp_path / 'a.db'}", DIMS)
    pg = open_store(postgres.new_database("bm25"), DIMS)
    words = ["kettle", "teapot", "saucer", "biscuit", "napkin", "ladle", "whisk"]
    try:
        for s in (lite, pg):
            for n in range(1, 41):
                text = " ".join(words[j % 7] for j in range(n % 7, n % 7 + 1 + n % 5))
                add(s, make(n, f"{text} item{n}", owner=f"user_{n % 3}",
                            status=Status.deleted if n % 11 == 0 else Status.active,
                            deleted_at=T0 if n % 11 == 0 else None))
            # PostgreSQL reads "-06" of a date as a signed number: its words match anyway
            for n, date in ((50, "2025-06-30"), (51, "2024-06-01"), (52, "2030-01-15")):
                add(s, make(n, f"deal closes {date}", owner="user_1"))
        for terms in (["kettle"], ["teapot", "whisk", "item7"], ["saucer", "biscuit"],
                      ["ladle", "napkin", "kettle", "teapot"], ["06", "30"]):
            for owner in (None, "user_1"):
                flt = CellFilter(agent_id="agent_a", owner_id=owner)
                got = [{h.cell_id: h.keyword for h in search(s, flt, terms, None, 50)}
                       for s in (lite, pg)]
                assert got[0].keys() == got[1].keys() and got[0], terms
                for cell_id, value in got[0].items():
                    assert got[1][cell_id] == pytest.approx(value, rel=1e-5), (terms, cell_id)
    finally:
        lite.close()
        pg.close()


@pytest.mark.postgres
def test_postgres_status_moves_beside_a_reembedding_never_deadlock(
        postgres: PostgresFactory) -> None:
    """A lifecycle pass's moves and a re-embedding's batch at once: a batch of moves as one
    statement locked its rows in the order it was handed (here descending) while the
    re-embedding locks in id order, and they deadlocked (PostgreSQL aborts one: a 503).
    Each move is now its own transaction, so neither holds more than one row the other
    wants."""
    store = open_store(postgres.new_database("deadlock"), DIMS)
    try:
        cells = [add(store, make(n, f"note {n}")) for n in range(1, 151)]
        sources = [EmbeddingSource(c.cell.id, c.cell.content.text) for c in cells]
        vectors = EMBED.embed([s.text for s in sources])
        errors: list[BaseException] = []

        def moves() -> None:
            for _ in range(12):
                fresh = sorted(store.get_many([c.cell.id for c in cells]),
                               key=lambda c: c.cell.id, reverse=True)
                to = (Status.stale if fresh[0].cell.lifecycle.status is Status.active
                      else Status.active)
                try:
                    store.set_statuses([StatusMove(c, to, T0) for c in fresh])
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

        def reembeds() -> None:
            for _ in range(12):
                try:
                    store.replace_vectors(list(zip(sources, vectors, strict=True)))
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

        threads = [threading.Thread(target=moves), threading.Thread(target=reembeds)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
    finally:
        store.close()


def test_postgres_plans_the_keyword_statement_for_each_search(postgres: PostgresFactory) -> None:
    """The keyword statement is never prepared: psycopg prepares a statement run 5 times,
    and PostgreSQL may then plan it once for any words (a generic plan), which reads an
    owner's whole index even for a word in a few cells (docs/performance.md). Other
    statements may be prepared (the hits' read is)."""
    from ampup_memory.amp.store.postgres import PostgresStore

    store = open_store(postgres.new_database("planned"), DIMS)
    try:
        assert isinstance(store, PostgresStore)
        for n in range(1, 6):
            add(store, make(n, f"green tea note{n}", owner="user_1"))
        flt = CellFilter(agent_id="agent_a", owner_id="user_1")
        for _ in range(4 * store._pool.get_stats()["pool_size"] + 8):
            assert search(store, flt, ["tea", "green"], None, 5)
        statements = []
        with ThreadPoolExecutor(8) as pool:  # every pooled connection at once
            def prepared(_: int) -> list[str]:
                with store._pool.connection() as conn:
                    time.sleep(0.2)
                    return [r[0] for r in conn.execute(
                        "SELECT statement FROM pg_prepared_statements").fetchall()]
            for found in pool.map(prepared, range(8)):
                statements += found
        assert statements  # the statistics' statement, prepared
        assert not [s for s in statements if "cell_postings" in s or "ts_rank_cd" in s]
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_searches_at_once_answer_as_one_by_one(
    postgres: PostgresFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL search with words and a vector runs its two steps on two pooled
    connections at once; with more searches at once than connections, those finding no
    second connection idle run the steps one after the other on their own instead of
    waiting for one (searches each holding one would wait on each other), and every
    search answers as it does alone, with the steps run one after the other."""
    from ampup_memory.amp.store import postgres as pgstore

    store = open_store(postgres.new_database("steps"), DIMS)
    try:
        for n in range(1, 31):
            add(store, make(n, f"{['green tea', 'black coffee', 'mint tea'][n % 3]} note{n}"))
        flt = CellFilter(agent_id="agent_a")
        queries = [(["tea", f"note{n}"], EMBED.embed([f"tea note{n}"])[0]) for n in range(24)]

        def answer(q: tuple[list[str], list[float]]) -> list[tuple[str, float, float | None]]:
            return sorted((h.cell_id, h.keyword, h.cosine)
                          for h in store.search_candidates(flt, q[0], q[1], 5))

        monkeypatch.setattr(pgstore, "CONCURRENT_STEPS", False)
        alone = [answer(q) for q in queries]
        monkeypatch.setattr(pgstore, "CONCURRENT_STEPS", True)
        with ThreadPoolExecutor(3 * pgstore.POOL_MAX) as pool:
            together = list(pool.map(answer, queries * 3, timeout=60))
        assert together == alone * 3
    finally:
        store.close()


def test_search_vector_neighbours(store: CellStore) -> None:
    texts = {1: "green tea morning ritual", 2: "green tea", 3: "coffee beans roasted dark",
             4: "mountain hiking trail"}
    for n, t in texts.items():
        add(store, make(n, t))
    add(store, make(5, "green tea morning", owner="user_9", by="agent_z"))  # never readable
    query = EMBED.embed(["green tea morning"])[0]
    flt = CellFilter(agent_id="agent_a")
    hits = search(store, flt, [], query, 2)
    got = {h.cell_id: h for h in hits}
    # "about k": a store may return more, but the k nearest readable ones lead
    assert make(5).cell.id not in got
    best = sorted(hits, key=lambda h: -(h.cosine or 0.0))[:2]
    assert {h.cell_id for h in best} == {make(1).cell.id, make(2).cell.id}
    q = np.asarray(query, dtype=np.float32)
    for n in (1, 2):
        v = np.asarray(EMBED.embed([texts[n]])[0], dtype=np.float32)
        cosine = got[make(n).cell.id].cosine
        assert cosine is not None and cosine == pytest.approx(float(v @ q), abs=1e-5)
        assert got[make(n).cell.id].keyword == 0.0
    # merged: keyword hits also carry their cosine
    merged = search(store, flt, ["hiking"], query, 1)
    by_id = {h.cell_id: h for h in merged}
    assert by_id.keys() >= {make(1).cell.id, make(4).cell.id}
    assert by_id[make(4).cell.id].keyword > 0
    assert by_id[make(4).cell.id].cosine == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("path", ["exact", "index"])
def test_every_hit_carries_its_own_scores_whichever_step_found_it(
    store: CellStore, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A hit the keyword step found, one the vector step found, and one both found carry
    the same scores: the keyword score the keyword step gave it (0 outside its k best),
    the cosine of its own vector, its own guard and decay inputs (`search`). PostgreSQL
    reads a hit's columns in the statement of the step that found it (no third statement
    reads the candidates again), on the exact path and the HNSW path alike."""
    if path == "index":
        for module in ("sqlite", "postgres"):
            monkeypatch.setattr(f"ampup_memory.amp.store.{module}.EXACT_LIMIT", 4)
    texts = ["green tea with lemon", "tea tea tea black", "mountain hiking trail",
             "mountain bike trail ride", "oolong tea leaves", "river trail at dawn",
             "coffee beans", "tea tea mountain trail", "jasmine tea", "rainy city",
             "a cup of tea and a long book about trains", "tea time"]
    for n, text in enumerate(texts, 1):
        add(store, make(n, text, at=T0 + timedelta(hours=n)))
    flt = CellFilter(agent_id="agent_a")
    query = EMBED.embed(["mountain trail"])[0]
    q = np.asarray(query, dtype=np.float32)
    cosines = {make(n).cell.id: float(np.asarray(EMBED.embed([t])[0], dtype=np.float32) @ q)
               for n, t in enumerate(texts, 1)}
    keyword = {h.cell_id: h.keyword for h in search(store, flt, ["tea"], None, 50)}
    k = 3
    best_keyword = sorted(keyword, key=lambda i: (-keyword[i], i))[:k]
    nearest = sorted(cosines, key=lambda i: -cosines[i])[:k]
    assert set(best_keyword) & set(nearest)  # one cell both steps find (8)
    assert set(keyword) - set(best_keyword) - set(nearest)  # a match outside both
    hits = {h.cell_id: h for h in search(store, flt, ["tea"], query, k)}
    assert hits.keys() >= set(best_keyword) | set(nearest)  # "about k": maybe more
    for cell_id, hit in hits.items():
        assert hit.cosine == pytest.approx(cosines[cell_id], abs=1e-5)
        if cell_id in best_keyword:
            assert hit.keyword == keyword[cell_id]
        else:  # SQLite may keep more keyword matches than k (its "about k")
            assert hit.keyword in (0.0, keyword.get(cell_id, 0.0))


def test_search_filters(store: CellStore) -> None:
    c = _population(store)
    query = EMBED.embed(["tea"])[0]

    def found(flt: CellFilter) -> set[str]:
        return {h.cell_id for h in search(store, flt, ["tea"], query, 50)}

    assert found(CellFilter(agent_id="agent_a", owner_id="user_3")) == {c["other_owner"].cell.id}
    assert found(CellFilter(agent_id="agent_a", types=[MemoryType.procedural])) == {
        c["procedure"].cell.id}
    assert found(CellFilter(agent_id="agent_a", statuses=[Status.stale, Status.archived])) == {
        c["stale"].cell.id, c["archived"].cell.id}
    assert found(CellFilter(agent_id="agent_a", statuses=[])) == set()
    everything = found(CellFilter(agent_id="agent_a"))
    assert c["other_private"].cell.id not in everything
    assert c["deleted"].cell.id not in everything
    assert c["coffee"].cell.id in everything  # a vector neighbour, readable, active


def test_search_one_owner_scores_as_unfiltered_search(
    store: CellStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An owner filter only narrows: each hit scores exactly as in the unfiltered search,
    and the keyword side keeps the k best keyword matches of that owner (as does the
    vector side where it ranks the owner's cells exactly). Pinned for an owner below the
    exact-ranking limit and one above it (the limit lowered so a few cells cross it)."""
    for module in ("sqlite", "postgres"):
        monkeypatch.setattr(f"ampup_memory.amp.store.{module}.EXACT_LIMIT", 20)
    monkeypatch.setattr("ampup_memory.amp.store.postgres.OWNER_EXACT_LIMIT", 20)
    words = ["tea", "coffee", "juice", "water", "milk", "soda"]
    owners = {"user_big": 40, "user_small": 12, "user_other": 48}
    n = 0
    for owner, count in owners.items():
        for _ in range(count):
            n += 1
            text = " ".join([words[(n + j) % 6] for j in range(1 + n % 5)] +
                            ["tea"] * (n % 3) + [f"note{n}", "about", "drinks"][: 1 + n % 3])
            add(store, make(n, text, owner=owner, public=owner == "user_other"))
    query = EMBED.embed(["tea with milk"])[0]
    k = 8
    everything = {h.cell_id: h for h in search(store, CellFilter(agent_id="agent_a"),
                                                ["tea", "milk"], query, 500)}
    assert len(everything) == n
    for owner, count in owners.items():
        mine = {i: h for i, h in everything.items() if h.guard.owner_id == owner}
        assert len(mine) == count
        hits = search(store, CellFilter(agent_id="agent_a", owner_id=owner),
                      ["tea", "milk"], query, k)
        for h in hits:  # a vector neighbour outside the keyword top k has keyword 0
            assert h.cell_id in mine
            assert h.cosine == mine[h.cell_id].cosine
            assert h.keyword in (0.0, mine[h.cell_id].keyword)
        best_keyword = sorted((h.keyword for h in mine.values() if h.keyword > 0),
                              reverse=True)[:k]
        assert sorted((h.keyword for h in hits if h.keyword > 0), reverse=True) == best_keyword
        if count <= 20:  # exact ranking: the k nearest of the owner's cells
            nearest = sorted((h.cosine or 0.0 for h in mine.values()), reverse=True)[:k]
            assert sorted((h.cosine or 0.0 for h in hits), reverse=True)[:k] == nearest


def test_search_many_cells_uses_the_index_path(
    store: CellStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the exact-ranking threshold the stores answer from an index (HNSW on
    PostgreSQL); the nearest cells must still come back and filters must still hold.
    The threshold is lowered so a few hundred cells cross it.

    HNSW is approximate and its graph is built with random levels, so this asks for
    recall over many queries rather than one exact answer: a lone outlier vector (one that
    shares nothing with the rest) can end up with no incoming links and be unreachable,
    which made a single-query version of this test fail about one run in ten. The keyword
    half of hybrid search is what finds such a cell in practice."""
    for module in ("sqlite", "postgres"):
        monkeypatch.setattr(f"ampup_memory.amp.store.{module}.EXACT_LIMIT", 50)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    rng = np.random.default_rng(7)
    n = 300
    texts = [" ".join(rng.choice(words, size=4)) + f" item{i}" for i in range(n)]
    for i, text in enumerate(texts):
        add(store, make(i + 1, text))
    # The same text as cell 1, owned by someone agent_a may not read: never returned.
    hidden = add(store, make(n + 1, texts[0], owner="user_2", by="agent_b"))
    probes = list(range(0, n, 15))  # 20 queries
    found = 0
    for i in probes:
        query = EMBED.embed([texts[i]])[0]
        hits = search(store, CellFilter(agent_id="agent_a"), [], query, 10)
        assert hits, texts[i]
        assert hidden.cell.id not in {h.cell_id for h in hits}
        assert all(h.guard.created_by == "agent_a" for h in hits)
        found += make(i + 1).cell.id in {h.cell_id for h in hits}
    assert found >= len(probes) - 2, f"recall@10 {found}/{len(probes)}"


@pytest.mark.postgres
def test_postgres_store_upgrades_to_the_owner_filter_index_and_inline_vectors(
    postgres: PostgresFactory,
) -> None:
    """An older PostgreSQL store (owner index without the filter columns, vectors with
    pgvector's EXTERNAL storage, moved to TOAST once a row passes ~2 kB) is brought to the
    current layout on open: the owner filter is answered from one covering index and
    vectors stay in the row, so neither the filter nor an exact distance reads TOAST."""
    url = postgres.new_database("upgrade")
    open_store(url, DIMS).close()
    with psycopg.connect(url, autocommit=True) as conn:  # the layout before this release
        conn.execute("DROP INDEX cells_owner_filter")
        conn.execute("CREATE INDEX cells_owner_status_id ON cells (owner_id, status, id)")
        conn.execute("ALTER TABLE cells ALTER COLUMN embedding SET STORAGE EXTERNAL")
    store = open_store(url, DIMS)
    try:
        noise = np.random.default_rng(3).integers(0, 2**62, 120)
        add(store, make(1, " ".join(f"{x:x}" for x in noise)))  # a row past 2 kB, unzippable
        with psycopg.connect(url, autocommit=True) as conn:
            indexes = {r[0]: r[1] for r in conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'cells'")}
            storage = conn.execute(
                "SELECT attstorage FROM pg_attribute WHERE attrelid = 'cells'::regclass"
                " AND attname = 'embedding'").fetchone()
            # A vector in the row counts its 4-byte header; one in TOAST only its data.
            size = conn.execute("SELECT pg_column_size(embedding) FROM cells").fetchone()
    finally:
        store.close()
    assert "cells_owner_status_id" not in indexes
    assert "INCLUDE (type, public, has_readers, created_by)" in indexes["cells_owner_filter"]
    assert storage == ("m",)
    assert size == (8 + 4 * DIMS,)


# ---- lifecycle -----------------------------------------------------------------------------


def test_lifecycle_batch_pages_active_and_stale(store: CellStore) -> None:
    c = _population(store)
    cell = make(12, "expiring tea").cell
    add(store, StoredCell(cell=cell.model_copy(update={
        "scoring": Scoring(importance=0.25, confidence=0.5, decay_rate=0.3),
        "lifecycle": cell.lifecycle.model_copy(update={
            "expires_at": T0 + timedelta(days=3), "last_updated_at": T0 + timedelta(1)})})))
    assert store.touch(c["shared"].cell.id, T0 + timedelta(days=5)) is not None
    expected = sorted([v.cell.id for k, v in c.items() if k not in ("archived", "deleted")]
                      + [cell.id])
    page = store.lifecycle_batch(None, 4)
    rest = store.lifecycle_batch(page[-1].cell_id, 100)
    assert [s.cell_id for s in page + rest] == expected and len(page) == 4
    assert store.lifecycle_batch(expected[-1], 10) == []
    # What the pass reads of each cell is what the one rule reads of the whole cell.
    for standing in page + rest:
        whole = store.get(standing.cell_id)
        assert whole is not None and standing == Standing.of(whole)


def move(store: CellStore, expected: StoredCell, status: Status,
         stale_since: datetime | None) -> bool:
    """One engine transition on its own; whether it was applied."""
    return store.set_statuses([StatusMove(expected, status, stale_since)]) == {expected.cell.id}


def test_set_status_applies_and_touches_no_clock(store: CellStore) -> None:
    stored = add(store, make(1))
    stale_at = T0 + timedelta(days=40)
    assert move(store, stored, Status.stale, stale_at)
    got = store.get(stored.cell.id)
    assert got is not None
    assert got.cell.lifecycle.status is Status.stale and got.stale_since == stale_at
    assert got.cell.lifecycle.last_updated_at == T0 and got.cell.lifecycle.last_accessed_at == T0
    assert got.cell.scoring.access_count == 0
    assert move(store, stored, Status.stale, stale_at) is False  # status moved on


def test_set_status_loses_to_a_concurrent_read_or_write(store: CellStore) -> None:
    read = add(store, make(1))
    store.touch(read.cell.id, T0 + timedelta(seconds=1))
    assert move(store, read, Status.stale, T0) is False
    got = store.get(read.cell.id)
    assert got is not None and got.cell.lifecycle.status is Status.active

    written = add(store, make(2))
    store.update(written.cell.id, set_text("changed"))
    assert move(store, written, Status.stale, T0) is False
    got = store.get(written.cell.id)
    assert got is not None and got.cell.lifecycle.status is Status.active


def test_set_statuses_moves_a_batch_but_the_cells_changed_meanwhile(store: CellStore) -> None:
    cells = [add(store, make(n)) for n in range(1, 6)]
    store.touch(cells[1].cell.id, T0 + timedelta(seconds=1))  # read since the pass read it
    store.update(cells[3].cell.id, set_text("changed"))  # written since
    stale_at = T0 + timedelta(days=40)
    moved = store.set_statuses([StatusMove(c, Status.stale, stale_at) for c in cells])
    assert moved == {cells[0].cell.id, cells[2].cell.id, cells[4].cell.id}
    for n, stored in enumerate(cells):
        got = store.get(stored.cell.id)
        assert got is not None
        if n in (1, 3):
            assert got.cell.lifecycle.status is Status.active and got.stale_since is None
        else:
            assert got.cell.lifecycle.status is Status.stale and got.stale_since == stale_at
            assert got.cell.lifecycle.last_updated_at == T0
    assert store.set_statuses([]) == set()
    archived = store.get(cells[0].cell.id)
    assert archived is not None  # a later move of the same cell reads its new standing
    assert store.set_statuses([StatusMove(archived, Status.archived, stale_at)]) == {
        cells[0].cell.id}


def test_a_pass_moves_more_cells_than_one_batch(store: CellStore,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Cells written together age together: one pass moves them all, a batch at a time."""
    monkeypatch.setattr("ampup_memory.amp.service.MOVE_BATCH", 4)
    cells = [add(store, make(n)) for n in range(1, 12)]
    amp = AmpService(store=store, embedder=EMBED, scoring_limit=ScoringLimit(0, 0))

    def moved(days: int) -> dict[str, int]:
        report = amp.run_lifecycle(LifecycleRunRequest(now=T0 + timedelta(days=days)))
        return {k: v for k, v in report.transitions.items() if v}

    def statuses() -> set[Status]:
        return {got.cell.lifecycle.status for got in store.get_many([c.cell.id for c in cells])}

    # 0.7 * 0.9 * e^(-0.02 * 40) = 0.28 < 0.3
    assert moved(40) == {"active_to_stale": 11} and statuses() == {Status.stale}
    assert moved(69) == {} and statuses() == {Status.stale}  # 29 days stale
    assert moved(70) == {"stale_to_archived": 11} and statuses() == {Status.archived}


def test_deleted_before_and_purge(store: CellStore) -> None:
    old = [add(store, make(n, status=Status.deleted, deleted_at=T0 - timedelta(days=40 + n)))
           for n in (3, 1, 2)]
    add(store, make(4, status=Status.deleted, deleted_at=T0))
    add(store, make(5))
    cutoff = T0 - timedelta(days=30)
    assert store.deleted_before(cutoff, 10) == sorted(s.cell.id for s in old)
    assert store.deleted_before(cutoff, 2) == sorted(s.cell.id for s in old)[:2]
    # Paging on from the last id seen (a dry run deletes nothing, so it must move on).
    first = store.deleted_before(cutoff, 2)
    assert store.deleted_before(cutoff, 2, first[-1]) == sorted(s.cell.id for s in old)[2:]
    assert store.deleted_before(cutoff, 2, sorted(s.cell.id for s in old)[-1]) == []
    assert store.deleted_before(T0, 10) == [make(n).cell.id for n in (1, 2, 3, 4)]  # inclusive
    assert store.purge([make(1).cell.id]) == 1
    assert store.purge([make(1).cell.id]) == 0
    assert store.get(make(1).cell.id) is None
    assert store.count() == 4
    # Several at once, in one transaction; ids already gone or never there count nothing.
    assert store.purge([make(2).cell.id, make(1).cell.id, "mem_missing", make(3).cell.id]) == 2
    assert store.purge([]) == 0
    assert store.get(make(2).cell.id) is None and store.get(make(3).cell.id) is None
    assert store.count() == 2


# ---- leases ------------------------------------------------------------------------------


def test_lease_is_exclusive_across_instances(opened: Callable[[], CellStore]) -> None:
    first, second = opened(), opened()
    with first.lease("amp-lifecycle", ttl_seconds=60) as held:
        assert held is True
        with first.lease("amp-lifecycle", ttl_seconds=60) as again:
            assert again is False
        with second.lease("amp-lifecycle", ttl_seconds=60) as other:
            assert other is False
        with second.lease("another-lease", ttl_seconds=60) as unrelated:
            assert unrelated is True
    with second.lease("amp-lifecycle", ttl_seconds=60) as later:
        assert later is True

    with pytest.raises(ZeroDivisionError):  # a failing holder still lets go
        with first.lease("amp-lifecycle", ttl_seconds=60) as held:
            assert held
            raise ZeroDivisionError
    with second.lease("amp-lifecycle", ttl_seconds=60) as after:
        assert after is True


def test_lease_holders_never_overlap(opened: Callable[[], CellStore]) -> None:
    stores = [opened(), opened()]
    inside = 0
    worst = 0
    wins = 0
    guard = threading.Lock()
    stop = threading.Event()

    def contend(i: int) -> None:
        nonlocal inside, worst, wins
        while not stop.is_set():
            with stores[i % 2].lease("race", ttl_seconds=60) as held:
                if held:
                    with guard:
                        inside += 1
                        worst = max(worst, inside)
                        wins += 1
                    stop.wait(0.005)
                    with guard:
                        inside -= 1

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    stop.wait(1.5)
    stop.set()
    for t in threads:
        t.join()
    assert wins > 5 and worst == 1


# ---- keys ----------------------------------------------------------------------------------


def test_keys_put_lookup_list_revoke(store: CellStore) -> None:
    a = KeyRecord(key_id="k1", agent_id="agent_a", key_hash="sha256:" + "a" * 64, admin=False,
                  created_at=T0, expires_at=T0 + timedelta(days=30), user_id="user_1")
    b = KeyRecord(key_id="k2", agent_id="ops", key_hash="sha256:" + "b" * 64, admin=True,
                  created_at=T0 + timedelta(seconds=1))
    store.put_key(b)
    store.put_key(a)
    assert store.key_by_hash(a.key_hash) == a
    assert store.key_by_hash(b.key_hash) == b
    assert store.key_by_hash("sha256:" + "c" * 64) is None
    assert store.list_keys() == [a, b]  # by creation time
    revoked_at = T0 + timedelta(days=1)
    assert store.revoke_key("k1", revoked_at) is True
    assert store.revoke_key("k1", revoked_at + timedelta(1)) is False  # first revocation stays
    assert store.revoke_key("k-missing", revoked_at) is False
    got = store.key_by_hash(a.key_hash)
    assert got is not None and got.revoked_at == revoked_at


# ---- lifecycle history -------------------------------------------------------------------


def test_record_and_read_passes(opened: Callable[[], CellStore]) -> None:
    first, second = opened(), opened()
    assert first.recent_passes(5) == []
    records = [
        PassRecord(started_at=T0 + timedelta(minutes=i),
                   finished_at=T0 + timedelta(minutes=i, seconds=2, microseconds=5),
                   holder=f"host:{100 + i}", evaluated=10 * i,
                   transitions={"active_to_stale": i, "stale_to_active": 0,
                                "stale_to_archived": 1},
                   purged=i % 2)
        for i in range(3)
    ]
    for i, r in enumerate(records):
        (first if i % 2 else second).record_pass(r)
    assert second.recent_passes(2) == [records[2], records[1]]  # newest first
    assert first.recent_passes(10) == records[::-1]
    # Each pass keeps the cells' status counts; the history keeps the newest ``keep``.
    last = replace(records[2], started_at=T0 + timedelta(hours=1),
                   states={"active": 3, "stale": 1})
    first.record_pass(last, keep=2)
    assert second.recent_passes(10) == [last, records[2]]


def test_a_store_made_before_passes_kept_states_opens_and_keeps_them(fresh_uri: str) -> None:
    open_store(fresh_uri, DIMS).close()
    old = PassRecord(started_at=T0, finished_at=T0, holder="h:1", evaluated=1,
                     transitions={}, purged=0)
    if fresh_uri.startswith("sqlite"):  # the layout before this release
        import sqlite3
        with sqlite3.connect(fresh_uri.removeprefix("sqlite:///")) as conn:
            conn.execute("ALTER TABLE lifecycle_passes DROP COLUMN states")
    else:
        with psycopg.connect(fresh_uri, autocommit=True) as conn:
            conn.execute("ALTER TABLE lifecycle_passes DROP COLUMN states")
    store = open_store(fresh_uri, DIMS)
    try:
        store.record_pass(old)
        new = replace(old, started_at=T0 + timedelta(1), states={"active": 2})
        store.record_pass(new)
        assert store.recent_passes(5) == [new, old]
    finally:
        store.close()


def test_status_counts(store: CellStore) -> None:
    assert store.status_counts() == {}
    for i, status in enumerate([Status.active, Status.active, Status.stale]):
        add(store, make(i, status=status))
    assert store.status_counts() == {"active": 2, "stale": 1}


# ---- embedding model and re-embedding ------------------------------------------------------


@pytest.fixture(scope="module")
def wordllama() -> WordLlamaEmbedder:
    return WordLlamaEmbedder(DIMS)  # the same width as EMBED: only the record tells them apart


class FailingEmbedder:
    """A real embedder that dies on its n-th call, as a process would mid-batch."""

    def __init__(self, inner: Embedder, fail_on_call: int) -> None:
        self.inner, self.fail_on_call, self.calls = inner, fail_on_call, 0
        self.name, self.dimensions = inner.name, inner.dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise RuntimeError("embedder died mid-run")
        return self.inner.embed(texts)


class CountingEmbedder:
    """A real embedder that counts the texts it embeds and takes its time."""

    def __init__(self, inner: Embedder, pause: float) -> None:
        self.inner, self.pause, self.texts = inner, pause, 0
        self.name, self.dimensions = inner.name, inner.dimensions
        self.lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        time.sleep(self.pause)
        with self.lock:
            self.texts += len(texts)
        return self.inner.embed(texts)


def cosine_of(store: CellStore, cell_id: str, vector: list[float]) -> float | None:
    """The store's cosine between a cell's stored vector and ``vector`` (None: none usable)."""
    hits = store.search_candidates(CellFilter(agent_id="agent_a", statuses=list(Status)),
                                   [], vector, 1000)
    return {h.cell_id: h.cosine for h in hits}.get(cell_id)


def test_embedding_model_is_recorded(opened: Callable[..., CellStore]) -> None:
    store = opened()
    assert store.embedding_model() is None  # fresh
    report = ensure_embedding_model(store, EMBED)
    assert (report.previous, report.reembedded) == (None, 0)  # empty: recorded, no work
    assert store.embedding_model() == ModelInfo("hash/256", 256)
    assert opened().embedding_model() == ModelInfo("hash/256", 256)  # another process
    assert ensure_embedding_model(store, EMBED).reembedded == 0  # unchanged: nothing to do
    store.set_embedding_model(ModelInfo("other/7", 7))
    assert opened().embedding_model() == ModelInfo("other/7", 7)


def test_reembed_rewrites_vectors_of_the_same_width_and_touches_no_clock(
    opened: Callable[..., CellStore], wordllama: WordLlamaEmbedder
) -> None:
    """The silent-mix case: a store of hash vectors (made before stores recorded their
    model) opened with WordLlama, which has the same width."""
    store = opened()
    texts = {1: "my favourite drink is green tea", 2: "the car needs new tyres before winter",
             3: "weekly standup moved to thursdays", 4: "nul \x00 inside"}
    tea = add(store, make(1, texts[1]))
    add(store, make(2, texts[2]))
    add(store, make(3, texts[3], status=Status.stale))
    add(store, make(4, texts[4], status=Status.deleted, deleted_at=T0))
    store.touch(make(2).cell.id, T0 + timedelta(hours=1))
    before = {n: wire_json(store.get(make(n).cell.id)) for n in range(1, 5)}
    flt = CellFilter(agent_id="agent_a", statuses=list(Status))
    decay_before = {h.cell_id: h.decay for h in search(store, flt, [], EMBED.embed(["x"])[0], 10)}
    query = wordllama.embed(["hot beverage brewed from leaves"])[0]  # no word in common
    expected = float(np.dot(wordllama.embed([tea.cell.content.text])[0], query))
    assert cosine_of(store, tea.cell.id, query) != pytest.approx(expected, abs=1e-3)

    report = ensure_embedding_model(store, wordllama, batch=3)
    assert (report.previous, report.reembedded) == (None, 4)  # unknown model: every cell
    assert store.embedding_model() == ModelInfo("wordllama/l2_supercat_256", 256)
    for n in range(1, 5):  # every stored vector is now the new embedder's
        own = wordllama.embed([texts[n]])[0]
        assert cosine_of(store, make(n).cell.id, own) == pytest.approx(1.0, abs=1e-4)
    assert cosine_of(store, tea.cell.id, query) == pytest.approx(expected, abs=1e-4)
    nearest = store.search_candidates(CellFilter(agent_id="agent_a"), [], query, 1)
    assert max(nearest, key=lambda h: h.cosine or 0.0).cell_id == tea.cell.id
    # Not an update: documents, counters, clocks and decay inputs are as they were.
    assert {n: wire_json(store.get(make(n).cell.id)) for n in range(1, 5)} == before
    assert {h.cell_id: h.decay for h in search(store, flt, [], query, 10)} == decay_before
    assert store.get(make(3).cell.id).stale_since == T0  # type: ignore[union-attr]
    assert store.get(make(4).cell.id).deleted_at == T0  # type: ignore[union-attr]


def test_reembed_to_a_new_width(
    opened: Callable[..., CellStore], store_uri: str
) -> None:
    old = opened()
    for n, text in enumerate(["green tea", "black coffee", "mountain trail"], start=1):
        add(old, make(n, text))
    old.set_embedding_model(EMBED_MODEL)
    narrow = HashEmbedder(32)
    new = opened(32)  # the operator switched to a 32-dimension embedder
    query = narrow.embed(["black coffee"])[0]
    assert cosine_of(new, make(2).cell.id, query) is None  # no comparable vector yet
    report = ensure_embedding_model(new, narrow)
    assert (report.previous, report.reembedded) == (EMBED_MODEL, 3)
    assert cosine_of(new, make(2).cell.id, query) == pytest.approx(1.0, abs=1e-5)
    hits = new.search_candidates(CellFilter(agent_id="agent_a"), [], query, 1)
    assert max(hits, key=lambda h: h.cosine or 0.0).cell_id == make(2).cell.id
    if store_uri.startswith("postgres"):  # the new width has its own HNSW index
        with psycopg.connect(store_uri) as conn:
            names = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
        assert "cells_embedding_hnsw_32" in names


def test_interrupted_reembed_keeps_the_old_record_and_runs_again(
    opened: Callable[..., CellStore]
) -> None:
    store = opened()
    for n in range(1, 6):
        add(store, make(n, f"memory number {n}"))
    store.set_embedding_model(EMBED_MODEL)
    narrow = HashEmbedder(32)
    reopened = opened(32)
    dying = FailingEmbedder(narrow, fail_on_call=2)  # batch 1 written, batch 2 dies
    with pytest.raises(RuntimeError, match="died"):
        ensure_embedding_model(reopened, dying, batch=2)
    assert reopened.embedding_model() == EMBED_MODEL  # not recorded: the work is redone
    written = [cosine_of(reopened, make(n).cell.id, narrow.embed([f"memory number {n}"])[0])
               for n in range(1, 6)]
    assert written[:2] == [pytest.approx(1.0, abs=1e-5)] * 2 and written[2:] == [None] * 3
    report = ensure_embedding_model(reopened, narrow, batch=2)  # the next start; lease free
    assert (report.previous, report.reembedded) == (EMBED_MODEL, 5)
    assert reopened.embedding_model() == ModelInfo("hash/32", 32)
    for n in range(1, 6):
        own = narrow.embed([f"memory number {n}"])[0]
        assert cosine_of(reopened, make(n).cell.id, own) == pytest.approx(1.0, abs=1e-5)


def test_processes_starting_together_reembed_once(opened: Callable[..., CellStore]) -> None:
    seed = opened()
    for n in range(1, 7):
        add(seed, make(n, f"memory number {n}"))
    seed.set_embedding_model(EMBED_MODEL)
    narrow = HashEmbedder(32)
    stores = [opened(32), opened(32)]
    embedders = [CountingEmbedder(narrow, pause=0.2), CountingEmbedder(narrow, pause=0.2)]
    start = threading.Barrier(2)

    def run(i: int) -> int:
        start.wait()
        return ensure_embedding_model(stores[i], embedders[i], batch=2).reembedded

    with ThreadPoolExecutor(2) as pool:
        done = sorted(pool.map(run, range(2)))
    assert done == [0, 6]  # one did the work; the other waited and found it done
    assert sum(e.texts for e in embedders) == 6
    assert all(s.embedding_model() == ModelInfo("hash/32", 32) for s in stores)


def test_replace_vectors_skips_a_cell_whose_text_moved_on(store: CellStore) -> None:
    add(store, make(1, "old words"))
    store.update(make(1).cell.id, set_text("new words"))
    stale = EmbeddingSource(make(1).cell.id, "old words")
    assert store.replace_vectors([(stale, EMBED.embed(["old words"])[0])]) == 0
    assert cosine_of(store, make(1).cell.id, EMBED.embed(["new words"])[0]) == pytest.approx(
        1.0, abs=1e-5)
    fresh = EmbeddingSource(make(1).cell.id, "new words")
    assert store.replace_vectors([(fresh, EMBED.embed(["new words"])[0])]) == 1
    assert store.embedding_sources(None, 10) == [fresh]


def _hnsw_options(url: str) -> tuple[int, list[str] | None]:
    """The cell store's HNSW index of `DIMS`-wide vectors: its oid and reloptions."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT oid::int, reloptions FROM pg_class WHERE relname = %s",
                           (f"cells_embedding_hnsw_{DIMS}",)).fetchone()
    assert row is not None
    return int(row[0]), row[1]


def _saved_graph_params(uri: str) -> tuple[int, int]:
    from ampup_memory.search.index.ann import MAGIC

    path = Path(uri.removeprefix("sqlite:///") + ".graphs") / "cells.ann"
    raw = path.read_bytes()
    size = int.from_bytes(raw[len(MAGIC):len(MAGIC) + 4], "big")
    header = json.loads(raw[len(MAGIC) + 4:len(MAGIC) + 4 + size])
    return int(header["connectivity"]), int(header["expansion_add"])


def test_the_vector_graph_follows_the_settings_parameters(store_uri: str) -> None:
    """AMPUP_MEMORY_SEARCH_ANN_CONNECTIVITY / _EXPANSION_ADD reach the cell store's graph:
    SQLite saves its graph with them and rebuilds one saved with others; PostgreSQL builds
    its HNSW index with them and builds it again, at open, when it was built with others
    (unset, a new graph or index gets 32 / 128 on both, and an existing PostgreSQL index,
    such as one an older version made with pgvector's 16 / 64, is kept as built)."""
    from ampup_memory.search.index.ann import GraphParams

    wider = GraphParams(24, 96)
    query = EMBED.embed(["memory number 7"])[0]
    want = make(7, "memory number 7").cell.id

    def opened_with(params: GraphParams) -> CellStore:
        return open_store(store_uri, DIMS, ann_min_vectors=1, ann_params=params)

    def nearest(store: CellStore) -> str:
        hits = store.search_candidates(CellFilter(agent_id="agent_a"), [], query, 5)
        wait = getattr(store, "wait_graphs", None)  # SQLite: a search starts the graph
        if wait is not None:
            wait(120)
            hits = store.search_candidates(CellFilter(agent_id="agent_a"), [], query, 5)
        return max(hits, key=lambda h: h.cosine or 0.0).cell_id

    first = opened_with(GraphParams())
    try:
        # 1,000 cells: a search asks for 200 vectors, answered exactly below 4 × that.
        for n in range(1, 1001):
            add(first, make(n, f"memory number {n}"))
        assert nearest(first) == want
    finally:
        first.close()
    if store_uri.startswith("sqlite"):
        assert _saved_graph_params(store_uri) == (32, 128)
    else:
        oid, options = _hnsw_options(store_uri)
        assert sorted(options or []) == ["ef_construction=128", "m=32"]
        with psycopg.connect(store_uri, autocommit=True) as conn:  # as an older version made it
            conn.execute(f"DROP INDEX cells_embedding_hnsw_{DIMS}")
            conn.execute(f"CREATE INDEX cells_embedding_hnsw_{DIMS} ON cells USING hnsw"
                         f" ((embedding::vector({DIMS})) vector_cosine_ops)"
                         f" WHERE vector_dims(embedding) = {DIMS}")
        legacy = _hnsw_options(store_uri)
        opened_with(GraphParams()).close()
        assert _hnsw_options(store_uri) == legacy  # no value set: kept as built
    second = opened_with(wider)
    try:
        assert nearest(second) == want
        if store_uri.startswith("sqlite"):
            assert second.graphs() == {"built": 1, "loaded": 0, "rejected": 1, "saved": 1,
                                       "building": 0}
    finally:
        second.close()
    if store_uri.startswith("sqlite"):
        assert _saved_graph_params(store_uri) == (24, 96)
    else:
        assert sorted(_hnsw_options(store_uri)[1] or []) == ["ef_construction=96", "m=24"]
    third = opened_with(wider)
    try:
        assert nearest(third) == want
        if store_uri.startswith("sqlite"):
            assert third.graphs() == {"built": 0, "loaded": 1, "rejected": 0, "saved": 0,
                                      "building": 0}
    finally:
        third.close()


@pytest.mark.postgres
def test_postgres_hnsw_scan_runs_at_the_cell_floor_unless_an_owner_is_named(
    postgres: PostgresFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cell store's HNSW scan asks pgvector for ``hnsw.ef_search`` through the one rule
    (`ann.pg_ef_search`): the cell floor (300) for a search naming no owner or an owner
    with an index of its own, the shared floor (400) for an owner's filtered scan of the
    whole-table index (docs/performance.md, sessions 24 and 25), and k when k is larger.
    Every search still finds the cells."""
    from ampup_memory.amp.store import postgres as pgstore
    from ampup_memory.search.index import ann

    monkeypatch.setattr(pgstore, "EXACT_LIMIT", 1)  # the HNSW path for so few cells
    monkeypatch.setattr(pgstore, "OWNER_EXACT_LIMIT", 1)
    monkeypatch.setattr(pgstore, "OWNER_INDEX_ABOVE", 1)
    store = open_store(postgres.new_database("floors"), DIMS)
    try:
        assert isinstance(store, pgstore.PostgresStore)
        for n in range(1, 9):  # user_2 has 6 cells, user_1 2
            add(store, make(n, f"green tea note{n}", owner="user_1" if n % 3 == 0 else "user_2"))
        asked: list[int] = []
        plain = store._execute

        def spy(conn: Any, sql: str, params: Any = (), prepare: bool | None = None) -> Any:
            if "hnsw.ef_search" in sql:
                asked.append(int(params[0]))
            return plain(conn, sql, params, prepare)

        monkeypatch.setattr(store, "_execute", spy)
        vector = EMBED.embed(["green tea"])[0]
        for flt, k, want in (
            (CellFilter(agent_id="agent_a"), 5, ann.PG_CELL_EF_FLOOR),
            (CellFilter(agent_id="agent_a", owner_id="user_1"), 5, ann.PG_EF_SEARCH[0]),
            (CellFilter(agent_id="agent_a"), 700, 700),
        ):
            asked.clear()
            assert search(store, flt, [], vector, k)
            assert asked == [want]
        assert ann.PG_CELL_EF_FLOOR < ann.PG_EF_SEARCH[0]
        # An owner with a graph of its own (`tend_owner_indexes`) is scanned there, at the
        # cell floor: its graph holds only its cells, as the whole-table one holds all.
        report = store.tend_owner_indexes()
        assert report is not None and report.built == ["user_2", "user_1"]  # largest first
        asked.clear()
        assert search(store, CellFilter(agent_id="agent_a", owner_id="user_1"), [], vector, 5)
        assert asked == [ann.PG_CELL_EF_FLOOR]
    finally:
        store.close()


def test_a_large_owner_gets_a_vector_index_of_its_own_where_the_database_keeps_them(
        store: CellStore, store_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL: an owner over `OWNER_INDEX_ABOVE` live cells gets a partial HNSW index
    of its own (kept down to half the limit, then dropped), and a search naming that
    owner finds what it found before. SQLite has none to tend (it builds a large owner's
    block in memory as it searches)."""
    from ampup_memory.amp.store import pg_owner_indexes
    from ampup_memory.amp.store import postgres as pg

    monkeypatch.setattr(pg, "OWNER_INDEX_ABOVE", 20)
    big = "o'brien; drop table cells; -- ünï"  # reaches DDL: quoted, never spliced
    words = "tea trains coffee boats maps rain paint music bread chess kites".split()
    for n in range(30):  # each text its own words: no two vectors alike, no ties
        text = " ".join(words[(n * 7 + i * i) % len(words)] for i in range(n % 5 + 2))
        add(store, make(n + 1, f"{text} {n}", owner=big, public=True))
    for n in range(5):
        add(store, make(100 + n, f"a small owner's note {n} about tea", public=True))
    search = CellFilter(agent_id="agent_a", owner_id=big)
    vector = EMBED.embed(["tea with trains"])[0]

    def found() -> list[str]:
        return sorted(h.cell_id for h in store.search_candidates(
            search, ["tea", "trains"], vector, 10))

    before = found()
    assert len(before) >= 10
    told: list[tuple[int, int]] = []
    report = store.tend_owner_indexes(progress=lambda done, total: told.append((done, total)))
    if store.info.name == "sqlite":
        assert report is None and told == []
        return
    assert report is not None
    # Progress in table blocks read: none at first, all of them (two scans) at the end.
    assert told[0][0] == 0 and told[-1][0] == told[-1][1] > 0, told
    assert report.wire() == {"built": [big], "dropped": [], "kept": [], "failed": [],
                             "skipped": False}
    name = pg_owner_indexes.index_name(big, DIMS)
    url = store_uri
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT i.indisvalid, pg_get_expr(i.indpred, i.indrelid), a.amname FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
            " WHERE i.indexrelid = to_regclass(%s)", (name,)).fetchone()
    assert row is not None and row[0] and row[2] == "hnsw", row
    assert "'o''brien; drop table cells; -- ünï'" in row[1], row
    assert f"vector_dims(embedding) = {DIMS}" in row[1], row
    assert store.vector_memory()["owner_indexes"] > 0  # type: ignore[index]
    assert found() == before
    monkeypatch.setattr(pg, "OWNER_INDEX_ABOVE", 50)  # 30 live cells: over half of it
    assert store.tend_owner_indexes().kept == [big]  # type: ignore[union-attr]
    monkeypatch.setattr(pg, "OWNER_INDEX_ABOVE", 70)  # under half: the index goes
    assert store.tend_owner_indexes().dropped == [big]  # type: ignore[union-attr]
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (name,)).fetchone() == (None,)
    assert store.vector_memory()["owner_indexes"] == 0  # type: ignore[index]
    assert found() == before


@pytest.mark.postgres
def test_postgres_opens_beside_an_index_build_and_writes_go_on(
        postgres: PostgresFactory) -> None:
    """A large owner's index is built ``CONCURRENTLY`` for minutes, holding the lock such
    a build holds on ``cells``. A server starting meanwhile must not wait for it: its
    ``CREATE INDEX IF NOT EXISTS`` would queue for a lock that stops writes, and every
    write to the table would then queue behind it."""
    url = postgres.new_database("beside")
    first = open_store(url, DIMS)
    try:
        with psycopg.connect(url) as build:  # a transaction holding the build's lock
            build.execute("LOCK TABLE cells IN SHARE UPDATE EXCLUSIVE MODE")
            waits_5s = ("&" if "?" in url else "?") + "options=-c%20lock_timeout%3D5000"
            second = open_store(url + waits_5s, DIMS)
            try:
                add(second, make(1, "written while an index is built"))
                add(first, make(2, "and by the other server"))
                assert second.count() == 2
            finally:
                second.close()
    finally:
        first.close()


# ---- moving cells between stores (ops/backup.py: a laptop's cells into PostgreSQL) -----

def _everything(store: CellStore) -> list[Any]:
    """All a store answers about its cells, to compare two stores by."""
    flt = CellFilter(agent_id="agent_a", statuses=tuple(Status))
    hits = search(store, flt, ["tea"], EMBED.embed(["green tea"])[0], 20)
    return [
        [(wire_json(c.stored), c.stored.stale_since, c.stored.deleted_at,
          None if c.vector is None else np.asarray(c.vector, dtype=np.float32).tobytes(),
          c.scoring_patches) for c in store.copies(None, 100)],
        # scores by each backend's own ranking (`test_keyword_scores_agree_across_stores`)
        sorted((h.cell_id, h.keyword > 0, None if h.cosine is None else
                round(h.cosine, 5), h.guard, h.decay) for h in hits),
        ids(store.list_candidates(flt, None, 100)),
        store.lifecycle_batch(None, 100),
        store.deleted_before(T0 + timedelta(days=1), 100),
        store.status_counts(),
    ]


def test_copies_carry_every_cell_whole_into_another_store(
        store: CellStore, fresh_uri: str) -> None:
    """`copies` of one store into `put_copies` of another (every pair of backends): each
    cell answers the same (clocks, access count, status clocks, vector, counted scoring
    PATCHes), its words and vector are searchable there, and a copy run again writes
    nothing twice."""
    cells = _population(store)
    store.create(make(12, "a cell with no vector", metadata=RICH_METADATA), None)
    nul = make(13, "tea with a \x00 inside", owner="o\x00wner", readable_by=["agent_\x00*"])
    add(store, nul)
    store.touch(cells["mine"].cell.id, T0 + timedelta(hours=3))
    store.touch(cells["mine"].cell.id, T0 + timedelta(hours=4))
    for minutes in (1, 2):
        store.update(cells["shared"].cell.id, _scoring_patch(T0 + timedelta(minutes=minutes)))
    target = open_store(fresh_uri, DIMS)
    try:
        assert target.restore_mark() is None
        target.set_restore_mark("backup of 2026-12-06")
        assert target.restore_mark() == "backup of 2026-12-06"
        after, written, batches = None, 0, 0
        while batch := store.copies(after, 5):
            written += target.put_copies(batch)
            batches += 1
            after = batch[-1].stored.cell.id
        assert (written, batches) == (13, 3)
        assert target.put_copies(store.copies(None, 100)) == 0  # run again: nothing twice
        assert _everything(target) == _everything(store)
        seen: list[datetime] = []

        def look(stored: StoredCell, tx: UpdateTx) -> UpdateOutcome:
            seen.extend(tx.scoring_patches_since(T0))
            return UpdateOutcome(stored)

        target.update(cells["shared"].cell.id, look)
        assert seen == [T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)]
        target.set_restore_mark(None)
        assert target.restore_mark() is None
    finally:
        target.close()
