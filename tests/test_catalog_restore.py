"""deployment.md's restore of a PostgreSQL catalog dump with an S3 warehouse, as written.

The docs said a catalog dump restores with "the bucket as of the same moment or later".
Later is not enough: each commit deletes its table's metadata files beyond the last
three, so a few commits after the dump the dumped catalog names files that are gone and
`serve` stops at start. What the docs now say works: on a versioned bucket, delete the
delete markers placed after the dump (in the same bucket) and every read answers as it
did at the dump. The dump here is `CREATE DATABASE … TEMPLATE` of the catalog while no
server holds it: the same rows `pg_dump` would carry, without needing its binary.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.memory_support import QUIET, cli_in_process
from tests.pg import PostgresFactory
from tests.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Server, s3  # noqa: F401  (fixture)
from tests.server_process import ServerProcess

pytestmark = [pytest.mark.postgres, pytest.mark.fleet]

SCOPE = "restore/team_a"
USER = {"X-AmpUp-User": "alice"}


def _s3_client(s3: S3Server) -> Any:  # noqa: F811
    import boto3  # moto's own dependency

    return boto3.client("s3", endpoint_url=s3.url, region_name=REGION,
                        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)


def _write(url: str, first: int, last: int) -> None:
    with httpx.Client(base_url=url, headers=USER, timeout=120) as c:
        for n in range(first, last):
            r = c.post("/episodes", json={"scope": SCOPE, "source": f"doc:restore{n}",
                                          "acl": ["*"], "body": f"Restore note {n}: Porto."})
            assert r.status_code == 201, r.text


def _reads(url: str) -> dict[str, Any]:
    with httpx.Client(base_url=url, headers=USER, timeout=120) as c:
        ledger = c.get("/ledger", params={"scope": SCOPE, "limit": 1000})
        episodes = c.get("/episodes", params={"scope": SCOPE, "limit": 1000})
        found = c.post("/query", json={"scope": SCOPE, "query": "restore note Porto",
                                       "find": "passages"})
        for r in (ledger, episodes, found):
            assert r.status_code == 200, r.text
        return {"ledger": ledger.json(), "episodes": episodes.json(), "query": found.json()}


def test_a_catalog_dump_restores_with_the_bucket_rewound_to_it(
        postgres: PostgresFactory, s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    import psycopg

    client = _s3_client(s3)
    bucket = s3.new_bucket("rewind")
    client.put_bucket_versioning(Bucket=bucket,
                                 VersioningConfiguration={"Status": "Enabled"})
    catalog = postgres.new_database("rw_catalog")
    env = {**QUIET, **s3.env(bucket), "AMPUP_MEMORY_CATALOG_URI": catalog,
           "AMPUP_MEMORY_INDEX_URI": postgres.new_database("rw_index")}
    home = tmp_path / "home"
    with ServerProcess(home, env=env) as proc:
        _write(proc.url, 0, 3)
        at_dump = _reads(proc.url)

    dump = f"{urlsplit(catalog).path.lstrip('/')}_dump"
    with psycopg.connect(postgres.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dump}" TEMPLATE "{urlsplit(catalog).path[1:]}"')
    dumped_at = datetime.now(UTC)
    time.sleep(1.1)  # S3 times are whole seconds in some stores

    with ServerProcess(home, env=env) as proc:
        _write(proc.url, 3, 9)  # six commits: past the three metadata files a table keeps

    restored = {**env, "AMPUP_MEMORY_CATALOG_URI": postgres.url_for(dump),
                "AMPUP_MEMORY_INDEX_URI": postgres.new_database("rw_index_restored")}
    with pytest.raises(RuntimeError) as stopped:  # the bucket as it is later: not enough
        ServerProcess(tmp_path / "restored", env=restored).start()
    assert "cannot use the Iceberg warehouse" in str(stopped.value)
    assert "metadata.json" in str(stopped.value)
    # doctor, run first as deployment.md says, names what `serve` would stop on.
    said = cli_in_process(tmp_path / "restored", restored, "doctor")
    assert said.returncode == 1, said.stdout
    warehouse = next(x for x in said.stdout.splitlines() if "  warehouse: " in x)
    assert warehouse.startswith("FAIL") and "have no current metadata file" in warehouse, \
        warehouse

    removed = 0
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for marker in page.get("DeleteMarkers", []):
            if marker["IsLatest"] and marker["LastModified"] > dumped_at:
                client.delete_object(Bucket=bucket, Key=marker["Key"],
                                     VersionId=marker["VersionId"])
                removed += 1
    assert removed > 0
    said = cli_in_process(tmp_path / "restored", restored, "doctor")
    assert said.returncode == 0, said.stdout
    with ServerProcess(tmp_path / "restored", env=restored) as proc:
        assert _reads(proc.url) == at_dump
        _write(proc.url, 9, 10)  # and the restored memory takes writes again
