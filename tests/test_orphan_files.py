"""Maintenance's orphan-file pass when another deleter is at work in the same folder: a
second server's pass, or the thread that deletes superseded table metadata files after a
commit (`warehouse.DELETES`). A file gone between the pass's listing and its delete was
the pass's aim; it used to fail the whole pass ("Cannot delete file …")."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ampup_memory.memory.maintenance import delete_orphan_files
from ampup_memory.memory.scopes import parse_scope
from ampup_memory.memory.service import MemoryService
from ampup_memory.settings import Settings
from tests.memory_support import QUIET, Memory, new_scope, serving

STRAYS = 4000


def test_two_orphan_passes_at_once_both_finish_and_remove_every_stray(tmp_path: Path) -> None:
    scope = new_scope()
    with serving(tmp_path, QUIET) as server:
        m = Memory(server.url)
        assert m.write(scope, "The Acme renewal is due in May.").status_code == 201
        m.close()
    svc = MemoryService.open(Settings.model_validate({**QUIET,
                                                      "AMPUP_MEMORY_HOME": str(tmp_path)}))
    try:
        table = svc.tables.table(parse_scope(scope).namespace, "episodes")
        folder = Path(table.location().removeprefix("file://")) / "data"
        for i in range(STRAYS):  # a crashed write's leftovers, many, so the passes overlap
            (folder / f"stray-{i:05}.parquet").write_bytes(b"junk")
        later = datetime.now(UTC) + timedelta(seconds=1)
        start, failed, removed = threading.Barrier(2), [], []

        def one_pass() -> None:
            start.wait()
            try:
                removed.append(delete_orphan_files(table, later))
            except Exception as exc:  # noqa: BLE001 -- what the test looks for
                failed.append(exc)

        passes = [threading.Thread(target=one_pass) for _ in range(2)]
        for t in passes:
            t.start()
        for t in passes:
            t.join()
        assert failed == [], failed
        assert sum(removed) == STRAYS, removed  # each stray counted by the pass that took it
        assert not list(folder.glob("stray-*"))
        assert svc.tables.table(parse_scope(scope).namespace, "episodes").scan().to_arrow(
            ).num_rows == 1  # the table's own files were kept
    finally:
        svc.close()
