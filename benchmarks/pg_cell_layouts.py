"""PostgreSQL: layouts of the AMP cell store's keyword side, as levers (session 23).

Each lever is a copy of a database `pg_cell_keyword.py load` made (``CREATE DATABASE …
TEMPLATE``, so every copy starts from the same pages), changed by its DDL, and, where the
keyword statement must read something else, a replacement for the store's ranking
statement (`PostgresStore._ranked`, the step after the words are counted and kept):

- ``inline``: the tsvector kept in the row (``SET STORAGE MAIN``, the rows rewritten by
  ``VACUUM FULL``), so no matched row fetches it from the TOAST table; the store's
  statement unchanged.
- ``narrow``: ``cell_keys`` (the id, the columns `rows.where_clause` tests and the
  tsvector, kept in the row) with its own GIN index, kept by a trigger on ``cells`` in the
  writing transaction; the store's statement reads it instead of ``cells``.
- ``postings``: ``lever_postings(word, cell_id, owner_id, tf, len)``, one row per lexeme
  of each cell (``tf``: its positions, which is what ``ts_rank_cd`` of that word alone
  counts; ``len``: the cell's distinct lexemes), kept by a trigger, read by an
  index-only scan on ``(word, cell_id) INCLUDE (owner_id, tf, len)``: every matching
  cell (of the owner asked for, tested in the index) scored from the postings alone,
  sorted, and the filters tested on the cells in that order until ``k`` pass (a
  primary-key probe each). Words ``to_tsquery`` makes into something other than one
  lexeme (or a number's two) fall back to the store's statement.

`prepare` makes a lever's copy (timed, with its sizes); `RANKED` holds the ranking
statements; `TRIGGERS` names the triggers `pg_cell_writes.py --layout` turns off and on.
"""

from __future__ import annotations

import time
from typing import Any

_KEYS_COLS = "id, type, owner_id, created_by, status, public, has_readers, tsv"

_NARROW = (
    """CREATE TABLE cell_keys (
        id text COLLATE "C" PRIMARY KEY,
        type text NOT NULL,
        owner_id text NOT NULL,
        created_by text NOT NULL,
        status text NOT NULL,
        public boolean NOT NULL,
        has_readers boolean NOT NULL,
        tsv tsvector NOT NULL
    )""",
    "ALTER TABLE cell_keys ALTER COLUMN tsv SET STORAGE MAIN",
    f"INSERT INTO cell_keys ({_KEYS_COLS}) SELECT {_KEYS_COLS} FROM cells",
    "CREATE INDEX cell_keys_tsv ON cell_keys USING gin (tsv)",
    "CREATE INDEX cell_keys_owner ON cell_keys (owner_id, status, id)"
    " INCLUDE (type, public, has_readers, created_by)",
    f"""CREATE FUNCTION cell_keys_sync() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO cell_keys ({_KEYS_COLS}) VALUES (NEW.id, NEW.type, NEW.owner_id,
                NEW.created_by, NEW.status, NEW.public, NEW.has_readers, NEW.tsv);
        ELSIF TG_OP = 'UPDATE' THEN
            UPDATE cell_keys SET type = NEW.type, owner_id = NEW.owner_id,
                created_by = NEW.created_by, status = NEW.status, public = NEW.public,
                has_readers = NEW.has_readers, tsv = NEW.tsv WHERE id = NEW.id;
        ELSE
            DELETE FROM cell_keys WHERE id = OLD.id;
        END IF;
        RETURN NULL;
    END $$""",
    "CREATE TRIGGER cell_keys_written AFTER INSERT OR DELETE ON cells"
    " FOR EACH ROW EXECUTE FUNCTION cell_keys_sync()",
    "CREATE TRIGGER cell_keys_rewritten AFTER UPDATE ON cells FOR EACH ROW WHEN"
    " ((OLD.type, OLD.owner_id, OLD.created_by, OLD.status, OLD.public, OLD.has_readers,"
    " OLD.tsv) IS DISTINCT FROM (NEW.type, NEW.owner_id, NEW.created_by, NEW.status,"
    " NEW.public, NEW.has_readers, NEW.tsv)) EXECUTE FUNCTION cell_keys_sync()",
    "VACUUM ANALYZE cell_keys",
)

