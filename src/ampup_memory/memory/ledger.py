"""The commit ledger: one row per commit in ``memory_system.ledger``.

A write lands its data rows first (each row carries its ``commit_id``), then appends one
ledger row. Readers only see rows whose commit is in the ledger, so a crash between the two
leaves nothing visible. The append is compare-and-set on the ledger table's snapshot: the
table has ``commit.retry.num-retries=0`` (pyiceberg would otherwise rebase a stale append
silently), and on conflict the service re-reads the head, recomputes ``parent`` and ``seq``
and retries with exponential back-off and full jitter (retry.py). Each (scope, branch)
history stays one chain.

Each ledger row is also written into its snapshot's summary, so catching up on new commits
reads the table metadata we already hold instead of Parquet files (sync.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import WithJsonSchema
from ulid import ULID

from ampup_memory.blank import is_blank
from ampup_memory.errors import field_error
from ampup_memory.timefmt import utc_text

SUMMARY_KEY = "ampup.ledger-row"
# What a ledger row records. A branch is born and freed by rows of its own chain: "branch"
# (its parent is the commit it forked from) and "delete"; a merge names the merged-in head
# in ``merged``. Rows written before branches existed read as "commit".
COMMIT, BRANCH, DELETE, MERGE = "commit", "branch", "delete", "merge"
KINDS = (COMMIT, BRANCH, DELETE, MERGE)
PUBLIC_CHANGES = ("episodes", "facts", "closures", "acl_changes", "events")


# A ULID in Crockford base32, as ids are written: a commit id, and the part after the
# prefix of run, session, pin and snapshot ids (their published patterns).
ULID_TEXT = "[0-9A-HJKMNP-TV-Z]{26}"
# Published in the schema; an id of any other shape is simply no commit of the scope
# (404), like an unknown one.
COMMIT_SCHEMA: dict[str, Any] = {"type": "string", "pattern": f"^{ULID_TEXT}$",
                                 "description": "A commit id of the scope's ledger."}
CommitText = Annotated[str, WithJsonSchema(COMMIT_SCHEMA)]


def given_commit(text: str | None, loc: str = "at_commit",
                 left_out: str = "the branch head") -> str | None:
    """A commit parameter as given (a read's ``at_commit``, the ledger's ``before``): None
    for none. Blank is refused, not read as none: `?at_commit=` from a template whose
    variable was empty read the head as if it were the commit asked for. ``left_out`` says
    what leaving the parameter out reads."""
    if text is not None and is_blank(text):
        raise field_error([loc], f"{loc} is blank: name a commit, or leave {loc} out for "
                          f"{left_out}", "string_blank")
    return text


def new_commit_id(after: str | None = None) -> str:
    """A new commit id. ULIDs sort by time, so Parquet min/max statistics prune files on
    commit_id filters; with ``after`` (the id of the commit it follows), one that sorts
    after it though the server that made that one had a clock ahead of ours, or ours
    stepped back (docs/deployment.md, "Clocks")."""
    made = ULID()
    if after is not None and str(made) <= after:
        try:
            made = ULID.from_timestamp(ULID.from_str(after).milliseconds + 1)
        except ValueError:  # not a ULID (no commit id is otherwise): ours as made
            pass
    return str(made)


@dataclass(frozen=True)
class LedgerEntry:
    commit_id: str
    parent: str | None
    scope: str
    branch: str
    seq: int
    author: str
    committed_at: datetime
    message: str
    changes: dict[str, int] = field(default_factory=dict)
    snapshots: dict[str, int] = field(default_factory=dict)
    kind: str = COMMIT
    merged: str | None = None

    def row(self) -> dict[str, Any]:
        return {
            "commit_id": self.commit_id, "parent": self.parent, "scope": self.scope,
            "branch": self.branch, "seq": self.seq, "author": self.author,
            "committed_at": self.committed_at, "message": self.message,
            "changes": json.dumps(self.changes, sort_keys=True),
            "snapshots": json.dumps(self.snapshots, sort_keys=True),
            "kind": self.kind, "merged": self.merged,
        }

    def summary(self) -> str:
        row = self.row()
        row["committed_at"] = self.committed_at.isoformat()
        return json.dumps(row, sort_keys=True)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> LedgerEntry:
        at = row["committed_at"]
        if isinstance(at, str):
            at = datetime.fromisoformat(at)
        return cls(
            commit_id=row["commit_id"], parent=row["parent"], scope=row["scope"],
            branch=row["branch"], seq=int(row["seq"]), author=row["author"],
            committed_at=at.astimezone(UTC), message=row["message"] or "",
            changes=json.loads(row["changes"] or "{}"),
            snapshots={k: int(v) for k, v in json.loads(row["snapshots"] or "{}").items()},
            kind=row.get("kind") or COMMIT, merged=row.get("merged"),
        )

    @classmethod
    def from_summary(cls, text: str) -> LedgerEntry:
        return cls.from_row(json.loads(text))

    def wire(self) -> dict[str, Any]:
        # Only counts that depend on the commit alone: older rows also counted bodies new to
        # the scope, which told any reader whether a guessed text was already held.
        changes = {k: v for k, v in self.changes.items() if k in PUBLIC_CHANGES}
        return {
            "id": self.commit_id, "parent": self.parent, "scope": self.scope,
            "branch": self.branch, "seq": self.seq, "author": self.author,
            "time": utc_text(self.committed_at), "message": self.message,
            "changes": changes, "snapshots": {k: str(v) for k, v in self.snapshots.items()},
            "kind": self.kind,
            "parents": [p for p in (self.parent, self.merged) if p],
        }


@dataclass(frozen=True)
class Head:
    commit_id: str
    seq: int
    committed_at: datetime


def not_before(now: datetime, *times: datetime | None) -> datetime:
    """``now``, or a microsecond after the latest of ``times`` when that is not before it:
    the clock of a chain. Its commits' times and the valid time its writes and reads take
    by default run forward from one commit to the next, though the servers that write it
    disagree about the time or one's clock steps back (docs/deployment.md, "Clocks")."""
    return max([now, *(t + timedelta(microseconds=1) for t in times if t is not None)])
