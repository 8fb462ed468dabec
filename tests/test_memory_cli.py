"""The AmpUp Memory commands against real state, with a real server reading what they wrote;
the MCP tool functions; keys binding the caller's user."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ampup_memory.auth import Caller
from ampup_memory.errors import AmpError
from ampup_memory.memory import mcp_tools
from ampup_memory.memory.facts import PostFact
from ampup_memory.memory.service import MemoryService
from ampup_memory.settings import load_settings
from tests.memory_support import (
    QUIET,
    Memory,
    bar_line,
    cli_in_process,
    new_scope,
    run_cli,
    serving,
)


def test_episode_type_commands(tmp_path: Path) -> None:
    listed = cli_in_process(tmp_path, QUIET, "episode-type", "list")
    assert listed.returncode == 0
    for prefix in ("slack:", "gmail:", "call:", "crm:", "doc:", "mcp:remember_memory:", "close:"):
        assert prefix in listed.stdout
    assert "split: one unit per speaker turn" in listed.stdout  # the split, not only the unit
    assert listed.stdout.count("split: ") == 7
    shown = json.loads(cli_in_process(tmp_path, QUIET, "episode-type", "show", "call").stdout)
    assert shown["unit"] == "turn" and "budget" in shown["predicates"]
    known = "known: slack, gmail, call, crm, doc, mcp, close"
    unknown = cli_in_process(tmp_path, QUIET, "episode-type", "show", "fax")
    assert (unknown.returncode, unknown.stderr) == (2, f"error: no episode type 'fax'; {known}\n")
    # The server's own `schema` type is listed nowhere (nor by GET /episode-types): it is
    # not shown either, by name or by prefix.
    for hidden in ("schema", "schema:sales"):
        done = cli_in_process(tmp_path, QUIET, "episode-type", "show", hidden)
        assert (done.returncode, done.stdout) == (2, ""), done
        assert done.stderr == f"error: no episode type {hidden!r}; {known}\n"


def test_load_keys_a_file_named_in_nfd_by_its_nfc_name(tmp_path: Path) -> None:
    """macOS hands file names back in NFD; a document key must be in NFC (docs/api.md), so
    `load` refused "café.md" as a bad record. The key is the path in NFC: found by the
    name as typed."""
    import unicodedata

    home, corpus, scope = tmp_path / "home", tmp_path / "corpus", new_scope()
    corpus.mkdir()
    nfd = unicodedata.normalize("NFD", "café.md")
    (corpus / nfd).write_text("Menu of the day.\n")
    done = cli_in_process(home, QUIET, "load", str(corpus), "--scope", scope, "--acl", "*")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["created"] == 1
    with serving(home, QUIET) as proc:
        m = Memory(proc.url)
        r = m.http.post("/document", json={"scope": scope, "document": "café.md"})
        assert r.status_code == 200, r.text
        assert r.json()["source"] == "doc:café.md"
        m.close()


def _corpus(root: Path) -> None:
    (root / "notes").mkdir(parents=True)
    for i in range(30):
        (root / f"doc{i}.md").write_text(f"# Doc {i}\n\nFirst paragraph {i}.\n\nSecond.\n")
    lines = [json.dumps({"source": f"slack:C7:{i}", "body": f"erin: update {i}"})
             for i in range(80)]
    lines.append(json.dumps({"source": "wiki:page-1", "body": "Unclaimed sources read as doc."}))
    lines.append("{not json")
    # Parses, but its body cannot be split (a crm: body is a JSON object): refused when
    # its batch is written, alone; the rest of that batch is still written.
    lines.insert(40, json.dumps({"source": "crm:acct-1", "body": "not an object"}))
    (root / "notes" / "feed.jsonl").write_text("\n".join(lines) + "\n")


def test_load_batches_and_rerun_writes_nothing(tmp_path: Path) -> None:
    home, corpus, scope = tmp_path / "home", tmp_path / "corpus", new_scope()
    _corpus(corpus)
    args = ("load", str(corpus), "--scope", scope, "--batch-size", "50", "--user", "loader")
    first = cli_in_process(home, QUIET, *args)
    assert first.returncode == 1, first.stderr  # one bad line is reported, the rest loaded
    counts = json.loads(first.stdout)
    assert counts == {"created": 111, "existing": 0, "conflict": 0, "invalid": 2,
                      "facts_created": 0, "facts_existing": 0, "facts_invalid": 0,
                      "commits": 3, "skipped_files": {}}
    assert "feed.jsonl:83" in first.stderr and "feed.jsonl:41" in first.stderr
    second = json.loads(cli_in_process(home, QUIET, *args).stdout)
    assert second == {"created": 0, "existing": 111, "conflict": 0, "invalid": 2,
                      "facts_created": 0, "facts_existing": 0, "facts_invalid": 0,
                      "commits": 0, "skipped_files": {}}

    with serving(home, QUIET) as proc:
        m = Memory(proc.url, user="loader")  # no --acl: readable by the loader alone
        ledger = m.ledger(scope)
        # the refused crm: line took a slot of batch 2
        assert [c["changes"]["episodes"] for c in reversed(ledger)] == [50, 49, 12]
        assert {c["author"] for c in ledger} == {"loader"}
        doc = m.http.post("/document", json={"scope": scope, "document": "doc7.md"}).json()
        assert doc["source"] == "doc:doc7.md" and len(doc["units"]) == 3
        bad = cli_in_process(home, QUIET, "load", str(corpus), "--scope", "Bad/Scope")
        assert bad.returncode == 2 and "invalid scope" in bad.stderr
        assert bad.stderr.count("\n") == 1, bad.stderr  # one line on stderr, unwrapped


def test_a_record_holding_nul_is_one_invalid_record_and_the_rest_loads(tmp_path: Path) -> None:
    """U+0000 (which no row may hold) in one corpus record stopped the whole `load` at its
    batch's commit (exit 2, nothing of the batch written). It is an invalid record like the
    others now: listed by its file and line and the field that holds it, the rest loaded,
    exit 1. Run as the installed command."""
    home, corpus, scope = tmp_path / "home", tmp_path / "corpus", new_scope()
    corpus.mkdir()
    (corpus / "feed.jsonl").write_text("\n".join([
        json.dumps({"source": "wiki:fine", "body": "A fine note."}),
        json.dumps({"source": "wiki:bad", "body": "A note with a\x00NUL."}),
        json.dumps({"source": "wiki:meta", "body": "Fine text.", "document": "d\x00"}),
        json.dumps({"fact": {"entity": "acct:acme", "predicate": "note", "value": "x",
                             "quote": "A fine\x00", "cites": [{"source": "wiki:fine",
                                                              "unit": 1}]}}),
        json.dumps({"source": "wiki:after", "body": "Loaded after the bad ones."}),
    ]) + "\n")
    (corpus / "nul.txt").write_text("plain text\x00 with a NUL\n")
    done = run_cli(home, QUIET, "load", str(corpus), "--scope", scope, "--acl", "*")
    assert done.returncode == 1, done.stderr
    counts = json.loads(done.stdout)
    assert (counts["created"], counts["invalid"], counts["facts_invalid"]) == (2, 3, 1), counts
    nul = "text may not contain the NUL character (U+0000)"
    for where in ("feed.jsonl:2: body: ", "feed.jsonl:3: document: ",
                  "feed.jsonl:4: fact.quote: ", "nul.txt: "):
        assert f"{where}{nul}" in done.stderr, (where, done.stderr)
    with serving(home, QUIET) as proc:
        listed = Memory(proc.url).http.get("/episodes", params={"scope": scope}).json()
    assert sorted(e["source"] for e in listed["episodes"]) == ["wiki:after", "wiki:fine"]


def test_an_empty_body_line_is_told_as_empty_and_text_stands_in_only_for_a_missing_body(
        tmp_path: Path) -> None:
    """A `.jsonl` line with "body": "" was told "body: Field required" (a line holding
    `text` as well loaded the `text` instead); `text` is read only when `body` is absent."""
    corpus, scope = tmp_path / "corpus", new_scope()
    corpus.mkdir()
    (corpus / "feed.jsonl").write_text("\n".join(json.dumps(line) for line in [
        {"source": "wiki:empty", "body": ""},
        {"source": "wiki:both", "body": "", "text": "Stand-in text."},
        {"source": "wiki:text", "text": "A note given as text."},
    ]) + "\n")
    done = cli_in_process(tmp_path / "home", QUIET, "load", str(corpus), "--scope", scope,
                          "--acl", "*")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["created"] == 1, done.stdout
    short = "body: String should have at least 1 character"
    for line in ("feed.jsonl:1", "feed.jsonl:2"):
        assert f"skipped {line}: {short}" in done.stderr, done.stderr
    assert "Field required" not in done.stderr, done.stderr


def test_a_fact_citing_an_episode_the_loader_may_not_read_says_so(tmp_path: Path) -> None:
    """`load --user dana --acl group:sales` (quickstart's line) with dana in no group: a
    corpus fact citing the corpus's own episode was told "no such episode"."""
    corpus, scope = tmp_path / "corpus", new_scope()
    corpus.mkdir()
    (corpus / "feed.jsonl").write_text("\n".join(json.dumps(line) for line in [
        {"source": "call:7", "body": "Ann: the budget is 80k"},
        {"fact": {"entity": "acct:acme", "predicate": "budget", "value": "80k",
                  "quote": "budget is 80k", "cites": [{"source": "call:7", "unit": 1}]}},
        {"fact": {"entity": "acct:acme", "predicate": "budget", "value": "80k",
                  "quote": "budget is 80k", "cites": [{"episode": "0" * 64, "unit": 1}]}},
    ]) + "\n")
    done = cli_in_process(tmp_path / "home", QUIET, "load", str(corpus), "--scope", scope,
                          "--user", "dana", "--acl", "group:sales")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["facts_invalid"] == 2, done.stdout
    assert ("skipped feed.jsonl:2: fact.cites.0.episode: --user dana may not read episode "
            in done.stderr), done.stderr
    # An episode id the corpus did not write stays unknown, whether held or not.
    assert "skipped feed.jsonl:3: fact.cites.0.episode: no such episode" in done.stderr


def test_a_file_whose_mtime_alone_moved_is_held_and_an_earlier_text_says_so(
        tmp_path: Path) -> None:
    """A text file's occurred_at is its mtime: a checkout or a copy moved it, and `load`
    again told every unchanged file "already loaded with a different occurred_at" (a
    conflict). Now that is `existing`, silently; a file back at an earlier version's text
    is still a conflict, told as that."""
    import os

    home, corpus, scope = tmp_path / "home", tmp_path / "corpus", new_scope()
    corpus.mkdir()
    note, other = corpus / "n.md", corpus / "o.md"
    note.write_text("Version one.\n")
    other.write_text("Other notes.\n")
    args = ("load", str(corpus), "--scope", scope, "--acl", "*")

    def load_at(mtime: int) -> tuple[dict[str, Any], list[str]]:
        for path in (note, other):
            os.utime(path, (mtime, mtime))
        done = cli_in_process(home, QUIET, *args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout), [line for line in done.stderr.splitlines()
                                         if line.startswith("skipped")]

    assert load_at(1_700_000_000)[0]["created"] == 2
    counts, said = load_at(1_700_000_100)  # touched: the same texts
    assert (counts["existing"], counts["conflict"], said) == (2, 0, [])
    note.write_text("Version two.\n")
    assert load_at(1_700_000_200)[0]["created"] == 1
    note.write_text("Version one.\n")  # back to the first text: not the newest version
    counts, said = load_at(1_700_000_300)
    assert (counts["existing"], counts["conflict"]) == (1, 1), counts
    assert len(said) == 1 and said[0].startswith(
        "skipped n.md: the text of an earlier version of document 'n.md' (episode "), said


def test_load_defaults_to_the_loader_and_explains_what_it_leaves_out(tmp_path: Path) -> None:
    home, corpus, scope = tmp_path / "home", tmp_path / "corpus", new_scope()
    (corpus / ".git").mkdir(parents=True)
    (corpus / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (corpus / "a.md").write_text("# Alpha\n\nThe alpha plan.\n")
    (corpus / "b.txt").write_text("Beta notes.\n")
    (corpus / "c.pdf").write_bytes(b"%PDF-1.4 binary")
    (corpus / "d.png").write_bytes(b"\x89PNG")
    (corpus / "e.md").write_text("  \n")
    (corpus / "feed.jsonl").write_text(
        json.dumps({"source": "wiki:pub", "body": "Everyone may read this.", "acl": ["*"],
                    "document": "pub"}) + "\n"
        + json.dumps({"source": "wiki:own", "body": "Only the loader.", "document": "own"})
        + "\n")
    args = ("load", str(corpus), "--scope", scope, "--user", "lena")
    first = cli_in_process(home, QUIET, *args)
    assert first.returncode == 0, first.stderr
    counts = json.loads(first.stdout)
    assert counts["created"] == 4 and counts["skipped_files"] == {
        ".pdf": 1, ".png": 1, "empty": 1, "hidden": 1}
    said = [line for line in first.stderr.splitlines() if line.startswith("skipped 4 files")]
    assert len(said) == 1 and "1 .pdf, 1 .png, 1 empty, 1 hidden" in said[0], first.stderr

    # The same files again for everyone: held episodes are never rewritten, and each one
    # is explained in one plain line.
    again = cli_in_process(home, QUIET, *args, "--acl", "*")
    counts = json.loads(again.stdout)
    assert (counts["created"], counts["existing"], counts["conflict"]) == (0, 1, 3)
    held = [line for line in again.stderr.splitlines() if "already loaded" in line]
    assert len(held) == 3, again.stderr
    assert any(line.startswith("skipped a.md: already loaded with a different acl; the "
                               "episode held (id ") and "kept unchanged" in line
               for line in held), held

    # One file named alone: read if `load` reads its kind (any case), else refused in one
    # line that names the kinds it reads, before anything is opened.
    single = cli_in_process(home, QUIET, "load", str(corpus / "c.pdf"), "--scope", scope)
    assert single.returncode == 2 and single.stdout == "", single
    assert single.stderr.strip().splitlines() == [
        f"error: cannot load {corpus / 'c.pdf'}: load reads .jsonl .markdown .md .ndjson "
        ".text .txt files, or a folder of them"]
    (corpus / "f.TXT").write_text("Loud notes.\n")
    loud = cli_in_process(home, QUIET, "load", str(corpus / "f.TXT"), "--scope", scope,
                          "--user", "lena")
    assert loud.returncode == 0, loud.stderr
    assert json.loads(loud.stdout)["created"] == 1

    with serving(home, QUIET) as proc:
        lena, alice = Memory(proc.url, "lena"), Memory(proc.url, "alice")

        def doc(m: Memory, key: str) -> int:
            r = m.http.post("/document", json={"scope": scope, "document": key})
            return r.status_code

        assert [doc(lena, k) for k in ("a.md", "b.txt", "own", "pub", "f.TXT")] == [200] * 5
        assert [doc(alice, k) for k in ("a.md", "b.txt", "own", "pub")] == [404, 404, 404, 200]


def ledger_first(m: Memory, scope: str) -> str:
    return str(m.ledger(scope)[-1]["id"])


def test_principal_close_and_rebuilt_index_agree(tmp_path: Path) -> None:
    home, scope = tmp_path / "home", new_scope()
    with serving(home, QUIET) as proc:
        m = Memory(proc.url, "frank")
        ep = m.write(scope, "Frank: renewal is due in June.", source="call:9",
                     acl=["group:ops"]).json()["id"]
        assert m.episode(scope, ep).status_code == 404
        assert cli_in_process(home, QUIET, "principal", "set", "frank", "--group", "ops"
                              ).returncode == 0
        assert m.episode(scope, ep).status_code == 200  # next read, no restart
        assert m.fact(scope, "acme", "renewal", "June", "due in June", [(ep, 1)]
                      ).status_code == 201
        closed = cli_in_process(home, QUIET, "close", "--scope", scope, "--entity", "acme",
                         "--predicate", "renewal", "--reason", "Renewed early.",
                         "--user", "frank")
        assert closed.returncode == 0, closed.stderr
        assert m.facts(scope, "acme").json()["facts"] == []
        widened = m.http.put(f"/episodes/{ep}/acl", json={"scope": scope,
                                                          "acl": ["group:ops", "user:gina"]})
        assert widened.status_code == 200, widened.text
        before = (m.ledger(scope), m.facts(scope, "acme", history="true").json(),
                  m.episode(scope, json.loads(closed.stdout)["episode"]).json(),
                  m.episode(scope, ep).json(),
                  m.episode(scope, ep, at_commit=ledger_first(m, scope)).json())

    rebuilt = cli_in_process(home, QUIET, "maintenance", "--rebuild-index")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["index_rebuilt_commits"] == 4
    assert "4/4" in bar_line(rebuilt.stderr, "rebuilding the read index")
    with serving(home, QUIET) as proc:
        m = Memory(proc.url, "frank")
        after = (m.ledger(scope), m.facts(scope, "acme", history="true").json(),
                 m.episode(scope, json.loads(closed.stdout)["episode"]).json(),
                 m.episode(scope, ep).json(),
                 m.episode(scope, ep, at_commit=ledger_first(m, scope)).json())
    assert after == before
    # The current ACL decides every version, an earlier commit's included.
    assert before[3]["acl"] == before[4]["acl"] == ["group:ops", "user:gina"]


def test_close_names_the_value_of_a_many_valued_attribute(tmp_path: Path) -> None:
    """`close --value` ends one value of a many-valued attribute, as POST /close does;
    without it the command says the value is needed and changes nothing."""
    home, scope, deal = tmp_path / "home", new_scope(), "opportunity:acme-renewal"
    with serving(home, QUIET) as proc:
        m = Memory(proc.url, "ivy")
        set_schema = cli_in_process(home, QUIET, "schema", "set", scope, "--builtin", "sales")
        assert set_schema.returncode == 0, set_schema.stderr
        ep = m.write(scope, "Globex is in the running.\n\nInitech bid too.").json()["id"]
        for unit, name in enumerate(["Globex", "Initech"], start=1):
            quote = "Globex is in the running." if unit == 1 else "Initech bid too."
            posted = m.fact(scope, deal, "competitors", name, quote, [(ep, unit)])
            assert posted.status_code == 201, posted.text
        close = ("close", "--scope", scope, "--entity", deal, "--predicate", "competitors",
                 "--reason", "Globex dropped out.", "--user", "ivy")
        unnamed = cli_in_process(home, QUIET, *close)
        named = cli_in_process(home, QUIET, *close, "--value", "Globex")
        assert named.returncode == 0, named.stderr
        current = m.facts(scope, deal).json()["facts"]
    assert unnamed.returncode != 0 and "name the value to close" in unnamed.stderr
    assert json.loads(named.stdout)["closed"]
    assert [f["value"] for f in current] == ["Initech"]


def test_keys_bind_the_user(tmp_path: Path) -> None:
    home, scope = tmp_path / "home", new_scope()
    env = {**QUIET, "AMP_REQUIRE_KEYS": "1"}
    made = cli_in_process(home, env, "keys", "create", "--agent", "agent_x", "--user", "bob")
    key = made.stdout.strip().splitlines()[-1]
    with serving(home, env) as proc:
        m = Memory(proc.url, "mallory")  # a header naming another user than the key's: 401
        keyed = {"X-AMP-Agent-ID": "agent_x", "X-AMP-API-Key": key}
        write = {"scope": scope, "source": "doc:a", "body": "b", "acl": ["user:bob"]}
        assert m.http.post("/episodes", headers=keyed, json=write).status_code == 401
        r = m.http.post("/episodes", headers={**keyed, "X-AmpUp-User": "bob"}, json=write)
        assert r.status_code == 201, r.text
        ledger = m.http.get("/ledger", params={"scope": scope},
                            headers={**keyed, "X-AmpUp-User": "bob"}).json()
        assert ledger["commits"][0]["author"] == "bob"
        assert m.episode(scope, r.json()["id"]).status_code == 401


def test_mcp_tool_functions(tmp_path: Path) -> None:
    svc = MemoryService.open(load_settings(home=tmp_path, embedding_provider="hash"))
    try:
        scope = new_scope()
        gina = Caller(agent_id="desk", user_id="gina")
        kept = mcp_tools.remember_memory(svc, gina, scope=scope, text="Gina prefers tea.",
                                         source="chat-42", document="prefs")
        assert kept["created"] is True
        got = mcp_tools.get_episode(svc, gina, scope=scope, id=kept["id"])
        assert got["source"] == "mcp:remember_memory:gina:chat-42"
        assert got["acl"] == ["user:gina"] and got["units"][0]["kind"] == "note"
        assert mcp_tools.get_episode(svc, gina, scope=scope, document="prefs")["id"] == kept["id"]
        again = mcp_tools.remember_memory(svc, gina, scope=scope, text="Gina prefers tea.",
                                          source="chat-42", document="prefs")
        assert again == {**kept, "created": False}
        other = Caller(agent_id="desk", user_id="hal")
        with pytest.raises(AmpError) as hidden:
            mcp_tools.get_episode(svc, other, scope=scope, id=kept["id"])
        assert hidden.value.status == 404
        svc.post_fact("gina", PostFact.model_validate({
            "scope": scope, "entity": "gina", "predicate": "preference", "value": "tea",
            "quote": "prefers tea", "cites": [{"episode": kept["id"], "unit": 1}]}))
        closed = mcp_tools.close_memory(svc, gina, scope=scope, entity="gina",
                                        predicate="preference", reason="Switched to coffee.")
        assert set(closed) == {"episode", "commit", "closed", "fact"}
        with pytest.raises(AmpError) as both:
            mcp_tools.get_episode(svc, gina, scope=scope, id=kept["id"], document="prefs")
        assert both.value.status == 422
        with pytest.raises(AmpError) as bad:
            mcp_tools.remember_memory(svc, gina, scope="Bad", text="x")
        assert bad.value.status == 422
        with pytest.raises(AmpError) as nobody:
            mcp_tools.remember_memory(svc, Caller(agent_id="desk"), scope=scope, text="x")
        assert nobody.value.status == 401
    finally:
        svc.close()



def test_principal_show_checks_the_id_and_errors_read_as_lines(tmp_path: Path) -> None:
    """`principal show` refuses an id `principal set` refuses (exit 2, one clear line, no
    traceback); a field error the message does not already say is its own `at` line."""
    home = tmp_path / "home"
    for bad in ("", "bad user"):
        shown = cli_in_process(home, QUIET, "principal", "show", bad)
        assert shown.returncode == 2 and shown.stdout == "", shown
        assert shown.stderr.strip().splitlines() == [
            f"error: VALIDATION_ERROR: invalid user id {bad!r}: letters, digits and ._@+- "
            "(max 200, starting with a letter or digit)"]
    ok = cli_in_process(home, QUIET, "principal", "show", "bob")
    assert (ok.returncode, json.loads(ok.stdout)) == (
        0, {"user": "bob", "groups": [], "roles": []})
    closed = cli_in_process(home, QUIET, "close", "--scope", new_scope(), "--entity", " ",
                            "--predicate", "renewal", "--reason", "x", "--user", "frank")
    assert closed.returncode == 2, closed
    assert closed.stderr.strip().splitlines() == [
        "error: VALIDATION_ERROR: Invalid arguments; at --entity: must hold a "
        "character other than white space"]
    # Named as the command takes it, the service's refusals too (was "; at value").
    many = cli_in_process(home, QUIET, "close", "--scope", new_scope(), "--entity", "e",
                          "--predicate", "p", "--reason", "x", "--user", "frank",
                          "--value", "v", "--branch", " ")
    assert many.stderr.strip().splitlines() == [
        "error: VALIDATION_ERROR: branch is blank: name a branch, or leave branch out for "
        "main; at --branch"]


def test_a_field_error_names_its_place_when_the_message_does_not(tmp_path: Path) -> None:
    """A message that is only the field's complaint ("Field required") is told where."""
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"name": "x", "description": "d"}))
    done = cli_in_process(tmp_path / "home", QUIET, "schema", "set", new_scope(), "--file",
                          str(schema))
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [
        "error: VALIDATION_ERROR: Field required; at schema.entities"]


