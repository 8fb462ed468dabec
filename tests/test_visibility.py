"""The bitmap path and core's per-episode rule (`memory/acl.py`) must always agree."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from ampup_memory.memory.acl import Principal, may_read, may_read_all
from ampup_memory.search.visibility import may_read_fact, visible_episodes

entries = st.sampled_from(
    ["*", "user:ann", "user:bob", "group:sales", "group:eng", "role:admin", "role:cs"]
)
acls = st.lists(entries, min_size=1, max_size=3, unique=True)
principals = st.builds(
    Principal,
    st.sampled_from(["ann", "bob", "cy"]),
    st.lists(st.sampled_from(["sales", "eng", "ops"]), max_size=2).map(tuple),
    st.lists(st.sampled_from(["admin", "cs"]), max_size=2).map(tuple),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(acls, min_size=1, max_size=12), principals,
       st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=3), max_size=6))
def test_bitmaps_agree_with_the_per_episode_rule(
    episode_acls: list[list[str]], who: Principal, facts: list[list[int]]
) -> None:
    bitmaps: dict[str, BitMap] = {}
    for num, acl in enumerate(episode_acls):
        for entry in acl:
            bitmaps.setdefault(entry, BitMap()).add(num)
    visible = visible_episodes(who, lambda e: bitmaps.get(e, BitMap()))
    for num, acl in enumerate(episode_acls):
        assert (num in visible) == may_read(who, acl)
    for cited in facts:
        cited = [c for c in cited if c < len(episode_acls)]
        # core's facts always cite something; the index refuses one that cites nothing
        assert may_read_fact(cited, visible) == (bool(cited) and may_read_all(
            who, [episode_acls[c] for c in cited]))


def test_a_fact_citing_nothing_is_never_visible() -> None:
    assert not may_read_fact([], BitMap([1, 2]))
