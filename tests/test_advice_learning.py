"""The learning half of the advice loop: situations, the evidence gate, notes and AIP.

Clustering runs on the default offline embedder (WordLlama); note learning, naming and
compiling ask the scripted OpenAI-compatible model server (a real HTTP process).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from ampup_memory.advice.aip import (
    Citation,
    SourceDocument,
    StepGraph,
    compile_skills,
)
from ampup_memory.advice.gate import (
    Evidence,
    GateRules,
    NoteState,
    record_outcome,
    record_served,
    review,
    serves,
)
from ampup_memory.advice.notes import MAX_PROMPT_CHARS, Note, build_prompt, learn_note
from ampup_memory.advice.situations import (
    Situation,
    SituationMap,
    build_map,
    situation_for,
)
from ampup_memory.models.chat import ModelUnavailable, OpenAIChat, Role, endpoint_for
from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.settings import Settings
from tests.model_support import ScriptedModel

T0 = datetime(2026, 11, 1, tzinfo=UTC)

KINDS = {
    "sql": [
        "Write a SQL query for monthly revenue by region",
        "SQL query: weekly signups per acquisition channel",
        "Build a SQL report of refunds by product for last quarter",
        "Query the orders table for average basket size per country",
        "Write SQL that counts active users per day from the events table",
        "SQL to find the top ten customers by lifetime revenue",
        "Write a query joining invoices and payments to list unpaid invoices",
        "SQL report of churned accounts by plan and month",
        "Query daily sales totals grouped by store",
        "Write a SQL query for conversion rate by marketing channel",
        "SQL: median order value per region over the last year",
        "Write SQL listing products with falling sales quarter over quarter",
        "Query the payments table for failed charges by card type",
        "Write SQL for monthly recurring revenue by customer segment",
    ],
    "bug": [
        "Fix the failing unit test in the payment service",
        "Debug the flaky integration test for the auth module",
        "Fix the null pointer exception in the checkout handler",
        "The billing test suite fails after the dependency upgrade, fix it",
        "Fix the race condition that breaks the retry test",
        "Investigate and fix the timeout error in the search service tests",
        "Fix a failing test caused by a wrong date format in the parser",
        "Repair the broken unit tests after the config refactor",
        "Fix the crash in the login handler when the token is missing",
        "Debug why the serialisation test fails on Python 3.12",
        "Fix the off-by-one error that fails the pagination test",
        "Fix the memory leak that makes the worker tests time out",
        "Fix the failing CI build caused by a broken import",
    ],
    "email": [
        "Draft a follow-up email to the buyer after the demo",
        "Write a thank-you email to the CFO after the pricing call",
        "Email our champion at Acme a recap of the discovery call",
        "Draft an email proposing next steps after the kickoff meeting",
        "Write a follow-up email to a prospect who went quiet after the trial",
        "Send the procurement lead a summary email of the contract terms we agreed",
        "Draft a renewal reminder email to the customer",
        "Write an email to the prospect with the pricing proposal attached",
        "Follow up by email with the customer about the security review",
        "Draft a short email asking the buyer for a meeting next week",
        "Write a recap email to the customer after the onboarding call",
        "Email the prospect to confirm the pilot start date",
        "Draft a follow-up email after the conference chat with a lead",
    ],
}
NEW_TASKS = {
    "sql": ["Write a SQL query for yearly revenue by region",
            "Query the number of new customers per week"],
    "bug": ["Fix the broken test in the invoice module",
            "Debug the failing unit test in the export service"],
    "email": ["Send a thank-you email to the customer after the demo"],
}
UNRELATED = ["Bake a sourdough loaf with a crisp crust",
             "Plan a hiking trip in the Alps for the summer",
             "Translate the user manual into German"]


@dataclass(frozen=True)
class Task:
    """The data plane's `RewardedTask` shape (advice/runs.py), built here by hand."""

    id: str
    task: str
    kind: str = "run"
    reward: float = 1.0
    user: str = "u1"
    trace: str = ""
    outcome: str = ""
    advice_key: str | None = None
    at: datetime = T0


