"""Visibility over the index: core's rule (`memory/acl.py`), computed with bitmaps.

Who may read an episode is decided in one place, :func:`ampup_memory.memory.acl.may_read`:
the episode's ACL and the principal's entries (``*``, ``user:``, one per group and role)
share an entry. The index keeps one roaring bitmap of episode numbers per ACL entry, so
the episodes a principal may read are the union of the bitmaps of its entries: the same
rule, evaluated for every episode at once (a test asserts the two agree). A membership
change touches one principal and never an episode. A fact is readable only when *every*
episode it cites is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pyroaring import BitMap

from ampup_memory.memory.acl import Principal

__all__ = ["Principal", "may_read_fact", "visible_episodes"]


def visible_episodes(principal: Principal, bitmap_of: Callable[[str], BitMap]) -> BitMap:
    """Numbers of the episodes ``principal`` may read: the union of its entries' bitmaps."""
    visible = BitMap()
    for entry in sorted(principal.entries()):
        visible |= bitmap_of(entry)
    return visible


def may_read_fact(episode_nums: Iterable[int], visible: BitMap) -> bool:
    """A fact is readable only when every cited episode is (a fact citing nothing is not)."""
    nums = list(episode_nums)
    return bool(nums) and all(n in visible for n in nums)
