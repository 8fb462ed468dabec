"""One behaviour module for every index backend: SQLite (default) and PostgreSQL+pgvector.

Each test runs against both through the shared engine, with real files and a real server.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ampup_memory.amp.lifecycle import DecayInputs, decay_score
from ampup_memory.amp.model import MemoryCell
from ampup_memory.memory.facts import begin_instant, begun, current, newest_order, timelines
from ampup_memory.memory.segments import Segment
from ampup_memory.search.cutoff import Cutoff
from ampup_memory.search.embed import HashEmbedder, WordLlamaEmbedder
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index.base import (
    DocumentBatch,
    FactRow,
    ModelInfo,
    SearchIndex,
    Terms,
)
from ampup_memory.search.index.common import dots, dots_at
from ampup_memory.search.index.registry import open_index
from ampup_memory.search.index.sqlite import SQLiteIndex
from ampup_memory.search.passages import CUT
from ampup_memory.search.rank import (
    Parts,
    meaning,
    normalise_keyword,
    score_parts,
    time_part,
    with_decay,
)
from ampup_memory.search.visibility import Principal
from tests.pg import PostgresFactory
from tests.search_docs import episode, fact, when

NOW = when("2025-04-15T12:00:00")
ANN = Principal("ann", groups=("sales",))
BOB = Principal("bob")
S = "acme__sales"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def index_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'index.db'}"
    factory: PostgresFactory = request.getfixturevalue("postgres")
    return factory.new_database("idx")


@pytest.fixture(scope="module")
def wordllama() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


@pytest.fixture
def index(index_uri: str) -> Iterator[SearchIndex]:
    idx = open_index(index_uri)
    yield idx
    idx.close()


@pytest.fixture
def engine(index: SearchIndex, wordllama: WordLlamaEmbedder) -> SearchEngine:
    eng = SearchEngine(index, wordllama)
    eng.ensure_model()
    return eng


def ids(results: object) -> list[str]:
    return [f.row.id for f in results.facts]  # type: ignore[attr-defined]


def test_field_weights_rank_entity_matches_above_quote_matches(engine: SearchEngine) -> None:
    e = episode(S, ["Globex said Initech owns the renewal.", "Initech budget is 40k."], ["*"])
    in_entity = fact(e, "Initech", "budget", "40k", "Initech budget is 40k.", unit=2)
    in_quote = fact(e, "Globex", "renewal_owner", "someone", "Globex said Initech owns the "
                    "renewal.", unit=1)
    engine.ingest(DocumentBatch([e], [in_entity, in_quote]))
    found = engine.search_facts(S, "main", "Initech", ANN, now=NOW)
    assert ids(found)[:2] == [in_entity.id, in_quote.id]
    assert found.facts[0].parts.keyword == 1.0
    assert 0 < found.facts[1].parts.keyword < 1.0


def test_a_rare_query_word_outranks_a_common_one(engine: SearchEngine,
                                                 index: SearchIndex) -> None:
    """Both backends weigh a query word by its IDF over the space: the one row matching the
    rare word ranks above the eight matching only the common one, though each row holds
    one of them once, in the same field. (PostgreSQL's ``ts_rank`` had no collection
    statistics: it tied them all, and the tie went to the older rows.)"""
    eps = [episode(S, [f"Client {i} said the invoice went out."], ["*"]) for i in range(8)]
    eps.append(episode(S, ["Client 8 said the zephyr went out."], ["*"]))
    engine.ingest(DocumentBatch(eps, [
        fact(e, f"Client {i}", "said", "out", e.units[0].text) for i, e in enumerate(eps)]))
    words = ["invoice", "zephyr"]
    passages = index.keyword_passages(S, "main", words, 20)
    facts = index.keyword_facts(S, "main", words, 20)
    assert len(passages) == len(facts) == 9
    best = index.passages([passages[0][0]])[0]
    assert "zephyr" in best.units[0][2]
    assert index.facts([facts[0][0]])[0].entity == "Client 8"
    for hits in (passages, facts):
        assert hits[0][1] > hits[1][1]  # strictly: a tie would be no IDF
        assert len({round(s, 9) for _, s in hits[1:]}) == 1  # the common rows alike


def test_scores_after_later_writes_equal_a_fresh_indexs(engine: SearchEngine,
                                                       index_uri: str) -> None:
    """The keyword statistics an index remembers (PostgreSQL: the space's size grown by
    the rows of later commits, counts under the newest row's commit) weigh a search after
    more writes exactly as an index that remembers nothing: the same scores, through
    this index and a second one opened on the same data (another server)."""
    index = engine.index
    words = ["invoice", "zephyr"]
    for seq in range(1, 5):
        eps = [replace(episode(S, [f"Client {seq}-{i} said the {w} went out twice."], ["*"],
                                source=f"call:{seq}-{i}"), seq=seq)
               for i, w in enumerate(["invoice", "invoice", "zephyr"][:1 + seq % 3])]
        engine.ingest(DocumentBatch(eps, [
            fact(e, f"Client {seq}-{i}", "said", "out", e.units[0].text, seq=seq)
            for i, e in enumerate(eps)]))
        remembered = (index.keyword_passages(S, "main", words, 50),
                      index.keyword_facts(S, "main", words, 50))
        other = open_index(index_uri)
        try:
            fresh = (other.keyword_passages(S, "main", words, 50),
                     other.keyword_facts(S, "main", words, 50))
        finally:
            other.close()
        assert remembered == fresh, seq
        assert all(remembered), seq


def test_score_is_the_documented_blend(engine: SearchEngine) -> None:
    e = episode(S, ["Acme budget for 2025 is 40k dollars.", "Dana owns the Acme account."],
                ["*"])
    engine.ingest(DocumentBatch([e], [
        fact(e, "Acme", "budget", "40k", "Acme budget for 2025 is 40k dollars."),
        fact(e, "Acme", "owner", "Dana", "Dana owns the Acme account.", unit=2),
    ]))
    found = engine.search_facts(S, "main", "how much money can Acme spend", ANN, now=NOW)
    assert found.facts
    for f in found.facts:
        p = f.parts
        assert 0.0 <= p.keyword <= 1.0 and 0.0 <= p.meaning <= 1.0 and p.time == 0.0
        assert f.score == pytest.approx(0.6 * p.keyword + 0.4 * p.meaning)
    # meaning carries a paraphrase: "money ... spend" is about the budget, not the owner
    assert found.facts[0].row.predicate == "budget"


# -- the blend, with literal weights and hand-computed numbers (no constant of rank.py) --------
def test_relevance_is_six_tenths_keyword_four_tenths_meaning_plus_time() -> None:
    assert Parts(1.0, 0.0).relevance == pytest.approx(0.6)
    assert Parts(0.0, 1.0).relevance == pytest.approx(0.4)
    assert Parts(0.5, 0.25).relevance == pytest.approx(0.4)  # 0.30 + 0.10
    assert Parts(0.5, 0.25, 1.0).relevance == pytest.approx(1.4)  # the window boost is 1
    assert Parts(1.0, 1.0).relevance == pytest.approx(1.0)


def test_parts_are_normalised_before_the_blend() -> None:
    assert normalise_keyword([2.0, 1.0, 0.0, -1.0]) == [1.0, 0.5, 0.0, 0.0]
    assert normalise_keyword([0.5, 0.25]) == [1.0, 0.5]  # raw scores below 1 scale up too
    assert normalise_keyword([0.001]) == [1.0]
    assert normalise_keyword([0.0, 0.0]) == [0.0, 0.0]
    assert normalise_keyword([-3.0]) == [0.0]
    assert normalise_keyword([]) == []
    assert [meaning(c) for c in (None, -0.2, 0.0, 0.7, 1.0, 1.3)] == [0.0, 0.0, 0.0, 0.7,
                                                                      1.0, 1.0]
    parts = score_parts([4.0, 1.0], [0.5, None])
    assert parts == [Parts(1.0, 0.5), Parts(0.25, 0.0)]
    assert [p.relevance for p in parts] == pytest.approx([0.8, 0.15])  # .6+.2, .15+0
    with pytest.raises(ValueError):  # one cosine per candidate, never silently cut
        score_parts([4.0, 1.0], [0.5])


def test_a_named_window_boosts_only_facts_valid_in_it() -> None:
    jan = (when("2025-01-01"), when("2025-02-01"))
    assert time_part(when("2024-12-01"), None, jan) == 1.0  # open-ended, began before
    assert time_part(when("2025-01-31"), when("2025-03-01"), jan) == 1.0
    assert time_part(when("2025-02-01"), None, jan) == 0.0  # begins as the window ends
    assert time_part(when("2024-12-01"), when("2025-01-01"), jan) == 0.0  # ended at start
    assert time_part(None, None, jan) == 0.0  # says nothing about when it held
    assert time_part(when("2024-12-01"), None, None) == 0.0  # the query names no window


def test_amp_blend_of_relevance_and_decay_score() -> None:
    """importance 0.8 × confidence 0.5 × e^(−0.01 × 10 days) = 0.4·e^−0.1 = 0.361935;
    relevance 0.6·1 + 0.4·0.5 = 0.8; blended 0.8 × (0.5 + 0.5 × 0.361935) = 0.544774."""
    since = when("2025-04-01T00:00:00")
    cell = DecayInputs(importance=0.8, confidence=0.5, decay_rate=0.01, since=since)
    decay = decay_score(cell, since + timedelta(days=10))
    assert decay == pytest.approx(0.361935, abs=1e-6)
    assert decay == pytest.approx(0.4 * math.exp(-0.1))
    assert decay_score(cell, since) == pytest.approx(0.4)
    assert decay_score(cell, since - timedelta(days=3)) == pytest.approx(0.4)  # no negative age
    assert decay_score(replace(cell, decay_rate=0.0), since + timedelta(days=1000)) == (
        pytest.approx(0.4))
    assert decay_score(cell, since + timedelta(days=100)) == pytest.approx(0.147152, abs=1e-6)
    relevance = Parts(1.0, 0.5).relevance
    assert with_decay(relevance, decay) == pytest.approx(0.544774, abs=1e-6)
    assert with_decay(0.8, 0.0) == pytest.approx(0.4)  # never below half its relevance
    assert with_decay(0.8, 1.0) == pytest.approx(0.8)
    assert with_decay(0.8, 0.5) == pytest.approx(0.6)
    assert with_decay(0.8, 2.0) == pytest.approx(0.8)  # decay is clamped to [0, 1]
    assert with_decay(0.8, -1.0) == pytest.approx(0.4)


def test_decay_runs_from_the_latest_of_created_read_and_updated() -> None:
    created = when("2025-01-01T00:00:00")
    for accessed, updated, since in (
        ("2025-01-05T00:00:00", "2025-01-03T00:00:00", "2025-01-05T00:00:00"),
        ("2025-01-03T00:00:00", "2025-01-09T00:00:00", "2025-01-09T00:00:00"),
        ("2025-01-01T00:00:00", "2025-01-01T00:00:00", "2025-01-01T00:00:00"),
    ):
        cell = MemoryCell.model_validate({
            "id": "mem_x", "type": "semantic", "content": {"text": "t"},
            "identity": {"owner_id": "o", "owner_type": "user", "created_by": "c"},
            "scoring": {"importance": 0.8, "confidence": 0.5, "decay_rate": 0.01},
            "lifecycle": {"created_at": created.isoformat(),
                          "last_accessed_at": when(accessed).isoformat(),
                          "last_updated_at": when(updated).isoformat()},
            "access_policy": {},
        })
        assert DecayInputs.of(cell) == DecayInputs(0.8, 0.5, 0.01, when(since), None)
        assert decay_score(cell, when(since) + timedelta(days=10)) == pytest.approx(0.361935,
                                                                                   abs=1e-6)


def test_visibility_facts_need_every_cited_episode(engine: SearchEngine) -> None:
    public = episode(S, ["Acme renewal is in June."], ["*"])
    sales = episode(S, ["Acme discount approved at 15 percent."], ["group:sales"])
    bobs = episode(S, ["Acme discount might go to 20 percent."], ["user:bob"])
    f_public = fact(public, "Acme", "renewal_month", "June", "Acme renewal is in June.")
    f_sales = fact(sales, "Acme", "discount", "15%", "Acme discount approved at 15 percent.")
    f_both = fact([sales, bobs], "Acme", "discount_ceiling", "20%",
                  "Acme discount might go to 20 percent.")
    engine.ingest(DocumentBatch([public, sales, bobs], [f_public, f_sales, f_both]))
    ann = set(ids(engine.search_facts(S, "main", "Acme discount renewal", ANN, now=NOW)))
    bob = set(ids(engine.search_facts(S, "main", "Acme discount renewal", BOB, now=NOW)))
    both = Principal("bob", groups=("sales",))
    every = set(ids(engine.search_facts(S, "main", "Acme discount renewal", both, now=NOW)))
    assert ann == {f_public.id, f_sales.id}
    assert bob == {f_public.id}
    assert every == {f_public.id, f_sales.id, f_both.id}
    # passages follow the episode ACL alone
    texts = {p.row.text for p in engine.search_passages(S, "main", "Acme discount", BOB,
                                                        now=NOW).passages}
    assert texts == {"Acme renewal is in June.", "Acme discount might go to 20 percent."}


def test_acl_change_moves_bits_and_membership_is_the_callers(engine: SearchEngine) -> None:
    e = episode(S, ["Initech churn risk is high."], ["user:ann"])
    f = fact(e, "Initech", "churn_risk", "high", "Initech churn risk is high.")
    engine.ingest(DocumentBatch([e], [f]))
    assert ids(engine.search_facts(S, "main", "Initech churn", BOB, now=NOW)) == []
    # a membership change is only the caller's entries: no episode is touched
    assert ids(engine.search_facts(S, "main", "Initech churn", Principal("bob", roles=("x",)),
                                   now=NOW)) == []
    # an ACL change (its own commit upstream) re-ingests the episode with the new ACL
    moved = episode(S, ["Initech churn risk is high."], ["role:cs"], commit="c2")
    engine.ingest(DocumentBatch([moved], []))
    assert ids(engine.search_facts(S, "main", "Initech churn", ANN, now=NOW)) == []
    assert ids(engine.search_facts(S, "main", "Initech churn", Principal("bob", roles=("cs",)),
                                   now=NOW)) == [f.id]
    assert engine.index.counts(S)["passages"] == 1  # the body was not indexed twice


def test_newest_visible_version_wins(engine: SearchEngine) -> None:
    old = episode(S, ["Acme budget is 30k."], ["*"], occurred="2025-01-05")
    new = episode(S, ["Acme budget raised to 50k."], ["*"], occurred="2025-03-02")
    secret = episode(S, ["Acme budget cut to 10k."], ["user:bob"], occurred="2025-04-01")
    v1 = fact(old, "Acme", "budget", "30k", "Acme budget is 30k.", valid_from="2025-01-05",
              seq=1)
    v2 = fact(new, "Acme", "budget", "50k", "Acme budget raised to 50k.",
              valid_from="2025-03-02", seq=2)
    v3 = fact(secret, "Acme", "budget", "10k", "Acme budget cut to 10k.",
              valid_from="2025-04-01", seq=3)
    engine.ingest(DocumentBatch([old, new, secret], [v1, v2, v3]))
    assert ids(engine.search_facts(S, "main", "Acme budget", ANN, now=NOW)) == [v2.id]
    assert ids(engine.search_facts(S, "main", "Acme budget", BOB, now=NOW)) == [v3.id]
    assert ids(engine.search_facts(S, "main", "Acme budget", ANN, now=NOW,
                                   as_of=when("2025-02-01"))) == [v1.id]


@dataclass(frozen=True)
class V:
    """A bare version for the newest-wins rule (memory/facts.py) alone."""

    value: str
    valid_from: datetime | None
    valid_to: datetime | None = None
    kind: str = "value"
    commit_seq: int = 1
    ord: int = 0
    entity: str = "Acme"
    predicate: str = "budget"


def test_newest_wins_windows_table() -> None:
    """Windows are half-open [valid_from, end): a version ends where the next begins, at
    its own valid_to, or at a closure; the literal ends and answers are worked out by hand."""
    jan, mar, may = V("30k", when("2025-01-01")), V("50k", when("2025-03-01")), V(
        "70k", when("2025-05-01"))
    line = timelines([may, jan, mar])[("Acme", "budget")]
    assert [(h.version.value, h.end) for h in line] == [
        ("30k", when("2025-03-01")), ("50k", when("2025-05-01")), ("70k", None)]
    for at, value in (("2024-12-31T23:59:59", None), ("2025-01-01", "30k"),
                      ("2025-02-28T23:59:59", "30k"), ("2025-03-01", "50k"),
                      ("2025-05-01", "70k"), ("2030-01-01", "70k")):
        held = current(line, when(at))
        assert (held.version.value if held else None) == value, at
    assert [h.holds_at(when("2025-03-01")) for h in line] == [False, True, False]
    assert [h.holds_at(when("2025-01-01")) for h in line] == [True, False, False]

    gap = timelines([V("30k", when("2025-01-01"), valid_to=when("2025-02-01")),
                     V("50k", when("2025-03-01"))])[("Acme", "budget")]
    assert [h.end for h in gap] == [when("2025-02-01"), None]
    assert current(gap, when("2025-01-31T23:59:59")).version.value == "30k"  # type: ignore[union-attr]
    assert current(gap, when("2025-02-01")) is None  # its own valid_to ended it
    assert current(gap, when("2025-02-15")) is None

    closed = timelines([V("30k", when("2025-01-01")),
                        V("", when("2025-03-01"), kind="closure", commit_seq=2)])
    closed_line = closed[("Acme", "budget")]
    assert current(closed_line, when("2025-04-01")) is None  # a closure is never a value
    assert current(closed_line, when("2025-02-01")).end == when("2025-03-01")  # type: ignore[union-attr]

    undated = timelines([V("old", None), V("30k", when("2025-01-01"))])[("Acme", "budget")]
    assert [(h.version.value, h.end) for h in undated] == [("old", when("2025-01-01")),
                                                          ("30k", None)]
    assert current(undated, when("2020-01-01")).version.value == "old"  # type: ignore[union-attr]
    assert current(undated, when("2025-01-01")).version.value == "30k"  # type: ignore[union-attr]
    # two undated versions: the later commit holds until the first dated one begins
    two = timelines([V("a", None), V("b", None, commit_seq=2), V("c", when("2025-01-01"))])
    assert [(h.version.value, h.end) for h in two[("Acme", "budget")]][1:] == [
        ("b", when("2025-01-01")), ("c", None)]


def test_a_closure_ends_the_value_and_is_never_a_result(engine: SearchEngine) -> None:
    e = episode(S, ["Globex pilot is running."], ["*"])
    why = episode(S, ["Globex pilot stopped: budget pulled."], ["*"], kind="reason")
    running = fact(e, "Globex", "pilot", "running", "Globex pilot is running.",
                   valid_from="2025-01-10", seq=1)
    closure = replace(fact(why, "Globex", "pilot", "", "Globex pilot stopped: budget pulled.",
                           valid_from="2025-03-01", seq=2), kind="closure")
    engine.ingest(DocumentBatch([e, why], [running, closure]))
    assert ids(engine.search_facts(S, "main", "Globex pilot", ANN, now=NOW)) == []
    found = engine.search_facts(S, "main", "Globex pilot", ANN, now=NOW,
                                as_of=when("2025-02-01"))
    assert ids(found) == [running.id] and found.facts[0].end == when("2025-03-01")
    # the window after the closure does not see the ended value
    assert ids(engine.search_facts(S, "main", "Globex pilot in April", ANN, now=NOW)) == []


def test_a_named_window_ranks_its_facts_first_and_reaches_old_versions(
    engine: SearchEngine,
) -> None:
    jan = episode(S, ["Acme champion is Raj."], ["*"], occurred="2025-01-03")
    mar = episode(S, ["Acme champion is now Mei."], ["*"], occurred="2025-03-12")
    other = episode(S, ["Acme champion Raj keynote."], ["*"], occurred="2025-02-01")
    raj = fact(jan, "Acme", "champion", "Raj", "Acme champion is Raj.",
               valid_from="2025-01-03", seq=1)
    mei = fact(mar, "Acme", "champion", "Mei", "Acme champion is now Mei.",
               valid_from="2025-03-12", seq=2)
    talk = fact(other, "Raj", "gave", "keynote", "Acme champion Raj keynote.",
                valid_from="2025-02-01", seq=3)
    engine.ingest(DocumentBatch([jan, mar, other], [raj, mei, talk]))
    now_ids = ids(engine.search_facts(S, "main", "Acme champion Raj", ANN, now=NOW))
    assert raj.id not in now_ids  # superseded: not current, no window named
    found = engine.search_facts(S, "main", "Acme champion Raj in January", ANN, now=NOW)
    assert found.window is not None and found.window.start == when("2025-01-01")
    assert ids(found)[0] == raj.id  # the old version, valid in January, ranks first
    assert found.facts[0].parts.time == 1.0
    assert all(f.parts.time == 0.0 for f in found.facts[1:])
    march = engine.search_facts(S, "main", "Acme champion last March", ANN, now=NOW)
    assert ids(march)[0] == mei.id and march.facts[0].parts.time == 1.0
    # Raj held from January 3 until Mei replaced him on March 12: February is his
    feb = engine.search_facts(S, "main", "Acme champion in February", ANN, now=NOW)
    assert ids(feb)[0] == raj.id and feb.facts[0].end == when("2025-03-12")
    april = engine.search_facts(S, "main", "Acme champion in April", ANN, now=NOW)
    assert ids(april)[0] == mei.id and raj.id not in ids(april)


def test_a_few_visible_matches_surface_under_many_hidden_ones(engine: SearchEngine) -> None:
    hidden = [episode(S, [f"Zephyr deal note {i} Zephyr Zephyr."], ["user:bob"])
              for i in range(120)]
    seen = episode(S, ["A remark on the Zephyr deal."], ["*"])
    facts = [fact(e, "Zephyr", f"note_{i}", str(i), e.units[0].text)
             for i, e in enumerate(hidden)]
    visible = fact(seen, "Zephyr", "remark", "deal", "A remark on the Zephyr deal.")
    engine.ingest(DocumentBatch([*hidden, seen], [*facts, visible]))
    found = engine.search_facts(S, "main", "Zephyr", ANN, limit=5, now=NOW)
    assert ids(found) == [visible.id]
    assert found.facts[0].parts.keyword == 1.0  # normalised among what the caller sees
    passages = engine.search_passages(S, "main", "Zephyr", ANN, limit=5, now=NOW)
    assert [p.row.text for p in passages.passages] == ["A remark on the Zephyr deal."]


def test_scopes_and_branches_do_not_mix(engine: SearchEngine) -> None:
    a = episode("acme__sales", ["Falcon launch slipped."], ["*"])
    b = episode("globex__eng", ["Falcon launch on time."], ["*"])
    c = episode("acme__sales", ["Falcon launch cancelled."], ["*"], branch="trial")
    engine.ingest(DocumentBatch([a, b, c], [
        fact(a, "Falcon", "launch", "slipped", "Falcon launch slipped."),
        fact(b, "Falcon", "launch", "on time", "Falcon launch on time."),
        fact(c, "Falcon", "launch", "cancelled", "Falcon launch cancelled."),
    ]))
    values = [f.row.value for f in engine.search_facts("acme__sales", "main", "Falcon launch",
                                                       ANN, now=NOW).facts]
    assert values == ["slipped"]
    values = [f.row.value for f in engine.search_facts("acme__sales", "trial", "Falcon",
                                                       ANN, now=NOW).facts]
    assert values == ["cancelled"]


def test_ingest_is_idempotent_and_cursors_move(engine: SearchEngine) -> None:
    e = episode(S, ["Hooli signed."], ["*"])
    batch = DocumentBatch([e], [fact(e, "Hooli", "status", "signed", "Hooli signed.")])
    first = engine.ingest(batch, cursor=(S, "main", "c1"))
    again = engine.ingest(batch, cursor=(S, "main", "c2"))
    assert (first.episodes, first.facts) == (1, 1)
    assert again.episodes == 0
    assert engine.index.counts(S) == {"episodes": 1, "passages": 1, "facts": 1}
    assert engine.index.cursor(S, "main") == "c2"
    assert engine.index.scopes() == [(S, "main")]


def test_unresolved_citations_are_not_indexed(engine: SearchEngine) -> None:
    e = episode(S, ["Orphan."], ["*"])
    report = engine.ingest(DocumentBatch([], [fact(e, "X", "y", "z", "Orphan.")]))
    assert report.unresolved == 1 and engine.index.counts(S)["facts"] == 0


def test_changed_model_reembeds_instead_of_mixing(index: SearchIndex) -> None:
    e = episode(S, ["Vandelay imports latex."], ["*"])
    first = SearchEngine(index, HashEmbedder(64))
    first.ensure_model()
    first.ingest(DocumentBatch([e], [fact(e, "Vandelay", "imports", "latex",
                                          "Vandelay imports latex.")]))
    assert index.model() == ModelInfo("hash/64", 64)
    second = SearchEngine(index, HashEmbedder(32))
    assert second.ensure_model() == 2  # one fact, one passage re-embedded
    assert index.model() == ModelInfo("hash/32", 32)
    assert index.missing_vectors("facts", 10) == []
    found = second.search_facts(S, "main", "Vandelay latex", ANN, now=NOW)
    assert found.facts and found.facts[0].parts.meaning > 0.5
    assert second.ensure_model() == 0  # same model: nothing to do



def test_a_width_change_over_a_full_index_reembeds(index: SearchIndex) -> None:
    """On PostgreSQL the new width's HNSW graphs were built in the transaction that nulled
    the old vectors, and CREATE INDEX read the rows' old versions too (an update that does
    not fit its page leaves one): "expected 32 dimensions, not 64", so no server started
    after a change of the embedder's width once the index held a few pages of rows
    (tools/crash_paths_audit.py, reembed on postgres-2: both servers, every start)."""
    eps = [episode(S, [f"Vandelay {i} imports latex and other goods."], ["*"])
           for i in range(300)]
    first = SearchEngine(index, HashEmbedder(64))
    first.ensure_model()
    first.ingest(DocumentBatch(eps, []))
    second = SearchEngine(index, HashEmbedder(32))
    assert second.ensure_model() == 300
    assert index.model() == ModelInfo("hash/32", 32)
    assert index.missing_vectors("passages", 10) == []


def test_index_cut_another_way_is_emptied_not_mixed(index: SearchIndex) -> None:
    e = episode(S, ["Vandelay imports latex."], ["*"])
    engine = SearchEngine(index, HashEmbedder(64))
    assert engine.ensure_model() == 0 and index.passage_cut() == CUT  # empty: just recorded
    engine.ingest(DocumentBatch([e], []), cursor=(S, "main", "c1"))
    assert engine.ensure_cut() is False  # same cut: rows stay
    assert index.counts(S)["passages"] == 1 and index.cursor(S, "main") == "c1"
    index.set_passage_cut("units/1500/2000")  # as an index of the former cut records
    assert engine.ensure_cut() is True
    assert index.counts(S) == {"episodes": 0, "passages": 0, "facts": 0}
    assert index.cursor(S, "main") is None and index.passage_cut() == CUT  # refeeds all


def test_index_from_before_the_cut_was_recorded_is_emptied(tmp_path: Path) -> None:
    path = tmp_path / "index.db"
    index = open_index(f"sqlite:///{path}")
    engine = SearchEngine(index, HashEmbedder(64))
    engine.ensure_model()
    engine.ingest(DocumentBatch([episode(S, ["Vandelay imports latex."], ["*"])], []),
                  cursor=(S, "main", "c1"))
    index.close()
    with sqlite3.connect(path) as conn:  # what every index written before this version has
        conn.execute("DELETE FROM meta WHERE key = 'passage_cut'")
    index = open_index(f"sqlite:///{path}")
    try:
        assert index.passage_cut() is None and index.counts(S)["passages"] == 1
        assert SearchEngine(index, HashEmbedder(64)).ensure_cut() is True
        assert index.counts(S)["passages"] == 0 and index.cursor(S, "main") is None
    finally:
        index.close()

QUERIES = ["renewal due in May", "demo", "Globex renewal last February", "Acme", "asked",
           "Initech July renewal demo", "account", "who wants a demo in August", "Hooli May",
           "Umbrella renewal", "renewal", "due", "what is due in June", "Acme Globex Initech"]


def _accounts(scope: str = S, branch: str = "main") -> DocumentBatch:
    eps = [episode(scope, [f"Account {n} renewal is due in {m}.", f"{n} asked for a demo."],
                   ["*"] if i % 2 else ["group:sales"], occurred=f"2025-0{1 + i % 3}-0{1 + i}",
                   branch=branch)
           for i, (n, m) in enumerate([("Acme", "May"), ("Globex", "June"), ("Initech", "July"),
                                       ("Hooli", "May"), ("Umbrella", "August")])]
    facts = [fact(e, e.units[0].text.split()[1], "renewal_due", e.units[0].text.split()[-1][:-1],
                  e.units[0].text, valid_from=e.occurred_at.date().isoformat())
             for e in eps]
    return DocumentBatch(eps, facts)


def _exact_answers(engine: SearchEngine, scope: str = S, branch: str = "main") -> list[object]:
    """Every score as the engine computed it: exact floats, no rounding."""
    out: list[object] = []
    for who in (ANN, BOB):
        for q in QUERIES:
            r = engine.search_facts(scope, branch, q, who, now=NOW, limit=20)
            out.append([(f.row.id, f.score, f.parts) for f in r.facts])
            p = engine.search_passages(scope, branch, q, who, now=NOW, limit=20)
            out.append([(x.row.text, x.score, x.parts) for x in p.passages])
    return out


def test_clear_and_reingest_gives_identical_answers(engine: SearchEngine) -> None:
    batch = _accounts()
    engine.ingest(batch)
    before = _exact_answers(engine)
    assert any(before)
    engine.index.clear(S)
    assert engine.index.counts(S) == {"episodes": 0, "passages": 0, "facts": 0}
    # Another batch composition and order than the first time: one episode per commit,
    # newest first, each embedded on its own. Scores must not depend on either.
    for e in reversed(batch.episodes):
        engine.ingest(DocumentBatch([e], [f for f in batch.facts if f.cites[0].episode == e.id]))
    assert _exact_answers(engine) == before


def test_other_scopes_and_branches_never_move_a_score(engine: SearchEngine) -> None:
    engine.ingest(_accounts())
    before = _exact_answers(engine)
    assert any(before)
    # hundreds of rows holding the query words, in another scope and on another branch
    for scope, branch in (("globex__eng", "main"), (S, "trial")):
        flood = [episode(scope, [f"Account {i} renewal due demo May {i}."], ["user:ann"],
                         branch=branch, source=f"doc:{i}") for i in range(150)]
        engine.ingest(DocumentBatch(flood, [
            fact(e, f"Acme {i}", "renewal_due", "May", e.units[0].text)
            for i, e in enumerate(flood)]))
        assert engine.search_passages(scope, branch, "renewal demo", ANN, now=NOW).passages
        assert _exact_answers(engine) == before
    engine.index.clear("globex__eng")
    assert _exact_answers(engine) == before


def _commit(i: int) -> DocumentBatch:
    """Commit ``i`` of a scope: one episode and two facts, words shared across commits."""
    texts = [f"Acme renewal call {i}: the follow_up on the budget is due in March.",
             " ".join(["renewal"] * (i % 3 + 1)) + f" owner note {i} for Globex budget."]
    e = replace(episode(S, texts, ["*"], commit=f"c{i}", source=f"call:{i}"), seq=i)
    return DocumentBatch([e], [
        fact(e, f"Acme {i}", "renewal_month", "March", texts[0], seq=i),
        fact(e, "Globex", f"budget_{i}", f"{i}0k", texts[1], unit=2, seq=i),
    ])


def test_held_keyword_scores_are_those_of_the_held_rows_alone(
        index_uri: str, request: pytest.FixtureRequest) -> None:
    """Keyword scores with ``upto`` (a held search) are, bit for bit, the scores an index
    holding only the commits up to that seq gives: later commits move none of them. On
    SQLite the held path computes BM25 over the held rows and the other index's is FTS5's
    own bm25(), so this also checks the two agree exactly (a phrase term included)."""
    if index_uri.startswith("sqlite"):
        fresh_uri = index_uri.replace("index.db", "fresh.db")
    else:
        fresh_uri = request.getfixturevalue("postgres").new_database("fresh")
    full, fresh = (SearchEngine(open_index(u), HashEmbedder(32)) for u in (index_uri,
                                                                           fresh_uri))
    try:
        for i in range(1, 9):
            full.ingest(_commit(i))
            if i <= 4:
                fresh.ingest(_commit(i))
        terms = ["acme", "renewal", "follow_up", "budget"]
        sqlite = index_uri.startswith("sqlite")

        def held_rows(hits: list[tuple[int, float]], fresh_hits: list[tuple[int, float]]
                      ) -> list[tuple[int, float]]:
            # SQLite answers the held rows only; PostgreSQL may add later rows (the engine
            # cuts candidates to the view), with scores that concern no held row.
            assert sqlite is False or {n for n, _ in hits} <= {n for n, _ in fresh_hits}
            return sorted(h for h in hits if h[0] in {n for n, _ in fresh_hits})

        expected = sorted(fresh.index.keyword_facts(S, "main", terms, 100))
        held = held_rows(full.index.keyword_facts(S, "main", terms, 100, upto=4), expected)
        assert held and held == expected
        expected = sorted(fresh.index.keyword_passages(S, "main", terms, 100))
        assert held_rows(full.index.keyword_passages(S, "main", terms, 100, upto=4),
                         expected) == expected
        nums = [n for n, _ in held]
        assert full.index.fact_keyword(S, "main", nums, terms, upto=4) == \
            fresh.index.fact_keyword(S, "main", nums, terms)
        if sqlite:  # the top k of the held rows, in order; unheld, later rows do count
            top = fresh.index.keyword_facts(S, "main", terms, 3)
            assert full.index.keyword_facts(S, "main", terms, 3, upto=4) == top
            today = dict(full.index.keyword_facts(S, "main", terms, 100))
            assert [today[n] for n in nums] != [s for _, s in held]
    finally:
        full.index.close()
        fresh.index.close()


def test_kept_postings_never_stand_for_rows_applied_later(tmp_path: Path) -> None:
    """A keyword file's connection keeps the rows of its latest words and each row's
    length (`keywords.SpaceConnection`). Held searches at a bound, then a narrower one,
    then, after more commits, a wider one, with facts scored apart between, on one SQLite
    index, give bit for bit the scores of an index holding exactly those commits: a kept
    read serves only ranges it covers, never rows applied after it."""
    def uri(name: str) -> str:
        return f"sqlite:///{tmp_path / name}"

    terms = ["acme", "renewal", "follow_up", "budget"]

    def answers(eng: SearchEngine, upto: int | None
                ) -> tuple[list[tuple[int, float]], list[tuple[int, float]], dict[int, float]]:
        facts = eng.index.keyword_facts(S, "main", terms, 100, upto=upto)
        return (facts, eng.index.keyword_passages(S, "main", terms, 100, upto=upto),
                eng.index.fact_keyword(S, "main", [n for n, _ in facts[1:]], terms, upto))

    def exactly(commits: int) -> tuple[list[tuple[int, float]], list[tuple[int, float]],
                                       dict[int, float]]:
        eng = SearchEngine(open_index(uri(f"fresh{commits}.db")), HashEmbedder(32))
        try:
            for i in range(1, commits + 1):
                eng.ingest(_commit(i))
            return answers(eng, None)
        finally:
            eng.index.close()

    full = SearchEngine(open_index(uri("full.db")), HashEmbedder(32))
    try:
        for i in range(1, 7):
            full.ingest(_commit(i))
        assert answers(full, 4) == exactly(4)
        assert answers(full, 2) == exactly(2)  # from the rows kept up to commit 4
        for i in range(7, 10):
            full.ingest(_commit(i))
        assert answers(full, 6) == exactly(6)  # beyond them: read again
        assert answers(full, 4) == exactly(4)
        assert answers(full, 8) == exactly(8)
    finally:
        full.index.close()


def _small_budget(monkeypatch: pytest.MonkeyPatch, budget_: int) -> None:
    """The postings budget at ``budget_`` for both index backends (they read it at call
    time), so a test reaches it with a few rows."""
    from ampup_memory.search import budget
    from ampup_memory.search.index import postgres as postgres_index
    from ampup_memory.search.index import sqlite as sqlite_index

    for module in (budget, sqlite_index, postgres_index):
        monkeypatch.setattr(module, "POSTINGS_BUDGET", budget_, raising=False)


def _renewal(eng: SearchEngine, i: int) -> None:
    """Commit i: one episode and one fact saying "renewal" with i fillers (the older, the
    shorter: the better match); commit 1 also says "zebra"."""
    text = "renewal " + " ".join(f"filler{j}" for j in range(i)) + (
        " zebra" if i == 1 else "")
    e = replace(episode(S, [text], ["*"], commit=f"c{i}", source=f"call:{i}"), seq=i)
    eng.ingest(DocumentBatch([e], [fact(e, f"Acme {i}", "note", "x", text, seq=i)]))


def _renewals(eng: SearchEngine, n: int = 12, check_at: int | None = 3) -> None:
    """Commits 1..n (`_renewal`)."""
    for i in range(1, n + 1):
        _renewal(eng, i)
        if i == check_at:  # 3 + 1 postings fit the budget: both words rank (counts are
            # forgotten on a write, so the writes below count afresh)
            both = eng.index.keyword_facts(S, "main", ["renewal", "zebra"], 50)
            assert len(both) == 3


def test_an_over_budget_pass_ranks_the_newest_postings_alone(
        index_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """When even the rarest known query word is over the postings budget, a ranked
    keyword pass (facts and passages, live and held) ranks only its newest
    ``POSTINGS_BUDGET`` matches, with their usual scores: its cost no longer grows with
    the word's doclist. Here the older rows are the better matches (shorter), so ranking
    every match would list them first."""
    _small_budget(monkeypatch, 4)
    eng = SearchEngine(open_index(index_uri), HashEmbedder(32))
    try:
        _renewals(eng)
        idx = eng.index
        facts = {f.num: f.commit_seq for f in idx.versions(S, "main", [
            (f"Acme {i}", "note") for i in range(1, 13)])}
        newest = sorted(facts, key=facts.__getitem__)[-4:]
        got = idx.keyword_facts(S, "main", ["renewal"], 50)
        assert sorted(n for n, _ in got) == sorted(newest)
        assert dict(got) == idx.fact_keyword(S, "main", newest, ["renewal"])
        # The cut follows the held rows: the newest four of commits 1..8.
        held = [n for n in sorted(facts, key=facts.__getitem__) if facts[n] <= 8][-4:]
        got = idx.keyword_facts(S, "main", ["renewal"], 50, upto=8)
        assert sorted(n for n, _ in got) == sorted(held)
        assert dict(got) == idx.fact_keyword(S, "main", held, ["renewal"], upto=8)
        passages = idx.keyword_passages(S, "main", ["renewal"], 50)
        assert len(passages) == 4
        assert {p.text.count("filler") for p in idx.passages(n for n, _ in passages)} == {
            9, 10, 11, 12}
        # Held passages too: the newest four of commits 1..8, counted over those alone
        # ("zebra" is then within the budget beside "renewal" up to commit 3).
        held_passages = idx.keyword_passages(S, "main", ["renewal"], 50, upto=8)
        assert {p.seq for p in idx.passages(n for n, _ in held_passages)} == {5, 6, 7, 8}
        words = ["renewal", "zebra"]
        assert idx.keyword_view("passages", S, [("main", 3)], words).terms == (
            "zebra", "renewal")
        assert idx.keyword_view("passages", S, [("main", None)], words).terms == ("zebra",)
        # A word within the budget is kept alone and finds its old row as before.
        rare = idx.keyword_facts(S, "main", ["renewal", "zebra"], 50)
        assert [facts[n] for n, _ in rare] == [1]
    finally:
        eng.index.close()


def _renewal_answer(eng: SearchEngine) -> list[tuple[str, Parts, float]]:
    found = eng.search_facts(S, "main", "renewal", ANN, now=NOW, limit=20).facts
    return [(f.row.id, f.parts, f.score) for f in found]


def test_a_write_between_a_fact_searchs_two_steps_moves_no_score(
        index_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fact search scores in two steps: its candidate lists, then the facts found
    otherwise (`fact_keyword`; here the 8 older matches, left out of an over-budget pass
    and found by meaning). A commit landing between the steps (another writer's) moves
    no score of the answer: both steps weigh by the statistics the search took once.
    When each step took the space's statistics itself, the facts scored apart were
    weighed by one more row holding the word than the facts listed."""
    _small_budget(monkeypatch, 4)
    eng = SearchEngine(open_index(index_uri), HashEmbedder(32))
    eng.ensure_model()  # facts found by meaning too
    try:
        _renewals(eng, check_at=None)
        alone = _renewal_answer(eng)
        assert len(alone) == 12
        apart: list[int] = []
        score_apart = eng.index.fact_keyword

        def after_a_write(scope: str, branch: str, nums: list[int], terms: Terms,
                          upto: int | None = None) -> dict[int, float]:
            if not apart:
                _renewal(eng, 13)
            apart.extend(nums)
            return score_apart(scope, branch, nums, terms, upto)

        monkeypatch.setattr(eng.index, "fact_keyword", after_a_write)
        assert _renewal_answer(eng) == alone
        assert len(apart) == 8
        monkeypatch.undo()
        assert len(_renewal_answer(eng)) == 13  # the write landed
    finally:
        eng.index.close()