def tasks_of(kinds: dict[str, list[str]], prefix: str = "run") -> list[Task]:
    return [Task(id=f"{prefix}_{kind}_{i:02d}", task=text)
            for kind, texts in kinds.items() for i, text in enumerate(texts)]


def kind_of(task_id: str) -> str:
    return task_id.split("_")[1]


@pytest.fixture(scope="module")
def embedder() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


@pytest.fixture(scope="module")
def first_map(embedder: WordLlamaEmbedder) -> SituationMap:
    return build_map(tasks_of(KINDS), embedder)


def chat(scripted: ScriptedModel, role: Role, retries: int = 1) -> OpenAIChat:
    settings = Settings.model_validate({**scripted.env(),
                                        "AMPUP_MEMORY_MODEL_RETRIES": str(retries)})
    endpoint = endpoint_for(settings, role)
    assert endpoint is not None
    return OpenAIChat(endpoint, sleep=lambda _: None)


# -- situations ------------------------------------------------------------------------------

def test_three_kinds_of_work_make_three_situations(first_map: SituationMap) -> None:
    assert len(first_map.situations) == 3
    kinds = [{kind_of(m) for m in s.members} for s in first_map.situations]
    assert sorted(k for one in kinds for k in one) == ["bug", "email", "sql"]  # one kind each
    assert sum(len(s.members) for s in first_map.situations) == 40
    for s in first_map.situations:
        assert s.id.startswith("sit_") and s.category.startswith("cat_")
        assert s.category in {c.id for c in first_map.categories}
        # Named from the tasks' own words: each kind's name has one of its telling words.
        telling = {"sql": {"sql", "query"}, "bug": {"fix", "test", "failing"},
                   "email": {"email", "draft"}}[kind_of(s.members[0])]
        assert telling & set(s.terms), s.terms
    assert {sid for c in first_map.categories for sid in c.situations} == {
        s.id for s in first_map.situations}
    assert SituationMap.from_json(first_map.to_json()) == first_map


def test_the_map_does_not_depend_on_input_order(embedder: WordLlamaEmbedder,
                                                first_map: SituationMap) -> None:
    again = build_map(list(reversed(tasks_of(KINDS))), embedder)
    assert sorted(s.members for s in again.situations) == sorted(
        s.members for s in first_map.situations)


def test_reclustering_with_new_tasks_keeps_the_ids(embedder: WordLlamaEmbedder,
                                                   first_map: SituationMap) -> None:
    more = tasks_of(KINDS) + tasks_of(NEW_TASKS, prefix="new")
    second = build_map(more, embedder, previous=first_map)
    assert len(second.situations) == 3
    old_of = {kind_of(s.members[0]): s.id for s in first_map.situations}
    for s in second.situations:
        kinds = {kind_of(m) for m in s.members}
        assert len(kinds) == 1
        assert s.id == old_of[kinds.pop()]  # the same kind of work keeps its id
    assert {c.id for c in second.categories} <= {c.id for c in first_map.categories}
    assert sum(len(s.members) for s in second.situations) == 45
    # Without the previous map every id is new.
    fresh = build_map(more, embedder)
    assert not {s.id for s in fresh.situations} & set(old_of.values())


TRAVEL = [
    "Book a flight to Berlin for the March offsite",
    "Find a hotel near the conference centre in Lisbon",
    "Book train tickets to Paris for the customer visit",
    "Arrange a rental car at the Austin airport",
    "Book flights and a hotel for the Singapore trip",
    "Find a cheaper flight to London next Tuesday",
    "Reserve a hotel room in Madrid for two nights",
    "Book a taxi from the airport to the hotel in Rome",
    "Change my flight to Boston to an earlier departure",
    "Book a hotel in Tokyo close to the office",
]


