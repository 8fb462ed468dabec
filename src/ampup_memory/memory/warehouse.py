"""The Iceberg warehouse: where the tables' files live, a local folder or an S3 bucket.

``AMPUP_MEMORY_WAREHOUSE`` is ``file:///path`` (the embedded default) or
``s3://bucket/prefix`` on any S3-compatible store, with the ``s3_*`` settings. Everything
that touches warehouse files (table writes, orphan-file cleanup, a workspace's drop) goes
through the catalog's FileIO, ``WarehouseIO`` (pyiceberg's ``PyArrowFileIO`` with fewer S3
requests and our timeouts and attempts, below), configured here once: the two
kinds of warehouse take one code path, and no caller opens a warehouse file with
``os``/``pathlib``. Backup copies a ``file://`` warehouse only (ops/backup.py says so).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
from pyarrow import fs as pafs
from pyiceberg.io import FileIO, InputFile, OutputFile, load_file_io
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO

from ampup_memory.errors import ConfigurationError
from ampup_memory.settings import S3_SCHEMES, Settings, env_name, mask_uri, warehouse_problem

# Region sent to an S3-compatible endpoint that was given none (MinIO, moto, SeaweedFS and
# Ceph accept any; without one pyarrow would ask AWS where the bucket lives).
ENDPOINT_DEFAULT_REGION = "us-east-1"
# Our own FileIO property (pyiceberg passes unknown ones through): attempts per S3 request.
S3_ATTEMPTS = "ampup.s3.attempts"
# Iceberg's own metadata files, read whole and never rewritten in place (every name
# carries a UUID or a snapshot id): table metadata, manifest lists and manifests.
IMMUTABLE_SUFFIXES = (".metadata.json", ".avro")
# Kept in memory by location, newest used last: a file larger than this is not kept.
FILE_CACHE_BYTES = 64 << 20
FILE_CACHE_LARGEST = 4 << 20


class _FileCache:
    """The bytes of Iceberg metadata files this process wrote or read, by location.

    Safe because such a file never changes once written: a commit writes new files and
    moves the catalog's pointer, and the names are unique. A file deleted since (old
    metadata, expired snapshots) is read as it was, which is what a reader holding the
    old pointer would have read a moment earlier; its commit's compare-and-set still
    fails on the moved pointer."""

    def __init__(self, limit: int = FILE_CACHE_BYTES) -> None:
        self.limit = limit
        self.size = 0
        self._files: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, location: str) -> bytes | None:
        with self._lock:
            data = self._files.get(location)
            if data is not None:
                self._files.move_to_end(location)
            return data

    def put(self, location: str, data: bytes) -> None:
        if len(data) > FILE_CACHE_LARGEST:
            return
        with self._lock:
            old = self._files.pop(location, None)
            self.size += len(data) - (len(old) if old is not None else 0)
            self._files[location] = data
            while self.size > self.limit:
                _, dropped = self._files.popitem(last=False)
                self.size -= len(dropped)

    def drop(self, location: str) -> None:
        with self._lock:
            old = self._files.pop(location, None)
            if old is not None:
                self.size -= len(old)


FILES = _FileCache()


log = logging.getLogger("ampup_memory.memory")
# How long a drop waits for this process's pending deletions before it lists (past it, a
# late one may leave a folder marker behind: an empty key, nothing a reader sees).
DRAIN_SECONDS = 30.0


class _Deleter:
    """Deletes superseded table metadata files after the commit that superseded them, on
    one background thread, so a commit does not wait for them: on S3 each is three round
    trips (pyarrow's HEAD, the DELETE, and the folder marker it puts back), 3 of a
    commit's 7. pyiceberg deletes them right after its commit and only warns when that
    fails: the file is unreferenced either way, and maintenance's orphan-file pass
    removes one left behind (a failed deletion, or one pending when the process ended)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], None] | threading.Event] = (
            queue.SimpleQueue())
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, delete: Callable[[], None]) -> None:
        self._put(delete)

    def drain(self, timeout: float = DRAIN_SECONDS) -> None:
        """Wait until every deletion submitted before has been tried."""
        done = threading.Event()
        self._put(done)
        done.wait(timeout)

    def _put(self, item: Callable[[], None] | threading.Event) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="ampup-metadata-deletes")
                self._thread.start()
        self._queue.put(item)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                item()
            except FileNotFoundError:
                pass
            except Exception as exc:  # an orphan for maintenance, as pyiceberg would leave
                log.warning("could not delete a superseded table metadata file: %s",
                            " ".join(str(exc).split()))


