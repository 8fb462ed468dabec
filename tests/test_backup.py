"""backup, restore and status: a real server, real stores, a real copy.

The property: a backup taken while writers run restores into a fresh home that answers
every read exactly as the original answered for the state the backup holds, and a
restored server serves new writes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.memory_support import (
    ADMIN_TOKEN,
    LEASE,
    QUIET,
    Memory,
    bar_line,
    cli_in_process,
    maintenance_lease_free,
    new_scope,
    serving,
    wait_until_lease_free,
)

AGENT = {"X-AMP-Agent-ID": "agent_backup"}


def _seed(mem: Memory, scope: str, amp: httpx.Client) -> list[str]:
    ids = []
    for n in range(6):
        r = mem.write(scope, f"Acme renewal call {n}: budget is {n}0k, contact Dana.",
                      acl=["*"] if n % 2 else ["user:alice"])
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    r = mem.fact(scope, "acme", "budget", "50k", "budget is 50k", [(ids[5], 1)])
    assert r.status_code == 201, r.text
    for n in range(3):
        r = amp.post("/amp/v1/memories", json={
            "type": "semantic", "content": {"text": f"prefers short messages {n}"},
            "identity": {"owner_id": "user_1", "owner_type": "user"}})
        assert r.status_code == 201, r.text
    return ids


def _reads(url: str, scope: str, ids: list[str]) -> dict[str, Any]:
    """Every read a user of the scope and an agent would make, as JSON."""
    out: dict[str, Any] = {}
    for user in ("alice", "bob"):
        mem = Memory(url, user)
        try:
            out[f"{user} ledger"] = mem.ledger(scope)
            out[f"{user} facts"] = mem.facts(scope, "acme").json()
            for i in ids:
                r = mem.episode(scope, i)
                out[f"{user} episode {i}"] = (r.status_code, r.json())
            r = mem.http.post("/query", json={"scope": scope, "query": "acme budget dana",
                                              "find": "passages"})
            assert r.status_code == 200, r.text
            out[f"{user} passages"] = r.json()
            found = mem.http.post("/search", json={"scope": scope, "query": "budget"}).json()
            found.pop("as_of")  # the time of the read, not of the data
            out[f"{user} search"] = found
        finally:
            mem.close()
    with httpx.Client(base_url=url, headers=AGENT) as amp:
        page = amp.get("/amp/v1/memories", params={"limit": 100}).json()
        for cell in page.get("items", page.get("memories", [])):
            for k in ("last_accessed_at",):  # a read moves the access clock: not data
                cell.get("lifecycle", {}).pop(k, None)
            cell.get("scoring", {}).pop("access_count", None)
        out["amp list"] = page
    return out


def test_backup_during_writes_restores_the_same_answers(tmp_path: Path) -> None:
    home, fresh, dest = tmp_path / "home", tmp_path / "fresh", tmp_path / "backup"
    scope = new_scope()
    with serving(home, QUIET) as server:
        mem = Memory(server.url)
        amp = httpx.Client(base_url=server.url, headers=AGENT)
        ids = _seed(mem, scope, amp)
        # Writers keep going in another scope while the backup runs.
        other, stop, written = new_scope(), threading.Event(), []

        def writer() -> None:
            w = Memory(server.url)
            while not stop.is_set():
                r = w.write(other, f"busy note {len(written)}")
                written.append(r.status_code)
            w.close()

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            done = cli_in_process(home, QUIET, "backup", str(dest))
        finally:
            stop.set()
            thread.join()
        assert done.returncode == 0, done.stderr
        assert written and set(written) == {201}
        report = json.loads(done.stdout)
        assert report["tables"] >= 4 and report["rows"] > 0
        before = _reads(server.url, scope, ids)
        amp.close()
        mem.close()

    restored = cli_in_process(fresh, QUIET, "restore", str(dest))
    assert restored.returncode == 0, restored.stderr
    commits = json.loads(restored.stdout)["index"]["read_index_commits"]
    assert f"{commits}/{commits}" in bar_line(restored.stderr, "rebuilding the read index")
    with serving(fresh, QUIET) as server:
        after = _reads(server.url, scope, ids)
        assert after == before
        # The other scope holds exactly the commits the backup saw: a whole chain.
        mem = Memory(server.url)
        chain = mem.ledger(other)
        assert [c["seq"] for c in chain] == list(range(len(chain), 0, -1))
        # And the restored memory takes new writes.
        assert mem.write(scope, "after the restore").status_code == 201
        mem.close()


def test_a_backup_folder_under_a_file_is_named_so(tmp_path: Path) -> None:
    """DEST under a file (a typo, a mounted path that is not there) said `storage error:
    [Errno 20] Not a directory`, as if the stores had failed."""
    home, blocker = tmp_path / "home", tmp_path / "backups"
    with serving(home, QUIET) as server:
        Memory(server.url).write(new_scope(), "one note")
    blocker.write_text("")
    done = cli_in_process(home, QUIET, "backup", str(blocker / "2026-12-05"))
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"error: cannot make the backup folder {blocker / '2026-12-05'}: "
                           f"{blocker} is a file, not a folder\n"), done.stderr


def test_restore_refuses_a_home_in_use_and_a_damaged_backup(tmp_path: Path) -> None:
    home, dest = tmp_path / "home", tmp_path / "backup"
    with serving(home, QUIET) as server:
        Memory(server.url).write(new_scope(), "one note")
    assert cli_in_process(home, QUIET, "backup", str(dest)).returncode == 0
    again = cli_in_process(home, QUIET, "backup", str(dest))
    assert again.returncode == 2 and "not empty" in again.stderr
    into_used = cli_in_process(home, QUIET, "restore", str(dest))
    assert into_used.returncode == 2 and "fresh home" in into_used.stderr
    manifest = json.loads((dest / "manifest.json").read_text())
    table = next(f for f in manifest["files"] if f["kind"] == "table")
    (dest / table["path"]).write_bytes(b"not parquet")
    damaged = cli_in_process(tmp_path / "fresh", QUIET, "restore", str(dest))
    assert damaged.returncode == 2 and "damaged" in damaged.stderr
    assert not (tmp_path / "fresh" / "catalog.db").exists()


def test_backup_on_postgres_says_what_to_use_instead(tmp_path: Path) -> None:
    env = {**QUIET, "AMPUP_MEMORY_CATALOG_URI": "postgresql://u:secret@127.0.0.1:1/db"}
    done = cli_in_process(tmp_path, env, "backup", str(tmp_path / "b"))
    assert done.returncode == 2
    assert "pg_dump" in done.stderr and "secret" not in done.stderr


def test_status_route_and_command(tmp_path: Path) -> None:
    home = tmp_path / "home"
    scope = new_scope()
    env = {**QUIET, "AMPUP_MEMORY_SEARCH_REFRESH_SECONDS": "1"}
    with serving(home, env) as server:
        mem = Memory(server.url)
        for n in range(3):
            assert mem.write(scope, f"status note {n}").status_code == 201
        denied = httpx.get(f"{server.url}/status")
        assert denied.status_code == 403
        assert denied.json()["error"]["code"] == "ACCESS_DENIED"
        r = httpx.get(f"{server.url}/status", headers={"X-AMP-Admin-Token": ADMIN_TOKEN})
        assert r.status_code == 200, r.text
        status = r.json()
        assert status["versions"]["ampup-memory"]
        assert status["stores"]["amp"]["engine"] == "sqlite"
        assert status["stores"]["catalog"]["bytes"] > 0
        assert status["stores"]["warehouse"]["bytes"] > 0
        assert status["scopes"] == [{"scope": scope, "commits": 3, "read_index_lag": 0,
                                     "search_index_lag": 0}]
        assert status["commits"] == 3
        assert status["embedder"]["configured"].startswith("hash/")
        names = {t["name"]: t for t in status["timers"]}
        assert names["search index refresh"]["runs"] >= 1
        assert names["search index refresh"]["enabled"] is True
        assert names["memory maintenance pass"]["enabled"] is False
        # runs once at start: enabled, with no interval
        warm = names["typed query warm-up"]
        assert (warm["enabled"], warm["interval_seconds"]) == (True, 0), warm
        mem.close()
    done = cli_in_process(home, QUIET, "status")
    assert done.returncode == 0, done.stderr
    offline = json.loads(done.stdout)
    assert offline["scopes"][0]["commits"] == 3 and offline["timers"] is None


def test_a_backup_killed_mid_copy_frees_the_lease_within_one_lease(tmp_path: Path) -> None:
    """The backup holds the maintenance lease renewed while it copies: held past one lease
    length while it lives, free within about one lease once it is killed (kill -9)."""
    env = {**QUIET, "AMPUP_MEMORY_LEASE_SECONDS": str(LEASE)}
    home = tmp_path / "home"
    with serving(home, env) as proc:  # one table to copy
        mem = Memory(proc.url)
        assert mem.write(new_scope(), "one episode to back up").status_code == 201
        mem.close()
    script = (  # the real backup, paused by its own progress callback once inside the lease
        "import sys, time\n"
        "from pathlib import Path\n"
        "from ampup_memory.ops.backup import backup\n"
        "from ampup_memory.settings import Settings\n"
        "def step(what, n):\n"
        "    if what != 'AMP cells':\n"
        "        print('copying', flush=True)\n"
        "        time.sleep(600)\n"
        "backup(Settings(), Path(sys.argv[1]), step)\n")
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "bk")],
                             env={**os.environ, "AMPUP_MEMORY_HOME": str(home), **env},
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "copying"
        assert not maintenance_lease_free(home, env)
        time.sleep(LEASE + 1)  # renewed: still held after a whole lease
        assert not maintenance_lease_free(home, env)
    finally:
        child.kill()
        child.wait()
    wait_until_lease_free(home, env, time.monotonic())


def _backup_of_one_scope(tmp_path: Path) -> Path:
    home, dest = tmp_path / "home", tmp_path / "backup"
    with serving(home, QUIET) as server:
        mem = Memory(server.url)
        assert mem.write(new_scope(), "one note").status_code == 201
        mem.close()
        with httpx.Client(base_url=server.url, headers=AGENT) as amp:
            assert amp.post("/amp/v1/memories", json={
                "type": "semantic", "content": {"text": "a cell"},
                "identity": {"owner_id": "user_1", "owner_type": "user"}}).status_code == 201
    assert cli_in_process(home, QUIET, "backup", str(dest)).returncode == 0
    return dest


def test_a_damaged_manifest_is_one_error_line(tmp_path: Path) -> None:
    """A manifest that is JSON but not a manifest's shape raised AttributeError / KeyError
    from inside `restore`."""
    dest = _backup_of_one_scope(tmp_path)
    fresh = tmp_path / "fresh"
    for text in ('[]', '"manifest"', '{"format": 1}', '{"format": 1, "files": {}}',
                 '{"format": 1, "files": [{"path": "amp.db"}]}',
                 '{"format": 1, "files": ["amp.db"]}'):
        (dest / "manifest.json").write_text(text)
        done = cli_in_process(fresh, QUIET, "restore", str(dest))
        assert done.returncode == 2, (text, done.stderr)
        assert "Traceback" not in done.stderr and "manifest" in done.stderr, (text, done.stderr)
        assert not fresh.exists() or not any(fresh.iterdir())


def test_a_manifest_naming_no_table_of_ours_or_one_twice_is_refused(tmp_path: Path) -> None:
    """Checksums intact, the manifest edited: a namespace no scope can have ended in
    pyiceberg's traceback, and a table listed twice was appended twice (every row of it
    doubled in the restored home, `rows` counting both)."""
    dest = _backup_of_one_scope(tmp_path)
    good = json.loads((dest / "manifest.json").read_text())
    table = next(f for f in good["files"] if f["kind"] == "table"
                 and f["namespace"] != "memory_system")
    edits = [("../x", table["table"]), ("a__", table["table"]),
             ("memory_system", "episodes"), (table["namespace"], "ledger")]
    fresh = tmp_path / "fresh"
    for edit in [*edits, None]:  # None: the table listed twice
        files = [dict(f) for f in good["files"]]
        if edit is None:
            files.append(dict(table))
        else:
            edited = next(f for f in files if f["path"] == table["path"])
            edited["namespace"], edited["table"] = edit
        (dest / "manifest.json").write_text(json.dumps({**good, "files": files}))
        done = cli_in_process(fresh, QUIET, "restore", str(dest))
        assert done.returncode == 2, (edit, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and "damaged" in done.stderr, done.stderr
        assert not fresh.exists() or not any(fresh.iterdir())
    (dest / "manifest.json").write_text(json.dumps(good))
    assert cli_in_process(fresh, QUIET, "restore", str(dest)).returncode == 0


def test_a_restore_that_fails_midway_leaves_the_home_as_it_was(tmp_path: Path) -> None:
    """A backup whose table rows do not fit this version's layout (checksums intact) failed
    with pyarrow's traceback after amp.db, the catalog and part of the warehouse were
    written, and the home then refused a second restore. Now: one error line, the home
    as it was (its other files kept), and a restore of a good backup into it works."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    good = _backup_of_one_scope(tmp_path)
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    tables = [f for f in manifest["files"] if f["kind"] == "table"]
    last = sorted(tables, key=lambda f: f["path"])[-1]  # restored after other tables
    pq.write_table(pa.table({"not_a_column": [1, 2]}), bad / last["path"])
    data = (bad / last["path"]).read_bytes()
    last["bytes"], last["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (bad / "manifest.json").write_text(json.dumps(manifest))

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "config.toml").write_text("# mine\n")
    failed = cli_in_process(fresh, QUIET, "restore", str(bad))
    assert failed.returncode == 2, failed.stderr
    assert "Traceback" not in failed.stderr and last["path"] in failed.stderr, failed.stderr
    assert sorted(p.name for p in fresh.iterdir()) == ["config.toml"]
    restored = cli_in_process(fresh, QUIET, "restore", str(good))
    assert restored.returncode == 0, restored.stderr