def test_a_new_kind_of_work_gets_a_new_id_and_old_ones_keep_theirs(
        embedder: WordLlamaEmbedder, first_map: SituationMap) -> None:
    old_of = {kind_of(s.members[0]): s.id for s in first_map.situations}
    grown = build_map(tasks_of(KINDS) + tasks_of({"travel": TRAVEL}), embedder,
                      previous=first_map)
    by_kind = {}
    for s in grown.situations:
        kinds = {kind_of(m) for m in s.members}
        assert len(kinds) == 1
        by_kind[kinds.pop()] = s.id
    assert set(by_kind) == {"sql", "bug", "email", "travel"}
    assert {k: by_kind[k] for k in old_of} == old_of
    assert by_kind["travel"] not in old_of.values()


def test_ids_are_kept_by_centre_when_no_task_is_shared(
        embedder: WordLlamaEmbedder, first_map: SituationMap) -> None:
    # The same kinds of work recorded again under other ids (the old runs aged out).
    again = build_map(tasks_of(KINDS, prefix="again"), embedder, previous=first_map)
    old_of = {kind_of(s.members[0]): s.id for s in first_map.situations}
    assert {kind_of(s.members[0]): s.id for s in again.situations} == old_of
    # A centre too far from every old one is a new situation: nothing is kept.
    strict = build_map(tasks_of(KINDS, prefix="again"), embedder, previous=first_map,
                       min_similarity=1.01)
    assert not {s.id for s in strict.situations} & set(old_of.values())


def test_small_and_bad_inputs(embedder: WordLlamaEmbedder) -> None:
    empty = build_map([], embedder)
    assert (empty.situations, empty.categories) == ((), ())
    assert situation_for(embedder.embed(["anything"])[0], empty, min_similarity=0.0) is None
    one = build_map([Task(id="run_a", task="Write a SQL query")], embedder)
    assert [s.members for s in one.situations] == [("run_a",)]
    assert [c.situations for c in one.categories] == [(one.situations[0].id,)]
    # The same text twice is one point, still two members.
    twice = build_map([Task(id="run_a", task="Fix the test"),
                       Task(id="run_b", task="fix  the TEST")], embedder)
    assert [s.members for s in twice.situations] == [("run_a", "run_b")]
    with pytest.raises(ValueError, match="unique"):
        build_map([Task(id="run_a", task="x"), Task(id="run_a", task="y")], embedder)
    with pytest.raises(ValueError, match="one vector per task"):
        build_map([Task(id="run_a", task="x")], embedder, vectors=[])


def test_a_new_task_finds_its_situation_and_an_unrelated_one_none(
        embedder: WordLlamaEmbedder, first_map: SituationMap) -> None:
    threshold = Settings().advice_situation_min_similarity
    by_kind = {kind_of(s.members[0]): s.id for s in first_map.situations}
    for kind, texts in NEW_TASKS.items():
        for vector in embedder.embed(texts):
            found = situation_for(vector, first_map, min_similarity=threshold)
            assert found is not None and found.id == by_kind[kind]
    for vector in embedder.embed(UNRELATED):
        assert situation_for(vector, first_map, min_similarity=threshold) is None
    # Another vector space matches nothing.
    vector = embedder.embed([NEW_TASKS["sql"][0]])[0]
    assert situation_for(vector, first_map, min_similarity=threshold,
                         embedder="hash/256") is None
    assert situation_for(vector[:128], first_map, min_similarity=threshold) is None


