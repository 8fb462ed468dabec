"""``ampup-memory doctor``: is each configured engine reachable and writable?

One check for the home folder, then one per engine (AMP cell store, Iceberg catalog,
warehouse, search index, and each configured model endpoint), each ending in one line:
``ok`` or exactly what is wrong. A check writes nothing that stays: the SQL ones roll
back, the warehouse one deletes the object it wrote, the home one the file it wrote, and
a folder or SQLite file a probe had to make is removed with it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ampup_memory.errors import disk_full, driver_said, pgvector_fix
from ampup_memory.settings import (
    MODEL_ROLES,
    Settings,
    env_name,
    file_in_the_way,
    mask_secrets,
    mask_uri,
)

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from sqlalchemy import Engine

CONNECT_TIMEOUT_SECONDS = 5


@dataclass(frozen=True)
class Check:
    name: str      # "AMP store", "catalog", ...
    where: str     # the masked URI or URL it checks
    run: Callable[[], str]  # returns what it verified; raises on a problem


@dataclass(frozen=True)
class Result:
    check: Check
    ok: bool
    said: str

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        return f"{mark}  {self.check.name}: {self.check.where}: {self.said}"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# Filesystems of the kernel: a folder there holds none of our files, whatever `access()`
# says (as root every path "may be written"; /proc refuses the mkdir, /dev takes files
# into memory, and a mkdir under /sys/fs/cgroup makes a cgroup).
PSEUDO_FILESYSTEMS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
    "securityfs", "pstore", "bpf", "configfs", "fusectl", "mqueue", "hugetlbfs", "autofs",
    "binfmt_misc", "efivarfs", "selinuxfs", "rpc_pipefs", "nsfs", "nfsd"})
MOUNTINFO = Path("/proc/self/mountinfo")


def _filesystem_of(path: Path) -> tuple[str, str] | None:
    """(mount point, filesystem type) of the mount holding ``path`` (an existing one), from
    Linux's mountinfo; None where there is none to read."""
    try:
        lines = MOUNTINFO.read_text().splitlines()
    except OSError:
        return None
    target = os.path.realpath(path)
    best: tuple[str, str] | None = None
    for line in lines:
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        # The kernel writes a space, tab, newline or backslash as an octal escape (\040).
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, fields[dash + 1])
    return best


def _on_a_disk(what: str, path: Path, fix: str) -> None:
    """Raise OSError when local ``path`` (or the nearest folder above it that exists) is on
    a kernel filesystem or a read-only one."""
    at = path.absolute()
    while not at.exists():
        at = at.parent
    mount = _filesystem_of(at)
    if mount is not None and mount[1] in PSEUDO_FILESYSTEMS:
        raise OSError(f"{what} is on {mount[0]}, a {mount[1]} filesystem of the kernel "
                      f"that holds no files: {fix}")
    if hasattr(os, "statvfs") and os.statvfs(at).f_flag & os.ST_RDONLY:
        raise OSError(f"{what} is on a read-only filesystem ({at}): {fix}")


def home_holds_files(home: Path) -> str:
    """Whether the home folder can hold the server's files, as `serve` would use it: not on
    a kernel filesystem nor a read-only one, and a file written there (in the folders
    `serve` would make, removed after) is fsynced and removed. Raises OSError in one
    line naming what is wrong."""
    blocker = file_in_the_way(home)
    if blocker is not None:
        raise OSError(f"home {home} cannot be created: {blocker} is a file, not a folder")
    fix = f"set {env_name('home')} or --home to a folder on a disk"
    _on_a_disk(f"home {home}", home, fix)
    made = _missing_folders(str(home))
    probe = home / f".ampup-doctor-{uuid.uuid4().hex[:12]}"
    try:
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"ampup-memory doctor probe")
            os.fsync(fd)
        finally:
            os.close(fd)
        probe.unlink()
    except OSError as exc:
        why = exc.strerror or str(exc)
        if disk_full(exc):  # a disk it is: the home is right, the disk has no room
            fix = f"free space on that disk, or set {env_name('home')} or --home to a " \
                "folder on another"
        raise OSError(f"home {home} cannot hold files: writing, syncing and removing one "
                      f"failed ({why}): {fix}") from None
    finally:
        with contextlib.suppress(OSError):  # a probe that could not be removed was said
            probe.unlink(missing_ok=True)
        for folder in reversed(made):
            try:
                os.rmdir(folder)
            except OSError:  # something else came to live there meanwhile: it stays
                break
    if made:
        return f"home {home} does not exist yet: `serve` creates it (a file there was " \
            "written, synced and removed)"
    return "a file was written, synced and removed"


