"""Facts in a loaded corpus: `ampup-memory load` writes fact lines after the episodes, cites
resolved by source, document or episode id, read back over HTTP from a real server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ampup_memory.memory.episode_types import by_name
from ampup_memory.memory.episodes import episode_id
from tests.memory_support import QUIET, Memory, cli_in_process, new_scope, serving

SLACK = ("slack:C1:1", "erin: the renewal is due in June")
CALL = ("call:7", "dana: we need 30 seats")


def _fact(entity: str, predicate: str, value: Any, quote: str, **cite: Any) -> str:
    return json.dumps({"fact": {"entity": entity, "predicate": predicate, "value": value,
                                "quote": quote, "cites": [cite]}})


def _corpus(root: Path) -> None:
    root.mkdir(parents=True)
    (root / "plan.md").write_text("# Plan\n\nThe budget for the pilot is 40k.\n\nSecond.\n")
    call_id = episode_id(by_name("call"), *CALL)  # cited by id, as POST /facts takes it
    lines = [
        json.dumps({"source": SLACK[0], "body": SLACK[1]}),
        json.dumps({"source": CALL[0], "body": CALL[1]}),
        # Two versions of one document: a cite by document names the newer one.
        json.dumps({"source": "wiki:hb", "body": "Version one says 10 seats.",
                    "document": "handbook", "occurred_at": "2024-06-01T00:00:00Z"}),
        json.dumps({"source": "wiki:hb", "body": "Version two says 12 seats.",
                    "document": "handbook", "occurred_at": "2024-01-01T00:00:00Z"}),
        _fact("acct:acme", "renewal", "June", "renewal is due in June",
              source=SLACK[0], unit=1),
        # The newer version (by occurred_at, not by line) does not say 12.
        _fact("acct:acme", "handbook_seats", 12, "12 seats", document="handbook", unit=1),
        _fact("acct:acme", "budget", "40k", "budget for the pilot is 40k",
              document="plan.md", unit=2),
        _fact("acct:acme", "owner", "erin", "erin", source="slack:nope", unit=1),
        _fact("acct:acme", "seats", 30, "30 seats", episode=call_id, unit=1),
        _fact("acct:acme", "handbook_version", "one", "Version one", document="handbook",
              unit=1),
        json.dumps({"fact": {"entity": "acct:acme", "predicate": "x"}}),
        json.dumps({"source": "slack:C1:2"}),  # no body: said so, not "a valid string"
    ]
    (root / "feed.jsonl").write_text("\n".join(lines) + "\n")


def test_load_writes_facts_citing_corpus_episodes_and_rerun_writes_nothing(
        tmp_path: Path) -> None:
    home, corpus, scope = tmp_path / "home", tmp_path / "corpus", new_scope()
    _corpus(corpus)
    args = ("load", str(corpus), "--scope", scope, "--batch-size", "3", "--user", "loader")
    first = cli_in_process(home, QUIET, *args)
    assert first.returncode == 1, first.stderr  # the bad facts are listed, the rest written
    counts = json.loads(first.stdout)
    # Episodes: 3 + 2 in two commits. Facts in chunks of 3: [renewal, handbook_seats
    # (refused: the rest posted again), budget], [owner (unknown source), seats, version].
    assert counts == {"created": 5, "existing": 0, "conflict": 0, "invalid": 1,
                      "facts_created": 4, "facts_existing": 0, "facts_invalid": 3,
                      "commits": 4, "skipped_files": {}}
    said = {line.split(":")[1]: line for line in first.stderr.splitlines()
            if line.startswith("skipped feed.jsonl:")}
    assert sorted(said, key=int) == ["6", "8", "11", "12"], first.stderr
    assert said["12"] == "skipped feed.jsonl:12: body: Field required", first.stderr
    assert said["6"].startswith("skipped feed.jsonl:6: fact.quote: the quote does not "
                                "occur verbatim")
    assert said["8"] == ("skipped feed.jsonl:8: fact.cites.0.source: no episode of this "
                         "corpus has source 'slack:nope'")
    assert said["11"].startswith("skipped feed.jsonl:11: fact.value: ")

    with serving(home, QUIET) as proc:
        m = Memory(proc.url, user="loader")
        ledger = m.ledger(scope)
        assert len(ledger) == 4
        got = m.facts(scope, "acct:acme", history="true")
        assert got.status_code == 200, got.text
        facts = {f["predicate"]: f for f in got.json()["facts"]}
        assert {p: f["value"] for p, f in facts.items()} == {
            "renewal": "June", "budget": "40k", "seats": 30, "handbook_version": "one"}
        assert {f["written_by"] for f in facts.values()} == {"posted"}

        def doc_id(key: str) -> str:
            r = m.http.post("/document", json={"scope": scope, "document": key})
            assert r.status_code == 200, r.text
            return str(r.json()["id"])

        assert facts["budget"]["cites"] == [{"episode": doc_id("plan.md"), "unit": 2}]
        assert facts["handbook_version"]["cites"] == [{"episode": doc_id("handbook"),
                                                       "unit": 1}]
        assert facts["renewal"]["cites"] == [
            {"episode": episode_id(by_name("slack"), *SLACK), "unit": 1}]
        # valid_from defaults to the cited episode's time, as POST /facts does
        assert facts["handbook_version"]["valid_from"] == "2024-06-01T00:00:00Z"

    again = cli_in_process(home, QUIET, *args)
    assert again.returncode == 1, again.stderr
    assert json.loads(again.stdout) == {
        "created": 0, "existing": 5, "conflict": 0, "invalid": 1, "facts_created": 0,
        "facts_existing": 4, "facts_invalid": 3, "commits": 0, "skipped_files": {}}
    with serving(home, QUIET) as proc:
        m = Memory(proc.url, user="loader")
        assert len(m.ledger(scope)) == 4
        assert len(m.facts(scope, "acct:acme", history="true").json()["facts"]) == 4


def test_a_fact_held_with_another_value_is_written_and_a_clean_corpus_exits_0(
        tmp_path: Path) -> None:
    home, corpus, scope = tmp_path / "home", tmp_path / "corpus", new_scope()
    corpus.mkdir()
    feed = corpus / "feed.jsonl"
    episode = json.dumps({"source": CALL[0], "body": CALL[1]})
    fact = _fact("acct:acme", "seats", 30, "30 seats", source=CALL[0], unit=1)
    feed.write_text("\n".join([episode, fact, fact]) + "\n")
    args = ("load", str(corpus), "--scope", scope, "--user", "loader")
    first = cli_in_process(home, QUIET, *args)
    assert first.returncode == 0, first.stderr
    counts = json.loads(first.stdout)
    # the same fact twice in one corpus is written once
    assert (counts["facts_created"], counts["facts_existing"], counts["commits"]) == (1, 1, 2)
    # Another value (the quote still in the unit) is a new version, not a held one.
    feed.write_text("\n".join([episode, _fact("acct:acme", "seats", "30", "30 seats",
                                              source=CALL[0], unit=1)]) + "\n")
    second = json.loads(cli_in_process(home, QUIET, *args).stdout)
    assert (second["facts_created"], second["facts_existing"]) == (1, 0)
    with serving(home, QUIET) as proc:
        m = Memory(proc.url, user="loader")
        versions = m.facts(scope, "acct:acme", history="true").json()["facts"]
        assert sorted(json.dumps(v["value"]) for v in versions) == ['"30"', "30"]
        # Another reader sees no fact (the episodes are the loader's alone).
        assert m.as_user("zed").facts(scope, "acct:acme").json()["facts"] == []