def test_a_schema_file_nested_10000_deep_is_one_error_line(tmp_path: Path) -> None:
    """`schema set --file` of JSON nested 10,000 deep was a RecursionError's traceback
    (found by tools/cli_audit.py); it is read by PUT /schemas' rule, one line."""
    schema = tmp_path / "deep.json"
    schema.write_text("[" * 10_000 + "]" * 10_000)
    done = cli_in_process(tmp_path / "home", QUIET, "schema", "set", new_scope(), "--file",
                          str(schema))
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [
        f"error: {schema}: not JSON (JSON in the file nests deeper than 128 arrays or "
        "objects)"]


def test_an_empty_scope_branch_or_builtin_is_refused_not_read_as_left_out(
        tmp_path: Path) -> None:
    """Found by tools/cli_audit.py: `--scope ""` ran `maintenance` and the advice passes
    over every scope, `extract --branch ""` (or a malformed one) passed for main when no
    model was configured, and `schema show SCOPE --builtin ""` showed SCOPE's schema, each
    exit 0. Each is one error line, exit 2, before anything is done."""
    home, scope = tmp_path / "home", new_scope()
    notes = tmp_path / "notes.md"
    notes.write_text("Acme plan is basic.\n")
    assert cli_in_process(home, QUIET, "load", str(notes), "--scope", scope,
                          "--user", "u").returncode == 0
    for args, says in (
            *((["maintenance", "--scope", ""], "invalid scope ''"),
              *(([*p, "--scope", " "], "invalid scope ' '") for p in (
                  ["advice", "judge"], ["advice", "cluster"], ["advice", "learn"],
                  ["advice", "compile"]))),
            (["extract", "--scope", scope, "--branch", ""], "--branch is blank"),
            (["extract", "--branch", "No Such/Branch"], "invalid branch name"),
            (["schema", "show", scope, "--builtin", ""], "no built-in schema ''")):
        done = cli_in_process(home, QUIET, *args)
        assert done.returncode == 2 and done.stdout == "", (args, done)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("error: ") and says in line, (args, line)


