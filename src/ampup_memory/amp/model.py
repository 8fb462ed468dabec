"""The AMP v0.1 memory cell and the request bodies that create and change it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import PydanticCustomError

from ampup_memory.blank import NOT_BLANK_PATTERN, not_blank
from ampup_memory.timefmt import Instant, format_time
from ampup_memory.web.body import JsonInt

AMP_VERSION = "0.1.0"
MAX_CELL_SIZE_BYTES = 65536
MAX_PAGE_SIZE = 100
# The contract sets no upper bound; this one only keeps offset + limit inside a 64-bit SQL
# integer everywhere. A large offset answers an empty page.
MAX_OFFSET = 2**31 - 1


def to_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


Timestamp = Annotated[datetime, PlainSerializer(format_time, return_type=str)]

Unit = Annotated[float, Field(ge=0.0, le=1.0)]
# decay_rate is per day (spec: e^(-rate x days)) and the spec sets no maximum. 86,400 is
# one e-fold per second: a full score falls below the stale threshold (0.3) in 1.2 s, by
# the second pass at the shortest lifecycle interval (1 s). Faster decay is below what the
# lifecycle can act on, and more likely a unit slip (per second, a percentage). Any finite
# rate scores finitely (the score only underflows to 0): this is a contract, not a guard,
# and cells stored before it keep their rate (the stored model has no maximum).
MAX_DECAY_RATE = 86400.0
DecayRate = Annotated[float, Field(ge=0.0, le=MAX_DECAY_RATE)]

# At least one non-blank character. The pattern is published in the schema only; the
# validators below check it, so a client reads "must not be blank", not a regex.
NonEmptyText = Annotated[
    str, StringConstraints(min_length=1), WithJsonSchema({"type": "string", "minLength": 1,
                                                          "pattern": NOT_BLANK_PATTERN})
]
AgentId = Annotated[str, StringConstraints(min_length=1, max_length=256)]

# ---- agent ids -------------------------------------------------------------------------
# An AMP agent id is 1–256 visible ASCII characters other than `/` and `*` (the pattern
# wildcard). Non-ASCII is refused, not decoded: HTTP clients disagree on how to send it
# (Node's fetch refuses it, servers read Latin-1), so it would be stored garbled. Regex
# metacharacters, `?`, `[`, `^`, `.` and backslash stay allowed: they are literal in patterns and
# the AMP v0.1 conformance suite names agents with them. An access pattern is the same
# with `*` allowed.
MAX_AGENT_ID = 256
# Patterns a policy's readable_by or writable_by may hold. Every listing and search by any
# agent tests a candidate cell's patterns against the caller: 300 cells of 7,000 patterns
# each (a few seconds to write) made every other agent's search take 8 s.
MAX_POLICY_PATTERNS = 64
AGENT_ID_PATTERN = r"^[!-)+-.0-~]{1,256}$"
AGENT_PATTERN_PATTERN = r"^[!-.0-~]{1,256}$"
_AGENT_ID_RULE = ("1–256 visible ASCII characters other than '/' and '*' (no spaces, "
                  "control or non-ASCII characters)")


def agent_id_problem(value: str, wildcard: bool = False) -> str | None:
    """Why ``value`` is not a valid agent id (``wildcard``: access pattern); None if valid.

    The one agent-id rule: the X-AMP-Agent-ID header, ``identity.created_by``, an agent's
    ``identity.owner_id``, ``readable_by``/``writable_by`` patterns and ``keys create``.
    """
    if not value:
        return "must not be empty"
    if len(value) > MAX_AGENT_ID:
        return f"is {len(value)} characters long; the limit is {MAX_AGENT_ID}"
    for ch in value:
        if not "!" <= ch <= "~":
            return "may hold only visible ASCII characters (no spaces, control or non-ASCII)"
        if ch == "/" or (ch == "*" and not wildcard):
            return f"must not contain {ch!r}"
    return None


def _agent_id(value: str) -> str:
    problem = agent_id_problem(value)
    if problem:
        raise ValueError(f"not a valid agent id: it {problem}")
    return value


def _agent_pattern(value: str) -> str:
    problem = agent_id_problem(value, wildcard=True)
    if problem:
        raise ValueError(f"not a valid agent id pattern: it {problem}")
    return value


AgentName = Annotated[str, AfterValidator(_agent_id), WithJsonSchema(
    {"type": "string", "pattern": AGENT_ID_PATTERN, "description": _AGENT_ID_RULE})]
AgentPattern = Annotated[str, AfterValidator(_agent_pattern), WithJsonSchema(
    {"type": "string", "pattern": AGENT_PATTERN_PATTERN,
     "description": "An agent id, or a pattern where `*` matches any run of characters"})]


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
        return not_blank(value)  # named by its loc: amp_remember calls it `content`


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
    # owner_type before owner_id: the owner_id check reads it, so a bad id is reported at
    # ["body", "identity", "owner_id"], the field the request names (docs/api.md).
    owner_type: OwnerType
    owner_id: AgentId
    created_by: AgentName | None = None
    session_id: str | None = None

    @field_validator("owner_id")
    @classmethod
    def _agent_owner(cls, value: str, info: ValidationInfo) -> str:
        # An agent owner is an agent id; a user's or an organisation's id is its own affair.
        if info.data.get("owner_type") is OwnerType.agent:
            problem = agent_id_problem(value)
            if problem:
                raise PydanticCustomError(
                    "agent_id_invalid", "not a valid agent id (owner_type is agent): "
                    "it {problem}", {"problem": problem})
        return value


class CreatePolicy(_Strict):
    """The access policy as a request sends it: every entry a valid agent id or pattern."""

    readable_by: list[AgentPattern] = Field(default_factory=list,
                                            max_length=MAX_POLICY_PATTERNS)
    writable_by: list[AgentPattern] = Field(default_factory=list,
                                            max_length=MAX_POLICY_PATTERNS)
    public: bool = False


class CreateScoring(_Strict):
    importance: Unit = 0.5
    confidence: Unit = 1.0
    decay_rate: DecayRate = 0.01


# Outside years 0001-9999 in UTC is a 422, as on every route (timefmt.Instant).
RequestTime = Instant


class CreateLifecycle(_Strict):
    expires_at: RequestTime | None = None


class CreateMemory(_Strict):
    """POST /memories. Server-owned fields (id, created_at, status, access_count) are ignored."""

    type: MemoryType
    content: Content
    identity: CreateIdentity
    scoring: CreateScoring = Field(default_factory=CreateScoring)
    access_policy: CreatePolicy = Field(default_factory=CreatePolicy)
    provenance: Provenance = Field(default_factory=Provenance)
    lifecycle: CreateLifecycle = Field(default_factory=CreateLifecycle)


def _not_null(value: Any) -> Any:
    """A PATCH field that may be left out but not sent as null: the cell always holds a
    value there (text, metadata, scores, policy, status, type), so null could only mean
    "clear", which it cannot; it was read as left out, ignoring what the client sent. The
    reference refuses it too (none of these is nullable in its update model). Left out,
    the field is None without this check running (defaults are not validated)."""
    if value is None:
        raise PydanticCustomError(
            "null_refused", "may not be null: leave it out to keep the stored value")
    return value


def _publish_not_null(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """The fields of ``cls.NOT_NULL`` published as they are checked: optional, not
    nullable (typed ``X | None`` so that a left-out field is None, and a refusal's ``loc``
    names the field alone, not a branch of a union)."""
    for name in getattr(cls, "NOT_NULL", ()):
        prop = schema["properties"][name]
        (kept,) = [b for b in prop.pop("anyOf") if b != {"type": "null"}]
        prop.update(kept)
        prop.pop("default", None)


class _Patch(_Strict):
    """A part of a PATCH body: every field optional; those in ``NOT_NULL`` (a value the
    cell always holds) never null (`_not_null`, `_publish_not_null`)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_publish_not_null)
    NOT_NULL: ClassVar[tuple[str, ...]] = ()