def test_rows_applied_while_a_view_counts_are_not_counted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite: a view's statistics (a fact search's first step) count each word's rows up
    to the row its row count reaches. Another writer's search catching the keyword file
    up between the two counts added rows the word count saw and the row count did not:
    5 more rows holding "renewal" than the 1 counted, a negative BM25 IDF, and the search
    answered 500 (``math domain error``; tools/race_audit.py, read-your-writes: 16
    writers each searching their own fact at once)."""
    for step in ("view", "search"):
        eng = SearchEngine(open_index(f"sqlite:///{tmp_path / step}.db"), HashEmbedder(32))
        try:
            _renewal(eng, 1)
            eng.index.keyword_facts(S, "main", ["zebra"], 10)  # the keyword file, caught up
            counts = eng.index._term_counts  # type: ignore[attr-defined]
            landed: list[bool] = []

            def after_other_writes(*args: object, counts: Any = counts,
                                   eng: SearchEngine = eng, landed: list[bool] = landed,
                                   ) -> Any:
                if not landed:  # another writer's commits, caught up by its search
                    landed.append(True)
                    for i in range(2, 7):
                        _renewal(eng, i)
                    eng.index.keyword_facts(S, "main", ["zebra"], 10)
                return counts(*args)

            monkeypatch.setattr(eng.index, "_term_counts", after_other_writes)
            if step == "view":
                view = eng.index.keyword_view("facts", S, [("main", None)], ["renewal"])
                assert (view.stats.rows, view.stats.hits) == (1, (1,))
            else:  # the rows of its view alone (was a ValueError)
                assert [row for row, _, _ in _renewal_answer(eng)] == [
                    f.id for f in eng.index.versions(S, "main", [("Acme 1", "note")])]
            assert landed
            monkeypatch.undo()
        finally:
            eng.index.close()


@pytest.mark.postgres
def test_a_pg_fact_search_reads_its_spaces_newest_commit_once(
        postgres: PostgresFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL takes a live space's statistics up to its newest row's commit, an index
    read (`PostgresIndex._mark`); a fact search reads it once, not again for the facts
    it scores apart (nor per wider round)."""
    from ampup_memory.search.index.postgres import PostgresIndex

    _small_budget(monkeypatch, 4)
    eng = SearchEngine(open_index(postgres.new_database("marks")), HashEmbedder(32))
    eng.ensure_model()  # facts found by meaning too
    try:
        _renewals(eng, check_at=None)
        reads: list[int | None] = []
        mark = PostgresIndex._mark

        def counted(conn: object, table: str, scope: str, branch: str, upto: int | None
                    ) -> int:
            reads.append(upto)
            return mark(conn, table, scope, branch, upto)  # type: ignore[arg-type]

        monkeypatch.setattr(PostgresIndex, "_mark", staticmethod(counted))
        assert len(_renewal_answer(eng)) == 12
        assert reads == [None]
    finally:
        eng.index.close()


