"""Search operations, independent of HTTP: the REST routes and the MCP tools call these."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from ampup_memory.errors import field_error
from ampup_memory.search.answer import facts_json, passages_json, text_answer
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.visibility import Principal

DEFAULT_LIMIT = 10
MAX_LIMIT = 100
SOURCE_PASSAGES = 3  # passages read for the text answer's uncited source text
_NAME = r"[a-z0-9]+(?:_[a-z0-9]+)*"
_SCOPE = re.compile(rf"^{_NAME}/{_NAME}$")
_BRANCH = re.compile(r"^[a-z0-9]+(?:[_-][a-z0-9]+)*$")


class FactSearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: str = Field(description="org/team")
    query: str = Field(min_length=1, max_length=2000)
    as_of: AwareDatetime | None = Field(
        default=None, description="Valid time the current versions are taken at (default now).")
    limit: int = Field(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    format: Literal["json", "text"] = "json"
    tz: str | None = Field(default=None, description="IANA zone for calendar words (UTC).")
    branch: str | None = None


class PassageQueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: str = Field(description="org/team")
    find: Literal["passages"]
    query: str = Field(min_length=1, max_length=2000)
    limit: int = Field(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    tz: str | None = None
    branch: str | None = None


def check_scope(scope: str, branch: str | None) -> tuple[str, str]:
    """Scope ``org/team`` and branch, validated before they reach the index."""
    if len(scope) > 129 or not _SCOPE.match(scope):
        raise field_error(["body", "scope"], f"invalid scope {scope[:80]!r}: use org/team, "
                          "lower-case letters, digits and single underscores", "scope_invalid")
    branch = branch or "main"
    if len(branch) > 64 or not _BRANCH.match(branch):
        raise field_error(["body", "branch"], "invalid branch name", "branch_invalid")
    return scope, branch


@dataclass
class SearchService:
    engine: SearchEngine
    principal_of: Callable[[str], Principal]
    # Brings the index level with the ledger for one scope before it is read.
    catch_up: Callable[[str, str], None] | None = None
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    def _prepare(self, user: str, scope: str, branch: str | None
                 ) -> tuple[str, str, Principal]:
        scope, branch = check_scope(scope, branch)
        if self.catch_up is not None:
            self.catch_up(scope, branch)
        return scope, branch, self.principal_of(user)

    def search(self, user: str, req: FactSearchRequest) -> dict[str, Any] | str:
        scope, branch, principal = self._prepare(user, req.scope, req.branch)
        now = self.clock()
        results = self.engine.search_facts(
            scope, branch, req.query, principal, as_of=req.as_of, limit=req.limit,
            tz=req.tz, now=now,
        )
        if req.format == "json":
            return facts_json(results, scope, branch, req.query, req.as_of or now)
        sources = self.engine.search_passages(
            scope, branch, req.query, principal, limit=SOURCE_PASSAGES, tz=req.tz, now=now
        )
        return text_answer(results, sources.passages)

    def query(self, user: str, req: PassageQueryRequest) -> dict[str, Any]:
        scope, branch, principal = self._prepare(user, req.scope, req.branch)
        results = self.engine.search_passages(
            scope, branch, req.query, principal, limit=req.limit, tz=req.tz, now=self.clock()
        )
        return passages_json(results, scope, branch, req.query)
