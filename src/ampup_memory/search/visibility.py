"""Who sees what: THE visibility rule of AmpUp Memory, in one place.

An episode's ACL is a short flat list of entries: ``*``, ``user:<id>``, ``group:<id>``,
``role:<name>``. A caller (a principal) holds entries too: ``*``, its ``user:`` entry and
one per group and role. The caller may read an episode when the two lists share an entry.
A fact is readable only when *every* episode it cites is readable.

The index keeps one roaring bitmap of episode numbers per ACL entry, so the caller's
visible set is the union of the bitmaps of its entries, and a membership change touches
one principal and never an episode. :func:`may_read_episode` is the same rule for one
episode given its ACL (for reads that are not searches); a test asserts both agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pyroaring import BitMap

from ampup_memory.errors import field_error

EVERYONE = "*"
_ENTRY = re.compile(r"^(\*|(user|group|role):[A-Za-z0-9._@+\-]{1,200})$")


def valid_entry(entry: str) -> bool:
    return bool(_ENTRY.match(entry))


def check_acl(acl: Sequence[str], loc: str = "acl") -> tuple[str, ...]:
    """A validated, de-duplicated ACL (422 on an entry of unknown shape or an empty list)."""
    if not acl:
        raise field_error(["body", loc], "an ACL needs at least one entry (use '*' for all)")
    for i, entry in enumerate(acl):
        if not isinstance(entry, str) or not valid_entry(entry):
            raise field_error(
                ["body", loc, i],
                f"ACL entry {entry!r} must be '*', 'user:<id>', 'group:<id>' or 'role:<name>'",
            )
    return tuple(dict.fromkeys(acl))


@dataclass(frozen=True)
class Principal:
    """A caller: a user plus the groups and roles a directory gave it."""

    user: str | None
    groups: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()

    def entries(self) -> tuple[str, ...]:
        found = [EVERYONE]
        if self.user:
            found.append(f"user:{self.user}")
        found += [f"group:{g}" for g in self.groups]
        found += [f"role:{r}" for r in self.roles]
        return tuple(dict.fromkeys(found))


def may_read_episode(acl: Iterable[str], principal: Principal) -> bool:
    """The rule for one episode: its ACL and the caller's entries share an entry."""
    return not set(acl).isdisjoint(principal.entries())


def visible_episodes(principal: Principal, bitmap_of: Callable[[str], BitMap]) -> BitMap:
    """The same rule over the index: the union of the caller's entries' bitmaps."""
    visible = BitMap()
    for entry in principal.entries():
        visible |= bitmap_of(entry)
    return visible


def may_read_fact(episode_nums: Iterable[int], visible: BitMap) -> bool:
    """A fact is readable only when every cited episode is (a fact citing nothing is not)."""
    nums = list(episode_nums)
    return bool(nums) and all(n in visible for n in nums)


def may_read_fact_acls(cited_acls: Iterable[Iterable[str]], principal: Principal) -> bool:
    """:func:`may_read_fact` for callers holding the cited episodes' ACLs, not numbers."""
    acls = list(cited_acls)
    return bool(acls) and all(may_read_episode(acl, principal) for acl in acls)
