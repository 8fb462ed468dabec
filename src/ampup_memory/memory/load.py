"""Reading a corpus folder into episodes for ``ampup-memory load``.

Text and Markdown files are one episode each (a version of the document named by its path);
JSONL files hold one episode per line. Sources no episode type claims are read as ``doc``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ampup_memory.memory.episodes import EpisodeIn

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".text"}
JSONL_SUFFIXES = {".jsonl", ".ndjson"}


@dataclass(frozen=True)
class Item:
    where: str  # file (and line) for messages
    episode: EpisodeIn | None
    error: str | None = None


def corpus_files(path: Path, skipped: Counter[str] | None = None) -> list[Path]:
    """The files to load, sorted; every other file is counted in ``skipped`` by kind
    (``hidden``, or its extension such as ``.pdf``)."""
    if path.is_file():
        return [path]
    wanted = TEXT_SUFFIXES | JSONL_SUFFIXES
    files = []
    for p in sorted(path.rglob("*")):
        if not p.is_file():
            continue
        if any(part.startswith(".") for part in p.relative_to(path).parts):
            kind = "hidden"
        elif p.suffix.lower() in wanted:
            files.append(p)
            continue
        else:
            kind = p.suffix.lower() or "without extension"
        if skipped is not None:
            skipped[kind] += 1
    return files


def _relative(path: Path, root: Path) -> str:
    base = root if root.is_dir() else root.parent
    return path.relative_to(base).as_posix()


def read_corpus(root: Path, acl: list[str],
                skipped: Counter[str] | None = None) -> Iterator[Item]:
    """Episodes of the files under ``root``; files not read are counted in ``skipped``."""
    for path in corpus_files(root, skipped):
        rel = _relative(path, root)
        if path.suffix.lower() in JSONL_SUFFIXES:
            yield from _jsonl(path, rel, acl)
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            yield Item(rel, None, f"cannot read: {exc}")
            continue
        if not text.strip():
            if skipped is not None:
                skipped["empty"] += 1
            continue
        mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        yield _item(rel, {"source": f"doc:{rel}", "body": text, "occurred_at": mtime,
                          "acl": acl, "document": rel})


def _jsonl(path: Path, rel: str, acl: list[str]) -> Iterator[Item]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        yield Item(rel, None, f"cannot read: {exc}")
        return
    for n, line in enumerate(lines, 1):
        where = f"{rel}:{n}"
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            yield Item(where, None, f"not JSON: {exc}")
            continue
        if not isinstance(data, dict):
            yield Item(where, None, "each line must be a JSON object")
            continue
        body = data.pop("body", None) or data.pop("text", None)
        record: dict[str, Any] = {"source": f"doc:{rel}#{n}", "acl": acl, **data, "body": body}
        yield _item(where, record)


def _item(where: str, record: dict[str, Any]) -> Item:
    try:
        return Item(where, EpisodeIn.model_validate(record))
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        return Item(where, None, f"{loc}: {first.get('msg')}")