@pytest.mark.postgres
def test_both_backends_keep_the_same_words_and_rank_the_same_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres: PostgresFactory) -> None:
    """One postings budget (`search/budget.py`) on both backends: for the same rows they
    keep the same query words (per space, held or not, a view's spaces together) and an
    over-budget pass ranks the same newest rows, so neither ranks a common word's whole
    doclist."""
    _small_budget(monkeypatch, 4)
    engines = [SearchEngine(open_index(u), HashEmbedder(32)) for u in (
        f"sqlite:///{tmp_path / 'index.db'}", postgres.new_database("budget"))]
    try:
        for eng in engines:
            _renewals(eng, check_at=None)
            own = replace(episode(S, ["zebra renewal on the branch"], ["*"], branch="exp",
                                  commit="e1"), seq=13)
            eng.ingest(DocumentBatch([own], [replace(fact(
                own, "Zeta", "note", "x", "zebra renewal on the branch", seq=13),
                commit="e1")]), lineage=["main"])

        def kept(idx: SearchIndex) -> list[list[str]]:
            asks = [("facts", [("main", None)], ["renewal", "zebra"]),
                    ("facts", [("main", None)], ["renewal", "filler0"]),
                    ("facts", [("main", None)], ["filler10", "filler9", "filler8"]),
                    ("facts", [("main", 3)], ["renewal", "zebra"]),
                    ("facts", [("main", 2)], ["filler0", "filler1", "zebra"]),
                    ("passages", [("main", None)], ["filler10", "filler11", "zebra"]),
                    ("passages", [("exp", None)], ["zebra", "renewal"]),
                    ("passages", [("main", 3)], ["renewal", "zebra"]),
                    ("passages", [("main", 2)], ["filler0", "filler1", "zebra"]),
                    ("passages", [("main", 2), ("exp", None)], ["zebra", "renewal"]),
                    ("facts", [("main", None), ("exp", None)], ["zebra", "filler1"]),
                    ("facts", [("main", 2), ("exp", None)], ["zebra", "renewal"])]
            return [list(idx.keyword_view(kind, S, spaces, words).terms)
                    for kind, spaces, words in asks]

        sqlite, pg = (kept(e.index) for e in engines)
        assert sqlite == pg
        assert sqlite[0] == ["zebra"] and sqlite[3] == ["zebra", "renewal"]

        def ranked(idx: SearchIndex) -> list[object]:
            facts = [sorted(f.id for f in idx.facts(n for n, _ in hits)) for hits in (
                idx.keyword_facts(S, "main", ["renewal"], 50),
                idx.keyword_facts(S, "main", ["renewal"], 50, upto=8),
                idx.keyword_facts(S, "main", ["filler0", "renewal"], 50))]
            texts = [sorted(p.text for p in idx.passages(n for n, _ in hits)) for hits in (
                idx.keyword_passages(S, "main", ["renewal", "filler0"], 50),
                idx.keyword_passages(S, "main", ["renewal"], 50, upto=8))]
            return [*facts, *texts]

        sqlite_rows, pg_rows = (ranked(e.index) for e in engines)
        assert sqlite_rows == pg_rows
        assert all(len(rows) == 4 for rows in sqlite_rows)  # type: ignore[arg-type]

        # Two newer facts not yet begun: an over-budget pass for begun facts cuts to the
        # newest matches first, then keeps the begun ones, on both backends alike.
        for eng in engines:
            for i in (14, 15):
                e = replace(episode(S, ["renewal later"], ["*"], commit=f"c{i}",
                                    source=f"call:{i}"), seq=i)
                eng.ingest(DocumentBatch([e], [fact(e, f"Acme {i}", "note", "x",
                                                    "renewal later", valid_from="2999-01-01",
                                                    seq=i)]))

        def begun_rows(idx: SearchIndex) -> list[str]:
            hits = idx.keyword_facts(S, "main", ["renewal"], 50, begun_at=when("2026-06-01"))
            return sorted(f.entity for f in idx.facts(n for n, _ in hits))

        sqlite_begun, pg_begun = (begun_rows(e.index) for e in engines)
        assert sqlite_begun == pg_begun == ["Acme 11", "Acme 12"]
    finally:
        for eng in engines:
            eng.index.close()


