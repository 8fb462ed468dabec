"""`ampup-memory doctor` against real engines: embedded PostgreSQL and a real S3 server."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.memory_support import cli_in_process
from tests.model_support import ScriptedModel
from tests.pg import PostgresFactory
from tests.s3 import SECRET_KEY, S3Server, s3  # noqa: F401  (session fixture)
from tests.server_process import free_port

pytestmark = pytest.mark.postgres


def _lines(out: str) -> dict[str, str]:
    """``{engine name: its line}`` from doctor's output."""
    found = {}
    for line in out.splitlines():
        mark, _, rest = line.partition("  ")
        name = rest.strip().split(":", 1)[0]
        found[name] = line
    return found


def test_doctor_says_ok_for_each_engine(postgres: PostgresFactory, s3: S3Server,  # noqa: F811
                                        tmp_path: Path) -> None:
    url = postgres.new_database("doctor")
    env = {**s3.env(s3.new_bucket("doctor")), "AMP_STORE_URI": url,
           "AMPUP_MEMORY_CATALOG_URI": url, "AMPUP_MEMORY_INDEX_URI": url}
    done = cli_in_process(tmp_path, env, "doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = _lines(done.stdout)
    # The home too: `serve` makes it (and its config file lives there) whatever the stores.
    assert set(lines) == {"home", "AMP store", "catalog", "warehouse", "index"}, done.stdout
    assert all(line.startswith("ok") for line in lines.values()), done.stdout
    assert "wrote, read back and deleted" in lines["warehouse"]
    assert "5/5" in done.stderr  # the progress bar went all the way
    # The probe left nothing behind in the bucket.
    bucket = urlsplit(env["AMPUP_MEMORY_WAREHOUSE"]).netloc
    assert [k for k in s3.keys(bucket) if "doctor" in k] == []


def test_doctor_names_each_broken_engine(postgres: PostgresFactory, s3: S3Server,  # noqa: F811
                                         tmp_path: Path) -> None:
    good = postgres.new_database("doctor")
    parts = urlsplit(good)
    # The same database on a port nothing listens on.
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/{parts.path.lstrip('/')}"
    env = {**s3.env("no-such-bucket-here"), "AMP_STORE_URI": dead,
           "AMPUP_MEMORY_CATALOG_URI": good, "AMPUP_MEMORY_INDEX_URI": good,
           "AMPUP_MEMORY_MODEL_BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
           "AMPUP_MEMORY_MODEL": "m"}
    done = cli_in_process(tmp_path, env, "doctor")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = _lines(done.stdout)
    assert lines["AMP store"].startswith("FAIL") and "refused" in lines["AMP store"].lower()
    assert lines["warehouse"].startswith("FAIL") and "bucket" in lines["warehouse"].lower()
    assert lines["model"].startswith("FAIL")
    assert lines["catalog"].startswith("ok") and lines["index"].startswith("ok")
    assert "3 of 6 checks failed" in done.stderr
    assert SECRET_KEY not in done.stdout + done.stderr
    # Each failure is one line: nothing but the home's and five engine lines on stdout.
    assert len(done.stdout.strip().splitlines()) == 6


def test_doctor_fails_a_database_without_pgvector_the_role_may_not_create(
        postgres: PostgresFactory, tmp_path: Path) -> None:
    """The cell store and the search index need pgvector; `serve` makes the extension, which
    a role that is not allowed to create it cannot (a database made by hand, without
    deploy/postgres-init.sql). doctor said ok there and `serve` then stopped: it names the
    fix now. A role that may create it is ok, and the probe leaves no extension behind."""
    import psycopg

    role, name = f"doctor_{uuid.uuid4().hex[:8]}", f"novector_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres.admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD 'pw'")  # ours: prefix + hex
        conn.execute(f'CREATE DATABASE "{name}" OWNER "{role}"')
    try:
        as_superuser = urlsplit(postgres.url_for(name))
        host = as_superuser.netloc.rpartition("@")[2]
        url = urlunsplit(as_superuser._replace(netloc=f"{role}:pw@{host}"))
        env = {"AMP_STORE_URI": url, "AMPUP_MEMORY_CATALOG_URI": url,
               "AMPUP_MEMORY_INDEX_URI": url}
        done = cli_in_process(tmp_path, env, "doctor")
        assert done.returncode == 1, done.stdout + done.stderr
        lines = _lines(done.stdout)
        for engine in ("AMP store", "index"):
            assert lines[engine].startswith("FAIL"), lines
            assert "CREATE EXTENSION vector" in lines[engine], lines
        assert lines["catalog"].startswith("ok"), lines  # the catalog needs no vectors
        good = postgres.url_for(name)
        done = cli_in_process(tmp_path, {**env, "AMP_STORE_URI": good,
                                         "AMPUP_MEMORY_INDEX_URI": good}, "doctor")
        assert done.returncode == 0, done.stdout + done.stderr
        with psycopg.connect(good) as conn:
            assert conn.execute(
                "SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None
    finally:
        with psycopg.connect(postgres.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_doctor_refuses_a_warehouse_it_cannot_use(tmp_path: Path) -> None:
    """Refused where the settings are read, as by every command (it was a FAIL line of
    doctor's, and taken by the commands that open no table)."""
    done = cli_in_process(tmp_path, {"AMPUP_MEMORY_WAREHOUSE": "s3:///prefix-without-bucket"},
                          "doctor")
    assert done.returncode == 2 and done.stdout == ""
    assert "invalid setting warehouse (AMPUP_MEMORY_WAREHOUSE): names no bucket" \
        in done.stderr, done.stderr



def test_a_changed_warehouse_on_a_home_with_tables_is_refused(tmp_path: Path) -> None:
    """The tables stay where the warehouse was when they were made: a home started again
    with another warehouse would put new scopes there and old ones stay behind (a backup
    copies the configured warehouse only). Every command that opens the catalog refuses
    it in one line; doctor names it; the old setting still works."""
    home = tmp_path / "home"
    corpus = tmp_path / "a.txt"
    corpus.write_text("Dana: the renewal is set at 120 seats\n")
    assert cli_in_process(home, {}, "load", str(corpus), "--scope", "acme/sales").returncode == 0
    moved = {"AMPUP_MEMORY_WAREHOUSE": f"file://{tmp_path / 'elsewhere'}"}
    for args in (("load", str(corpus), "--scope", "acme/other"),
                 ("serve", "--port", str(free_port()))):
        done = cli_in_process(home, moved, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "tables were made under another one" in done.stderr, done.stderr
        assert f"{home}/warehouse/acme__sales" in done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "elsewhere").exists()  # nothing was written there
    done = cli_in_process(home, moved, "doctor")
    assert done.returncode == 1
    lines = _lines(done.stdout)
    assert lines["warehouse"].startswith("FAIL"), lines
    assert "made under another one" in lines["warehouse"]
    assert lines["catalog"].startswith("ok"), lines
    done = cli_in_process(home, {}, "load", str(corpus), "--scope", "acme/other")
    assert done.returncode == 0, done.stderr


def test_doctor_names_tables_whose_current_metadata_file_is_gone(tmp_path: Path) -> None:
    """A catalog restored from a dump without the warehouse as of the dump names metadata
    files later commits deleted: `serve` stops on them. doctor said ok (it only wrote a
    probe object); it now finds each table's current metadata file and names the lost."""
    home = tmp_path / "home"
    corpus = tmp_path / "a.txt"
    corpus.write_text("Dana: the renewal is set at 120 seats\n")
    assert cli_in_process(home, {}, "load", str(corpus), "--scope", "acme/sales").returncode == 0
    done = cli_in_process(home, {}, "doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    warehouse_line = _lines(done.stdout)["warehouse"]
    assert "the current metadata file of each of the catalog's" in warehouse_line
    tables = int(warehouse_line.rsplit("catalog's ", 1)[1].split()[0])
    assert tables >= 2, warehouse_line  # the scope's tables and the system ones
    with sqlite3.connect(home / "catalog.db") as catalog:
        (location,) = catalog.execute(
            "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ? AND "
            "table_name = ?", ("acme__sales", "episodes")).fetchone()
    Path(urlsplit(location).path).unlink()
    done = cli_in_process(home, {}, "doctor")
    assert done.returncode == 1, done.stdout
    lines = _lines(done.stdout)
    assert lines["warehouse"].startswith("FAIL"), lines
    assert f"1 of the catalog's {tables} tables have no current metadata file" \
        in lines["warehouse"], lines["warehouse"]
    assert "acme__sales.episodes" in lines["warehouse"]
    assert lines["catalog"].startswith("ok"), lines
    assert "Traceback" not in done.stderr


def test_doctor_before_the_first_serve_says_the_home_will_be_created(tmp_path: Path) -> None:
    done = cli_in_process(tmp_path / "not-yet", {}, "doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = _lines(done.stdout)
    for name in ("AMP store", "catalog", "index"):
        assert lines[name].startswith("ok") and "`serve` creates it" in lines[name], lines
    assert lines["warehouse"].startswith("ok"), lines
    assert not (tmp_path / "not-yet").exists()  # probed, and no trace left
    # A home that cannot be created (under a plain file) is a failure.
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = cli_in_process(blocker / "home", {}, "doctor")
    assert done.returncode == 1
    assert "cannot be created" in _lines(done.stdout)["AMP store"], done.stdout


def test_doctor_on_an_empty_home_leaves_it_empty(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = cli_in_process(home, {}, "doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = _lines(done.stdout)
    assert lines["home"].endswith("a file was written, synced and removed"), lines
    for name, file in (("AMP store", "amp.db"), ("catalog", "catalog.db"),
                       ("index", "index.db")):
        assert lines[name].startswith("ok") and f"`serve` creates {file}" in lines[name]
    assert lines["warehouse"].startswith("ok"), lines
    assert list(home.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self/mountinfo").is_file(), reason="Linux /proc only")
def test_doctor_fails_a_home_on_a_kernel_filesystem(tmp_path: Path) -> None:
    """As root, `os.access` says any path may be written, so a home under /proc was `ok`
    (`serve` creates it) for every SQLite store, and `serve` then failed. The home is
    checked first, as `serve` uses it: on a kernel or read-only filesystem, or where a
    file cannot be written, synced and removed, it fails in one line saying so."""
    home = Path("/proc") / f"ampup-doctor-{tmp_path.name}"
    done = cli_in_process(home, {}, "doctor")
    assert done.returncode == 1, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"FAIL  home: {home}: ") and "a proc filesystem of the kernel" \
        in first and "AMPUP_MEMORY_HOME" in first, done.stdout
    for name in ("AMP store", "catalog", "index"):  # no longer "`serve` creates it"
        assert _lines(done.stdout)[name].startswith("FAIL"), done.stdout
    # A file warehouse there is refused alike, with the setting that moves it.
    done = cli_in_process(tmp_path / "home", {"AMPUP_MEMORY_WAREHOUSE": f"file://{home}"},
                          "doctor")
    assert done.returncode == 1
    said = _lines(done.stdout)["warehouse"]
    assert "filesystem of the kernel" in said and "AMPUP_MEMORY_WAREHOUSE" in said, said
    assert _lines(done.stdout)["home"].startswith("ok"), done.stdout
    assert not (tmp_path / "home").exists()  # probed, and no trace left


def test_doctor_fails_a_home_on_a_read_only_filesystem(tmp_path: Path) -> None:
    """A home on a read-only filesystem (a read-only mount, a snapshot) is one FAIL line
    saying so and naming the setting that moves it: root may write through permission
    bits, not through a read-only mount."""
    point = tmp_path / "ro"
    point.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(point)],
        capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("needs a read-only mount (root, where mounting is allowed)")
    home = point / "home"
    try:
        done = cli_in_process(home, {}, "doctor")
    finally:
        subprocess.run(["umount", str(point)], check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"FAIL  home: {home}: ") and "read-only filesystem" in first \
        and "AMPUP_MEMORY_HOME" in first, done.stdout


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a folder without write bits")
def test_doctor_fails_a_home_where_no_file_can_be_written(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    (locked / "home").mkdir(parents=True)
    locked.joinpath("home").chmod(0o500)
    try:
        done = cli_in_process(locked / "home", {}, "doctor")
    finally:
        locked.joinpath("home").chmod(0o700)
    assert done.returncode == 1
    assert "cannot hold files" in _lines(done.stdout)["home"], done.stdout


def test_an_empty_home_setting_is_a_settings_error(tmp_path: Path) -> None:
    done = cli_in_process(tmp_path, {"AMPUP_MEMORY_HOME": ""}, "doctor")
    assert done.returncode != 0 and done.stdout == ""
    assert "invalid setting home (AMPUP_MEMORY_HOME)" in done.stderr, done.stderr
    assert "is empty" in done.stderr and "Traceback" not in done.stderr


def test_doctor_says_a_model_answered_in_plain_words(tmp_path: Path,
                                                    scripted_model: ScriptedModel) -> None:
    env = {"AMPUP_MEMORY_MODEL_BASE_URL": scripted_model.url + "/v1",
           "AMPUP_MEMORY_MODEL": "scripted"}
    done = cli_in_process(tmp_path, env, "doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _lines(done.stdout)["model"].endswith("reachable: it listed its models"), done.stdout