def _home_to_create(home: Path) -> str:
    """The home folder does not exist yet: fine if `serve` can create it and keep its
    files there (`home_holds_files`)."""
    home_holds_files(home)
    return f"home {home} does not exist yet: `serve` creates it"


def _sqlite_write(path: Path) -> None:
    """Take the file's write lock and write in a transaction that is rolled back."""
    conn = sqlite3.connect(path, timeout=CONNECT_TIMEOUT_SECONDS, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")  # takes the write lock: the file is writable
        conn.execute("CREATE TABLE ampup_doctor_probe (x INTEGER)")
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def _missing_folders(path: str) -> list[str]:
    """The folders of local ``path`` that do not exist yet, outermost first."""
    missing: list[str] = []
    folder = os.path.abspath(path)
    while not os.path.exists(folder):
        missing.insert(0, folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return missing


def _sql_check(uri: str, home: Path, vectors: bool = False) -> Callable[[], str]:
    """Connect and write in a transaction that is rolled back. ``vectors``: the store keeps
    vectors (the cell store, the search index), so on PostgreSQL the ``vector`` extension
    must be there or the role allowed to create it, as `serve` does (also rolled back)."""
    scheme = urlsplit(uri).scheme

    def sqlite_probe() -> str:
        from ampup_memory.ops.backup import sqlite_file

        path = sqlite_file(uri)
        assert path is not None
        if not path.parent.is_dir():
            if path.parent.absolute() == home.absolute():
                return _home_to_create(home)
            raise OSError(f"folder {path.parent} does not exist")
        if not path.exists():
            # Probed where the file would be made, then removed: doctor leaves no trace.
            probe = path.with_name(f"{path.name}.doctor-{uuid.uuid4().hex[:12]}")
            try:
                _sqlite_write(probe)
            finally:
                for suffix in ("", "-journal", "-wal", "-shm"):
                    probe.with_name(probe.name + suffix).unlink(missing_ok=True)
            return f"no file yet, folder writable: `serve` creates {path.name}"
        _sqlite_write(path)
        return "sqlite file writable"

    def postgres_probe() -> str:
        import psycopg

        from ampup_memory.amp.store.postgres import conninfo_from_uri

        with psycopg.connect(conninfo_from_uri(uri),
                             connect_timeout=CONNECT_TIMEOUT_SECONDS) as conn:
            version = conn.execute("SHOW server_version").fetchone()
            conn.execute("CREATE TABLE ampup_doctor_probe (x integer)")
            conn.execute("INSERT INTO ampup_doctor_probe VALUES (1)")
            if vectors:
                try:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                except psycopg.Error as exc:
                    raise OSError(f"{driver_said(exc).rstrip('.')}.{pgvector_fix(exc)}"
                                  ) from None
            conn.rollback()
        return f"PostgreSQL {version[0] if version else '?'} reachable and writable" + (
            ", pgvector ready" if vectors else "")

    if scheme == "sqlite":
        return sqlite_probe
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        return postgres_probe

    def unknown() -> str:
        raise ValueError(f"unsupported URI scheme {scheme}:// (sqlite:/// or postgresql://)")
    return unknown


def _warehouse_check(settings: Settings) -> Callable[[], str]:
    def probe() -> str:
        from ampup_memory.memory import warehouse

        props = warehouse.catalog_properties(settings)
        # Straight under the warehouse: no folder of its own left behind on S3.
        location = f"{settings.resolved_warehouse.rstrip('/')}/_ampup_doctor_{uuid.uuid4().hex}"
        io = warehouse.file_io(props, location)
        made: list[str] = []  # local folders the probe made, removed with it
        if not warehouse.is_s3(location):
            fs, path = warehouse.filesystem(io, location)
            _on_a_disk(f"warehouse folder {path.rsplit('/', 1)[0]}", Path(path),
                       f"set {env_name('warehouse')} to a folder on a disk")
            made = _missing_folders(path.rsplit("/", 1)[0])
            fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        payload = b"ampup-memory doctor probe"
        try:
            with io.new_output(location).create(overwrite=True) as out:
                out.write(payload)
            try:
                with io.new_input(location).open() as got:
                    if got.read() != payload:
                        raise OSError(
                            "the probe object read back differs from what was written")
            finally:
                io.delete(location)
        finally:
            for folder in reversed(made):
                try:
                    os.rmdir(folder)
                except OSError:  # something else came to live there meanwhile: it stays
                    break
        _tables_under(settings, props["warehouse"])
        tables = _metadata_present(settings, io, location)
        said = "wrote, read back and deleted a probe object"
        if tables:
            said += f"; the current metadata file of each of the catalog's {tables} " \
                "tables is there"
        return said
    return probe


@contextlib.contextmanager
def _catalog(settings: Settings) -> Iterator[Engine | None]:
    """An engine on the configured catalog, or None for an embedded one not made yet."""
    from sqlalchemy import create_engine

    from ampup_memory.memory.tables import sqlalchemy_url
    from ampup_memory.ops.backup import sqlite_file

    uri = settings.resolved_catalog_uri
    db = sqlite_file(uri)
    if db is not None and not db.exists():
        yield None
        return
    engine = create_engine(sqlalchemy_url(uri, setting="AMPUP_MEMORY_CATALOG_URI"))
    try:
        yield engine
    finally:
        engine.dispose()


def _tables_under(settings: Settings, location: str) -> None:
    """Raise where the catalog's tables were made under another warehouse (what `serve`
    would refuse to start on). A catalog not made yet, or not reachable (its own check
    says why), has nothing to compare."""
    from ampup_memory.memory.tables import moved_warehouse, table_outside

    with _catalog(settings) as engine:
        if engine is None:
            return
        try:
            stray = table_outside(engine, location)
        except Exception:  # noqa: BLE001 - the catalog's own check reports an unreachable one
            return
    if stray is not None:
        raise ValueError(moved_warehouse(location, stray))


def _catalog_locations(settings: Settings) -> list[tuple[str, str, str]]:
    """``(namespace, table, current metadata file)`` of every table the catalog names; []
    for a catalog not made yet or not reachable (its own check says why)."""
    from pyiceberg.catalog.sql import IcebergTables
    from sqlalchemy import inspect, select

    from ampup_memory.memory.tables import CATALOG_NAME

    stmt = select(IcebergTables.table_namespace, IcebergTables.table_name,
                  IcebergTables.metadata_location).where(
        IcebergTables.catalog_name == CATALOG_NAME)
    with _catalog(settings) as engine:
        if engine is None:
            return []
        try:
            with engine.connect() as conn:
                if not inspect(conn).has_table(IcebergTables.__tablename__):
                    return []
                return [(ns, name, loc) for ns, name, loc in conn.execute(stmt) if loc]
        except Exception:  # noqa: BLE001 - the catalog's own check reports an unreachable one
            return []


def _metadata_present(settings: Settings, io: FileIO, location: str) -> int:
    """How many tables the catalog names, once each one's current metadata file is found
    in the warehouse; raise OSError naming the missing ones. A catalog restored from a
    dump without the bucket as of the dump names files a few commits have since deleted:
    `serve` then stops on the first table it opens (docs/deployment.md, Backups), and the
    probe object alone said nothing of it."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.fs as pafs

    from ampup_memory.memory import warehouse

    tables = _catalog_locations(settings)
    if not tables:
        return 0
    fs, _ = warehouse.filesystem(io, location)

    def missing(entry: tuple[str, str, str]) -> bool:
        _, _, meta = entry
        try:
            info = fs.get_file_info(warehouse.filesystem(io, meta)[1])
        except OSError as exc:
            if warehouse.not_found(exc):
                return True
            raise
        return bool(info.type == pafs.FileType.NotFound)

    # One HEAD a table on S3: in parallel, as a store's round trip is most of the cost.
    with ThreadPoolExecutor(max_workers=16) as pool:
        gone = [t for t, lost in zip(tables, pool.map(missing, tables), strict=True) if lost]
    if gone:
        named = ", ".join(f"{ns}.{name} ({mask_uri(meta)})" for ns, name, meta in gone[:3])
        more = f" and {len(gone) - 3} more" if len(gone) > 3 else ""
        raise OSError(
            f"{len(gone)} of the catalog's {len(tables)} tables have no current metadata "
            f"file in the warehouse: {named}{more}. `serve` would stop on them. A catalog "
            "restored from a dump needs the bucket as of the dump (docs/deployment.md, "
            "Backups); files deleted outside the server cannot be made again here")
    return len(tables)


def _endpoint_check(base_url: str, api_key: str | None) -> Callable[[], str]:
    def probe() -> str:
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        answer = httpx.get(base_url.rstrip("/") + "/models", headers=headers,
                           timeout=CONNECT_TIMEOUT_SECONDS)
        if answer.status_code in (401, 403):
            raise PermissionError(f"the API key was refused (HTTP {answer.status_code})")
        if answer.status_code >= 400:
            raise OSError(f"it would not list its models (HTTP {answer.status_code}); is the "
                          "base URL right?")
        return "reachable: it listed its models"
    return probe


def checks(settings: Settings) -> list[Check]:
    found = [
        # First: every embedded store below lives in it, and `serve` makes it regardless.
        Check("home", str(settings.home), lambda: home_holds_files(settings.home)),
        Check("AMP store", mask_uri(settings.resolved_store_uri),
              _sql_check(settings.resolved_store_uri, settings.home, vectors=True)),
        Check("catalog", mask_uri(settings.resolved_catalog_uri),
              _sql_check(settings.resolved_catalog_uri, settings.home)),
        Check("warehouse", mask_uri(settings.resolved_warehouse), _warehouse_check(settings)),
        Check("index", mask_uri(settings.resolved_index_uri),
              _sql_check(settings.resolved_index_uri, settings.home, vectors=True)),
    ]
    endpoints: dict[str, tuple[str, str | None]] = {}
    if settings.model_base_url:
        endpoints["model"] = (settings.model_base_url, settings.model_api_key)
    for role in MODEL_ROLES:
        url = getattr(settings, f"{role}_model_base_url")
        if url and url != settings.model_base_url:
            key = getattr(settings, f"{role}_model_api_key") or settings.model_api_key
            endpoints[f"{role} model"] = (url, key)
    if settings.embedding_provider == "openai-compatible" and settings.embedding_base_url:
        endpoints["embedding model"] = (settings.embedding_base_url,
                                        settings.embedding_api_key)
    for name, (url, key) in endpoints.items():
        found.append(Check(name, mask_uri(url), _endpoint_check(url, key)))
    return found


def secrets_of(settings: Settings) -> list[str]:
    """Passwords and keys an error message might quote, to be masked in it."""
    out = [settings.s3_secret_access_key, settings.model_api_key,
           settings.embedding_api_key]
    for uri in (settings.resolved_store_uri, settings.resolved_catalog_uri,
                settings.resolved_index_uri):
        try:
            out.append(urlsplit(uri).password)
        except ValueError:
            continue
    return [s for s in out if s]


def run_check(check: Check, secrets: list[str]) -> Result:
    try:
        return Result(check, True, check.run())
    except Exception as exc:  # each engine's own error says what is wrong; one line of it
        return Result(check, False, mask_secrets(_one_line(exc), list(secrets)))
