"""Search operations, independent of HTTP: the REST routes and the MCP tools call these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ampup_memory.blank import NOT_BLANK_PATTERN, not_blank
from ampup_memory.errors import ServiceUnavailable, field_error
from ampup_memory.memory.ledger import CommitText, given_commit
from ampup_memory.memory.scopes import BranchText, ScopeText, parse_branch, parse_scope
from ampup_memory.memory.snapshots import PinText, SnapshotText
from ampup_memory.search.answer import facts_json, passages_json, text_answer
from ampup_memory.search.cutoff import Cutoff
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.rerank import Slots
from ampup_memory.search.visibility import Principal
from ampup_memory.timefmt import Instant
from ampup_memory.web.body import JsonInt

DEFAULT_LIMIT = 10
MAX_LIMIT = 100
SOURCE_PASSAGES = 3  # passages read for the answers' uncited source text
AT_COMMIT_DOC = (
    "Search as of this commit of the scope's ledger on this branch: only facts and "
    "episodes it or an earlier commit wrote count. Visibility is the current ACL.")


# What a search asks: white space alone asks nothing (a template whose variable came out
# empty), refused as `string_blank` as AMP's search query is; the pattern is published.
SearchQuery = Annotated[str, Field(min_length=1, max_length=2000,
                                   json_schema_extra={"pattern": NOT_BLANK_PATTERN}),
                        AfterValidator(not_blank)]


RERANK_DOC = (
    "Reorder the top results with the server's reranker (AMPUP_MEMORY_RERANK). Default: "
    "whenever the server has one; false skips it (faster); true on a server without one "
    "is a 422.")


class FactSearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeText
    query: SearchQuery
    as_of: Instant | None = Field(
        default=None, description="Valid time the current versions are taken at (default now).")
    limit: JsonInt = Field(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    format: Literal["json", "text"] = "json"
    tz: str | None = Field(default=None, description="IANA zone for calendar words (UTC).")
    branch: BranchText | None = None
    at_commit: CommitText | None = Field(default=None, description=AT_COMMIT_DOC)
    pin: PinText | None = None
    snapshot: SnapshotText | None = None
    rerank: bool | None = Field(default=None, description=RERANK_DOC)


class PassageQueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeText
    find: Literal["passages"]
    query: SearchQuery
    limit: JsonInt = Field(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    tz: str | None = Field(default=None, description="IANA zone for calendar words (UTC).")
    branch: BranchText | None = None
    at_commit: CommitText | None = Field(default=None, description=AT_COMMIT_DOC)
    pin: PinText | None = None
    snapshot: SnapshotText | None = None
    rerank: bool | None = Field(default=None, description=RERANK_DOC)


def check_scope(scope: object, branch: object) -> tuple[str, str]:
    """Scope ``org/team`` and branch, parsed exactly as the memory routes parse them."""
    return str(parse_scope(scope)), parse_branch(branch)


@dataclass
class SearchService:
    engine: SearchEngine
    # The caller's groups and roles, read fresh (core's principal lookup), so a
    # membership change counts on the next search.
    principal_of: Callable[[str], Principal]
    # Brings the index level with the ledger for the view of (scope, branch, at_commit)
    # and resolves it exactly as GET /facts does (same 404 for an unknown branch, or a
    # commit unknown or of another scope or branch): None for the whole of main, else the
    # view's segments (`search/cutoff.py`). Without it only main, as of now, is searched.
    reach: Callable[[str, str, str | None], Cutoff | None] | None = None
    # Turns a pin or snapshot into the (scope, branch, at_commit) it holds (core's
    # ``Holds.resolve``, the one rule for held reads); None: only plain reads.
    resolve_held: Callable[[object, object, str | None, str | None, str | None],
                           tuple[object, object, str | None]] | None = None
    # Now on a (scope, branch): core's ``now_on`` (never before the branch's newest
    # commit, whichever server's clock stamped it); None: this server's clock.
    clock: Callable[[str, str], datetime] | None = None

    def _now(self, scope: str, branch: str) -> datetime:
        return self.clock(scope, branch) if self.clock is not None else datetime.now(UTC)

    def _prepare(self, user: str, req: FactSearchRequest | PassageQueryRequest,
                 ) -> tuple[str, str, Principal, Cutoff | None]:
        scope_in: object = req.scope
        branch_in: object = req.branch
        at_commit = given_commit(req.at_commit)
        if req.pin is not None or req.snapshot is not None:
            if self.resolve_held is None:
                raise ServiceUnavailable("Pinned and snapshot reads need the commit ledger.")
            scope_in, branch_in, at_commit = self.resolve_held(
                scope_in, branch_in, at_commit, req.pin, req.snapshot)
        scope, branch = check_scope(scope_in, branch_in)
        cutoff = None
        if self.reach is not None:
            cutoff = self.reach(scope, branch, at_commit)
        elif at_commit:
            raise ServiceUnavailable("Search as of a commit needs the commit ledger.")
        return scope, branch, self.principal_of(user), cutoff

    def slots(self, rerank: bool | None) -> Slots | None:
        """The turns a search asking ``rerank`` waits for: the reranker's own slots when
        the server reranks it (`Rerank` in rerank.py says why), else None: it runs at once
        on the threads every other request shares."""
        plan = self.engine.rerank
        return plan.slots if plan is not None and self._may_rerank(rerank) else None

    def _may_rerank(self, rerank: bool | None) -> bool:
        if rerank and self.engine.rerank is None:
            raise field_error(["rerank"], "this server has no reranker (set "
                              "AMPUP_MEMORY_RERANK); send false or leave it out",
                              "rerank_unavailable")
        return rerank is not False

    def search(self, user: str, req: FactSearchRequest) -> dict[str, Any] | str:
        rerank = self._may_rerank(req.rerank)
        scope, branch, principal, cutoff = self._prepare(user, req)
        now = self._now(scope, branch)
        results = self.engine.search_facts(
            scope, branch, req.query, principal, as_of=req.as_of, limit=req.limit,
            tz=req.tz, now=now, cutoff=cutoff, rerank=rerank,
        )
        sources = self.engine.search_passages(
            scope, branch, req.query, principal, limit=SOURCE_PASSAGES, tz=req.tz, now=now,
            cutoff=cutoff,
        )
        if req.format == "json":
            return facts_json(results, sources.passages, scope, branch, req.query,
                              req.as_of or now, cutoff.commit if cutoff else None)
        return text_answer(results, sources.passages)

    def query(self, user: str, req: PassageQueryRequest) -> dict[str, Any]:
        rerank = self._may_rerank(req.rerank)
        scope, branch, principal, cutoff = self._prepare(user, req)
        results = self.engine.search_passages(
            scope, branch, req.query, principal, limit=req.limit, tz=req.tz,
            now=self._now(scope, branch),
            cutoff=cutoff, rerank=rerank,
        )
        return passages_json(results, scope, branch, req.query,
                             cutoff.commit if cutoff else None)