def test_a_model_names_the_groups_and_its_failure_keeps_word_names(
        embedder: WordLlamaEmbedder, first_map: SituationMap,
        scripted_model: ScriptedModel) -> None:
    sits = first_map.situations
    scripted_model.script([{"match": "You name groups of tasks", "reply": {
        "situations": [{"id": s.id, "name": f"Kind {i}"} for i, s in enumerate(sits)],
        "categories": [{"id": c.id, "name": f"Area {i}"}
                       for i, c in enumerate(first_map.categories)]}}])
    named = build_map(tasks_of(KINDS), embedder, previous=first_map,
                      model=chat(scripted_model, Role.LEARN))
    assert named.named_by == ScriptedModel.name
    assert {s.name for s in named.situations} == {"Kind 0", "Kind 1", "Kind 2"}
    assert {c.name for c in named.categories} == {
        f"Area {i}" for i in range(len(first_map.categories))}
    prompt = scripted_model.calls()[0]["messages"][1]["content"]
    assert KINDS["sql"][0] in prompt or any(t in prompt for t in KINDS["sql"])

    scripted_model.script([{"match": "You name groups of tasks", "reply": "not json"}])
    fallback = build_map(tasks_of(KINDS), embedder, previous=first_map,
                         model=chat(scripted_model, Role.LEARN))
    assert fallback.named_by == "words"
    assert [s.name for s in fallback.situations] == [s.name for s in first_map.situations]


# -- the evidence gate -----------------------------------------------------------------------

RULES = GateRules.from_settings(Settings())


def test_the_gate_defaults_come_from_settings() -> None:
    assert RULES == GateRules(trial_share=0.2, promote_after_people=3, retire_min_served=20,
                              retire_max_help_rate=0.1)
    custom = Settings.model_validate({"AMPUP_MEMORY_ADVICE_TRIAL_SHARE": "0.5",
                                      "AMPUP_MEMORY_ADVICE_PROMOTE_AFTER_PEOPLE": "2"})
    assert GateRules.from_settings(custom).trial_share == 0.5
    assert GateRules.from_settings(custom).promote_after_people == 2
    with pytest.raises(ValidationError):
        Settings.model_validate({"AMPUP_MEMORY_ADVICE_TRIAL_SHARE": "1.5"})


def test_a_candidate_is_served_in_its_trial_share_of_sessions() -> None:
    sessions = [f"ses_{i:04d}" for i in range(1000)]
    for note in ("note_a", "note_b"):
        served = [serves(note, NoteState.CANDIDATE, s, RULES) for s in sessions]
        share = sum(1 for ok, _ in served if ok) / len(sessions)
        assert abs(share - 0.2) <= 0.05, share
        assert all(trial == ok for ok, trial in served)
        # Deterministic per (note, session).
        assert served == [serves(note, NoteState.CANDIDATE, s, RULES) for s in sessions]
    half = GateRules(trial_share=0.5)
    share = sum(serves("note_a", NoteState.CANDIDATE, s, half)[0] for s in sessions) / 1000
    assert abs(share - 0.5) <= 0.05
    assert all(serves("note_a", NoteState.PROMOTED, s, RULES) == (True, False)
               for s in sessions)
    assert not any(serves("note_a", NoteState.RETIRED, s, RULES)[0] for s in sessions)


def helped_by(users: list[str]) -> tuple[NoteState, Evidence, list[str]]:
    """A candidate served and helping once per entry of ``users``; the gate reviewed after
    each. Returns the state, the evidence and the kinds of every event."""
    state, evidence, kinds = NoteState.CANDIDATE, Evidence(), []
    for i, user in enumerate(users):
        at = T0 + timedelta(minutes=i)
        evidence, event = record_served("note_x", state, evidence, session=f"ses_{i}",
                                        user=user, at=at)
        kinds.append(event.kind)
        evidence, event = record_outcome("note_x", state, evidence, session=f"ses_{i}",
                                         user=user, applied=True, helped=True, at=at)
        kinds.append(event.kind)
        state, change = review("note_x", state, evidence, RULES, at=at)
        if change is not None:
            kinds.append(change.kind)
    return state, evidence, kinds


