"""The Iceberg warehouse: where the tables' files live, a local folder or an S3 bucket.

``AMPUP_MEMORY_WAREHOUSE`` is ``file:///path`` (the embedded default) or
``s3://bucket/prefix`` on any S3-compatible store, with the ``s3_*`` settings. Everything
that touches warehouse files (table writes, orphan-file cleanup, a workspace's drop) goes
through the catalog's FileIO, pyiceberg's ``PyArrowFileIO``, configured here once: the two
kinds of warehouse take one code path, and no caller opens a warehouse file with
``os``/``pathlib``. Backup copies a ``file://`` warehouse only (ops/backup.py says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from pyarrow import fs as pafs
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.io.pyarrow import PyArrowFileIO

from ampup_memory.errors import ConfigurationError
from ampup_memory.settings import S3_SCHEMES, Settings, env_name, mask_uri, warehouse_problem

# A store that stops answering fails a request after this long (then pyarrow's own retries).
CONNECT_TIMEOUT_SECONDS = "10"
REQUEST_TIMEOUT_SECONDS = "60"
# Region sent to an S3-compatible endpoint that was given none (MinIO, moto, SeaweedFS and
# Ceph accept any; without one pyarrow would ask AWS where the bucket lives).
ENDPOINT_DEFAULT_REGION = "us-east-1"


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
    props = {"warehouse": location, "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
    if urlsplit(location).scheme.lower() == "file":
        return props
    region = settings.s3_region or (ENDPOINT_DEFAULT_REGION if settings.s3_endpoint else None)
    wanted = {
        "s3.endpoint": settings.s3_endpoint,
        "s3.region": region,
        "s3.access-key-id": settings.s3_access_key_id,
        "s3.secret-access-key": settings.s3_secret_access_key,
        "s3.force-virtual-addressing": "true" if settings.s3_virtual_addressing else "false",
        "s3.connect-timeout": CONNECT_TIMEOUT_SECONDS,
        "s3.request-timeout": REQUEST_TIMEOUT_SECONDS,
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
