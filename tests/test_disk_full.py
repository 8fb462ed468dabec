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
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.memory_support import QUIET, cli_in_process
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