def test_promotion_needs_three_different_people() -> None:
    state, evidence, _ = helped_by(["ann"] * 10)
    assert state is NoteState.CANDIDATE  # one user helped ten times is one person
    assert evidence.counters() == {"served": 10, "applied": 10, "helped": 10,
                                   "helped_by_people": 1}
    state, _, _ = helped_by(["ann", "bob", "ann", "bob"])
    assert state is NoteState.CANDIDATE  # two people are not enough
    state, evidence, kinds = helped_by(["ann", "bob", "ann", "cho"])
    assert state is NoteState.PROMOTED and evidence.helped_by_people == 3
    assert kinds == ["served", "outcome"] * 4 + ["promoted"]  # the whole history
    again, change = review("note_x", state, evidence, RULES)
    assert (again, change) == (NoteState.PROMOTED, None)  # promoted once


def test_a_note_served_often_that_rarely_helps_is_retired() -> None:
    state, evidence = NoteState.PROMOTED, Evidence()
    events = []
    for i in range(RULES.retire_min_served):
        evidence, _ = record_served("note_y", state, evidence, session=f"ses_{i}")
        evidence, _ = record_outcome("note_y", state, evidence, session=f"ses_{i}",
                                     user=f"u{i}", applied=i < 5, helped=i < 2)
        state, change = review("note_y", state, evidence, RULES)
        if change is not None:
            events.append(change)
    # 2 helped of 20 served = 0.1 = the most a retired note may have helped.
    assert state is NoteState.RETIRED
    assert [e.kind for e in events] == ["retired"]
    assert events[0].evidence == {"served": 20, "applied": 5, "helped": 2,
                                  "helped_by_people": 2}
    assert events[0].to_dict()["state"] == "retired"
    assert review("note_y", state, evidence, RULES) == (NoteState.RETIRED, None)
    # Fewer servings, or a better help rate, keep it.
    assert review("note_y", NoteState.PROMOTED, Evidence(served=19, helped=1), RULES)[0] \
        is NoteState.PROMOTED
    assert review("note_y", NoteState.PROMOTED, Evidence(served=20, helped=3), RULES)[0] \
        is NoteState.PROMOTED


# -- notes -----------------------------------------------------------------------------------

SITUATION = Situation(id="sit_x", category="cat_x", name="sql query revenue",
                      terms=("sql", "query", "revenue"), centroid=(1.0,), members=())


def rewarded(n_good: int, n_bad: int, trace_len: int = 100) -> list[Task]:
    good = [Task(id=f"run_g{i}", task=f"SQL revenue report {i}", reward=1.0 - i * 0.1,
                 user=f"u{i}", trace=f"GOOD-TRACE-{i} " + "x" * trace_len,
                 outcome="report delivered", at=T0 + timedelta(hours=i))
            for i in range(n_good)]
    bad = [Task(id=f"run_b{i}", task=f"SQL revenue report {i}", reward=-1.0,
                user=f"u{i}", trace=f"BAD-TRACE-{i} forgot the time zone",
                outcome="wrong totals", at=T0 + timedelta(hours=i)) for i in range(n_bad)]
    return good + bad


NOTE_REPLY = {"when": "Revenue reports in SQL.",
              "steps": ["Check the time zone of the timestamps", "Group by month"],
              "pitfalls": ["Summing refunds as revenue"]}


def test_a_note_is_learned_from_the_best_and_the_failed_runs(
        scripted_model: ScriptedModel) -> None:
    scripted_model.script([{"match": "Attempts that worked", "reply": NOTE_REPLY}])
    tasks = rewarded(3, 2)
    note = learn_note(SITUATION, tasks, chat(scripted_model, Role.LEARN), min_runs=5,
                      now=T0)
    assert note is not None
    assert (note.situation, note.when, note.steps, note.pitfalls) == (
        "sit_x", "Revenue reports in SQL.",
        ("Check the time zone of the timestamps", "Group by month"),
        ("Summing refunds as revenue",))
    assert note.key.startswith("note_") and note.state is NoteState.CANDIDATE
    assert note.evidence.counters() == {"served": 0, "applied": 0, "helped": 0,
                                        "helped_by_people": 0}
    assert set(note.sources) == {t.id for t in tasks}
    assert note.model == ScriptedModel.name
    helped = replace(note, state=NoteState.PROMOTED,
                     evidence=Evidence(served=4, applied=3, helped=2,
                                       helped_users=frozenset({"ann", "bob"})))
    assert Note.from_dict(json.loads(json.dumps(helped.to_dict()))) == helped
    prompt = scripted_model.calls()[0]["messages"][1]["content"]
    assert prompt.index("GOOD-TRACE-0") < prompt.index("GOOD-TRACE-1")  # best first
    assert "BAD-TRACE-0" in prompt.split("Attempts that failed:")[1]


