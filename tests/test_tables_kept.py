"""The tables a server keeps loaded stay within a bound (`MemoryTables`, `TABLES_KEPT`).

Every scope has tables of its own, and a server that runs for weeks meets scopes without
end, workspaces among them, made and dropped by the hour: it kept every table it had
ever read, a dropped workspace's too (tools/leak_audit.py, workload ``churn``: 25 MB more
for each 30 scopes and workspaces, the tables' metadata the most of it).
"""

from __future__ import annotations

from pathlib import Path

from ampup_memory.memory.scopes import Scope
from ampup_memory.memory.tables import SCOPE_TABLES, MemoryTables, open_catalog
from ampup_memory.settings import Settings


def test_loaded_tables_are_kept_within_the_bound_and_a_dropped_one_not_at_all(
        tmp_path: Path) -> None:
    settings = Settings(**{"AMPUP_MEMORY_HOME": str(tmp_path)})
    made = MemoryTables.open(settings)
    scopes = [Scope(f"kept{n}", "team_1") for n in range(4)]
    for scope in scopes:
        made.ensure_scope(scope)
    made.close()

    tables = MemoryTables(open_catalog(settings), kept=6)
    try:
        for scope in scopes:  # 16 tables read, one after another
            for name in SCOPE_TABLES:
                assert tables.scope_table(scope, name) is not None
        assert len(tables._cache) == 6
        assert len(tables._known) == 6
        # One read again is still right: loaded from the catalog once more.
        first = scopes[0]
        assert tables.scope_table(first, "episodes") is not None
        # A table being dropped is forgotten at once, its metadata too.
        last = scopes[-1]
        tables.forget(last.namespace, "facts")
        assert tables._cache.get((last.namespace, "facts")) is None
        assert tables._known.get((last.namespace, "facts")) is None
    finally:
        tables.close()
