"""Properties of the read/write rules and wildcard patterns (hypothesis)."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache

from hypothesis import given
from hypothesis import strategies as st

from ampup_memory.amp.access import Guard, can_read, can_write, may_be_readable, pattern_matches
from ampup_memory.amp.model import MemoryCell

ALPHABET = "ab_.*?-"
ids = st.text(alphabet=ALPHABET.replace("*", ""), min_size=1, max_size=6)
patterns = st.text(alphabet=ALPHABET, min_size=1, max_size=6)


def oracle(pattern: str, text: str) -> bool:
    """An independent matcher: `*` is any run, everything else literal."""

    @cache
    def go(i: int, j: int) -> bool:
        if i == len(pattern):
            return j == len(text)
        if pattern[i] == "*":
            return go(i + 1, j) or (j < len(text) and go(i, j + 1))
        return j < len(text) and pattern[i] == text[j] and go(i + 1, j + 1)

    return go(0, 0)


@given(patterns, ids)
def test_pattern_matches_agrees_with_oracle(pattern: str, agent: str) -> None:
    assert pattern_matches(pattern, agent) == oracle(pattern, agent)


@given(st.text(alphabet="ab*", min_size=1, max_size=12),
       st.text(alphabet="ab", min_size=0, max_size=14))
def test_many_stars_agree_with_oracle(pattern: str, agent: str) -> None:
    assert pattern_matches(pattern, agent) == oracle(pattern, agent)


def test_a_pattern_cannot_stall_the_read_rule() -> None:
    """A regex of `.*` pieces backtracked for minutes on this (an audit hung a server with
    it); the rule must answer at once, whatever pattern a cell's creator wrote."""
    import time
    start = time.perf_counter()
    for n in (30, 200, 2000):
        assert not pattern_matches("*a" * n + "*b", "a" * (2 * n))
        assert pattern_matches("*a" * n + "*b", "a" * (2 * n) + "b")
    assert time.perf_counter() - start < 2.0


def cell(created_by: str, owner: str, public: bool, readers: list[str],
         writers: list[str]) -> MemoryCell:
    now = datetime.now(UTC).isoformat()
    return MemoryCell.model_validate({
        "id": "mem_x", "type": "semantic", "content": {"text": "t"},
        "identity": {"owner_id": owner, "owner_type": "user", "created_by": created_by},
        "scoring": {}, "lifecycle": {"created_at": now, "last_accessed_at": now,
                                     "last_updated_at": now},
        "access_policy": {"readable_by": readers, "writable_by": writers, "public": public},
    })


@given(ids, ids, st.booleans(), st.lists(patterns, max_size=3),
       st.lists(patterns, max_size=3), ids)
def test_rules_hold(created_by: str, owner: str, public: bool, readers: list[str],
                    writers: list[str], agent: str) -> None:
    c = cell(created_by, owner, public, readers, writers)
    readable = can_read(c, agent)
    # The stores' SQL pre-filter is a necessary condition of the rule.
    assert not readable or may_be_readable(
        c.access_policy.public, c.identity.created_by, c.identity.owner_id,
        bool(c.access_policy.readable_by), agent)
    # The guard a store builds from columns decides exactly as the whole cell.
    assert can_read(Guard.of(c), agent) == readable
    assert can_write(Guard.of(c), agent) == can_write(c, agent)
    # public grants no write; writable_by grants no read.
    if agent not in (c.identity.created_by, c.identity.owner_id):
        assert can_write(c, agent) == any(oracle(p, agent) for p in writers)
        assert readable == (public or any(oracle(p, agent) for p in readers))