def test_too_few_or_no_positive_runs_write_no_note(scripted_model: ScriptedModel) -> None:
    model = chat(scripted_model, Role.LEARN)
    assert learn_note(SITUATION, rewarded(2, 2), model, min_runs=5) is None
    assert learn_note(SITUATION, rewarded(0, 6), model, min_runs=5) is None
    assert scripted_model.calls() == []  # the model was not asked


@pytest.mark.parametrize("reply", [
    "not json", {"when": "x", "steps": []}, {"steps": ["a"]},
])
def test_a_garbage_answer_returns_no_note(scripted_model: ScriptedModel,
                                          reply: object) -> None:
    scripted_model.script([], default={"reply": reply})
    with pytest.raises(ModelUnavailable):
        learn_note(SITUATION, rewarded(4, 2), chat(scripted_model, Role.LEARN))
    assert len(scripted_model.calls()) == 2  # asked, retried once, then gave up


def test_the_note_prompt_is_bounded() -> None:
    prompt, shown = build_prompt(SITUATION, rewarded(40, 40, trace_len=50_000))
    assert len(prompt) <= MAX_PROMPT_CHARS
    assert 0 < len(shown) <= 12
    assert all(t in prompt for t in shown)


# -- AIP -------------------------------------------------------------------------------------

def graph(steps: list[str], edges: list[tuple[str, str]]) -> StepGraph:
    return StepGraph.model_validate({
        "steps": [{"id": s, "text": f"do {s}"} for s in steps],
        "edges": [{"from": a, "to": b} for a, b in edges]})


def test_a_step_graph_is_validated() -> None:
    ok = graph(["s1", "s2", "s3"], [("s1", "s2"), ("s1", "s3"), ("s2", "s3"), ("s3", "s2")])
    assert ok.start == "s1"
    assert ok.to_json_dict()["edges"][0] == {"from": "s1", "to": "s2"}
    for steps, edges, message in [
        (["s1", "s1"], [], "unique"),
        (["s1", "s2"], [("s1", "s9")], "does not exist"),
        (["s1", "s2"], [], "exactly one start"),
        (["s1", "s2", "s3"], [("s1", "s3"), ("s2", "s3")], "exactly one start"),
        (["s1", "s2", "s3"], [("s1", "s2"), ("s3", "s3")], "not reachable from the start s1"),
        (["s1", "s2"], [("s1", "s2"), ("s2", "s1")], "exactly one start"),  # no start
    ]:
        with pytest.raises(ValidationError, match=message):
            graph(steps, edges)
    with pytest.raises(ValidationError, match="not reachable"):
        graph(["s1", "s2", "s3"], [("s2", "s3"), ("s3", "s2")])
    with pytest.raises(ValidationError):
        graph(["Bad Id"], [])


DOCS = [SourceDocument(episode="ep_refund", title="Refund policy", units=(
    "Refunds are approved by the team lead.",
    "First check the order is under 30 days old.",
    "If it is older, send it to finance.",
    "Then issue the refund in the billing tool.",
))]


def cited(episode: str, unit: int) -> list[dict[str, object]]:
    return [{"episode": episode, "unit": unit}]


