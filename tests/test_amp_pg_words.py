"""PostgreSQL cell store: the keyword statistics and postings the database keeps as cells
are written (`amp/store/pg_words.py`, `amp/store/pg_postings.py`) equal counting and
writing them from the cells again, after every kind of write, with writers at once on two
store instances (two servers), and for a store an older version made (made when a server
opens it); searches score as SQLite's store does, and from the postings as from the
``tsv`` column."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from ampup_memory.amp.model import MemoryType, Status
from ampup_memory.amp.store import pg_postings, pg_words
from ampup_memory.amp.store import postgres as pg_store
from ampup_memory.amp.store.base import CellFilter, CellStore, StatusMove
from ampup_memory.amp.store.postgres import PostgresStore, tsquery
from ampup_memory.amp.store.registry import open_store
from ampup_memory.search.tokenize import words
from tests.pg import PostgresFactory
from tests.test_store_contract import DIMS, T0, add, make, set_text

pytestmark = pytest.mark.postgres

# Words shared by many cells (hot counter rows), rarer ones, numbers and dates (PostgreSQL
# reads "-06" of "2025-06-30" as a signed number, counted as 06), stop words, repeats,
# and words joined by "_" (``to_tsquery`` makes them a phrase: not counted in the table).
VOCABULARY = ("tea coffee kettle teapot saucer biscuit napkin ladle whisk running runs"
              " 2025-06-30 06 30 11 -11 2024-11-20 the a of tea_time x-11 café").split()


def text_for(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 9)))


@pytest.fixture
def url(postgres: PostgresFactory) -> str:
    return postgres.new_database("words")


@pytest.fixture
def stores(url: str) -> Iterator[list[PostgresStore]]:
    """Two store instances on one database: two servers, as far as each knows."""
    opened = [open_store(url, DIMS), open_store(url, DIMS)]
    assert all(isinstance(s, PostgresStore) for s in opened)
    yield opened  # type: ignore[misc]
    for s in opened:
        s.close()


def counted(url: str, terms: list[str]) -> tuple[int, int, dict[str, int | None]]:
    """The store's statistics statement, as a search reads it."""
    with psycopg.connect(url, autocommit=True) as conn:
        return pg_words.statistics(conn.execute(
            pg_words.STATISTICS, (terms, [tsquery([t]) or "" for t in terms])).fetchone(),
            terms)


def assert_exact(url: str, terms: list[str]) -> None:
    """Every term's count equals the cells its query matches, N the cells and the
    lengths their summed lengths; no shard's count is negative; the table is what
    counting every cell again makes, and the postings what writing them again makes."""
    rows, tokens, table = counted(url, terms)
    with psycopg.connect(url, autocommit=True) as conn:
        truth = conn.execute("SELECT count(*), coalesce(sum(length(tsv)), 0) FROM cells"
                             ).fetchone()
        assert (rows, tokens) == truth
        for term, n in table.items():
            query = tsquery([term])
            if query is None or n is None:
                continue
            matching = conn.execute(
                "SELECT count(*) FROM cells WHERE tsv @@ to_tsquery('english', %s)",
                (query,)).fetchone()
            assert (term, n) == (term, matching[0] if matching else None)
        assert conn.execute("SELECT count(*) FROM cell_words WHERE n < 0").fetchone() == (0,)
        # No row at 0: a word no cell holds (an edit's old text, a purged or deleted
        # cell's) is no row, or the words of a replaced text outlived it.
        assert conn.execute("SELECT word FROM cell_words WHERE n = 0").fetchall() == []
        kept = "SELECT word, sum(n) FROM cell_words GROUP BY 1 HAVING sum(n) <> 0 ORDER BY 1"
        before = conn.execute(kept).fetchall()
        sizes = "SELECT sum(cells), sum(lengths) FROM cell_totals"
        sized = conn.execute(sizes).fetchone()
        postings = "SELECT * FROM cell_postings ORDER BY word, cell_id"
        written = conn.execute(postings).fetchall()
        with conn.transaction(force_rollback=True):
            pg_words.recount(conn)
            assert conn.execute(kept).fetchall() == before
            assert conn.execute(sizes).fetchone() == sized
            pg_postings.refill(conn)
            assert conn.execute(postings).fetchall() == written


def every_word() -> list[str]:
    return sorted({w for text in VOCABULARY for w in words(text)} | {"tea_time", "nothing"})