@pytest.mark.postgres
def test_a_postgres_index_without_passage_seqs_is_emptied_and_refills_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres: PostgresFactory) -> None:
    """An index made before PostgreSQL passage rows kept their commit seq (the column
    and its index dropped here) gets the column when opened; its rows, which no seq can
    be derived for in the index, are emptied (cursors too, so the feed refills it from
    the store) and, refilled, it answers held and seq-bounded passage searches as SQLite
    does. A current index keeps its rows when reopened."""
    import psycopg

    _small_budget(monkeypatch, 4)
    uri = postgres.new_database("old")
    sqlite, pg = (SearchEngine(open_index(u), HashEmbedder(32)) for u in (
        f"sqlite:///{tmp_path / 'index.db'}", uri))
    try:
        _renewals(sqlite, check_at=None)
        _renewals(pg, check_at=None)
        pg.index.close()
        pg = SearchEngine(open_index(uri), HashEmbedder(32))
        assert pg.index.counts()["passages"] == 12  # a current index is kept
        pg.index.close()
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("DROP INDEX search_passages_seq")
            conn.execute("ALTER TABLE search_passages DROP COLUMN seq")
        pg = SearchEngine(open_index(uri), HashEmbedder(32))
        with psycopg.connect(uri, autocommit=True) as conn:
            found = conn.execute(
                "SELECT count(*) FROM pg_indexes WHERE indexname = 'search_passages_seq'"
            ).fetchone()
        assert found == (1,)
        assert pg.index.counts() == {"episodes": 0, "passages": 0, "facts": 0}
        assert pg.index.scopes() == [] and pg.index.cursor(S, "main") is None
        _renewals(pg, check_at=None)  # what the feed gives it again from the store

        def held(idx: SearchIndex) -> list[object]:
            words = [list(idx.keyword_view("passages", S, [("main", upto)],
                                           ["renewal", "zebra"]).terms)
                     for upto in (3, 8, None)]
            rows = [sorted((p.seq, p.text) for p in idx.passages(n for n, _ in hits))
                    for hits in (idx.keyword_passages(S, "main", ["renewal"], 50, upto=8),
                                 idx.keyword_passages(S, "main", ["renewal"], 3, None, (2, 6)))]
            return [*words, *rows]

        want = held(sqlite.index)
        assert held(pg.index) == want
        assert want[:3] == [["zebra", "renewal"], ["zebra"], ["zebra"]]
        assert [s for s, _ in want[3]] == [5, 6, 7, 8]  # type: ignore[attr-defined]
        assert [s for s, _ in want[4]] == [3, 4, 5]  # type: ignore[attr-defined]
    finally:
        sqlite.index.close()
        pg.index.close()