DELETES = _Deleter()


def _immutable(location: str) -> bool:
    return location.endswith(IMMUTABLE_SUFFIXES)


class _Written:
    """The stream a new file is written through: pyarrow's, noting how many bytes went
    (pyiceberg asks a new data file's and manifest's length right after: a HEAD each)
    and, for a metadata file, its bytes, kept once the store has taken them all."""

    def __init__(self, file: WarehouseFile, stream: Any) -> None:
        self._file = file
        self._stream = stream
        self._kept: list[bytes] | None = [] if _immutable(file.location) else None

    def write(self, data: Any) -> int:
        if self._kept is not None:
            self._kept.append(bytes(data))
        return int(self._stream.write(data))

    def close(self) -> None:
        if self._stream.closed:
            return
        size = self._stream.tell()
        self._stream.close()  # raises if the store refused the file: nothing noted then
        self._file.written_size = size
        if self._kept is not None:
            FILES.put(self._file.location, b"".join(self._kept))

    def __enter__(self) -> _Written:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:  # tell, flush, closed, writable ...
        return getattr(self._stream, name)


class WarehouseFile(PyArrowFile):
    """pyiceberg's file, without the round trips its metadata files do not need."""

    written_size: int | None = None

    def __len__(self) -> int:
        if self.written_size is not None:
            return self.written_size
        data = FILES.get(self.location)
        return len(data) if data is not None else super().__len__()

    def exists(self) -> bool:
        return FILES.get(self.location) is not None or super().exists()

    def open(self, seekable: bool = True) -> Any:
        """A metadata file from memory, else read whole once and kept (pyiceberg reads
        them whole); anything else as pyiceberg opens it."""
        if not _immutable(self.location):
            return super().open(seekable)
        data = FILES.get(self.location)
        if data is None:
            with super().open(seekable=False) as stream:
                data = stream.read()
            FILES.put(self.location, data)
        return pa.BufferReader(data)

    def create(self, overwrite: bool = False) -> Any:
        """pyiceberg checks that a new table metadata file is not there yet (a HEAD and a
        listing on S3) before it writes one. The name is new (a UUID), and on S3 the check
        could not stop a racing writer anyway: the catalog's compare-and-set does."""
        return _Written(self, super().create(overwrite=True))