def _postings(carried: tuple[str, ...]) -> tuple[str, ...]:
    """The DDL of ``lever_postings`` carrying the cells' columns ``carried`` (constants of
    this module: the filter's), rewritten by the trigger when one of them changes."""
    cols = ", ".join(carried)
    new = ", ".join(f"NEW.{c}" for c in carried)
    old = ", ".join(f"OLD.{c}" for c in ("tsv", *carried))
    types = {"owner_id": "text", "created_by": "text", "status": "text", "type": "text",
             "public": "boolean", "has_readers": "boolean"}
    return (
        f"""CREATE TABLE lever_postings (
            word text COLLATE "C" NOT NULL,
            cell_id text COLLATE "C" NOT NULL,
            {"".join(f"{c} {types[c]} NOT NULL, " for c in carried)}
            tf smallint NOT NULL,
            len integer NOT NULL
        )""",
        f"INSERT INTO lever_postings (word, cell_id, {cols}, tf, len) SELECT u.lexeme, c.id,"
        f" {', '.join(f'c.{c}' for c in carried)}, cardinality(u.positions), length(c.tsv)"
        " FROM cells c, unnest(c.tsv) u",
        f"CREATE INDEX lever_postings_word ON lever_postings (word, cell_id)"
        f" INCLUDE ({cols}, tf, len)",
        f"""CREATE FUNCTION lever_postings_sync() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP <> 'INSERT' THEN
                DELETE FROM lever_postings p USING unnest(tsvector_to_array(OLD.tsv)) l
                WHERE p.word = l COLLATE "C" AND p.cell_id = OLD.id;
            END IF;
            IF TG_OP <> 'DELETE' THEN
                INSERT INTO lever_postings (word, cell_id, {cols}, tf, len)
                SELECT u.lexeme, NEW.id, {new}, cardinality(u.positions), length(NEW.tsv)
                FROM unnest(NEW.tsv) u;
            END IF;
            RETURN NULL;
        END $$""",
        "CREATE TRIGGER lever_postings_written AFTER INSERT OR DELETE ON cells"
        " FOR EACH ROW EXECUTE FUNCTION lever_postings_sync()",
        "CREATE TRIGGER lever_postings_rewritten AFTER UPDATE ON cells FOR EACH ROW"
        f" WHEN (({old}) IS DISTINCT FROM ({old.replace('OLD.', 'NEW.')}))"
        " EXECUTE FUNCTION lever_postings_sync()",
        "VACUUM ANALYZE lever_postings",
    )


# ``postings``: the owner alone carried (tested in the index), the rest of the filters
# on the cells; ``filtered``: every column `rows.where_clause` tests carried, so the
# filters are tested in the index and no cell is read.
_FILTERED = ("type", "owner_id", "created_by", "status", "public", "has_readers")

DDL: dict[str, tuple[str, ...]] = {
    "inline": ("ALTER TABLE cells ALTER COLUMN tsv SET STORAGE MAIN", "VACUUM FULL cells",
               "VACUUM ANALYZE cells"),
    "narrow": _NARROW,
    "postings": _postings(("owner_id",)),
    "filtered": _postings(_FILTERED),
}

# The relations each lever's keyword step reads, for `pg_prewarm` after a restart.
PREWARM: dict[str, tuple[str, ...]] = {
    "base": ("cells", "cells_tsv", "cells_owner_filter"),
    "inline": ("cells", "cells_tsv", "cells_owner_filter"),
    "narrow": ("cell_keys", "cell_keys_tsv", "cell_keys_owner", "cells", "cells_pkey"),
    "postings": ("lever_postings_word", "cells", "cells_pkey", "cells_tsv"),
    "filtered": ("lever_postings_word", "cells", "cells_pkey", "cells_tsv"),
}

TRIGGERS: dict[str, tuple[str, ...]] = {
    "inline": (),
    "narrow": ("cell_keys_written", "cell_keys_rewritten"),
    "postings": ("lever_postings_written", "lever_postings_rewritten"),
    "filtered": ("lever_postings_written", "lever_postings_rewritten"),
}

# The relations a lever adds (or, for ``inline``, rewrites), for their sizes.
SIZED: dict[str, tuple[str, ...]] = {
    "base": ("cells", "cells_tsv"),
    "inline": ("cells", "cells_tsv"),
    "narrow": ("cell_keys", "cell_keys_tsv", "cell_keys_owner", "cell_keys_pkey"),
    "postings": ("lever_postings", "lever_postings_word"),
    "filtered": ("lever_postings", "lever_postings_word"),
}


def sizes(conn: Any, layout: str) -> dict[str, float]:
    """MB of each relation the layout adds or rewrites (a table with its TOAST, an index
    alone), and the share of the cells' tsvectors stored out of line."""
    out: dict[str, float] = {}
    for name in SIZED[layout]:
        row = conn.execute("SELECT CASE WHEN c.relkind = 'i' THEN pg_relation_size(c.oid)"
                           " ELSE pg_table_size(c.oid) END FROM pg_class c"
                           " WHERE c.oid = %s::regclass", (name,)).fetchone()
        out[name] = round(int(row[0]) / 2**20, 1)
    row = conn.execute(
        "SELECT avg((pg_column_toast_chunk_id(tsv) IS NOT NULL)::int)::float8 FROM cells"
    ).fetchone()
    out["cells_tsv_toasted_share"] = round(float(row[0]), 4)
    return out