def test_relative_table_uris_open_from_anywhere(tmp_path: Path) -> None:
    """A relative SQLite catalog or index file and a relative file:// warehouse are made
    absolute when read, as the home is: tables loaded from one directory open from any
    other (their metadata locations were relative to the loader's working directory)."""
    import os
    import subprocess
    import sys

    import ampup_memory

    work, scope = tmp_path / "work", new_scope()
    (work / "corpus").mkdir(parents=True)
    (work / "corpus" / "note.md").write_text("The Lisbon office opens in May.\n")
    relative = {"AMPUP_MEMORY_CATALOG_URI": "sqlite:///catalog.db",
                "AMPUP_MEMORY_INDEX_URI": "sqlite:///index.db",
                "AMPUP_MEMORY_WAREHOUSE": "file://warehouse"}
    source = str(Path(ampup_memory.__file__).parents[1])  # this checkout, from any cwd
    done = subprocess.run(
        [sys.executable, "-m", "ampup_memory.cli", "load", "corpus", "--scope", scope,
         "--acl", "*"],
        env={**os.environ, **QUIET, **relative, "PYTHONPATH": source,
             "AMPUP_MEMORY_HOME": str(tmp_path / "home")},
        cwd=work, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["created"] == 1
    absolute = {"AMPUP_MEMORY_CATALOG_URI": f"sqlite:///{work / 'catalog.db'}",
                "AMPUP_MEMORY_INDEX_URI": f"sqlite:///{work / 'index.db'}",
                "AMPUP_MEMORY_WAREHOUSE": f"file://{work / 'warehouse'}"}
    with serving(tmp_path / "home", {**QUIET, **absolute}) as server:  # another cwd
        m = Memory(server.url)
        listed = m.http.get("/episodes", params={"scope": scope}).json()["episodes"]
        assert [e["source"] for e in listed] == ["doc:note.md"]
        m.close()


def test_a_blank_branch_or_commit_option_is_refused_in_one_line(tmp_path: Path) -> None:
    """`--branch ""` (a script's empty variable) loaded into main, and `--from " "` or
    `--at-commit ""` forked main's head, as if the option were left out. Each is one
    error line naming it; left out, main as before."""
    home, scope = tmp_path / "home", new_scope()
    notes = tmp_path / "notes.md"
    notes.write_text("Acme plan is basic.\n")
    for args, says in (
            (["load", str(notes), "--scope", scope, "--user", "u", "--branch", ""],
             "branch is blank"),
            (["schema", "show", scope, "--branch", " "], "branch is blank"),
            (["branch", "create", scope, "b1", "--user", "u", "--from", " "], "from is blank"),
            (["branch", "create", scope, "b1", "--user", "u", "--at-commit", ""],
             "at_commit is blank"),
            (["merge", scope, "b1", "--user", "u", "--into", ""], "into is blank"),
            # Each named as the command takes it, not as the body's field.
            (["merge", scope, "b1", "--user", "u", "--into", ""], "; at --into"),
            (["merge", scope, "b1", "--user", "u", "--into", "b1"], "itself; at FROM"),
            (["schema", "set", scope, "--builtin", "nope"], "at --builtin: Input should be")):
        done = cli_in_process(home, QUIET, *args)
        assert done.returncode == 2 and done.stdout == "", (args, done)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("error: VALIDATION_ERROR: ") and says in line, (args, line)
    # A branch the command needs (merge's FROM, a branch's NAME) cannot be left out: its
    # refusal offered "leave from out for main".
    for args, says in (
            (["merge", scope, " ", "--user", "u"], "from is blank: name a branch; at FROM"),
            (["branch", "create", scope, " ", "--user", "u"], "name is blank: name a branch"),
            (["branch", "delete", scope, "", "--user", "u"], "name is blank: name a branch")):
        done = cli_in_process(home, QUIET, *args)
        assert done.returncode == 2 and done.stdout == "", (args, done)
        assert done.stderr.strip().splitlines() == [f"error: VALIDATION_ERROR: {says}"], args
    assert cli_in_process(home, QUIET, "load", str(notes), "--scope", scope,
                          "--user", "u").returncode == 0
