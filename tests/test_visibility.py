"""The ACL rule (`memory/acl.py`) and its bitmap form (`search/visibility.py`).

First literal tables worked out by hand from the entries' meaning; then a property: the
bitmap path and the per-episode rule always agree.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from ampup_memory.memory.acl import Principal, common_acl, may_read, may_read_all
from ampup_memory.search.visibility import may_read_fact, visible_episodes

T, F = True, False
ANN = Principal("ann", groups=("sales",))
BOB = Principal("bob", roles=("admin",))
CY = Principal("cy", groups=("eng", "ops"), roles=("cs",))
DEE = Principal("dee")
WHO = (ANN, BOB, CY, DEE)

# (episode ACL, may read: ann bob cy dee)
ACLS: list[tuple[list[str], tuple[bool, ...]]] = [
    (["*"],                          (T, T, T, T)),
    (["user:ann"],                   (T, F, F, F)),
    (["user:an"],                    (F, F, F, F)),  # whole ids, not prefixes
    (["user:anne"],                  (F, F, F, F)),
    (["group:sales"],                (T, F, F, F)),
    (["role:sales"],                 (F, F, F, F)),  # the kind is part of the entry
    (["user:sales"],                 (F, F, F, F)),
    (["role:admin"],                 (F, T, F, F)),
    (["group:admin"],                (F, F, F, F)),
    (["group:ops"],                  (F, F, T, F)),  # any one of several groups
    (["role:cs", "user:dee"],        (F, F, T, T)),  # any one entry of the ACL
    (["group:eng", "role:admin"],    (F, T, T, F)),
    (["user:bob", "group:sales"],    (T, T, F, F)),
    (["user:cy", "*"],               (T, T, T, T)),
    ([],                             (F, F, F, F)),  # core refuses it; the rule says no
]


def test_entries_a_principal_holds() -> None:
    assert ANN.entries() == {"*", "user:ann", "group:sales"}
    assert CY.entries() == {"*", "user:cy", "group:eng", "group:ops", "role:cs"}
    assert DEE.entries() == {"*", "user:dee"}


def test_acl_table_per_episode_and_with_bitmaps() -> None:
    bitmaps: dict[str, BitMap] = {}
    for num, (acl, _) in enumerate(ACLS):
        for entry in acl:
            bitmaps.setdefault(entry, BitMap()).add(num)
    for i, who in enumerate(WHO):
        visible = visible_episodes(who, lambda e: bitmaps.get(e, BitMap()))
        for num, (acl, reads) in enumerate(ACLS):
            assert may_read(who, acl) is reads[i], (who.user, acl)
            assert (num in visible) is reads[i], (who.user, acl)


# (ACLs of the cited episodes, may read the fact: ann bob cy dee)
FACTS: list[tuple[list[list[str]], tuple[bool, ...]]] = [
    ([["*"]],                                  (T, T, T, T)),
    ([["*"], ["user:ann"]],                    (T, F, F, F)),  # every cited episode
    ([["group:sales"], ["role:admin"]],        (F, F, F, F)),
    ([["group:sales", "role:admin"], ["*"]],   (T, T, F, F)),
    ([["role:cs"], ["group:eng"], ["*"]],      (F, F, T, F)),
    ([],                                       (F, F, F, F)),  # a fact citing nothing
]


def test_fact_table_per_episode_and_with_bitmaps() -> None:
    for cited, reads in FACTS:
        bitmaps: dict[str, BitMap] = {}
        for num, acl in enumerate(cited):
            for entry in acl:
                bitmaps.setdefault(entry, BitMap()).add(num)
        for i, who in enumerate(WHO):
            visible = visible_episodes(who, lambda e, b=bitmaps: b.get(e, BitMap()))
            assert may_read_fact(range(len(cited)), visible) is reads[i], (who.user, cited)
            if cited:  # core's facts always cite something
                assert may_read_all(who, cited) is reads[i], (who.user, cited)


def test_common_acl_table() -> None:
    """A closure's reason episode gets the entries every cited ACL shares."""
    # A public ACL narrows nothing: readers of both are the readers of the other one.
    assert common_acl([["*", "user:ann"], ["user:ann", "group:x"]]) == ("group:x",
                                                                         "user:ann")
    assert common_acl([["*"], ["user:bob"]]) == ("user:bob",)
    assert common_acl([["*"], ["*", "group:x"]]) == ("*",)
    assert common_acl([["group:b", "group:a"], ["group:a", "group:b"]]) == ("group:a",
                                                                            "group:b")
    assert common_acl([["user:ann"], ["user:bob"]]) == ()
    assert common_acl([["role:x"]]) == ("role:x",)
    assert common_acl([]) == ()


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