def prepare(admin_url: str, source_uri: str, layout: str) -> dict[str, Any]:
    """A copy of the database at ``source_uri`` with the layout's DDL applied; its URI,
    the seconds the DDL took and the sizes (`sizes`)."""
    import psycopg
    from tests.pg import PostgresFactory

    factory = PostgresFactory(admin_url)
    source = psycopg.conninfo.conninfo_to_dict(source_uri)["dbname"]
    name = f"{source}_{layout}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")  # ours: a name made here
        t = time.perf_counter()
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {source}")
        copy_s = time.perf_counter() - t
    uri = factory.url_for(name)
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        t = time.perf_counter()
        for statement in DDL[layout]:
            conn.execute(statement)
        ddl_s = time.perf_counter() - t
        return {"uri": uri, "copy_s": round(copy_s, 1), "ddl_s": round(ddl_s, 1),
                "sizes": sizes(conn, layout)}


def narrow_ranked(store: Any) -> None:
    """The store's ranking statement reading ``cell_keys`` instead of ``cells``."""
    plain = store._ranked

    def ranked(conn: Any, where: str, params: list[Any], query: str, scoring: Any,
               k: int) -> dict[str, float]:
        execute = store._execute

        def on_keys(c: Any, sql: str, p: Any = (), prepare: bool | None = None) -> Any:
            return execute(c, sql.replace("FROM cells c WHERE c.tsv", "FROM cell_keys c"
                                          " WHERE c.tsv"), p, prepare)

        store._execute = on_keys
        try:
            return plain(conn, where, params, query, scoring, k)
        finally:
            store._execute = execute

    store._ranked = ranked


# Each kept word's lexemes when its ``to_tsquery`` is one lexeme or a number's two
# (`bm25_sql.number_forms`), else none (a phrase: the store's statement ranks it).
_LEXEMES = """SELECT u.i, m[1] FROM unnest(%s::text[]) WITH ORDINALITY u(q, i),
    LATERAL (SELECT to_tsquery('english', u.q)::text AS t) x,
    LATERAL regexp_matches(x.t, '''([^''\\\\]+)''', 'g') m
    WHERE x.t ~ '^''[^''\\\\]+''( \\| ''[^''\\\\]+'')?$'"""


def postings_ranked(store: Any, carried: bool = False) -> None:
    """The store's ranking statement scoring from ``lever_postings`` (see the module's
    doc); the same BM25 expression (`bm25_sql.Scoring.score`) over the same ``f<i>`` and
    ``l``, so the same scores. ``carried``: the postings carry every filtered column
    (``filtered``), so the filters are tested on them."""
    plain = store._ranked

    def ranked(conn: Any, where: str, params: list[Any], query: str, scoring: Any,
               k: int) -> dict[str, float]:
        pairs = store._execute(conn, _LEXEMES, (list(scoring.words),)).fetchall()
        if {int(i) for i, _ in pairs} != set(range(1, len(scoring.words) + 1)):
            return plain(conn, where, params, query, scoring, k)
        # The owner asked for, if any (`rows.where_clause` binds it after the statuses
        # and the agent twice), tested on the postings too.
        clause = " AND c.owner_id = %s"  # the owner's; the access test has an OR'd one
        owner = clause in where and params[where.split(clause)[0].count("%s")] or None
        freqs = "".join(
            f", coalesce(sum(p.tf) FILTER (WHERE w.i = {i + 1}), 0)::float8 AS f{i}"
            for i in range(len(scoring.words)))
        if carried:
            return {
                cell_id: max(float(score), 0.0)
                for cell_id, score in store._execute(
                    conn,
                    f"SELECT id, {scoring.score} AS r FROM"
                    f" (SELECT p.cell_id AS id{freqs}, max(p.len)::float8 AS l"
                    " FROM unnest(%s::int[], %s::text[]) w(i, word)"
                    " JOIN lever_postings p ON p.word = w.word COLLATE \"C\""
                    f" AND {where.replace('c.', 'p.')} GROUP BY p.cell_id) a"
                    " ORDER BY r DESC, id LIMIT %s",
                    (*scoring.values, [int(i) for i, _ in pairs], [w for _, w in pairs],
                     *params, k), prepare=False)
            }
        return {
            cell_id: max(float(score), 0.0)
            for cell_id, score in store._execute(
                conn,
                f"SELECT s.id, s.r FROM (SELECT id, {scoring.score} AS r FROM"
                f" (SELECT p.cell_id AS id{freqs}, max(p.len)::float8 AS l"
                " FROM unnest(%s::int[], %s::text[]) w(i, word)"
                " JOIN lever_postings p ON p.word = w.word COLLATE \"C\""
                f"{' AND p.owner_id = %s' if owner else ''} GROUP BY p.cell_id) a"
                " ORDER BY r DESC, id OFFSET 0) s"
                f" CROSS JOIN LATERAL (SELECT 1 FROM cells c WHERE c.id = s.id AND {where}"
                " LIMIT 1) ok LIMIT %s",
                (*scoring.values, [int(i) for i, _ in pairs], [w for _, w in pairs],
                 *([owner] if owner else []), *params, k), prepare=False)
        }

    store._ranked = ranked


RANKED = {"narrow": narrow_ranked, "postings": postings_ranked,
          "filtered": lambda store: postings_ranked(store, carried=True)}
