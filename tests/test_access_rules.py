"""The read/write rules and wildcard patterns: literal tables first, then properties.

The tables are written out by hand from the AMP v0.1 specification. The property tests
compare the rule with an independent matcher (``oracle``), never with itself.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from typing import Any

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


T, F = True, False

# (pattern, agent id, matches): '*' is any run of characters, also empty; all else literal.
PATTERNS = [
    ("agent_billing", "agent_billing", T),
    ("agent_billing", "agent_billing_v1", F),   # no '*': not a prefix
    ("agent_billing", "x_agent_billing", F),    # nor a suffix
    ("agent_billing_*", "agent_billing_v1", T),
    ("agent_billing_*", "agent_billing_", T),   # the empty run
    ("agent_billing_*", "agent_billing", F),
    ("agent_billing_*", "xagent_billing_v1", F),  # anchored at the start
    ("*_ops", "team_ops", T),
    ("*_ops", "_ops", T),
    ("*_ops", "team_ops_x", F),                 # anchored at the end
    ("a*c", "abc", T),
    ("a*c", "ac", T),
    ("a*c", "abcd", F),
    ("ab*ba", "aba", F),                        # head and tail may not overlap
    ("ab*ba", "abba", T),
    ("*a*a", "a", F),
    ("*a*a", "aa", T),
    ("*a*b*c", "cba", F),                       # middle pieces in order
    ("*a*b*c", "xaybzc", T),
    ("a*b*c*d", "abcd", T),
    ("a*b*c*d", "acbd", F),
    ("a*bc*bc", "abcbc", T),
    ("a*bc*bc", "abc", F),                      # one "bc" cannot serve twice
    ("*", "", T),
    ("*", "anyone", T),
    ("**", "x", T),
    ("a.c", "a.c", T),
    ("a.c", "abc", F),                          # '.' is literal
    ("a?c", "abc", F),                          # '?' is literal
    ("a?c", "a?c", T),
    ("[ab]", "a", F),                           # brackets are literal
    ("[ab]", "[ab]", T),
    ("a+", "aa", F),
    ("^a$", "a", F),
]


def test_pattern_table() -> None:
    got = [(p, a, pattern_matches(p, a)) for p, a, _ in PATTERNS]
    assert got == PATTERNS
    # the property tests below lean on the oracle: it must give the table's answers too
    assert [(p, a, oracle(p, a)) for p, a, _ in PATTERNS] == PATTERNS


CREATOR, OWNER = "creator", "owner"
# (access policy, agent, may read, may write), for a cell created by CREATOR for OWNER.
RULES = [
    ({}, CREATOR, T, T),
    ({}, OWNER, T, T),
    ({}, "stranger", F, F),
    ({"public": True}, "stranger", T, F),          # public grants read, never write
    ({"public": True}, OWNER, T, T),
    ({"readable_by": ["bill_*"]}, "bill_v1", T, F),  # readable_by grants no write
    ({"readable_by": ["bill_*"]}, "bill", F, F),
    ({"readable_by": ["x", "bill_*", "y"]}, "bill_v1", T, F),  # any one pattern
    ({"readable_by": ["x", "y"]}, "z", F, F),
    ({"readable_by": ["*"]}, "stranger", T, F),
    ({"writable_by": ["bill_*"]}, "bill_v1", F, T),  # writable_by grants no read
    ({"writable_by": ["x", "bill_*"]}, "bill_v1", F, T),
    ({"writable_by": ["bill_*"]}, "sales_v1", F, F),
    ({"readable_by": ["bill_*"], "writable_by": ["ops"]}, "ops", F, T),
    ({"readable_by": ["ops"], "writable_by": ["ops"]}, "ops", T, T),
    ({"public": True, "writable_by": ["ops"]}, "ops", T, T),
    ({"readable_by": ["creator"]}, "creator2", F, F),
    ({"readable_by": ["owner*"]}, "owner2", T, F),
]


def _policy_cell(policy: dict[str, Any]) -> MemoryCell:
    return cell(CREATOR, OWNER, policy.get("public", False), policy.get("readable_by", []),
                policy.get("writable_by", []))


def test_read_and_write_rule_table() -> None:
    for policy, agent, reads, writes in RULES:
        c = _policy_cell(policy)
        assert (can_read(c, agent), can_write(c, agent)) == (reads, writes), (policy, agent)
        guard = Guard.of(c)  # what a store builds from columns decides the same
        assert (can_read(guard, agent), can_write(guard, agent)) == (reads, writes)


# (public, has readable_by, agent, necessary condition): the SQL pre-filter's table.
PREFILTER = [
    (F, F, CREATOR, T),
    (F, F, OWNER, T),
    (F, F, "stranger", F),
    (T, F, "stranger", T),
    (F, T, "stranger", T),
]


def test_prefilter_table() -> None:
    for public, has_readers, agent, expected in PREFILTER:
        got = may_be_readable(public, CREATOR, OWNER, has_readers, agent)
        assert got is expected, (public, has_readers, agent)


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