class WarehouseIO(PyArrowFileIO):
    """pyiceberg's ``PyArrowFileIO`` with the S3 client we configure and fewer requests:

    - each S3 request gets the configured connect and request timeouts and attempts;
    - a new file is one PUT (pyarrow's delayed open: small files go up in one request,
      not a multipart upload of three);
    - Iceberg metadata files are kept in memory once written or read (``_FileCache``),
      and a written file's length is known without asking the store;
    - superseded table metadata files are deleted off the commit's path (``_Deleter``)."""

    def _initialize_s3_fs(self, netloc: str | None) -> pafs.FileSystem:
        made = super()._initialize_s3_fs(netloc)
        options = made.__reduce__()[1][0]  # every option pyiceberg set, to start from
        attempts = int(self.properties.get(S3_ATTEMPTS, 3))
        return pafs.S3FileSystem(**{
            **options, "allow_delayed_open": True,
            "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=attempts)})

    def _file(self, location: str) -> WarehouseFile:
        scheme, netloc, path = self.parse_location(location, self.properties)
        plain = super().new_input(location)
        return WarehouseFile(location=location, path=path, fs=self.fs_by_scheme(scheme, netloc),
                             buffer_size=plain._buffer_size)

    def new_input(self, location: str) -> WarehouseFile:
        return self._file(location)

    def new_output(self, location: str) -> WarehouseFile:
        return self._file(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        """Delete a file; a superseded table metadata file (the only kind pyiceberg
        deletes after a commit) on the background thread (``_Deleter``)."""
        name = location if isinstance(location, str) else location.location
        FILES.drop(name)
        if name.endswith(".metadata.json"):
            DELETES.submit(lambda: PyArrowFileIO.delete(self, name))
        else:
            super().delete(location)


def not_found(exc: OSError) -> bool:
    """Whether a filesystem error says the file is not there (pyarrow's local filesystem
    raises ``FileNotFoundError``; on S3 it may be an ``OSError`` saying so, which pyiceberg
    reads the same way)."""
    return isinstance(exc, FileNotFoundError) or exc.errno == 2 \
        or "Path does not exist" in str(exc)


def is_s3(location: str) -> bool:
    return urlsplit(location).scheme in S3_SCHEMES


def catalog_properties(settings: Settings) -> dict[str, str]:
    """The catalog's (and so every table FileIO's) properties for the configured warehouse.

    Raises ConfigurationError for a warehouse we cannot use, naming the setting."""
    location = settings.resolved_warehouse
    # Settings check it when read; a Settings built another way is held to the same rule.
    problem = warehouse_problem(location)
    if problem is not None:
        raise ConfigurationError(f"{env_name('warehouse')} {mask_uri(location)!r} {problem}")
    props = {"warehouse": location, "py-io-impl": f"{__name__}.WarehouseIO"}
    if urlsplit(location).scheme.lower() == "file":
        return props
    region = settings.s3_region or (ENDPOINT_DEFAULT_REGION if settings.s3_endpoint else None)
    wanted = {
        "s3.endpoint": settings.s3_endpoint,
        "s3.region": region,
        "s3.access-key-id": settings.s3_access_key_id,
        "s3.secret-access-key": settings.s3_secret_access_key,
        "s3.force-virtual-addressing": "true" if settings.s3_virtual_addressing else "false",
        "s3.connect-timeout": str(settings.s3_connect_timeout_seconds),
        "s3.request-timeout": str(settings.s3_request_timeout_seconds),
        S3_ATTEMPTS: str(settings.s3_attempts),
    }
    props.update({k: v for k, v in wanted.items() if v is not None})
    return props


def file_io(properties: Mapping[str, str], location: str) -> FileIO:
    """The FileIO the catalog with these properties uses for ``location``."""
    return load_file_io(dict(properties), location)


def filesystem(io: FileIO, location: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem ``io`` uses for ``location``, and the location's path on it
    (``/folder/...`` on a local disk, ``bucket/prefix/...`` on S3): for listing, which
    FileIO itself does not offer."""
    if not isinstance(io, PyArrowFileIO):
        raise ConfigurationError(f"the warehouse FileIO is {type(io).__name__}; "
                                 "AmpUp Memory needs pyiceberg's PyArrowFileIO")
    scheme, netloc, path = io.parse_location(location, io.properties)
    return io.fs_by_scheme(scheme, netloc), path


def remove_tree(properties: Mapping[str, str], location: str) -> None:
    """Delete every file under ``location`` (a namespace's folder or prefix); nothing
    there is not an error."""
    fs, path = filesystem(file_io(properties, location), location)
    DELETES.drain()  # a pending deletion must not put a folder marker back afterwards
    for attempt in range(3):
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            return
        try:
            fs.delete_dir(path)
            return
        except OSError:  # a file went (or came) while listing: list again
            if attempt == 2:
                raise


def namespace_location(properties: Mapping[str, str], namespace: str) -> str:
    """Where the catalog puts a namespace's tables by default (``<warehouse>/<ns>``)."""
    return f"{str(properties.get('warehouse', '')).rstrip('/')}/{namespace}"