def test_versions_since_a_place_are_those_at_or_after_it(engine: SearchEngine) -> None:
    """``versions(..., since)`` gives, for a key it names, exactly the versions at or
    after that place in newest-wins' order (``valid_from``, none counting as the epoch;
    then commit seq; then position) and every version of a key it does not name: what
    the search reads to decide whether a candidate is current, without the older ones."""
    e = episode(S, ["Acme budget notes."], ["*"])
    docs = [replace(fact(e, "Acme", "budget", f"{i}k", "Acme budget notes.",
                         valid_from=at, seq=seq, fact_id=f"v{i}"), ord=o)
            for i, (at, seq, o) in enumerate([
                (None, 1, 0), (None, 2, 0), ("2025-01-10", 1, 0), ("2025-01-10", 1, 1),
                ("2025-01-10", 2, 0), ("2025-03-01", 1, 0), ("2025-03-01", 3, 2)])]
    other = fact(e, "Globex", "budget", "1k", "Acme budget notes.", fact_id="g0")
    engine.ingest(DocumentBatch([e], [*docs, other]))
    keys = {("Acme", "budget"), ("Globex", "budget")}
    every = engine.index.versions(S, "main", keys)
    assert len(every) == 8
    acme = [v for v in every if v.entity == "Acme"]
    for pivot in acme:
        place = newest_order(pivot)
        got = engine.index.versions(S, "main", keys, {("Acme", "budget"): place})
        want = {v.id for v in acme if newest_order(v) >= place} | {other.id}
        assert {v.id for v in got} == want, pivot.id
        assert 1 < len(want) < 9 or pivot.id in ("v0", "v6")


