"""A full disk under the embedded home: clear answers, nothing acknowledged lost, and the
server writes again once space is freed, with no restart.

The home is a small tmpfs (root, where mounting is allowed; skipped elsewhere) that the
test fills with one file. SQLite said "database or disk is full" as a raw
``sqlite3.OperationalError``: a 500 with a traceback in the log, and the keep-alive
connection reset under the next request. Now every write is a 507
``INSUFFICIENT_STORAGE`` in the error envelope and one warning line naming the disk.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.memory_support import QUIET, cli_in_process
from tests.pg import PostgresFactory
from tests.server_process import ServerProcess, plain_client

SCOPE = "disk/team_a"
AGENT = {"X-AMP-Agent-ID": "agent_disk", "X-AmpUp-User": "alice"}


@pytest.fixture(scope="module")
def small_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    point = tmp_path_factory.mktemp("small-disk")
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(point)],
        capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("needs a small filesystem to fill (root, where mounting is allowed)")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.fixture(scope="module")
def server(small_disk: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[ServerProcess]:
    proc = ServerProcess(small_disk / "home", env={**QUIET, "AMPUP_MEMORY_LOG_LEVEL": "info"})
    proc.log_path = tmp_path_factory.mktemp("disk-log") / "server.log"  # not on the full disk
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _fill(disk: Path) -> Path:
    """Write one file until the disk has no room left; the file is returned to free it."""
    filler = disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
        except OSError:
            pass
    assert os.statvfs(disk).f_bavail == 0
    return filler


def _cell(n: int) -> dict[str, object]:
    return {"type": "semantic", "content": {"text": f"disk full note {n}"},
            "identity": {"owner_id": "user_disk", "owner_type": "user"}}


def _episode(n: int) -> dict[str, object]:
    return {"scope": SCOPE, "source": f"doc:disk{n}", "body": f"Disk note {n}.", "acl": ["*"]}


def test_writes_on_a_full_disk_are_507_and_resume_once_space_is_freed(
        server: ServerProcess, small_disk: Path) -> None:
    with plain_client(base_url=server.url, timeout=60, headers=AGENT) as c:
        cell = c.post("/amp/v1/memories", json=_cell(0))
        episode = c.post("/episodes", json=_episode(0))
        assert (cell.status_code, episode.status_code) == (201, 201), cell.text + episode.text
        filler = _fill(small_disk)
        try:
            for route, body in (("/amp/v1/memories", _cell(1)), ("/episodes", _episode(1)),
                                ("/amp/v1/memories", _cell(2)), ("/episodes", _episode(2))):
                r = c.post(route, json=body)  # one connection: none is reset under the next
                assert r.status_code == 507, (route, r.status_code, r.text)
                error = r.json()["error"]
                assert error["code"] == "INSUFFICIENT_STORAGE" and "full" in error["message"]
            assert c.get("/amp/v1/health").status_code == 200
            # Reads that need no write go on: a read of the tables wrote the ledger's new
            # snapshot into the read index after every commit, so each was a 507 too.
            got = c.get(f"/episodes/{episode.json()['id']}", params={"scope": SCOPE})
            assert got.status_code == 200, got.text
            found = c.post("/search", json={"scope": SCOPE, "query": "disk note"})
            assert found.status_code == 200, found.text
            assert c.get("/ledger", params={"scope": SCOPE}).status_code == 200
            # A cell is handed over though its access cannot be counted (a write).
            for _ in range(3):
                read = c.get(f"/amp/v1/memories/{cell.json()['id']}")
                assert read.status_code == 200, read.text
        finally:
            filler.unlink()
        assert c.post("/amp/v1/memories", json=_cell(3)).status_code == 201
        assert c.post("/episodes", json=_episode(3)).status_code == 201
        assert c.get(f"/amp/v1/memories/{cell.json()['id']}").status_code == 200
        got = c.get(f"/episodes/{episode.json()['id']}", params={"scope": SCOPE})
        assert got.status_code == 200, got.text
    log = server.log_path.read_text()
    assert "disk full on POST /amp/v1/memories" in log and "Traceback" not in log, log


def test_commands_on_a_full_disk_say_so(server: ServerProcess, small_disk: Path) -> None:
    """A command opening a home on the full disk says the disk is full (SQLite said only
    "disk I/O error": it could not make its -wal and -shm files); doctor says to free
    space; a backup into it says so and leaves nothing behind."""
    assert cli_in_process(small_disk / "other", QUIET, "lifecycle", "run").returncode == 0
    filler = _fill(small_disk)
    try:
        other = cli_in_process(small_disk / "other", QUIET, "lifecycle", "run")
        doctor = cli_in_process(small_disk / "fresh", QUIET, "doctor")
        backup = cli_in_process(server.home, QUIET, "backup", str(small_disk / "backup"))
    finally:
        filler.unlink()
    assert other.returncode == 2 and "its disk is full" in other.stderr, other.stderr
    home_line = doctor.stdout.splitlines()[0]
    assert home_line.startswith("FAIL  home:") and "free space on that disk" in home_line, \
        doctor.stdout
    assert backup.returncode == 2, backup.stdout + backup.stderr
    assert "disk full while writing the backup into" in backup.stderr, backup.stderr
    assert backup.stdout == "" and not (small_disk / "backup").exists()


@pytest.fixture
def pg_on_small_disk(postgres: PostgresFactory, small_disk: Path  # small_disk: root's skip
                     ) -> Iterator[tuple[str, Path]]:
    """A database whose tables live on a tablespace on a small tmpfs of its own (the
    PostgreSQL server's own machine and user: the embedded one, as root)."""
    import psycopg

    # Not under pytest's folder (root's, mode 0700): PostgreSQL's own user must reach it.
    point = Path(tempfile.mkdtemp(prefix="ampup-pg-disk-"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(point)],
                      capture_output=True).returncode != 0:
        pytest.skip("needs a small filesystem to fill")
    name = f"full_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(postgres.admin_url, autocommit=True) as conn:
            data = Path(str(conn.execute("SHOW data_directory").fetchone()[0]))  # type: ignore[index]
            if not data.exists():
                pytest.skip("PostgreSQL is not on this machine (TEST_POSTGRES_URL)")
            os.chown(point, data.stat().st_uid, data.stat().st_gid)
            conn.execute(f"CREATE TABLESPACE {name} LOCATION '{point}'")
            conn.execute(f'CREATE DATABASE "{name}" TABLESPACE {name}')
        url = postgres.url_for(name)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield url, point
        with psycopg.connect(postgres.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f"DROP TABLESPACE IF EXISTS {name}")
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)
        point.rmdir()