def test_skills_are_compiled_with_verified_citations(scripted_model: ScriptedModel) -> None:
    scripted_model.script([{"match": "ep_refund", "reply": {"skills": [
        {"name": "Refund an order", "when": "A customer asks for a refund.",
         "steps": [
             {"id": "check_age", "text": "Check the order is under 30 days old",
              "cites": cited("ep_refund", 2)},
             {"id": "ask_lead", "text": "Ask the team lead to approve",
              "cites": cited("ep_refund", 1) + cited("ep_refund", 1)},
             {"id": "invent", "text": "Offer a discount voucher", "cites": []},
             {"id": "finance", "text": "Send it to finance", "cites": cited("ep_refund", 3)},
             {"id": "issue", "text": "Issue the refund in billing",
              "cites": cited("ep_refund", 4) + cited("ep_other", 1)}],
         "edges": [
             {"from": "check_age", "to": "ask_lead", "condition": "under 30 days"},
             {"from": "check_age", "to": "finance", "condition": "older"},
             {"from": "ask_lead", "to": "invent"},
             {"from": "invent", "to": "issue", "condition": "approved"}],
         "edge_cases": [
             {"text": "Orders older than 30 days go to finance",
              "cites": cited("ep_refund", 3)},
             {"text": "VIP customers skip approval", "cites": cited("ep_refund", 9)},
             # JSON's true is no unit number (Python read it as unit 1, shown, so kept).
             {"text": "Refund twice if asked", "cites": [{"episode": "ep_refund",
                                                          "unit": True}]}]},
        {"name": "Made up", "when": "Never.",
         "steps": [{"id": "s1", "text": "Nothing backs this", "cites": cited("ep_x", 1)}]},
    ]}}])
    skills = compile_skills(DOCS, chat(scripted_model, Role.COMPILE))
    assert len(skills) == 1  # the skill with no verified step is dropped
    skill = skills[0]
    assert skill.key.startswith("proc_") and skill.name == "Refund an order"
    assert [s.id for s in skill.graph.steps] == ["check_age", "ask_lead", "finance", "issue"]
    assert skill.steps == ["Check the order is under 30 days old",
                           "Ask the team lead to approve", "Send it to finance",
                           "Issue the refund in billing"]
    # The uncited step is gone; the flow through it is kept.
    assert {(e.from_, e.to, e.condition) for e in skill.graph.edges} == {
        ("check_age", "ask_lead", "under 30 days"), ("check_age", "finance", "older"),
        ("ask_lead", "issue", "approved")}
    assert skill.edge_cases == ["Orders older than 30 days go to finance"]
    assert skill.sources == [Citation(episode="ep_refund", unit=u) for u in (2, 1, 3, 4)]
    prompt = scripted_model.calls()[0]["messages"][1]["content"]
    assert "[2] First check the order is under 30 days old." in prompt


def test_a_skill_whose_graph_breaks_without_its_uncited_start_is_dropped(
        scripted_model: ScriptedModel) -> None:
    scripted_model.script([{"match": "ep_refund", "reply": {"skills": [
        {"name": "Forked", "when": "x",
         "steps": [{"id": "a", "text": "uncited start", "cites": []},
                   {"id": "b", "text": "b", "cites": cited("ep_refund", 1)},
                   {"id": "c", "text": "c", "cites": cited("ep_refund", 2)}],
         "edges": [{"from": "a", "to": "b"}, {"from": "a", "to": "c"}]}]}}])
    assert compile_skills(DOCS, chat(scripted_model, Role.COMPILE)) == []


def test_a_garbage_compile_answer_returns_nothing(scripted_model: ScriptedModel) -> None:
    scripted_model.script([], default={"reply": {"skills": [{"name": "no steps"}]}})
    with pytest.raises(ModelUnavailable):
        compile_skills(DOCS, chat(scripted_model, Role.COMPILE))
    scripted_model.script([], default={"status": 503})
    with pytest.raises(ModelUnavailable):
        compile_skills(DOCS, chat(scripted_model, Role.COMPILE))