def test_counts_stay_exact_through_every_kind_of_write(
    url: str, stores: list[PostgresStore]
) -> None:
    """Creates, edits of the text, edits of anything else, reads, status changes, a
    re-embedding, deletes and purges, and a TRUNCATE: the counts follow each."""
    store = stores[0]
    rng = random.Random(5)
    assert counted(url, ["tea"]) == (0, 0, {"tea": 0})
    cells = [add(store, make(n, text_for(rng))) for n in range(1, 61)]
    assert_exact(url, every_word())
    for stored in cells[:20]:  # new texts
        store.update(stored.cell.id, set_text(text_for(rng)))
    for stored in cells[20:25]:  # the same text again: nothing moves
        store.update(stored.cell.id, set_text(stored.cell.content.text))
    for stored in cells[25:35]:  # reads, then status changes (no text changes)
        touched = store.touch(stored.cell.id, T0 + timedelta(hours=1))
        assert touched is not None
        assert store.set_statuses([StatusMove(touched, Status.stale, T0 + timedelta(hours=2))])
    with psycopg.connect(url, autocommit=True) as conn:  # a re-embedding's rewrite
        conn.execute("UPDATE cells SET embedding = embedding WHERE id = ANY(%s)",
                     ([c.cell.id for c in cells[35:45]],))
    assert_exact(url, every_word())
    for stored in cells[45:55]:
        assert store.purge([stored.cell.id]) == 1
    with psycopg.connect(url, autocommit=True) as conn:  # several rows in one statement
        conn.execute("DELETE FROM cells WHERE id = ANY(%s)",
                     ([c.cell.id for c in cells[55:]],))
    assert_exact(url, every_word())
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE cells")
    assert counted(url, every_word())[:2] == (0, 0)
    assert_exact(url, every_word())
    add(store, make(100, "tea kettle 2025-06-30"))
    assert_exact(url, every_word())


def test_a_purged_cells_words_leave_the_table(url: str, stores: list[PostgresStore]) -> None:
    """A purge is an erasure (the AMP spec: "permanently hard-deleted from the physical
    database"): a word only the purged cell held left a row of count 0 in `cell_words`
    for ever, the text's words outliving the cell. A word other cells hold keeps its
    count."""
    store = stores[0]
    secret = add(store, make(1, "call 5550123 or zqvault7 tea"))
    add(store, make(2, "tea kettle"))
    assert store.purge([secret.cell.id]) == 1
    with psycopg.connect(url, autocommit=True) as conn:
        left = conn.execute("SELECT word, sum(n) FROM cell_words GROUP BY 1 ORDER BY 1"
                            ).fetchall()
    assert left == [("kettl", 1), ("tea", 1)]
    assert_exact(url, ["tea", "kettle", "zqvault7", "5550123"])


def test_a_word_the_table_does_not_count_is_counted_by_its_query(
    url: str, stores: list[PostgresStore]
) -> None:
    """``tea_time`` is the phrase 'tea' <-> 'time' to ``to_tsquery``: no row of the table
    holds it, so it is counted by matching (and a search still finds its cells); a stop
    word matches nothing and counts 0."""
    store = stores[0]
    add(store, make(1, "tea time at noon"))
    add(store, make(2, "time for tea"))
    _, _, table = counted(url, ["tea_time", "the", "tea", "06"])
    assert table == {"tea_time": None, "the": 0, "tea": 2, "06": 0}
    flt = CellFilter(agent_id="agent_a")
    assert [h.cell_id for h in store.search_candidates(flt, ["tea_time"], None, 10)] == [
        make(1).cell.id]


def test_writers_at_once_on_two_servers_leave_exact_counts(
    url: str, stores: list[PostgresStore]
) -> None:
    """Eight threads on two store instances create, edit and purge cells whose words
    overlap (every cell holds "tea": one hot word): no write fails (a deadlock would be
    an error), and the counts are exact after."""
    errors: list[BaseException] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        rng = random.Random(w)
        store = stores[w % 2]
        mine = []
        try:
            for i in range(40):
                n = w * 1000 + i
                mine.append(add(store, make(n, "tea " + text_for(rng))))
                if i % 3 == 0:
                    store.update(make(n).cell.id, set_text("tea " + text_for(rng)))
                if i % 5 == 0:
                    store.purge([mine.pop(0).cell.id])
        except BaseException as exc:  # noqa: BLE001 - reported below
            with lock:
                errors.append(exc)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(writer, range(8)))
    assert errors == []
    assert_exact(url, every_word())
    _, _, table = counted(url, ["tea"])
    assert table["tea"] == stores[0].count() == 8 * 32


