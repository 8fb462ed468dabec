"""Reading a corpus folder into episodes and facts for ``ampup-memory load``.

Text and Markdown files are one episode each (a version of the document named by its path);
JSONL files hold one episode per line, or one fact (a line ``{"fact": {...}}``, an item of
``POST /facts/batch`` whose cites may also name an episode of the corpus by its source or
its document: :class:`CiteTargets`). Sources no episode type claims are read as ``doc``.
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ampup_memory.errors import ValidationFailed, field_error, refuse_nul
from ampup_memory.memory.episodes import EPISODE_ID_PATTERN, MAX_SOURCE, DocumentKey, EpisodeIn
from ampup_memory.memory.facts import FactIn
from ampup_memory.web.body import JsonInt

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".text"}
JSONL_SUFFIXES = {".jsonl", ".ndjson"}


class CorpusCite(BaseModel):
    """A cite of a corpus fact: an episode by id (any of the scope, as the API takes it),
    or by the source or document key of an episode this corpus loads."""

    model_config = ConfigDict(extra="forbid")

    episode: str | None = Field(default=None, pattern=EPISODE_ID_PATTERN)
    source: str | None = Field(default=None, min_length=1, max_length=MAX_SOURCE)
    document: DocumentKey | None = None
    unit: JsonInt = Field(ge=1, le=2**31 - 1)

    @model_validator(mode="after")
    def _one_name(self) -> CorpusCite:
        if sum(x is not None for x in (self.episode, self.source, self.document)) != 1:
            raise ValueError("name the episode by one of episode, source or document")
        return self


class CorpusFact(FactIn):
    # FactIn's fields and rules, with cites that may name corpus episodes (resolved to
    # FactIn's cites by CiteTargets once the episodes are written).
    cites: list[CorpusCite] = Field(min_length=1, max_length=32)  # type: ignore[assignment]


class FactLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fact: CorpusFact


@dataclass(frozen=True)
class Item:
    where: str  # file (and line) for messages
    episode: EpisodeIn | None
    error: str | None = None
    fact: CorpusFact | None = None
    is_fact: bool = False  # a fact line, read (``fact``) or refused (``error``)
    # A text file's occurred_at is its mtime, not a time anyone stated: a checkout or a
    # copy changes it, and the same text held under an older mtime is that episode.
    file_time: bool = False


def loadable(path: Path) -> bool:
    """Whether `load` reads this file: by its extension (TEXT_SUFFIXES, JSONL_SUFFIXES)."""
    return path.suffix.lower() in TEXT_SUFFIXES | JSONL_SUFFIXES


def corpus_files(path: Path, skipped: Counter[str] | None = None) -> list[Path]:
    """The files to load, sorted; every other file is counted in ``skipped`` by kind
    (``hidden``, or its extension such as ``.pdf``). A file named alone is the caller's
    to check (`loadable`): it is read whatever its name."""
    if path.is_file():
        return [path]
    files = []
    for p in sorted(path.rglob("*")):
        if not p.is_file():
            continue
        if any(part.startswith(".") for part in p.relative_to(path).parts):
            kind = "hidden"
        elif loadable(p):
            files.append(p)
            continue
        else:
            kind = p.suffix.lower() or "without extension"
        if skipped is not None:
            skipped[kind] += 1
    return files


def _relative(path: Path, root: Path) -> str:
    """A file's key (its document key and source): its path under the corpus, in NFC. The
    name is the file system's, not the user's spelling, and macOS hands names back in NFD,
    which a document key may not be (`ruled.composed`); "café.md" is one key either way."""
    base = root if root.is_dir() else root.parent
    return unicodedata.normalize("NFC", path.relative_to(base).as_posix())


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
        problem = _nul_problem(text)
        if problem:
            yield Item(rel, None, problem)
            continue
        mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        item = _item(rel, {"source": f"doc:{rel}", "body": text, "occurred_at": mtime,
                           "acl": acl, "document": rel})
        yield replace(item, file_time=True)


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
        problem = _nul_problem(data)
        if problem:
            yield Item(where, None, problem, is_fact="fact" in data)
            continue
        if "fact" in data:
            yield _fact_item(where, data)
            continue
        # `text` stands in for a missing `body`, never for an empty one (a line with
        # "body": "" was told "body: Field required", or loaded its `text` instead).
        body = data.pop("body") if "body" in data else data.pop("text", None)
        record: dict[str, Any] = {"source": f"doc:{rel}#{n}", "acl": acl, **data}
        if body is not None:  # none: the check says "Field required", not "a valid string"
            record["body"] = body
        yield _item(where, record)


def _nul_problem(data: Any) -> str | None:
    """``loc: msg`` of U+0000 in a record (the commit's own check, `refuse_nul`), named as
    the record spells its fields; None when there is none. Met at its batch's commit, it
    stopped the whole load."""
    try:
        refuse_nul(data, [])
    except ValidationFailed as exc:
        return fact_error(exc)
    return None


def _item(where: str, record: dict[str, Any]) -> Item:
    try:
        return Item(where, EpisodeIn.model_validate(record))
    except ValidationError as exc:
        return Item(where, None, _first_error(exc.errors()))


def _fact_item(where: str, data: dict[str, Any]) -> Item:
    try:
        return Item(where, None, fact=FactLine.model_validate(data).fact, is_fact=True)
    except ValidationError as exc:
        return Item(where, None, _first_error(exc.errors()), is_fact=True)


def _first_error(errors: Any) -> str:
    """``loc: msg`` of the first error (pydantic's or ``details.errors``)."""
    first = errors[0] if errors else {}
    loc = ".".join(str(p) for p in first.get("loc", ()))
    return f"{loc}: {first.get('msg')}" if loc else str(first.get("msg"))


def fact_error(exc: ValidationFailed, loc: list[str | int] | None = None) -> str:
    """A refused fact as one line, the way a bad line of the corpus is told; ``loc``
    replaces the error's own (a batch's ``facts.<n>.quote`` told as ``fact.quote``)."""
    errors = exc.details.get("errors") or []
    if not errors:
        return exc.message
    first = dict(errors[0])
    if loc is not None:
        first["loc"] = loc
    return _first_error([first])


class CiteTargets:
    """The episodes this corpus wrote (or found held alike), by source and by document:
    what a corpus fact's cite by ``source`` or ``document`` names. A document's newest
    version is the one with the latest ``occurred_at``, then the later in the corpus, as
    GET /documents orders versions."""

    def __init__(self) -> None:
        self._by_source: dict[str, set[str]] = {}
        self._by_document: dict[str, list[str]] = {}  # in corpus order
        self._not_loaded: set[tuple[str, str]] = set()  # ("source" | "document", name)
        self._newest: dict[str, str] = {}

    def add(self, episode: EpisodeIn, episode_id: str) -> None:
        self._by_source.setdefault(episode.source, set()).add(episode_id)
        if episode.document is not None:
            self._by_document.setdefault(episode.document, []).append(episode_id)

    def wrote(self, episode_id: str) -> bool:
        """Whether this corpus wrote (or found held alike) that episode."""
        return any(episode_id in ids for ids in self._by_source.values())

    def not_loaded(self, episode: EpisodeIn) -> None:
        """A line the load kept out (held otherwise): a cite of it says so."""
        self._not_loaded.add(("source", episode.source))
        if episode.document is not None:
            self._not_loaded.add(("document", episode.document))

    def versioned(self) -> set[str]:
        """Ids of the versions of documents written more than once: their order needs
        their ``occurred_at`` (:meth:`order`)."""
        return {i for ids in self._by_document.values() if len(set(ids)) > 1 for i in ids}

    def order(self, occurred_at: dict[str, datetime]) -> None:
        for doc, ids in self._by_document.items():
            ranked = [(occurred_at.get(i, _EPOCH), n, i) for n, i in enumerate(ids)]
            self._newest[doc] = max(ranked)[2]

    def resolve(self, fact: CorpusFact) -> FactIn:
        """The fact with every cite naming its episode by id; a cite naming a source or
        document the corpus did not load is a ValidationFailed at that cite."""
        cites = []
        for i, cite in enumerate(fact.cites):
            cites.append({"episode": self._episode(cite, ["fact", "cites", i]),
                          "unit": cite.unit})
        data = fact.model_dump(exclude={"cites"}, exclude_unset=True)
        return FactIn.model_validate({**data, "cites": cites})

    def _episode(self, cite: CorpusCite, loc: list[str | int]) -> str:
        if cite.episode is not None:
            return cite.episode
        if cite.source is not None:
            kind, name, ids = "source", cite.source, sorted(self._by_source.get(cite.source, ()))
        else:
            assert cite.document is not None
            kind, name = "document", cite.document
            versions = self._by_document.get(name, [])
            ids = [self._newest.get(name, versions[-1])] if versions else []
        if len(ids) == 1:
            return ids[0]
        if ids:
            raise field_error([*loc, kind], f"{len(ids)} episodes of this corpus have source "
                              f"{name!r}: cite one by episode id", "cite_ambiguous")
        if (kind, name) in self._not_loaded:
            raise field_error([*loc, kind], f"the episode with {kind} {name!r} was not "
                              "loaded (see its line)", "cite_not_loaded")
        raise field_error([*loc, kind], f"no episode of this corpus has {kind} {name!r}",
                          "cite_unknown")


_EPOCH = datetime.min.replace(tzinfo=UTC)