def test_a_seq_range_lists_the_best_rows_of_its_commits_alone(engine: SearchEngine) -> None:
    """``seqs`` = (after, upto] bounds a candidate list to the rows of those commits (a
    view's segment: a branch's base cut at the fork, a held commit): the ``k`` best of
    them, not the ``k`` best of all rows with the others dropped, so a cut segment needs
    no second ask. Scores are unchanged."""
    for i in range(1, 9):
        engine.ingest(_commit(i))
    idx = engine.index
    vector = engine.embedder.embed(["Acme renewal budget"])[0]
    terms = ["acme", "renewal", "budget"]
    facts = {f.num: f.commit_seq for f in idx.facts(
        n for n, _ in idx.keyword_facts(S, "main", terms, 100))}
    lists = [
        ("facts", lambda k, seqs: idx.keyword_facts(S, "main", terms, k, None, seqs)),
        ("facts", lambda k, seqs: idx.nearest_facts(S, "main", vector, k, seqs)),
        ("passages", lambda k, seqs: idx.keyword_passages(S, "main", terms, k, None, seqs)),
        ("passages", lambda k, seqs: idx.nearest_passages(S, "main", vector, k, seqs)),
    ]
    passages = {p.num: p.seq for p in idx.passages(
        n for n, _ in idx.nearest_passages(S, "main", vector, 100))}
    for kind, listed in lists:
        seq_of = facts if kind == "facts" else passages
        every = listed(100, None)
        assert len({seq_of[n] for n, _ in every}) == 8, kind
        for after, upto in ((0, 4), (2, 6), (5, 8)):
            inside = [h for h in every if after < (seq_of[h[0]] or 0) <= upto]
            best = sorted(inside, key=lambda h: (-h[1], h[0]))[:3]
            got = listed(3, (after, upto))
            assert sorted(got, key=lambda h: (-h[1], h[0])) == best, (kind, after, upto)
            assert len(got) == 3