@pytest.mark.postgres
def test_the_cell_store_on_a_full_postgresql_disk_is_507(
        pg_on_small_disk: tuple[str, Path], tmp_path: Path) -> None:
    """PostgreSQL's disk_full (53100) is a 507 as SQLite's is, with a log line; the cell
    store answered its own 503 "unavailable" and logged nothing."""
    url, disk = pg_on_small_disk
    with ServerProcess(tmp_path, env={**QUIET, "AMP_STORE_URI": url}) as proc, \
            plain_client(base_url=proc.url, timeout=60, headers=AGENT) as c:
        kept = c.post("/amp/v1/memories", json=_cell(0))
        assert kept.status_code == 201, kept.text
        filler = _fill(disk)
        try:  # pages with room take a few rows first: write until the table must grow
            for n in range(1, 200):
                text = os.urandom(3000).hex()  # not compressed into a page with room
                r = c.post("/amp/v1/memories", json={**_cell(n), "content": {"text": text}})
                if r.status_code != 201:
                    break
            assert r.status_code == 507, r.text
            assert r.json()["error"]["code"] == "INSUFFICIENT_STORAGE"
            read = c.get(f"/amp/v1/memories/{kept.json()['id']}")  # uncounted, not a 507
            assert read.status_code == 200, read.text
        finally:
            filler.unlink()
        assert c.post("/amp/v1/memories", json=_cell(2)).status_code == 201
        assert c.get(f"/amp/v1/memories/{kept.json()['id']}").status_code == 200
    assert "cell store (PostgreSQL), disk full" in proc.log_path.read_text()
