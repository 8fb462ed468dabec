"""The AMP read rule and write rule. Each lives here, once; every caller uses these.

GET, listing, search, PATCH, DELETE and the MCP tools all decide with `can_read` /
`can_write`; a PATCH that touches ``access_policy`` or ``identity`` also needs
`can_manage`. `tests/test_rule_callers.py` asserts the callers agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from ampup_memory.amp.model import MemoryCell


@dataclass(frozen=True)
class Guard:
    """The part of a cell the rules look at. Stores can build it from a few columns, so
    search can apply the read rule to every hit before loading any whole cell."""

    created_by: str
    owner_id: str
    public: bool
    readable_by: tuple[str, ...]
    writable_by: tuple[str, ...] = ()

    @classmethod
    def of(cls, cell: MemoryCell) -> Guard:
        return cls(
            created_by=cell.identity.created_by,
            owner_id=cell.identity.owner_id,
            public=cell.access_policy.public,
            readable_by=tuple(cell.access_policy.readable_by),
            writable_by=tuple(cell.access_policy.writable_by),
        )


def _guard(subject: MemoryCell | Guard) -> Guard:
    return subject if isinstance(subject, Guard) else Guard.of(subject)


def pattern_matches(pattern: str, agent_id: str) -> bool:
    """Does ``agent_id`` match an access-policy pattern such as ``agent_billing_*``?

    ``*`` is any run of characters (also empty); every other character is literal. Matched
    by anchoring the first and last pieces and finding the ones between left to right,
    which is exact for ``*``-only patterns and linear-ish in the input: a regex of ``.*``
    pieces backtracks exponentially on patterns like ``*a*a*a…*b``, and any agent may
    write such a pattern into a cell it creates.
    """
    if "*" not in pattern:
        return pattern == agent_id
    head, *middle, tail = pattern.split("*")
    if len(head) + len(tail) > len(agent_id):
        return False
    if not (agent_id.startswith(head) and agent_id.endswith(tail)):
        return False
    pos, end = len(head), len(agent_id) - len(tail)
    for piece in middle:
        found = agent_id.find(piece, pos, end)
        if found < 0:
            return False
        pos = found + len(piece)
    return True


def can_manage(subject: MemoryCell | Guard, agent_id: str) -> bool:
    """The policy rule: only the creator or the owner may change who reads and writes the
    cell (``access_policy``) or whose it is (``identity``). No pattern grants it, so an
    agent given write (`writable_by`) cannot grant itself read. The creator and the owner
    also bypass both lists below: they keep access to their own memory."""
    g = _guard(subject)
    return agent_id in (g.created_by, g.owner_id)


def can_read(subject: MemoryCell | Guard, agent_id: str) -> bool:
    """The read rule: public, or creator, or owner, or a readable_by pattern matches."""
    g = _guard(subject)
    if g.public or can_manage(g, agent_id):
        return True
    return any(pattern_matches(p, agent_id) for p in g.readable_by)


def can_write(subject: MemoryCell | Guard, agent_id: str) -> bool:
    """The write rule: creator, or owner, or a writable_by pattern. `public` grants no write;
    `writable_by` grants no read (what a write answers is cut to what `can_read` allows)."""
    g = _guard(subject)
    if can_manage(g, agent_id):
        return True
    return any(pattern_matches(p, agent_id) for p in g.writable_by)


def may_be_readable(public: bool, created_by: str, owner_id: str, has_readers: bool,
                    agent_id: str) -> bool:
    """A necessary condition of `can_read`, cheap enough for a store to push into SQL.

    Stores use it only to skip rows that can never pass; the decision itself is always
    `can_read`. A property test asserts ``can_read(c, a) ⇒ may_be_readable(…)``.
    """
    return public or agent_id in (created_by, owner_id) or has_readers