def test_a_store_an_older_version_made_is_counted_when_opened(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store without the counts and postings (made, and written, by an older version)
    gets them when a server opens it; two servers opening it at once make them once, and
    say so in a warning each (the default log level shows it: writers wait meanwhile).
    Its scores then equal SQLite's for the same cells."""
    old = open_store(url, DIMS)
    try:
        with psycopg.connect(url, autocommit=True) as conn:  # as an older version left it
            conn.execute("DROP TABLE cell_words, cell_totals, cell_postings")
            conn.execute("DROP FUNCTION cell_words_count, cell_words_empty,"
                         " cell_postings_write, cell_postings_empty CASCADE")
        kitchen = ["kettle", "teapot", "saucer", "biscuit", "napkin", "ladle", "whisk"]
        lite = open_store(f"sqlite:///{tmp_path / 'a.db'}", DIMS)
        for s in (old, lite):
            for n in range(1, 31):
                add(s, make(n, " ".join(kitchen[j % 7] for j in range(n % 7, n % 7 + 1 + n % 5))
                            + f" item{n} 2025-06-{n + 30}"))
    finally:
        old.close()
    caplog.set_level(logging.WARNING, logger="ampup_memory")
    with ThreadPoolExecutor(2) as pool:
        opened = list(pool.map(lambda _: open_store(url, DIMS), range(2)))
    said = [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and "made by an older version" in r.getMessage()]
    assert len(said) == 2, said  # once each, by the one opener that did the work
    assert any("keyword statistics" in m for m in said)
    assert any("keyword postings" in m for m in said)
    assert_exact(url, every_word() + kitchen + ["item7", "2025", "45"])
    with psycopg.connect(url, autocommit=True) as conn:  # triggers lost: writes uncounted
        conn.execute("DROP TRIGGER cell_words_written ON cells")
        conn.execute("DROP TRIGGER cell_postings_written ON cells")
    add(opened[0], make(31, "kettle item31"))
    add(lite, make(31, "kettle item31"))
    opened[1].close()
    opened[1] = open_store(url, DIMS)  # made again, and every cell counted again
    try:
        assert_exact(url, every_word() + kitchen + ["item7", "2025", "45"])
        flt = CellFilter(agent_id="agent_a")
        for terms in (["kettle"], ["teapot", "whisk", "item7"], ["45", "06", "2025"]):
            want = {h.cell_id: h.keyword for h in lite.search_candidates(flt, terms, None, 50)}
            for store in opened:
                got = {h.cell_id: h.keyword for h in store.search_candidates(
                    flt, terms, None, 50)}
                assert got.keys() == want.keys() and want, terms
                for cell_id, value in want.items():
                    assert got[cell_id] == pytest.approx(value, rel=1e-5), (terms, cell_id)
    finally:
        lite.close()
        for s in opened:
            s.close()


def test_scores_follow_writes_at_once_on_every_server(
    url: str, stores: list[PostgresStore]
) -> None:
    """A write on one server weighs on the other's next search: no counts remembered."""
    first, second = stores
    for n in range(1, 4):
        add(first, make(n, f"tea note{n}"))
    flt = CellFilter(agent_id="agent_a")

    def score(store: CellStore) -> float:
        return {h.cell_id: h.keyword for h in store.search_candidates(
            flt, ["note1"], None, 10)}[make(1).cell.id]

    before = score(second)
    for n in range(4, 9):
        add(first, make(n, f"coffee note{n}"))
    assert score(second) > before  # rarer among 8 cells
    assert score(first) == score(second)


def test_postings_rank_as_the_tsv_column_does(
    url: str, stores: list[PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The postings (`pg_postings`) give every search the ids and scores ranking from the
    ``tsv`` column gives: words repeated in a cell, numbers and dates (a number's signed
    lexeme), owners, types, statuses and access (cells another agent may not see), after
    edits of text, status and access."""
    store = stores[0]
    rng = random.Random(11)
    owners, agents = ("user_1", "user_2", "user_3"), ("agent_a", "agent_b")
    cells = [add(store, make(n, text_for(rng), owner=owners[n % 3], by=agents[n % 2],
                             type_=(MemoryType.semantic, MemoryType.episodic)[n % 5 == 0],
                             public=n % 7 == 0,
                             readable_by=["agent_c"] if n % 4 == 0 else None))
             for n in range(1, 81)]
    for stored in cells[:10]:
        store.update(stored.cell.id, set_text(text_for(rng)))
    for stored in cells[10:20]:
        assert store.set_statuses([StatusMove(stored, Status.stale, T0 + timedelta(hours=1))])
    with psycopg.connect(url, autocommit=True) as conn:  # an access list emptied
        conn.execute("UPDATE cells SET has_readers = false WHERE id = ANY(%s)",
                     ([c.cell.id for c in cells[20:40]],))
    filters = [CellFilter(agent_id="agent_a"), CellFilter(agent_id="agent_c"),
               CellFilter(agent_id="agent_b", owner_id="user_2"),
               CellFilter(agent_id="agent_a", types=[MemoryType.episodic]),
               CellFilter(agent_id="agent_a", statuses=(Status.active, Status.stale))]
    queries = [["tea"], ["kettle", "teapot", "whisk"], ["running"], ["06", "2025", "30"],
               ["11", "café", "napkin"], ["tea", "coffee", "saucer", "biscuit", "ladle"]]
    seen = 0
    for flt in filters:
        for terms in queries:
            monkeypatch.setattr(pg_store, "KEYWORD_POSTINGS", False)
            want = {h.cell_id: h.keyword for h in store.search_candidates(flt, terms, None, 7)}
            monkeypatch.setattr(pg_store, "KEYWORD_POSTINGS", True)
            got = {h.cell_id: h.keyword for h in store.search_candidates(flt, terms, None, 7)}
            assert got.keys() == want.keys(), (flt, terms)
            for cell_id, value in want.items():
                assert got[cell_id] == pytest.approx(value, rel=1e-12), (flt, terms, cell_id)
            seen += len(want)
    assert seen > 50  # the filters and words left cells to rank