class PatchContent(_Patch):
    NOT_NULL = ("text", "metadata")
    text: NonEmptyText | None = None
    metadata: dict[str, Any] | None = None

    _sent = field_validator(*NOT_NULL, mode="before")(_not_null)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        return None if value is None else not_blank(value)


class PatchScoring(_Patch):
    NOT_NULL = ("importance", "confidence", "decay_rate")
    importance: Unit | None = None
    confidence: Unit | None = None
    decay_rate: DecayRate | None = None

    _sent = field_validator(*NOT_NULL, mode="before")(_not_null)


class PatchPolicy(_Patch):
    NOT_NULL = ("readable_by", "writable_by", "public")
    readable_by: list[AgentPattern] | None = Field(default=None,
                                                   max_length=MAX_POLICY_PATTERNS)
    writable_by: list[AgentPattern] | None = Field(default=None,
                                                   max_length=MAX_POLICY_PATTERNS)
    public: bool | None = None

    _sent = field_validator(*NOT_NULL, mode="before")(_not_null)


class PatchLifecycle(_Patch):
    NOT_NULL = ("status",)
    status: Status | None = None
    expires_at: RequestTime | None = None  # null clears the expiry
    created_at: RequestTime | None = None

    _sent = field_validator(*NOT_NULL, mode="before")(_not_null)


