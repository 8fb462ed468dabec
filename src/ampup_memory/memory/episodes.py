"""Episodes: the request shapes, content-addressed ids and the idempotent-write comparison."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema

from ampup_memory.blank import NOT_BLANK_PATTERN, UNPADDED_PATTERN, not_blank, unpadded
from ampup_memory.errors import field_error, refuse_nul, refuse_surrogate
from ampup_memory.memory.acl import AclEntry, normalize_acl
from ampup_memory.memory.episode_types import (
    EpisodeType,
    SplitError,
    Unit,
    known_prefixes,
    require_type,
)
from ampup_memory.memory.scopes import BranchText, ScopeText
from ampup_memory.ruled import composed, published, ruled
from ampup_memory.timefmt import Instant, utc_text

MAX_BODY_BYTES = 1_000_000
MAX_BATCH = 1000
MAX_ACL = 64
MAX_ENTITY = 256  # an entity id, in `about` as in a fact
EPISODE_ID_PATTERN = r"^[0-9a-f]{64}$"
# An episode id as a request names it (a cite, a listing's cursor): refused in words.
EpisodeId = Annotated[str, ruled(EPISODE_ID_PATTERN, "episode_id_invalid", "episode id",
                                 "64 lower-case hex digits, as POST /episodes answers it"),
                      published(EPISODE_ID_PATTERN)]


# An entity or predicate is a name: white space alone names nothing (" " would be an entity
# no one can tell from "  "). The pattern is published (`not_blank` checks it with its own
# error), so a client that validates against the schema refuses what the server refuses.
_PUBLISHED_NOT_BLANK: dict[str, Any] = {"pattern": NOT_BLANK_PATTERN}
EntityId = Annotated[str, Field(min_length=1, max_length=MAX_ENTITY,
                                json_schema_extra=_PUBLISHED_NOT_BLANK), AfterValidator(not_blank),
                     AfterValidator(composed)]
Predicate = Annotated[str, Field(min_length=1, max_length=128,
                                 json_schema_extra=_PUBLISHED_NOT_BLANK), AfterValidator(not_blank),
                      AfterValidator(composed)]
# A document key names the versions of one document, on every route that takes one (written
# on an episode, read by POST /document, chosen by PUT /procedures/sources): matched as sent,
# so in NFC (`composed`), and with no white space at either end (`unpadded`: refused, never
# trimmed). The pattern is published so a schema-checking client refuses it first.
MAX_DOCUMENT_KEY = 512
DocumentKey = Annotated[str, Field(min_length=1, max_length=MAX_DOCUMENT_KEY,
                                   json_schema_extra={"pattern": UNPADDED_PATTERN}),
                        AfterValidator(unpadded), AfterValidator(composed)]
MAX_SOURCE = 512
# The schema publishes the claimed prefixes; `require_type` checks them (after identity,
# with a message that lists them), from the same list of episode types.
Source = Annotated[str, Field(min_length=1, max_length=MAX_SOURCE), WithJsonSchema({
    "type": "string", "minLength": 1, "maxLength": MAX_SOURCE,
    "pattern": "^(?:" + "|".join(re.escape(p) for p in known_prefixes()) + ")",
    "description": "Where it came from; its prefix picks the episode type."})]


class EpisodeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: Source
    body: str = Field(min_length=1, max_length=MAX_BODY_BYTES,
                      description=f"The text, stored once by SHA-256; at most {MAX_BODY_BYTES} "
                      "bytes as UTF-8.")
    occurred_at: Instant | None = Field(
        default=None, description="When it happened (default: when first written).")
    about: list[EntityId] | None = Field(default=None, max_length=100,
                                    description="Entity ids the episode is about.")
    acl: list[AclEntry] = Field(min_length=1, max_length=MAX_ACL,
                                description="Who may read it: '*', 'user:', 'group:', 'role:'.")
    document: DocumentKey | None = Field(
        default=None, description="Document key: this episode is one version.")


class WriteEpisode(EpisodeIn):
    scope: ScopeText
    branch: BranchText | None = None


class WriteBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeText
    branch: BranchText | None = None
    episodes: list[EpisodeIn] = Field(min_length=1, max_length=MAX_BATCH)


class ChangeAcl(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeText
    branch: BranchText | None = None
    acl: list[AclEntry] = Field(min_length=1, max_length=MAX_ACL)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def episode_id(etype: EpisodeType, source: str, body: str) -> str:
    return sha256(f"{source}\n{body}" if etype.id_includes_source else body)


@dataclass(frozen=True)
class EpisodeRecord:
    """One committed (or about to be committed) episode as the read path sees it."""

    id: str
    source: str
    type: str
    occurred_at: datetime
    about: tuple[str, ...]
    acl: tuple[str, ...]
    document: str | None
    body_ref: str
    branch: str
    commit_id: str = ""
    seq: int = 0

    def wire(self, scope: str, units: list[Unit] | None = None,
             body: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "scope": scope, "branch": self.branch, "source": self.source,
            "type": self.type, "occurred_at": utc_text(self.occurred_at),
            "about": list(self.about), "acl": list(self.acl), "document": self.document,
            "body_ref": self.body_ref, "commit": self.commit_id,
        }
        if body is not None:
            out["body"] = body
        if units is not None:
            out["units"] = [u.wire() for u in units]
        return out


@dataclass(frozen=True)
class Prepared:
    """A validated incoming episode: its record, its body, and which fields it stated."""

    record: EpisodeRecord
    body: str
    stated_time: bool
    stated_about: bool


def prepare(item: EpisodeIn, branch: str, now: datetime, loc: list[str | int],
            etype: EpisodeType | None = None) -> Prepared:
    """Check one incoming episode; ``etype`` overrides the source lookup (``load``'s doc)."""
    if len(item.body.encode("utf-8")) > MAX_BODY_BYTES:
        raise field_error([*loc, "body"], f"a body holds at most {MAX_BODY_BYTES} bytes",
                          "body_too_large")
    kind = etype or require_type(item.source, [*loc, "source"])
    try:
        units = kind.units(item.body)
    except SplitError as exc:
        raise field_error([*loc, "body"], str(exc), "body_shape") from exc
    if not units:
        raise field_error([*loc, "body"], "the body has no text to cite", "body_empty")
    for unit in units:  # JSON in a body (crm:, slack:, gmail:) spells any character escaped
        refuse_nul(unit.text, [*loc, "body"])
        refuse_surrogate(unit.text, [*loc, "body"])
    acl = normalize_acl(item.acl, [*loc, "acl"])
    about = tuple(sorted(set(item.about or [])))  # each checked by EntityId
    record = EpisodeRecord(
        id=episode_id(kind, item.source, item.body),
        source=item.source,
        type=kind.name,
        occurred_at=(item.occurred_at or now).astimezone(UTC),
        about=about,
        acl=acl,
        document=item.document,
        body_ref=sha256(item.body),
        branch=branch,
    )
    return Prepared(record, item.body, item.occurred_at is not None, item.about is not None)


def differing_fields(existing: EpisodeRecord, new: Prepared) -> list[str]:
    """What a rewrite of an existing id would change. Fields the rewrite leaves out
    (no ``occurred_at``, no ``about``) are not a difference: a retry may omit them."""
    diff = []
    if existing.acl != new.record.acl:
        diff.append("acl")
    if new.stated_time and existing.occurred_at != new.record.occurred_at:
        diff.append("occurred_at")
    if new.stated_about and existing.about != new.record.about:
        diff.append("about")
    if existing.document != new.record.document:
        diff.append("document")
    return diff
