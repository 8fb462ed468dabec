"""Who reads what: ACL entries, principals, and the one visibility rule.

An episode carries a short flat ACL of entries ``*``, ``user:<id>``, ``group:<id>`` and
``role:<name>``. A caller is a principal: a user plus the groups and roles they hold. The
caller may read an episode when the ACL and the principal's entries meet; a fact is visible
when every episode it cites is. Membership lives on the principal only, so changing it never
rewrites an episode and takes effect on the next read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated

from ampup_memory.errors import field_error
from ampup_memory.ruled import published, ruled

EVERYONE = "*"
KINDS = ("user", "group", "role")
MAX_ID = 200
_ID = rf"[A-Za-z0-9][A-Za-z0-9._@+\-]{{0,{MAX_ID - 1}}}"
ID_PATTERN = f"^{_ID}$"
ENTRY_PATTERN = rf"^(?:\*|(?:user|group|role):{_ID})$"
ID_RE = re.compile(rf"^{_ID}$")
ENTRY_RE = re.compile(ENTRY_PATTERN)
MAX_ENTRIES = 64
ACL_RULE = "use '*', 'user:<id>', 'group:<id>' or 'role:<name>'"
ID_RULE = f"letters, digits and ._@+- (max {MAX_ID}, starting with a letter or digit)"

# Request models use these: the published schema says what the server accepts, and a
# refused one says the rule in words.
AclEntry = Annotated[str, ruled(ENTRY_PATTERN, "acl_invalid", "ACL entry", ACL_RULE),
                     published(ENTRY_PATTERN)]
Identifier = Annotated[str, ruled(ID_PATTERN, "id_invalid", "id", ID_RULE),
                       published(ID_PATTERN)]


def normalize_acl(entries: Iterable[str], loc: list[str | int]) -> tuple[str, ...]:
    """Validated, de-duplicated and sorted: two spellings of one ACL compare equal."""
    seen = sorted(set(entries))
    bad = [e for e in seen if not isinstance(e, str) or not ENTRY_RE.fullmatch(e)]
    if bad:
        raise field_error(
            loc, f"invalid ACL entry {str(bad[0])[:80]!r}: {ACL_RULE}", "acl_invalid")
    if not seen:
        raise field_error(loc, "an ACL needs at least one entry (use '*' for everyone)",
                          "acl_empty")
    if len(seen) > MAX_ENTRIES:
        raise field_error(loc, f"an ACL holds at most {MAX_ENTRIES} entries", "acl_too_long")
    return tuple(seen)


def valid_id(value: str) -> bool:
    return ID_RE.fullmatch(value) is not None


def require_id(value: str, loc: list[str | int], what: str = "id") -> str:
    if not isinstance(value, str) or not valid_id(value):
        raise field_error(loc, f"invalid {what} {str(value)[:80]!r}: {ID_RULE}", "id_invalid")
    return value


def own_acl(user: str) -> list[str]:
    """The ACL of an episode whose writer named none: readable by that writer only."""
    return [f"user:{user}"]


@dataclass(frozen=True)
class Principal:
    user: str
    groups: tuple[str, ...] = field(default=())
    roles: tuple[str, ...] = field(default=())

    def entries(self) -> frozenset[str]:
        """The ACL entries this principal holds (``*`` is held by everyone)."""
        return frozenset(
            [EVERYONE, f"user:{self.user}"]
            + [f"group:{g}" for g in self.groups]
            + [f"role:{r}" for r in self.roles]
        )

    def wire(self) -> dict[str, object]:
        return {"user": self.user, "groups": list(self.groups), "roles": list(self.roles)}


def may_read(principal: Principal, acl: Iterable[str]) -> bool:
    """The visibility rule, the only one: some ACL entry is one the principal holds."""
    held = principal.entries()
    return any(entry in held for entry in acl)


def may_read_all(principal: Principal, acls: Iterable[Iterable[str]]) -> bool:
    """A fact's rule: the caller may read every episode it cites."""
    return all(may_read(principal, acl) for acl in acls)


def common_acl(acls: Iterable[Iterable[str]]) -> tuple[str, ...]:
    """Entries present in every ACL that is not public: whoever holds one may read all of
    those episodes. An ACL holding ``*`` lets everyone read, so it narrows nothing (a value
    citing a public episode and ``user:bob``'s is bob's); all public: ``("*",)``."""
    sets = [set(a) for a in acls]
    if not sets:
        return ()
    narrowing = [s for s in sets if EVERYONE not in s]
    if not narrowing:
        return (EVERYONE,)
    return tuple(sorted(set.intersection(*narrowing)))
