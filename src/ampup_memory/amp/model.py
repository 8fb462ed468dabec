"""The AMP v0.1 memory cell and the request bodies that create and change it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    WithJsonSchema,
    field_validator,
)

from ampup_memory.jsontypes import JsonInt
from ampup_memory.timefmt import format_time

AMP_VERSION = "0.1.0"
MAX_CELL_SIZE_BYTES = 65536
MAX_PAGE_SIZE = 100
# The contract sets no upper bound; this one only keeps offset + limit inside a 64-bit SQL
# integer everywhere. A large offset answers an empty page.
MAX_OFFSET = 2**31 - 1


EARLIEST_UTC = datetime.min.replace(tzinfo=UTC)
LATEST_UTC = datetime.max.replace(tzinfo=UTC)


def _in_range(value: datetime | None) -> datetime | None:
    # An instant Python cannot hold in UTC (year 1 at +05:00) clamps to the nearest one it
    # can: as an expiry or a "now" it means the same thing, and it is never a 500.
    if value is None:
        return None
    try:
        return value.astimezone(UTC)
    except OverflowError:
        return EARLIEST_UTC if value.year < 5000 else LATEST_UTC


def to_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


Timestamp = Annotated[datetime, PlainSerializer(format_time, return_type=str)]

Unit = Annotated[float, Field(ge=0.0, le=1.0)]
# At least one non-blank character. The pattern is published in the schema only; the
# validators below check it, so a client reads "must not be blank", not a regex.
NonEmptyText = Annotated[
    str, StringConstraints(min_length=1), WithJsonSchema({"type": "string", "minLength": 1,
                                                          "pattern": "\\S"})
]
AgentId = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class MemoryType(StrEnum):
    episodic = "episodic"
    semantic = "semantic"
    procedural = "procedural"


class OwnerType(StrEnum):
    user = "user"
    agent = "agent"
    organization = "organization"


class Status(StrEnum):
    active = "active"
    stale = "stale"
    archived = "archived"
    deleted = "deleted"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Content(_Strict):
    text: NonEmptyText
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content.text must not be blank")
        return value


class Identity(_Strict):
    owner_id: AgentId
    owner_type: OwnerType
    created_by: str
    session_id: str | None = None


class Scoring(_Strict):
    importance: Unit = 0.5
    confidence: Unit = 1.0
    decay_rate: Annotated[float, Field(ge=0.0)] = 0.01
    access_count: Annotated[int, Field(ge=0)] = 0


class Lifecycle(_Strict):
    created_at: Timestamp
    last_accessed_at: Timestamp
    last_updated_at: Timestamp
    expires_at: Timestamp | None = None
    status: Status = Status.active


class AccessPolicy(_Strict):
    readable_by: list[AgentId] = Field(default_factory=list)
    writable_by: list[AgentId] = Field(default_factory=list)
    public: bool = False


class Provenance(_Strict):
    source_type: str | None = None
    source_ref: str | None = None
    extraction_method: str | None = None


class MemoryCell(_Strict):
    """The atomic unit of AMP storage, exactly as it goes over the wire."""

    id: str
    amp_version: str = AMP_VERSION
    type: MemoryType
    content: Content
    identity: Identity
    scoring: Scoring
    lifecycle: Lifecycle
    access_policy: AccessPolicy
    provenance: Provenance = Field(default_factory=Provenance)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def size_bytes(self) -> int:
        """Size of the whole cell as compact UTF-8 JSON: the number CELL_TOO_LARGE checks."""
        return len(
            json.dumps(self.wire(), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        )


class StoredCell(BaseModel):
    """A cell plus the bookkeeping the lifecycle needs but the wire never shows."""

    cell: MemoryCell
    stale_since: datetime | None = None
    deleted_at: datetime | None = None


# ---- request bodies ------------------------------------------------------------------


class CreateIdentity(_Strict):
    owner_id: AgentId
    owner_type: OwnerType
    created_by: AgentId | None = None
    session_id: str | None = None


class CreateScoring(_Strict):
    importance: Unit = 0.5
    confidence: Unit = 1.0
    decay_rate: Annotated[float, Field(ge=0.0)] = 0.01


RequestTime = Annotated[AwareDatetime, AfterValidator(_in_range)]


class CreateLifecycle(_Strict):
    expires_at: RequestTime | None = None


class CreateMemory(_Strict):
    """POST /memories. Server-owned fields (id, created_at, status, access_count) are ignored."""

    type: MemoryType
    content: Content
    identity: CreateIdentity
    scoring: CreateScoring = Field(default_factory=CreateScoring)
    access_policy: AccessPolicy = Field(default_factory=AccessPolicy)
    provenance: Provenance = Field(default_factory=Provenance)
    lifecycle: CreateLifecycle = Field(default_factory=CreateLifecycle)


class PatchContent(_Strict):
    text: NonEmptyText | None = None
    metadata: dict[str, Any] | None = None

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("content.text must not be blank")
        return value


class PatchScoring(_Strict):
    importance: Unit | None = None
    confidence: Unit | None = None
    decay_rate: Annotated[float, Field(ge=0.0)] | None = None


class PatchPolicy(_Strict):
    readable_by: list[AgentId] | None = None
    writable_by: list[AgentId] | None = None
    public: bool | None = None


class PatchLifecycle(_Strict):
    status: Status | None = None
    expires_at: RequestTime | None = None
    created_at: RequestTime | None = None


class PatchIdentity(_Strict):
    owner_id: str | None = None
    owner_type: OwnerType | None = None
    created_by: str | None = None
    session_id: str | None = None


class PatchMemory(_Strict):
    """PATCH /memories/{id}: every part optional; sub-objects deep-merge into the cell."""

    id: str | None = None
    amp_version: str | None = None
    type: MemoryType | None = None
    content: PatchContent | None = None
    identity: PatchIdentity | None = None
    scoring: PatchScoring | None = None
    access_policy: PatchPolicy | None = None
    provenance: Provenance | None = None
    lifecycle: PatchLifecycle | None = None
    created_at: RequestTime | None = None


class ListQuery(_Strict):
    owner_id: str | None = None
    type: MemoryType | None = None
    status: Status = Status.active
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE_SIZE)] = 20
    offset: Annotated[int, Field(ge=0, le=MAX_OFFSET)] = 0


class SearchRequest(_Strict):
    query: Annotated[str, StringConstraints(min_length=1, max_length=4096), WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": 4096, "pattern": "\\S"})]
    owner_id: str | None = None
    types: list[MemoryType] | None = None
    status: list[Status] | None = None
    include_stale: bool = False
    limit: JsonInt = Field(default=10, ge=1, le=MAX_PAGE_SIZE)
    offset: JsonInt = Field(default=0, ge=0, le=MAX_OFFSET)

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, value: str) -> str:
        if not value.strip():  # "" is already refused; "   " is the same request
            raise ValueError("query must not be blank")
        return value

    def statuses(self) -> list[Status]:
        """The statuses searched: asked-for ones (default active), never deleted."""
        wanted = list(self.status) if self.status else [Status.active]
        if self.include_stale and Status.stale not in wanted:
            wanted.append(Status.stale)
        return [s for s in wanted if s is not Status.deleted]


class LifecycleRunRequest(_Strict):
    now: RequestTime | None = None
    dry_run: bool = False


class PurgeRequest(_Strict):
    id: Annotated[str, StringConstraints(min_length=1)]


class Page(BaseModel):
    results: list[dict[str, Any]]
    returned: int
    has_more: bool
    offset: int
    limit: int


class SearchPage(Page):
    query: str
