"""Open tables: DuckDB's `iceberg` extension (installed from PyPI as `duckdb-ext-iceberg`,
nothing downloaded at run time) reads a scope's episodes and facts and the ledger from
the catalog's table metadata, with none of our code on the read path."""

from __future__ import annotations

import glob
import site
import sqlite3
from pathlib import Path

import pytest

from tests.memory_support import QUIET, Memory, new_scope, serving

duckdb = pytest.importorskip("duckdb")


def _duckdb_with_iceberg() -> object:
    found = [p for root in site.getsitepackages()
             for p in glob.glob(f"{root}/duckdb_ext/extensions/*/*/*.duckdb_extension")]
    assert any(p.endswith("iceberg.duckdb_extension") for p in found), found
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    for path in sorted(found, key=lambda p: "iceberg" in p):  # avro first
        con.execute(f"LOAD '{path}'")
    return con


def test_duckdb_reads_episodes_facts_and_ledger(tmp_path: Path) -> None:
    scope = new_scope()
    ns = scope.replace("/", "__")
    with serving(tmp_path, QUIET) as server:
        m = Memory(server.url)
        ep = m.write(scope, "Dana owns the Acme account.", source="doc:owners").json()
        fact = m.fact(scope, "acme", "owner", "dana", "Dana owns", [(ep["id"], 1)]).json()
        m.close()
    # The catalog says where each table's current metadata is: that is all DuckDB needs.
    with sqlite3.connect(tmp_path / "catalog.db") as cat:
        where = {(n, t): loc for n, t, loc in cat.execute(
            "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables")}
    con = _duckdb_with_iceberg()
    episodes = con.execute(  # type: ignore[attr-defined]
        "SELECT id, source, commit_id FROM iceberg_scan(?)",
        [where[(ns, "episodes")]]).fetchall()
    assert episodes == [(ep["id"], "doc:owners", ep["commit"])]
    facts = con.execute(  # type: ignore[attr-defined]
        "SELECT entity, predicate, commit_id FROM iceberg_scan(?)",
        [where[(ns, "facts")]]).fetchall()
    assert facts == [("acme", "owner", fact["commit"])]
    ledger = con.execute(  # type: ignore[attr-defined]
        "SELECT commit_id, seq FROM iceberg_scan(?) WHERE scope = ? ORDER BY seq",
        [where[("memory_system", "ledger")], scope]).fetchall()
    assert ledger == [(ep["commit"], 1), (fact["commit"], 2)]