def test_a_backup_of_a_home_with_no_stores_is_refused(tmp_path: Path) -> None:
    """A mistyped home: missing, it failed with SQLAlchemy's message; existing but empty,
    `backup` created a catalog, an index and a warehouse in it and wrote a backup of
    nothing. Both are one line now, and nothing is written anywhere."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for home in (tmp_path / "missing", empty):
        done = cli_in_process(home, QUIET, "backup", str(tmp_path / "bk"))
        assert done.returncode == 2, done.stderr
        assert "nothing to back up" in done.stderr and "sqlalche" not in done.stderr
        assert not (tmp_path / "bk").exists()
    assert not (tmp_path / "missing").exists() and not any(empty.iterdir())


def test_a_backup_interrupted_midway_leaves_no_partial_folder(tmp_path: Path) -> None:
    """Ctrl-C after the cells were copied left DEST with amp.db and no manifest: the same
    command then refused DEST as not empty. The interrupt here is raised from the real
    backup's own progress callback, at its first table."""
    from ampup_memory.ops.backup import backup
    from ampup_memory.settings import Settings

    home = tmp_path / "home"
    with serving(home, QUIET) as server:
        mem = Memory(server.url)
        assert mem.write(new_scope(), "one note").status_code == 201
        mem.close()

    def interrupt(what: str, n: int) -> None:
        if what != "AMP cells":
            raise KeyboardInterrupt

    for dest in (tmp_path / "new", tmp_path / "made-empty"):
        if dest.name == "made-empty":
            dest.mkdir()
        with pytest.raises(KeyboardInterrupt):
            backup(Settings(**{"AMPUP_MEMORY_HOME": str(home)}), dest, interrupt)
        assert not dest.exists() or not any(dest.iterdir())
        assert cli_in_process(home, QUIET, "backup", str(dest)).returncode == 0