def test_a_view_keeps_the_query_words_its_segments_afford_together(
        engine: SearchEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A view of several segments is one space for the postings budget too: a word whose
    rows in the view pass the budget is dropped on every segment, as a main holding the
    view's rows would drop it, though the branch's few rows alone afford it."""
    _small_budget(monkeypatch, 100)
    idx = engine.index
    common = 60  # main alone affords "pricing"; with the branch's 60, not
    base = episode(S, ["Pricing notes."], ["*"])
    engine.ingest(DocumentBatch([base], [
        fact(base, f"Company{i}", "note", "pricing", "pricing call", fact_id=f"m{i}")
        for i in range(common)]))
    own = replace(episode(S, ["Zephyr pricing."], ["*"], branch="exp", commit="e2"), seq=2)
    engine.ingest(DocumentBatch([own], [
        replace(fact(own, f"Company{i}", "note", "pricing", "pricing call", fact_id=f"e{i}",
                     seq=2), commit="e2") for i in range(60)] + [
        replace(fact(own, "Zephyr", "codename", "Nightjar", "Zephyr codename", seq=2),
                commit="e2")]), lineage=["main"])
    words = ["pricing", "zephyr"]
    alone = idx.keyword_view("facts", S, [("main", None)], words)
    assert alone.terms == ("pricing",)
    together = idx.keyword_view("facts", S, [("main", None), ("exp", None)], words)
    assert together.terms == ("zephyr",)
    view = Cutoff((Segment("main", 0, 1), Segment("exp", 1)), lambda _: {})
    found = engine.search_facts(S, "exp", "pricing zephyr", ANN, now=NOW, cutoff=view,
                                limit=20).facts
    scored = {f.row.entity for f in found if f.parts.keyword > 0}
    assert len(found) == 20 and "Zephyr" in scored
    assert scored == {"Zephyr"}


def test_a_view_scores_its_segments_as_one_space_holding_their_rows(
        engine: SearchEngine) -> None:
    """Given a view's words (`keyword_view`), every segment's keyword lists and scores are
    those of one space holding the view's rows: on SQLite BM25 with the view's row count,
    average length and rows per word, whatever the segment holds alone; a branch of one
    fact no longer weighs each of its words near zero. Passages as facts."""
    idx = engine.index
    texts = [f"Account{i} review covers pricing and renewal terms, call {i}."
             for i in range(12)] + ["Calder bridge repairs start in spring."]
    base = episode(S, texts, ["*"])
    rows = [fact(base, f"Account{i}", "topic", "pricing renewal", texts[i], unit=i + 1,
                 fact_id=f"m{i}") for i in range(12)]
    rows.append(fact(base, "Calder bridge", "repairs", "spring", texts[12], unit=13,
                     fact_id="near"))
    engine.ingest(DocumentBatch([base], rows))
    own = replace(episode(S, ["Osprey nests at Calder marsh."], ["*"], branch="exp",
                          commit="e2"), seq=2)
    mine = replace(fact(own, "Osprey", "nests_at", "Calder marsh",
                        "Osprey nests at Calder marsh.", seq=2, fact_id="own"), commit="e2")
    engine.ingest(DocumentBatch([own], [mine]), lineage=["main"])
    ref = "acme__ref"  # main holds exactly the view's rows
    ref_base, ref_own = replace(base, scope=ref), replace(own, scope=ref, branch="main")
    engine.ingest(DocumentBatch([ref_base, ref_own], [replace(r, scope=ref) for r in rows] + [
        replace(mine, scope=ref, branch="main")]))

    words = ["osprey", "nests", "calder", "marsh"]
    scored: dict[str, dict[str, float]] = {}
    for kind in ("facts", "passages"):
        view = idx.keyword_view(kind, S, [("main", None), ("exp", None)], words)
        assert sorted(view.terms) == sorted(words)
        if kind == "facts":
            lists = {b: idx.keyword_facts(S, b, view, 50) for b in ("main", "exp")}
            want = idx.keyword_facts(ref, "main", words, 50)
            label = {r.num: r.id for r in idx.facts(
                n for hits in [*lists.values(), want] for n, _ in hits)}
        else:
            lists = {b: idx.keyword_passages(S, b, view, 50) for b in ("main", "exp")}
            want = idx.keyword_passages(ref, "main", words, 50)
            label = {p.num: p.text for p in idx.passages(
                n for hits in [*lists.values(), want] for n, _ in hits)}
        got = scored[kind] = {label[n]: s for hits in lists.values() for n, s in hits}
        assert got == {label[n]: s for n, s in want}, kind
        best = max(got, key=got.__getitem__)
        assert best in ("own", "Osprey nests at Calder marsh."), (kind, got)
        if kind == "facts":  # one scale for a fact scored apart, as in the lists
            [(num, score)] = lists["exp"]
            assert idx.fact_keyword(S, "exp", [num], view) == {num: score}
            near = next(n for n, s in lists["main"] if label[n] == "near")
            assert idx.fact_keyword(S, "main", [near], view) == {near: got["near"]}
    # One space's own words score with its own statistics, as before: the branch's one
    # fact holds every word, so on SQLite each weighs near zero there.
    alone = dict(idx.keyword_facts(S, "exp", words, 50))
    if isinstance(idx, SQLiteIndex):
        assert max(alone.values()) < 1e-3 < scored["facts"]["own"]


def test_clear_branch_forgets_one_branch_only(engine: SearchEngine) -> None:
    """A deleted branch leaves the index: rows, cursor, keyword statistics, vectors and
    bitmap bits; main, other branches and other scopes answer exactly as before, and a
    branch made again under the name starts empty."""
    engine.ingest(_accounts(), cursor=(S, "main", "m1"))
    engine.ingest(_accounts("globex__eng", "trial"), cursor=("globex__eng", "trial", "g1"))
    before = _exact_answers(engine), _exact_answers(engine, "globex__eng", "trial")
    trial = _accounts(S, "trial")
    engine.ingest(trial, cursor=(S, "trial", "t1"))
    ids_ = [e.id for e in trial.episodes]
    held = engine.index.episode_numbers(S, "trial", ids_)
    assert len(held) == 5 and engine.search_facts(S, "trial", "Acme renewal", ANN, now=NOW).facts
    everyone = engine.index.acl_bitmap("*") | engine.index.acl_bitmap("group:sales")
    assert set(held.values()) <= set(everyone)

    engine.index.clear_branch(S, "trial")
    assert engine.index.episode_numbers(S, "trial", ids_) == {}
    assert engine.index.cursor(S, "trial") is None
    assert engine.index.cursor(S, "main") == "m1"
    assert (S, "trial") not in engine.index.scopes()
    everyone = engine.index.acl_bitmap("*") | engine.index.acl_bitmap("group:sales")
    assert not set(held.values()) & set(everyone)
    assert engine.index.keyword_facts(S, "trial", ["acme", "renewal"], 50) == []
    assert engine.index.keyword_passages(S, "trial", ["acme", "renewal"], 50) == []
    vector = engine.embedder.embed(["Acme renewal"])[0]
    assert engine.index.nearest_facts(S, "trial", vector, 50) == []
    assert engine.index.nearest_passages(S, "trial", vector, 50) == []
    assert engine.index.versions(S, "trial", {("Acme", "renewal_due")}) == []
    assert (_exact_answers(engine), _exact_answers(engine, "globex__eng", "trial")) == before

    again = episode(S, ["Account Acme renewal moved to October."], ["*"], branch="trial")
    engine.ingest(DocumentBatch([again], [fact(again, "Acme", "renewal_due", "October",
                                               again.units[0].text)]))
    found = engine.search_facts(S, "trial", "Acme renewal", ANN, now=NOW).facts
    assert [f.row.value for f in found] == ["October"]
    assert engine.index.episode_numbers(S, "trial", ids_) == {}


def test_a_rows_cosine_does_not_depend_on_its_neighbours() -> None:
    """The meaning part of one row is a function of its vector and the query alone: the
    same float in a matrix of any size or order (a rebuilt index fills it differently)."""
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((1003, 256)).astype(np.float32)
    query = rng.standard_normal(256).astype(np.float32)
    whole = dots(rows, query)
    for size in (1, 2, 3, 7, 9, 64, 65, 500):
        pick = rng.choice(len(rows), size, replace=False)
        assert np.array_equal(dots(rows[pick], query), whole[pick])
    order = rng.permutation(len(rows))
    assert np.array_equal(dots(rows[order], query), whole[order])
    # Gathered a chunk at a time (a group's rows, `dots_at`): the same floats.
    big = rng.standard_normal((5000, 256)).astype(np.float32)
    pick = np.sort(rng.choice(len(big), 2500, replace=False))
    assert np.array_equal(dots_at(big, pick, query), dots(big, query)[pick])


def test_an_embedding_does_not_depend_on_its_batch(wordllama: WordLlamaEmbedder) -> None:
    """Live writes embed one commit at a time, a rebuild fifty commits at a time."""
    texts = [" ".join(["Acme renewal budget pilot demo"] * n) + f" note {n}." for n in range(1, 90)]
    together = wordllama.embed(texts)
    assert [wordllama.embed([t])[0] for t in texts] == together
    assert wordllama.embed(texts[::-1]) == together[::-1]


def test_wordllama_vectors_are_the_librarys_own(wordllama: WordLlamaEmbedder) -> None:
    """Our WordLlama tokenizes with `encode_batch_fast` (no character offsets): every
    vector must equal, bit for bit, the library's own embedding of the same batch, so
    vectors stored before and after agree (mixed lengths, so batches are padded)."""
    import wordllama as wl

    from ampup_memory.search.embed import _normalise

    texts = ["", "a", "Grüße aus Köln — naïve café ☕", "From: rep@acme.test\n\nQuote 7"]
    texts += [" ".join(["renewal budget pilot"] * n) + f" note {n}." for n in range(1, 140)]
    library = wl.WordLlama.load(cache_dir=Path(wl.__file__).parent, disable_download=True,
                                dim=wordllama.dimensions)
    want = _normalise(np.asarray(library.embed(texts, norm=False), dtype=np.float32))
    assert wordllama.embed(texts) == want


def test_sqlite_keyword_files_follow_their_space(tmp_path: Path) -> None:
    """SQLite only: each (scope, branch) gets its own keyword file on first write, clear()
    deletes it, a stale file is removed on open, and a file name is only ever built from
    a number and a hex token."""
    from ampup_memory.search.index.keywords import Space, space_file

    uri = f"sqlite:///{tmp_path / 'index.db'}"
    folder = tmp_path / "index.db.keywords"
    engine = SearchEngine(open_index(uri), HashEmbedder(32))
    engine.ensure_model()

    def files() -> set[str]:
        return {p.name for p in folder.glob("*.db")} if folder.exists() else set()

    assert files() == set()
    engine.ingest(_accounts())
    engine.ingest(_accounts(branch="trial"))
    engine.ingest(_accounts("globex__eng"))
    assert len(files()) == 3
    with sqlite3.connect(tmp_path / "index.db") as conn:  # the index file's schema is fixed
        assert not conn.execute(
            "SELECT 1 FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%'").fetchone()
    engine.index.clear(S)
    assert len(files()) == 1
    assert engine.search_facts("globex__eng", "main", "renewal", ANN, now=NOW).facts
    assert not engine.search_facts(S, "main", "renewal", ANN, now=NOW).facts
    engine.index.close()

    stale = space_file(folder, Space(99, "0123456789abcdef", "x__y", "main"))
    stale.write_bytes(b"")
    reopened = SearchEngine(open_index(uri), HashEmbedder(32))
    assert len(files()) == 1 and not stale.exists()
    answers = _exact_answers(reopened, "globex__eng")
    assert any(answers)
    reopened.index.close()

    # A writer that stopped between its commit and its keyword file (here: the file is
    # gone): the next search applies the rows again, and scores are the same.
    for path in folder.iterdir():
        path.unlink()
    again = SearchEngine(open_index(uri), HashEmbedder(32))
    assert _exact_answers(again, "globex__eng") == answers
    assert len(files()) == 1
    again.index.close()

    for bad in (Space(0, "0123456789abcdef", S, "main"), Space(True, "0123456789abcdef", S,
                "main"), Space(1, "../../etc/passwd", S, "main"), Space(1, "ABC", S, "main")):
        with pytest.raises(ValueError):
            space_file(folder, bad)


# Not in time order, so begun rows and others alternate by row number.
_STARTS = ["2025-04-15T12:00:00", None, "2138-01-01", "2025-04-15T11:59:59.999999",
           "2025-04-16", "2024-01-01", "2025-04-15T12:00:00.000001"]


def _starting_facts(engine: SearchEngine) -> dict[int, FactRow]:
    """One fact per start above, each a 'renewal' match of another length (distinct
    keyword scores and cosines), under its own entity."""
    e = episode(S, ["Renewal notes."], ["*"])
    docs = [fact(e, f"Account {i}", "renewal", "due", "renewal " + "word " * i,
                 valid_from=at, fact_id=f"f{i}") for i, at in enumerate(_STARTS)]
    engine.ingest(DocumentBatch([e], docs))
    rows = engine.index.versions(S, "main", {(f"Account {i}", "renewal")
                                             for i in range(len(_STARTS))})
    return {r.num: r for r in rows}


def test_candidate_lists_of_begun_facts_keep_exactly_what_begun_keeps(
        engine: SearchEngine) -> None:
    """``begun_at`` lists the k best facts whose validity has begun then, and the
    backend's own form of the test (SQLite: an array of `begin_instant`s, or the rows;
    PostgreSQL: SQL) keeps exactly the facts `memory.facts.begun` keeps, at the
    microsecond on either side and for a fact with no ``valid_from``."""
    rows = _starting_facts(engine)
    idx = engine.index
    vector = engine.embedder.embed(["renewal"])[0]
    every_kw = idx.keyword_facts(S, "main", ["renewal"], 100)
    every_near = idx.nearest_facts(S, "main", vector, 100)
    assert set(dict(every_kw)) == set(rows) == set(dict(every_near))
    for at in ("2023-06-01", "2025-04-15T11:59:59.999999", "2025-04-15T12:00:00",
               "2025-04-15T12:00:00.000001", "2030-01-01", "2200-01-01"):
        instant = when(at)
        want = {n for n, r in rows.items() if begun(r, instant)}
        for every, listed in (
                (every_kw, lambda k, t=instant: idx.keyword_facts(S, "main", ["renewal"], k,
                                                                 begun_at=t)),
                (every_near, lambda k, t=instant: idx.nearest_facts(S, "main", vector, k,
                                                                   begun_at=t))):
            assert {n for n, _ in listed(100)} == want, at
            best = sorted((h for h in every if h[0] in want), key=lambda h: (-h[1], h[0]))
            got = listed(2)
            # The two best begun (PostgreSQL may tie these rows: equal scores).
            assert {n for n, _ in got} <= want, at
            assert sorted(s for _, s in got) == pytest.approx(
                sorted(s for _, s in best[:2])), at
        if isinstance(idx, SQLiteIndex):
            assert idx.begun_facts(S, "main", list(rows), begin_instant(instant)) == want
            # From the rows when no vector is cached for them: the same facts.
            idx._vectors["facts"].by_key.pop((S, "main"))
            try:
                assert idx.begun_facts(S, "main", list(rows), begin_instant(instant)) == want
                assert {n for n, _ in idx.keyword_facts(S, "main", ["renewal"], 100,
                                                        begun_at=instant)} == want
            finally:
                idx._vectors["facts"].reset(-1)
    # A held search (as of commit 1, a later commit written): its rows alone, begun ones.
    e2 = episode(S, ["More renewal notes."], ["*"], commit="c2", source="call:2")
    engine.ingest(DocumentBatch([e2], [fact(e2, "Account 99", "renewal", "due", "renewal",
                                            valid_from="2024-01-01", seq=2)]))
    for at in ("2023-06-01", "2025-04-15T12:00:00", "2200-01-01"):
        instant = when(at)
        want = {n for n, r in rows.items() if begun(r, instant)}
        got = {n for n, _ in idx.keyword_facts(S, "main", ["renewal"], 100, upto=1,
                                                begun_at=instant)}
        assert got & set(rows) == want, at
        if isinstance(idx, SQLiteIndex):  # PostgreSQL lists later rows too (the engine cuts)
            assert got <= set(rows), at


def test_a_search_before_most_facts_begin_asks_each_list_once(
        engine: SearchEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sixty better matches not yet valid at ``now`` and three begun ones: the lists hold
    begun facts only, so one round finds the three (the search asked again with 4k, 16k,
    ... while the not-yet-valid ones filled its lists)."""
    e = episode(S, ["Renewal notes."], ["*"])
    late = [fact(e, f"Late {i}", "renewal", "due", "renewal due", valid_from="2030-01-01",
                 fact_id=f"late{i}") for i in range(60)]
    begun_ = [fact(e, f"Early {i}", "renewal", "due", "renewal due soon " + "x " * i,
                   valid_from="2025-01-01", fact_id=f"early{i}") for i in range(3)]
    engine.ingest(DocumentBatch([e], [*late, *begun_]))
    calls: list[int] = []
    keyword = engine.index.keyword_facts

    def counted(*args: object, **kwargs: object) -> list[tuple[int, float]]:
        calls.append(1)
        return keyword(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine.index, "keyword_facts", counted)
    found = engine.search_facts(S, "main", "renewal due", ANN, now=NOW)
    assert sorted(f.row.id for f in found.facts) == ["early0", "early1", "early2"]
    assert len(calls) == 1
    later = engine.search_facts(S, "main", "renewal due", ANN, now=when("2031-01-01"))
    assert len(later.facts) == 10 and all(f.row.id.startswith("late") for f in later.facts)


