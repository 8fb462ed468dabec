"""A table load racing other servers' commits, on real Iceberg files and both catalogs.

A load reads the catalog's pointer, then the metadata file it names; tables delete all but
their last few metadata files on each commit. When other servers commit enough times in
between, the named file is gone. Seen in CI as a 503 "storage did not answer" on a write
and a merge among four writers; the load must follow the pointer instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog

from ampup_memory.memory.tables import CATALOG_NAME, DATA_PROPERTIES, Catalog, sqlalchemy_url
from tests.memory_support import BACKENDS

ROWS = pa.schema([pa.field("n", pa.int64(), nullable=False)])
# More commits than the metadata files a table keeps: the first one's file is deleted.
COMMITS = int(DATA_PROPERTIES["write.metadata.previous-versions-max"]) + 2


def _racing(base: type[SqlCatalog]) -> type[SqlCatalog]:
    """``base`` with another server committing COMMITS times between a load's read of the
    pointer and its read of the file (once)."""

    class Racing(base):  # type: ignore[misc, valid-type]
        other: SqlCatalog | None = None

        def _convert_orm_to_iceberg(self, orm_table: IcebergTables) -> Any:
            other, self.other = self.other, None
            if other is not None:
                table = other.load_table(("ns", "t"))
                for n in range(COMMITS):
                    table.append(pa.Table.from_pylist([{"n": n}], schema=ROWS))
            return super()._convert_orm_to_iceberg(orm_table)

    return Racing


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_load_follows_the_pointer_past_a_deleted_metadata_file(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    uri = (request.getfixturevalue("postgres").new_database("race") if kind == "postgres"
           else f"sqlite:///{tmp_path / 'catalog.db'}")
    props = {"uri": sqlalchemy_url(uri, setting="catalog"),
             "warehouse": f"file://{tmp_path / 'warehouse'}"}
    other = Catalog(CATALOG_NAME, **props)
    other.create_namespace("ns")
    other.create_table(("ns", "t"), schema=ROWS, properties=DATA_PROPERTIES)
    try:
        # pyiceberg's own catalog: the file the pointer named is gone by the time it reads.
        plain = _racing(SqlCatalog)(CATALOG_NAME, **props)
        plain.other = other
        with pytest.raises(FileNotFoundError):
            plain.load_table(("ns", "t"))
        plain.engine.dispose()

        ours = _racing(Catalog)(CATALOG_NAME, **props)
        ours.other = other
        loaded = ours.load_table(("ns", "t"))
        assert loaded.metadata_location == other.load_table(("ns", "t")).metadata_location
        assert len(loaded.scan().to_arrow()) == 2 * COMMITS

        # A file missing while the pointer still names it is a real loss: raised.
        Path(loaded.metadata_location.removeprefix("file://")).unlink()
        with pytest.raises(FileNotFoundError):
            ours.load_table(("ns", "t"))
        ours.engine.dispose()
    finally:
        other.engine.dispose()