class PatchIdentity(_Strict):
    owner_id: str | None = None
    owner_type: OwnerType | None = None
    created_by: str | None = None
    session_id: str | None = None


class PatchMemory(_Patch):
    """PATCH /memories/{id}: every part optional; sub-objects deep-merge into the cell."""

    NOT_NULL = ("type",)

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

    _sent = field_validator(*NOT_NULL, mode="before")(_not_null)


class ListQuery(_Strict):
    owner_id: str | None = None
    type: MemoryType | None = None
    status: Status = Status.active
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE_SIZE)] = 20
    offset: Annotated[int, Field(ge=0, le=MAX_OFFSET)] = 0


class SearchRequest(_Strict):
    query: Annotated[str, StringConstraints(min_length=1, max_length=4096), WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": 4096, "pattern": NOT_BLANK_PATTERN})]
    owner_id: str | None = None
    types: list[MemoryType] | None = Field(default=None, description=(
        "The types a cell may have; left out or null: any type; [] matches no cell."))
    status: list[Status] | None = Field(default=None, description=(
        'The statuses a cell may have (deleted never); left out or null: ["active"]; '
        "[] none (include_stale still adds stale)."))
    include_stale: bool = False
    limit: JsonInt = Field(default=10, ge=1, le=MAX_PAGE_SIZE)
    offset: JsonInt = Field(default=0, ge=0, le=MAX_OFFSET)

    @field_validator("types", "status")
    @classmethod
    def _as_sets(cls, value: list[Any] | None) -> list[Any] | None:
        # Sets of values, sent as lists: each value once. 400,000 copies of "active" went
        # into one SQL statement as many parameters (SQLite: a 500; PostgreSQL: 9 s, then
        # a 503 "cell store unavailable").
        return None if value is None else list(dict.fromkeys(value))

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, value: str) -> str:
        # "" is already refused; "   " is the same request, refused by the one blank rule
        # in its words (no "Value error, query ..." naming the field twice: its loc does).
        return not_blank(value)

    def statuses(self) -> list[Status]:
        """The statuses searched: asked-for ones (default active; ``[]`` none, so only
        ``include_stale``'s stale), never deleted."""
        wanted = list(self.status) if self.status is not None else [Status.active]
        if self.include_stale and Status.stale not in wanted:
            wanted.append(Status.stale)
        return [s for s in wanted if s is not Status.deleted]


class LifecycleRunRequest(_Strict):
    now: RequestTime | None = None
    dry_run: bool = False


class PurgeRequest(_Strict):
    id: Annotated[str, StringConstraints(min_length=1)]


class WriteReceipt(BaseModel):
    """A PATCH's answer to a caller who may write the cell but not read it: only its id."""

    id: str


class Page(BaseModel):
    results: list[dict[str, Any]]
    returned: int
    has_more: bool
    offset: int
    limit: int


class SearchPage(Page):
    query: str