def _graph_options(url: str) -> dict[str, list[str] | None]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname IN"
            " ('search_passages_vec_hnsw', 'search_facts_vec_hnsw')").fetchall()
    return {str(name): (sorted(options) if options else None) for name, options in rows}


@pytest.mark.postgres
def test_pg_hnsw_indexes_follow_the_graph_settings(
        postgres: PostgresFactory, wordllama: WordLlamaEmbedder) -> None:
    """The passages' and facts' HNSW indexes are built with the graph settings (M,
    efConstruction) and built again when a server opens with other values set; unset,
    new indexes get 32 / 128 and an index made before (pgvector's 16 / 64, no options) is
    kept as built. Answers stay the same (the rows are re-scored exactly)."""
    import psycopg

    from ampup_memory.search.index.ann import GraphParams

    url = postgres.new_database("graphs")
    eps = [episode(S, [f"budget review {i}", f"renewal note {i} for globex"], ["*"])
           for i in range(30)]
    batch = DocumentBatch(eps, [fact(e, f"Account {i}", "status", "renewal", "renewal")
                                for i, e in enumerate(eps)])

    def answers(params: GraphParams) -> list[object]:
        eng = SearchEngine(open_index(url, 0, params), wordllama)
        try:
            eng.ensure_model()
            return [([p.row.num for p in eng.search_passages(S, "main", q, ANN,
                                                              now=NOW).passages],
                     ids(eng.search_facts(S, "main", q, ANN, now=NOW)))
                    for q in ("budget review 7", "globex renewal")]
        finally:
            eng.index.close()

    first = SearchEngine(open_index(url, 0), wordllama)
    first.ensure_model()
    first.ingest(batch)
    first.index.close()
    default = ["ef_construction=128", "m=32"]
    assert _graph_options(url) == {"search_passages_vec_hnsw": default,
                                   "search_facts_vec_hnsw": default}
    before = answers(GraphParams())
    assert all(passages and facts for passages, facts in before), before
    with psycopg.connect(url, autocommit=True) as conn:  # as an older version made them
        for table in ("search_passages", "search_facts"):
            conn.execute(f"DROP INDEX {table}_vec_hnsw")
            conn.execute(f"CREATE INDEX {table}_vec_hnsw ON {table} USING hnsw"
                         " ((vec::vector(256)) vector_cosine_ops)")
    assert answers(GraphParams()) == before
    assert set(_graph_options(url).values()) == {None}  # kept as built: no value is set
    assert answers(GraphParams(24, 96)) == before
    wider = ["ef_construction=96", "m=24"]
    assert _graph_options(url) == {"search_passages_vec_hnsw": wider,
                                   "search_facts_vec_hnsw": wider}
