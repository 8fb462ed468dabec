"""What the learning loop and the compile pass make, read through `AmpUpClient` with the
effect real: a note actually learned from rewarded sessions (the scripted learn model, a
real HTTP process) and served, procedures actually compiled from a chosen document, and a
document the model keeps refusing actually set aside, each read back with the client's
methods (`situations`, `notes`, `advice`, `procedures`, `set_aside`, `iter_set_aside`).
The passes run through the CLI's own entry in this process, as the server tests do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ampup_memory.client import AmpUpClient, AsyncAmpUpClient
from ampup_memory.models.setaside import UNUSABLE_PASSES
from tests.memory_support import ADMIN_TOKEN, QUIET, cli_in_process, new_scope, start
from tests.model_support import ScriptedModel
from tests.server_process import ServerProcess
from tests.test_advice_learning import KINDS, NEW_TASKS
from tests.test_advice_procedures import REFUND_TASK, RUNBOOK, answer

NOTE = {"when": "For SQL reporting tasks.", "steps": ["Write the query.", "Check the rows."],
        "pitfalls": ["Skipping the row check."]}


@dataclass
class Served:
    proc: ServerProcess
    home: Path
    env: dict[str, str]

    def run(self, *args: str) -> dict[str, object]:
        done = cli_in_process(self.home, self.env, *args)
        assert done.returncode == 0, done.stderr
        report: dict[str, object] = json.loads(done.stdout)
        return report


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory,
           scripted_model_process: ScriptedModel) -> Iterator[Served]:
    env = {**QUIET, **scripted_model_process.env("LEARN_"),
           **scripted_model_process.env("COMPILE_"),
           "AMP_EMBEDDING_PROVIDER": "wordllama",  # situations need meaning, not hashes
           "AMPUP_MEMORY_MODEL_RETRIES": "0",
           "AMPUP_MEMORY_ADVICE_JUDGE_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_CLUSTER_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_LEARN_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_COMPILE_INTERVAL_SECONDS": "0",
           "AMPUP_MEMORY_ADVICE_MIN_RUNS_FOR_NOTE": "2",
           "AMPUP_MEMORY_ADVICE_TRIAL_SHARE": "1.0"}
    home = tmp_path_factory.mktemp("client-advice")
    proc = start(home, env)
    yield Served(proc, home, env)
    proc.stop()


@pytest.fixture
def alice(served: Served) -> Iterator[AmpUpClient]:
    with AmpUpClient(served.proc.url, "alice", admin_token=ADMIN_TOKEN) as client:
        yield client


def test_a_note_is_learned_and_served(served: Served, alice: AmpUpClient,
                                      scripted_model_process: ScriptedModel) -> None:
    scope, model = new_scope(), scripted_model_process
    model.reset()
    sessions = []
    for task in KINDS["sql"][:5]:
        ses = alice.start_session(scope, task)["id"]
        alice.end_session(ses, "wrote the query and checked it", "the right rows", reward=1.0)
        sessions.append(ses)
    assert alice.notes(scope) == {"scope": scope, "notes": []}
    served.run("advice", "cluster", "--scope", scope)
    situations = {s["id"] for s in alice.situations(scope)["situations"]}
    assert situations

    model.script([], default={"reply": NOTE})
    learned = served.run("advice", "learn", "--scope", scope)
    notes = alice.notes(scope)["notes"]
    assert len(notes) == learned["scopes"][0]["learned"] >= 1  # type: ignore[index]
    note = notes[0]
    assert note["situation"] in situations
    assert (note["steps"], note["pitfalls"]) == (NOTE["steps"], NOTE["pitfalls"])
    assert set(note["sources"]) <= set(sessions) and note["sources"]
    assert note in alice.notes(scope, situation=note["situation"])["notes"]
    assert alice.notes(scope, situation="sit_none")["notes"] == []
    with AmpUpClient(served.proc.url, "mallory") as mallory:  # sources are what one may read
        assert all(n["sources"] == [] for n in mallory.notes(scope)["notes"])

    task = NEW_TASKS["sql"][0]
    advice = alice.advice(scope, task, session=alice.start_session(scope, task)["id"])["advice"]
    assert (advice["kind"], advice["trial"], advice["steps"]) == ("note", True, NOTE["steps"])


async def test_procedures_are_compiled_from_the_chosen_document(
        served: Served, alice: AmpUpClient, scripted_model_process: ScriptedModel) -> None:
    scope, model = new_scope(), scripted_model_process
    model.reset()
    episode = alice.remember(scope, RUNBOOK, source="doc:refunds",
                             document="refund-runbook")["id"]
    assert alice.procedures(scope)["version"] is None
    assert alice.set_procedure_sources(scope, "refund-runbook")["commit"]
    model.script([{"match": "Refunds: check the order", "reply": answer(episode)}])
    served.run("advice", "compile", "--scope", scope)

    got = alice.procedures(scope)
    assert got["version"] and got["model"] == model.name
    [skill] = got["procedures"]  # the skill citing a unit never shown is rejected
    assert (skill["name"], skill["steps"][0]) == ("Refund an order",
                                                  "Check the order is under 30 days old")
    assert skill["sources"] == [{"episode": episode, "unit": u} for u in range(1, 6)]
    async with AsyncAmpUpClient(served.proc.url, "alice") as same:
        assert await same.procedures(scope) == got
    advice = alice.advice(scope, REFUND_TASK)["advice"]
    assert (advice["kind"], advice["name"]) == ("procedure", "Refund an order")


async def test_a_refused_document_is_set_aside(served: Served, alice: AmpUpClient,
                                               scripted_model_process: ScriptedModel) -> None:
    scope, model = new_scope(), scripted_model_process
    model.reset()
    alice.remember(scope, "Failover: promote the replica.\n\nRepoint the DNS name.",
                   source="doc:failover", document="failover-runbook")
    alice.set_procedure_sources(scope, ["failover-runbook"])
    model.script([{"match": "Failover: promote", "status": 400}])
    for n in range(1, UNUSABLE_PASSES + 1):
        assert alice.set_aside(scope)["items"] == [], n  # not before the last pass
        done = cli_in_process(served.home, served.env, "advice", "compile", "--scope", scope)
        assert done.returncode in (0, 2), done.stderr

    page = alice.set_aside(scope, kind="compile")
    [item] = page["items"]
    assert (item["kind"], item["item"], item["passes"]) == ("compile", scope, UNUSABLE_PASSES)
    assert "HTTP 400" in item["reason"]
    assert alice.set_aside(scope, kind="learn")["items"] == []
    assert list(alice.iter_set_aside(scope, page_size=1)) == [item]
    async with AsyncAmpUpClient(served.proc.url, "alice") as same:
        assert [i async for i in same.iter_set_aside(scope, kind="compile")] == [item]
    calls = len(model.calls())
    served.run("advice", "compile", "--scope", scope)
    assert len(model.calls()) == calls  # set aside: not asked again