KILLED_MIDWAY = """
import os, signal, sys
from pathlib import Path
from ampup_memory.ops import backup as ops
from ampup_memory.settings import Settings

def die(what, n):
    if what != "AMP cells":  # at the first table, the cells already copied
        os.kill(os.getpid(), signal.SIGKILL)

what, home, path = sys.argv[1:]
settings = Settings(**{"AMPUP_MEMORY_HOME": home})
if what == "backup":
    ops.backup(settings, Path(path), die)
else:
    with ops.undone_on_failure(settings):
        ops.restore(settings, Path(path), die)
"""


def test_a_backup_or_restore_killed_midway_runs_again(tmp_path: Path) -> None:
    """kill -9 runs no clean-up: a backup killed after copying the cells left DEST without
    a manifest, and a restore killed midway left a home with stores, so the same command
    run again refused both (`not empty`, `fresh home only`), as docs/cli.md promises it
    does not (tools/crash_paths_audit.py, 3 of 3 kills each), and the half-restored home
    was served as if whole. Each is killed here by its own progress callback, then run
    again."""
    good = _backup_of_one_scope(tmp_path)
    home = tmp_path / "home"
    # The killed backup's maintenance lease frees itself within one lease length.
    env = {**os.environ, **QUIET, "PYTHONPATH": os.pathsep.join(sys.path),
           "AMPUP_MEMORY_LEASE_SECONDS": "3"}
    for what, where, path in (("backup", home, tmp_path / "again"),
                              ("restore", tmp_path / "restored", good)):
        done = subprocess.run([sys.executable, "-c", KILLED_MIDWAY, what, str(where),
                               str(path)], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == -9, done.stderr
    assert any((tmp_path / "again").iterdir()) and any((tmp_path / "restored").iterdir())
    # The half-restored home (some tables, no index) is not served as if it were whole.
    half = cli_in_process(tmp_path / "restored", QUIET, "lifecycle", "run", "--dry-run")
    assert half.returncode == 2 and "restore" in half.stderr, half.stderr
    again = cli_in_process(home, QUIET, "backup", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    listed = [{f["path"] for f in json.loads((b / "manifest.json").read_text())["files"]}
              for b in (good, tmp_path / "again")]
    assert listed[0] == listed[1]
    restored = cli_in_process(tmp_path / "restored", QUIET, "restore", str(good))
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout.strip().splitlines()[-1])["rows"] > 0
    assert not list((tmp_path / "restored").glob(".restore-*"))
    assert not list((tmp_path / "again").glob(".backup-*"))


def test_a_home_named_relatively_opens_from_anywhere(tmp_path: Path) -> None:
    """`restore BK --home rel` (or any command with a relative home) wrote table metadata
    paths relative to the working directory: the same home opened by its full path, or
    from another directory, could not open its tables and `serve` stopped at start."""
    import ampup_memory

    good = _backup_of_one_scope(tmp_path)
    source = str(Path(ampup_memory.__file__).parents[1])  # this checkout, from any cwd
    done = subprocess.run(
        [sys.executable, "-m", "ampup_memory.cli", "restore", str(good), "--home", "rel"],
        env={**os.environ, **QUIET, "PYTHONPATH": source}, cwd=tmp_path,
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with serving(tmp_path / "rel", QUIET) as server:  # by its full path, from elsewhere
        mem = Memory(server.url)
        scopes = httpx.get(f"{server.url}/amp/v1/memories", headers=AGENT,
                           params={"owner_id": "user_1"}).json()["results"]
        assert [c["content"]["text"] for c in scopes] == ["a cell"]
        assert mem.write(new_scope(), "after a relative restore").status_code == 201
        mem.close()


def _rewrite_table(backup: Path, path: str, change: Any) -> None:
    """Replace one table's rows in a backup by ``change(rows)``, its checksum updated."""
    import hashlib

    import pyarrow.parquet as pq

    pq.write_table(change(pq.read_table(backup / path)), backup / path)
    manifest = json.loads((backup / "manifest.json").read_text())
    entry = next(f for f in manifest["files"] if f["path"] == path)
    data = (backup / path).read_bytes()
    entry["bytes"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (backup / "manifest.json").write_text(json.dumps(manifest))


def test_a_backup_made_before_a_column_was_added_restores(tmp_path: Path) -> None:
    """Tables gain optional columns on upgrade (the ledger's `merged` came with branches),
    but `restore` cast the backup's rows to this version's layout, which needs the same
    columns: a backup taken before an upgrade failed to restore after it. A missing
    optional column now reads as null, as an upgraded table's older rows do; a column this
    version does not know (a backup by a newer version) is refused, never dropped."""
    import pyarrow as pa

    good = _backup_of_one_scope(tmp_path)
    manifest = json.loads((good / "manifest.json").read_text())
    namespace = next(f["namespace"] for f in manifest["files"]
                     if f["kind"] == "table" and f["namespace"] != "memory_system")
    scope = namespace.replace("__", "/")
    older, newer = tmp_path / "older", tmp_path / "newer"
    shutil.copytree(good, older)
    shutil.copytree(good, newer)
    ledger = "tables/memory_system/ledger.parquet"
    _rewrite_table(older, ledger, lambda rows: rows.drop_columns(["merged"]))
    _rewrite_table(newer, ledger, lambda rows: rows.append_column(
        "from_the_future", pa.array(["x"] * rows.num_rows)))

    refused = cli_in_process(tmp_path / "from-newer", QUIET, "restore", str(newer))
    assert refused.returncode == 2 and "from_the_future" in refused.stderr, refused.stderr
    answers = []
    for name, backup in (("from-good", good), ("from-older", older)):
        done = cli_in_process(tmp_path / name, QUIET, "restore", str(backup))
        assert done.returncode == 0, done.stderr
        with serving(tmp_path / name, QUIET) as server:
            mem = Memory(server.url)
            answers.append(mem.ledger(scope))
            mem.close()
    assert answers[0] == answers[1] and answers[0]
