"""The command line itself, run as a real process: where settings come from, what a command
offers and prints, how fast it answers, and how `serve` starts (or refuses to)."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.memory_support import (
    QUIET,
    Memory,
    bar_line,
    cli_in_process,
    new_scope,
    serving,
)
from tests.server_process import ServerProcess

HEAVY = ("pyiceberg", "pyarrow", "numpy", "wordllama", "fastapi")


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment without any of our settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMP_", "AMPUP_"))}
    return {**env, **extra}


def cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ampup_memory.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def cli_here(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`cli` through the CLI's own entry in this process (`cli_in_process`), with exactly
    ``env`` as the environment: for a command whose output, exit code or error line is
    under test, without a Python start (seconds each under load). `serve` and `mcp` stay
    in `cli`: one that wrongly started would serve, not fail."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        home = env.get("AMPUP_MEMORY_HOME")
        return cli_in_process(Path(home) if home else None, {}, *args)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def shown(env: dict[str, str], *args: str) -> dict[str, Any]:
    """`ampup-memory settings --json`: the effective settings."""
    done = cli_here(env, "settings", "--json", *args)
    assert done.returncode == 0, done.stderr
    values: dict[str, Any] = json.loads(done.stdout)
    return values


# -- A: only the documented environment names count -------------------------------------------
def test_bare_environment_names_are_not_settings(tmp_path: Path) -> None:
    env = clean_env(HOME=str(tmp_path), HOST="10.9.8.7", PORT="1234", ADMIN_TOKEN="t0k3n",
                    STORE_URI="sqlite:////elsewhere.db", REQUIRE_KEYS="true",
                    LOG_LEVEL="debug")
    values = shown(env)
    # The default data folder is ~/.ampup-memory under $HOME, not $HOME itself.
    assert values["home"] == str(tmp_path / ".ampup-memory")
    assert (values["host"], values["port"]) == ("127.0.0.1", 8765)
    assert values["admin_token"] is None and values["store_uri"] is None
    assert values["require_keys"] is False and values["log_level"] == "warning"
    # The documented names do count.
    values = shown(clean_env(HOME=str(tmp_path), AMPUP_MEMORY_PORT="1234"))
    assert values["port"] == 1234


def test_stray_fault_variables_cannot_arm_the_crash_hook(tmp_path: Path) -> None:
    home = tmp_path / "home"
    stray = {"FAULT": "after-rows", "AMPUP_MEMORY_FAULT": "after-rows",
             "AMPUP_MEMORY_TEST_FAULT": "after-rows",  # the test name, but no home named
             "fault": "after-rows"}
    with serving(home, {**QUIET, **stray}) as proc:
        m = Memory(proc.url)
        written = m.write(new_scope(), "alice: still alive", source="slack:C1:1")
        assert written.status_code == 201, written.text
        assert proc.proc is not None and proc.proc.poll() is None
    assert "fault" not in shown(clean_env(**stray, AMPUP_MEMORY_HOME=str(home)))


# -- B: secrets stay hidden; an open bind in trust mode is called out --------------------------
def test_settings_mask_passwords_inside_uris(tmp_path: Path) -> None:
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path),
                    AMP_STORE_URI="postgresql://amp:s3cr3t-pw@db.internal:5432/amp",
                    AMPUP_MEMORY_CATALOG_URI="postgresql://cat:0th3r-pw@db/cat",
                    AMP_ADMIN_TOKEN="admin-s3cr3t")
    table = cli_here(env, "settings")
    assert table.returncode == 0, table.stderr
    values = shown(env)
    for text in (table.stdout, json.dumps(values)):
        assert "s3cr3t-pw" not in text and "0th3r-pw" not in text and "admin-s3cr3t" not in text
    assert values["store_uri"] == "postgresql://amp:•••@db.internal:5432/amp"
    assert values["catalog_uri"] == "postgresql://cat:•••@db/cat"
    assert values["admin_token"] == "•••"
    assert "•••" in table.stdout
    # whole, off a terminal too (`settings | grep store_uri` showed `postgresql://amp:•••@d…`)
    assert "postgresql://amp:•••@db.internal:5432/amp" in table.stdout, table.stdout


def test_settings_json_keeps_numbers_numbers(tmp_path: Path) -> None:
    values = shown(clean_env(AMPUP_MEMORY_HOME=str(tmp_path), AMPUP_MEMORY_RERANK_WEIGHT="0.5"))
    assert values["rerank_weight"] == 0.5 and values["store_pool_wait_seconds"] == 30.0
    assert values["port"] == 8765 and values["extract_model_timeout_seconds"] is None


def _warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("warning:")]


def test_open_bind_in_trust_mode_warns_and_access_log_is_off(tmp_path: Path) -> None:
    trusting = ServerProcess(tmp_path / "a", env=QUIET, args=["--host", "0.0.0.0"]).start(90)
    try:
        assert httpx.get(f"{trusting.url}/amp/v1/health").status_code == 200
    finally:
        trusting.stop()
    log = trusting.log_path.read_text()
    assert len(_warnings(log)) == 1, log
    assert "0.0.0.0" in _warnings(log)[0] and "AMP_REQUIRE_KEYS" in _warnings(log)[0]
    assert "/amp/v1/health" not in log  # the access log is off by default

    keyed = ServerProcess(tmp_path / "b", env=QUIET,
                          args=["--host", "0.0.0.0", "--require-keys"]).start(90)
    keyed.stop()
    assert _warnings(keyed.log_path.read_text()) == []


# -- C: fast, light, per-command help, one-line errors ----------------------------------------
def test_help_and_settings_answer_fast(tmp_path: Path) -> None:
    """Measured as the child's CPU time (what the command costs, whatever else the machine
    runs; the whole stack costs several seconds), with a loose bound on the wall clock."""
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path))
    for args in (["--help"], ["settings"], ["keys", "list"]):
        cli(env, *args)  # warm the file cache
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        done = cli(env, *args)
        took = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        assert done.returncode == 0, done.stderr
        assert cpu < 1.5, f"`ampup-memory {' '.join(args)}` used {cpu:.2f} s of CPU"
        assert took < 10, f"`ampup-memory {' '.join(args)}` took {took:.2f} s"


LIGHT = """
import json, sys
from ampup_memory.cli import run
try:
    run(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)), file=sys.stderr)
"""


def _heavy_after(env: dict[str, str], *args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", LIGHT.format(heavy=HEAVY), *args], env=env,
                          capture_output=True, text=True, timeout=120)
    loaded: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return loaded


def test_light_commands_do_not_import_the_stack(tmp_path: Path) -> None:
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path))
    assert _heavy_after(env, "--help") == []
    assert _heavy_after(env, "settings") == []
    assert _heavy_after(env, "principal", "--help") == []
    # keys open the cell store alone: never the tables, the models, the web stack or the
    # vector code (numpy loads only when a store with vectors opens).
    assert _heavy_after(env, "keys", "list") == []


def test_each_command_offers_only_its_own_settings(tmp_path: Path) -> None:
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path))

    def flags(*command: str) -> str:
        done = cli_here(env, *command, "--help")
        assert done.returncode == 0, done.stderr
        return done.stdout

    mcp = flags("mcp")
    assert "--mcp-agent-id" in mcp and "--store-uri" in mcp
    assert "--host" not in mcp and "--port" not in mcp and "--lifecycle-enabled" not in mcp
    keys = flags("keys", "list")
    assert "--store-uri" in keys and "--home" in keys and "--config" in keys
    for other in ("--embedding-provider", "--port", "--catalog-uri", "--admin-token"):
        assert other not in keys
    serve = flags("serve")
    assert "--host" in serve and "--access-log" in serve and "--mcp-agent-id" not in serve
    assert "--port" not in flags("principal", "show")


def test_a_command_takes_as_flags_the_settings_it_reads(tmp_path: Path) -> None:
    """A setting a command reads from the environment is also its flag (cli.md). `serve`
    runs the extraction and advice timers with the model settings yet refused
    `--model-base-url`; `advice cluster` and `compile` embed with the embedding settings,
    `advice cluster|learn` apply the situation and note rules, `backup` and `workspace
    delete|gc` hold the lease, and every command opening the cell store with its embedder
    sizes its pool, all without the flag. Each flag here is read: a value the
    setting refuses (or an embedder that cannot work) is that setting's one error line."""
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"))
    # `serve` and `mcp` run in their own process: one that wrongly took its flag would
    # serve (a timeout there, not a hung test).
    for args, says in (
            (["serve", "--port", "0", "--model-concurrency", "0"], "model_concurrency"),
            (["serve", "--port", "0", "--lease-seconds", "0"], "lease_seconds"),
            (["serve", "--port", "0", "--advice-trial-share", "2"], "advice_trial_share"),
            (["mcp", "--advice-min-runs-for-note", "0"], "advice_min_runs_for_note")):
        _one_error_line(cli(env, *args, timeout=120), says)
    for args, says in (
            (["advice", "cluster", "--advice-situation-min-similarity", "2"],
             "advice_situation_min_similarity"),
            (["advice", "cluster", "--embedding-provider", "openai-compatible"],
             "AMP_EMBEDDING_BASE_URL"),
            (["advice", "compile", "--embedding-provider", "openai-compatible",
              "--model-base-url", "http://127.0.0.1:1/v1", "--model-name", "m"],
             "AMP_EMBEDDING_BASE_URL"),
            (["advice", "learn", "--advice-promote-after-people", "0"],
             "advice_promote_after_people"),
            (["backup", str(tmp_path / "bk"), "--lease-seconds", "0"], "lease_seconds"),
            (["workspace", "gc", "--lease-seconds", "0"], "lease_seconds"),
            (["workspace", "delete", "ws_0123456789abcdef", "--embedding-provider",
              "openai-compatible"], "AMP_EMBEDDING_BASE_URL"),
            (["index", "rebuild", "--search-ann-connectivity", "1"],
             "search_ann_connectivity"),
            (["lifecycle", "run", "--embedding-provider", "openai-compatible"],
             "AMP_EMBEDDING_BASE_URL"),
            (["purge", "mem_x", "--store-pool-wait-seconds", "0"], "store_pool_wait_seconds")):
        _one_error_line(cli_here(env, *args), says)


def test_snapshot_help_says_it_holds_every_branch(tmp_path: Path) -> None:
    """A snapshot holds main and every live branch (docs/cli.md, test_pins); the help
    once said main only."""
    done = cli_here(clean_env(AMPUP_MEMORY_HOME=str(tmp_path)), "snapshot", "create",
                    "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "every live branch" in text and "main head" not in text


def test_a_number_setting_s_flag_says_number_not_text(tmp_path: Path) -> None:
    """`--rerank-weight TEXT`, `--model-timeout-seconds TEXT`: the help named click's
    type for the float settings (read as text, checked by the setting); it says NUMBER."""
    from ampup_memory.cli import flag_name
    from ampup_memory.settings import Settings

    done = cli_here(clean_env(AMPUP_MEMORY_HOME=str(tmp_path)), "serve", "--help")
    assert done.returncode == 0, done.stderr
    floats = [name for name, info in Settings.model_fields.items()
              if info.annotation in (float, float | None)]
    assert "rerank_weight" in floats and "model_timeout_seconds" in floats
    for name in floats:
        flag = flag_name(name)
        if flag + " " in done.stdout:
            assert f"{flag} NUMBER" in done.stdout, (flag, done.stdout)


def test_command_help_speaks_no_http() -> None:
    """A command's own words (its help and its own options; the settings' flags describe
    the server, so they may) name no status code, route or HTTP: the CLI user sends no
    request."""
    import re

    import click

    from ampup_memory.cli import SETTING_FIELDS, command_tree

    http = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) /|\b[45]\d\d\b|HTTP|\broutes?\b")
    said: list[str] = []
    for path, command in command_tree():
        texts = [command.help or ""] + [
            p.help or "" for p in command.params
            if isinstance(p, click.Option) and p.name not in SETTING_FIELDS]
        said.extend(f"{path}: {t}" for t in texts if http.search(t))
    assert said == []


def test_every_command_and_option_says_what_it_is() -> None:
    """`--help` of every command and subcommand: a one-line description, and help text
    for each option (`close --entity`, `merge --message`, `schema set --branch` had none:
    their help line was the flag alone)."""
    import click

    from ampup_memory.cli import cli as command_line
    from ampup_memory.cli import command_tree

    missing: list[str] = []
    for path, command in [("", command_line), *command_tree()]:
        where = f"ampup-memory {path}".rstrip()
        if not (command.help or "").strip():
            missing.append(f"{where}: no description")
        for param in command.params:
            if isinstance(param, click.Option) and not (param.help or "").strip():
                missing.append(f"{where} {param.opts[0]}: no help")
    assert missing == []


def test_version_says_the_package_version() -> None:
    from importlib.metadata import version

    done = cli_here(clean_env(), "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ampup-memory, version {version('ampup-memory')}"


def test_memstore_names_itself() -> None:
    memstore = Path(sys.executable).parent / "memstore"
    done = subprocess.run([str(memstore), "--help"], capture_output=True, text=True,
                          env=clean_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: memstore "), done.stdout


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path))
    for args, says in ((["serve", "--prot", "9000"], "--prot"),
                       (["load"], "PATH"),
                       (["settings", "--port", "99999"], "port"),
                       (["nonsense"], "nonsense"),
                       # A group without its command named its commands in a one-line
                       # squash of its whole help.
                       ([], "missing a command (see `ampup-memory --help`)"),
                       (["keys"], "keys: missing a command: create, list or revoke"),
                       (["advice"], "missing a command: cluster, compile, judge or learn")):
        # `serve` in its own process: one that wrongly took the flag would serve.
        done = (cli if args[:1] == ["serve"] else cli_here)(env, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
        assert says in done.stderr and done.stdout == ""


def test_a_user_or_acl_no_request_could_name_is_a_usage_error(tmp_path: Path) -> None:
    """`load`, `close`, `branch`, `merge`, `schema set` and `keys create` took any
    `--user` (and `load`/`close` any `--acl` entry): they committed as `bad user!`, bound a
    key to a user no request can be, or skipped every record with a regex in the message.
    Now each refuses before it opens anything, as `pin` and `workspace` already did."""
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), AMP_EMBEDDING_PROVIDER="hash")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("Acme budget is 40k.\n")
    assert cli_here(env, "load", str(corpus), "--scope", "a/b", "--acl", "*").returncode == 0
    assert cli_here(env, "branch", "create", "a/b", "feat", "--user", "u").returncode == 0
    before = json.loads(cli_here(env, "status").stdout)["commits"]
    bad = "bad user!"
    for args in (["load", str(corpus), "--scope", "a/c", "--acl", "*", "--user", bad],
                 ["close", "--scope", "a/b", "--entity", "e", "--predicate", "p",
                  "--reason", "r", "--user", bad],
                 ["branch", "create", "a/b", "f2", "--user", bad],
                 ["branch", "delete", "a/b", "feat", "--user", bad],
                 ["merge", "a/b", "feat", "--user", bad],
                 ["schema", "set", "a/b", "--builtin", "sales", "--user", bad],
                 ["keys", "create", "--agent", "a1", "--user", bad],
                 ["workspace", "list", "--user", bad]):
        done = cli_here(env, *args)
        _one_error_line(done, "--user", "invalid user id")
        assert done.stdout == "", (args, done.stdout)
    for args in (["load", str(corpus), "--scope", "a/c", "--acl", "bad acl"],
                 ["close", "--scope", "a/b", "--entity", "e", "--predicate", "p",
                  "--reason", "r", "--user", "u", "--acl", "nope"]):
        done = cli_here(env, *args)
        _one_error_line(done, "--acl", "invalid ACL entry")
    assert json.loads(cli_here(env, "status").stdout)["commits"] == before
    assert "no API keys" in cli_here(env, "keys", "list").stdout


def _one_error_line(done: subprocess.CompletedProcess[str], *says: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    for text in says:
        assert text in done.stderr, done.stderr


def test_a_home_that_is_a_file_says_so(tmp_path: Path) -> None:
    """A home naming a file, or a folder under one: mkdir's "File exists" / "Not a
    directory" told no one what was wrong, and `doctor` said such a home "does not exist
    and cannot be created in" the file itself."""
    blocker = tmp_path / "notes.txt"
    blocker.write_text("")
    for home, says in ((blocker, "it is a file, not a folder"),
                       (blocker / "sub" / "home", f"{blocker} is a file, not a folder")):
        env = clean_env(AMPUP_MEMORY_HOME=str(home), **QUIET)
        # `status` on a home under a file says there is no home there (it makes none).
        # `keys list` / `keys revoke` said "no API keys" / "no active key" (session 23).
        commands = [["keys", "create", "--agent", "agent_a"], ["keys", "list"],
                    ["keys", "revoke", "k"], ["load", str(tmp_path),
                    "--scope", "acme/sales"]] + [["status"]] * (home == blocker)
        for args in commands:
            _one_error_line(cli_here(env, *args), f"home folder {home}: {says}")
        _one_error_line(cli(env, "serve", "--port", "0", timeout=120), says)
        doctor = cli_here(env, "doctor")
        assert doctor.returncode == 1 and "Traceback" not in doctor.stderr, doctor
        for store in ("AMP store", "catalog", "index"):
            line = next(x for x in doctor.stdout.splitlines() if f"  {store}: " in x)
            assert line.startswith("FAIL") and f"{blocker} is a file, not a folder" in line, line
            assert "does not exist" not in line, line


def test_status_of_a_home_that_does_not_exist_says_so_and_makes_nothing(
        tmp_path: Path) -> None:
    """`status` opened the stores, so on a mistyped home it made the folder and empty
    stores, and reported them as a home of nothing."""
    home = tmp_path / "no-such-home"
    done = cli_here(clean_env(AMPUP_MEMORY_HOME=str(home)), "status")
    _one_error_line(done, f"no AmpUp Memory home at {home}", "ampup-memory serve")
    assert not home.exists()


def test_two_outputs_asked_of_settings_are_a_usage_error(tmp_path: Path) -> None:
    """`settings --json --markdown` printed the Markdown reference and ignored --json."""
    done = cli_here(clean_env(AMPUP_MEMORY_HOME=str(tmp_path)), "settings", "--json",
                    "--markdown")
    _one_error_line(done, "--markdown", "--json")
    assert done.stdout == ""


def test_every_count_option_refuses_zero_and_less_as_one_usage_line(tmp_path: Path) -> None:
    """`extract --limit 0` was taken (and read nothing); `workspace create --max-facts 0`
    reached the workspace rule and answered with its field name, not the flag. Every count
    option has one rule (`cliutil.count_type`): at least 1, said as a usage error."""
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"))
    create = ["workspace", "create", "w", "--ttl", "1h", "--user", "u"]
    for args, flag, rule in ((["extract"], "--limit", "x>=1"),
                             (["extract"], "--batch", "1<=x<=1000"),
                             (["load", str(tmp_path), "--scope", "a/b"], "--batch-size",
                              "x>=1"),
                             (create, "--max-scopes", "x>=1"),
                             (create, "--max-bytes", "x>=1")):
        for value in ("0", "-1"):
            _one_error_line(cli_here(env, *args, flag, value), f"'{flag}'", rule)


def test_an_error_before_the_first_bar_is_still_one_line(tmp_path: Path) -> None:
    """Off a terminal a progress display that ended before its first bar printed an empty
    line: `maintenance --scope BAD` and `restore` of a folder that is no backup wrote a
    blank line above their one error line."""
    home = tmp_path / "home"
    env = clean_env(AMPUP_MEMORY_HOME=str(home), AMP_EMBEDDING_PROVIDER="hash")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("hello\n")
    assert cli_here(env, "load", str(corpus), "--scope", "a/b", "--acl", "*").returncode == 0
    _one_error_line(cli_here(env, "maintenance", "--scope", "BAD"), "invalid scope")
    _one_error_line(cli_here(clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "fresh")), "restore",
                             str(corpus)), "not a backup")
    # Refused before any work, with a bar already drawn: no `backing up 0/9` line above.
    _one_error_line(cli_here(env, "backup", str(corpus)), "is not empty")
    assert cli_here(env, "backup", str(tmp_path / "bk")).returncode == 0
    _one_error_line(cli_here(env, "restore", str(tmp_path / "bk")), "fresh home only")


def test_an_unknown_scope_is_one_error_line_naming_it(tmp_path: Path) -> None:
    """`--scope` of a pass names a scope of this home: one it never held is one error line
    naming it, exit 2 (`advice cluster` reported `no/such` as processed, exit 0; the other
    passes said nothing). With a model configured or not: the scope is looked up first."""
    home = tmp_path / "home"
    env = clean_env(AMPUP_MEMORY_HOME=str(home), AMP_EMBEDDING_PROVIDER="hash",
                    AMPUP_MEMORY_MODEL_BASE_URL="http://127.0.0.1:9/v1",
                    AMPUP_MEMORY_MODEL="nowhere", AMPUP_MEMORY_MODEL_RETRIES="0")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("hello\n")
    assert cli_here(env, "load", str(corpus), "--scope", "a/b", "--acl", "*").returncode == 0
    for args in (["advice", "cluster"], ["advice", "judge"], ["advice", "learn"],
                 ["advice", "compile"], ["maintenance"], ["extract"],
                 ["index", "rebuild"]):  # rebuilt nothing, exit 0
        done = cli_here(env, *args, "--scope", "no/such")
        _one_error_line(done, "NOT_FOUND", "no/such")
        assert done.stdout == "", (args, done.stdout)
    known = cli_here(env, "advice", "cluster", "--scope", "a/b")
    assert known.returncode == 0, known.stderr
    assert json.loads(known.stdout)["scopes"][0]["scope"] == "a/b"


def test_a_home_that_cannot_be_made_or_opened_is_one_line(tmp_path: Path) -> None:
    """A home under a file (as a read-only disk or a wrong path gives it), or a store file
    that is not one: every kind of command says so in one line, exit 2."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = clean_env(AMPUP_MEMORY_HOME=str(blocker / "home"), **QUIET)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("hello\n")
    for args in (["keys", "create", "--agent", "agent_a"], ["status"],
                 ["principal", "show", "alice"], ["load", str(corpus), "--scope", "acme/sales"]):
        _one_error_line(cli_here(env, *args), str(blocker / "home"))
    _one_error_line(cli(env, "serve", "--port", "0", timeout=120), str(blocker / "home"))
    # A listing makes nothing, but a file in the home's way is said as such, not taken
    # for a home that holds no keys yet (session 23).
    _one_error_line(cli_here(env, "keys", "list"), str(blocker), "is a file, not a folder")

    for store, args in (("amp.db", ["keys", "list"]), ("amp.db", ["status"]),
                        ("index.db", ["principal", "show", "alice"])):
        home = tmp_path / f"home-{store}-{args[0]}"
        (home / store).mkdir(parents=True)  # a folder where the SQLite file belongs
        _one_error_line(cli_here(clean_env(AMPUP_MEMORY_HOME=str(home), **QUIET), *args),
                        str(home / store))


def test_settings_that_cannot_work_and_a_database_down_are_one_line(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("hello\n")
    # The embedder is built inside the command (after the stores opened).
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"),
                    AMP_EMBEDDING_PROVIDER="openai-compatible")
    for args in (["load", str(corpus), "--scope", "acme/sales"], ["index", "rebuild"]):
        _one_error_line(cli_here(env, *args), "AMP_EMBEDDING_BASE_URL")
    # Nothing listens on port 1: the index database is down.
    down = cli_here(clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home2"), **QUIET,
                              AMPUP_MEMORY_INDEX_URI="postgresql://amp:s3cr3t-pw@127.0.0.1:1/amp"),
                    "principal", "show", "alice")
    _one_error_line(down, "127.0.0.1")
    assert "s3cr3t-pw" not in down.stderr


def test_the_settings_take_exactly_the_schemes_the_stores_open() -> None:
    """`settings.DATABASE_SCHEMES` (checked where settings are read, kept apart so `--help`
    imports no store) is a second list of the cell store registry's schemes: the two agree,
    and the tables open each of them."""
    from ampup_memory.amp.store.registry import STORE_LOADERS
    from ampup_memory.memory.tables import sqlalchemy_url
    from ampup_memory.settings import DATABASE_SCHEMES

    assert sorted(DATABASE_SCHEMES) == sorted(STORE_LOADERS)
    for scheme in DATABASE_SCHEMES:
        assert sqlalchemy_url(f"{scheme}:///x" if scheme == "sqlite" else f"{scheme}://h/d",
                              setting="catalog_uri")


def test_an_infinite_or_nan_number_setting_is_refused_in_one_line(tmp_path: Path) -> None:
    """`AMPUP_MEMORY_MODEL_TIMEOUT_SECONDS=inf` (or `1e400`, which reads as inf) was taken:
    a model call that may wait for ever. Every number setting is finite."""
    base = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    for name, field, value in (
            ("AMPUP_MEMORY_MODEL_TIMEOUT_SECONDS", "model_timeout_seconds", "inf"),
            ("AMPUP_MEMORY_MODEL_TIMEOUT_SECONDS", "model_timeout_seconds", "1e400"),
            ("AMPUP_MEMORY_RERANK_WEIGHT", "rerank_weight", "nan")):
        done = cli_here({**base, name: value}, "settings")
        _one_error_line(done, f"invalid setting {field} ({name})", "finite number")
    assert shown({**base, "AMPUP_MEMORY_MODEL_TIMEOUT_SECONDS": "2.5"})[
        "model_timeout_seconds"] == 2.5


def test_a_control_character_in_a_model_setting_stops_the_start_in_one_line(
        tmp_path: Path) -> None:
    """A model name, base URL or key holding a NUL or another control character failed only
    at the first model call (an extraction pass "cannot connect"). It is refused where the
    settings are read, by every command, in one line naming the setting; a key is not
    shown."""
    base = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    for name, value, field in (
            ("AMPUP_MEMORY_MODEL", "qwen\x01:7b", "model_name"),
            ("AMPUP_MEMORY_EXTRACT_MODEL_BASE_URL", "http://127.0.0.1:1/v1\n",
             "extract_model_base_url"),
            ("AMPUP_MEMORY_JUDGE_MODEL_API_KEY", "sk-s3cr3t\x7f", "judge_model_api_key")):
        for args in (["extract"], ["serve"]):
            done = (cli_here({**base, name: value}, *args) if args == ["extract"]
                    else cli({**base, name: value}, *args, timeout=120))
            _one_error_line(done, f"invalid setting {field} ({name})")
            assert "control character" in done.stderr, done.stderr
            assert "s3cr3t" not in done.stderr and "Traceback" not in done.stderr
    config = tmp_path / "config.toml"
    config.write_text('model_name = "qwen\\u0000"\n')
    done = cli_here(base, "settings", "--config", str(config))
    _one_error_line(done, "invalid setting model_name (AMPUP_MEMORY_MODEL)")
    assert "U+0000" in done.stderr, done.stderr
    # Printable text is a setting as before.
    config.write_text('model_name = "qwen2.5:7b-instruct é"\n')
    assert shown(base, "--config", str(config))["model_name"] == "qwen2.5:7b-instruct é"


def test_a_wordllama_width_without_its_weights_is_a_setting_error(tmp_path: Path) -> None:
    """WordLlama's wheel holds its 256-dimension weights alone; another width named a
    missing weights file and was said as a "storage error" (crash31)."""
    base = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **{
        **QUIET, "AMP_EMBEDDING_PROVIDER": "wordllama", "AMP_EMBEDDING_DIMENSIONS": "128"})
    done = cli(base, "serve", "--port", "0", timeout=120)
    _one_error_line(done, "AMP_EMBEDDING_DIMENSIONS=128: the installed WordLlama has "
                    "weights for 256 dimensions only")
    assert "storage" not in done.stderr, done.stderr


def test_an_endpoint_that_is_no_http_url_stops_the_start_in_one_line(
        tmp_path: Path) -> None:
    """A model or embedding endpoint without its scheme (`localhost:11434/v1`), of
    another scheme or with no host was taken, and failed only at the first model call,
    minutes into `serve`. Every command refuses it where the settings are read, in one
    line naming the setting and the form it takes."""
    base = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    for name, value, field in (
            ("AMPUP_MEMORY_MODEL_BASE_URL", "localhost:11434/v1", "model_base_url"),
            ("AMPUP_MEMORY_JUDGE_MODEL_BASE_URL", "ftp://models/v1", "judge_model_base_url"),
            ("AMP_EMBEDDING_BASE_URL", "http://:8080/v1", "embedding_base_url"),
            ("AMPUP_MEMORY_EXTRACT_MODEL_BASE_URL", "http://h:port/v1",
             "extract_model_base_url")):
        for args in (["settings"], ["serve", "--port", "0"]):
            done = (cli_here({**base, name: value}, *args) if args == ["settings"]
                    else cli({**base, name: value}, *args, timeout=120))
            _one_error_line(done, f"invalid setting {field} ({name}): is not", repr(value))
            assert "http://" in done.stderr and "Traceback" not in done.stderr, done.stderr
    # A query or fragment: each request's path went into it (`?api-version=1/chat/…`).
    for name, value in (("AMPUP_MEMORY_MODEL_BASE_URL", "http://h/v1?api-version=1"),
                        ("AMP_EMBEDDING_BASE_URL", "http://h/v1#x")):
        _one_error_line(cli_here({**base, name: value}, "settings"),
                        f"({name}): holds a query or fragment", "http://localhost:11434/v1")
    # Either scheme, any case, with a port or none, is an endpoint as before.
    for value in ("http://127.0.0.1:11434/v1", "HTTPS://api.example.com/v1"):
        assert shown({**base, "AMPUP_MEMORY_MODEL_BASE_URL": value})["model_base_url"] == value


def test_a_database_uri_of_the_wrong_form_is_one_line_naming_its_setting(
        tmp_path: Path) -> None:
    """`sqlite://index.db` (two slashes) was a traceback in the first command that opened
    the index or catalog; a bare path said `got /var/lib/index.db://`, or, for the store,
    was taken by every command that did not open it. Each is refused where the settings
    are read, in one line naming the setting and the form it takes, a password masked."""
    base = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    for name, field in (("AMPUP_MEMORY_INDEX_URI", "index_uri"),
                        ("AMPUP_MEMORY_CATALOG_URI", "catalog_uri"),
                        ("AMP_STORE_URI", "store_uri")):
        for value, says in (("sqlite://index.db", "three slashes"),
                            ("/var/lib/ampup/x.db", "sqlite:////var/lib/ampup/x.db"),
                            ("mysql://u:Sekr1t-pw@db/x", "postgresql://")):
            for args in (["principal", "show", "alice"], ["keys", "list"]):
                done = cli_here({**base, name: value}, *args)
                _one_error_line(done, f"invalid setting {field} ({name})", says)
                assert "Sekr1t-pw" not in done.stderr, done.stderr
    # The forms each store opens are settings as before.
    for value in ("sqlite:///rel.db", "sqlite:///:memory:", "postgres://u:pw@db/x",
                  "postgresql+psycopg://db/x"):
        assert shown({**base, "AMPUP_MEMORY_INDEX_URI": value})["index_uri"]


def test_allowed_origins_and_hosts_of_the_wrong_form_are_one_line(tmp_path: Path) -> None:
    """An origin is matched whole: `app.example.com`, `*` or a page's URL never equals
    what a browser sends, so every call from that site was refused (403) while the
    setting looked right; a URL among the allowed hosts never equals a `Host`. `serve`
    refuses both at start, in one line naming the setting and the form it takes."""
    base = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    for name, value, says in (
            ("AMPUP_MEMORY_ALLOWED_ORIGINS", "app.example.com", "scheme://host[:port]"),
            ("AMPUP_MEMORY_ALLOWED_ORIGINS", "https://ok.example.com, *", "'*' is no origin"),
            ("AMPUP_MEMORY_ALLOWED_ORIGINS", "https://app.example.com/inbox", "no path"),
            ("AMPUP_MEMORY_ALLOWED_HOSTS", "https://memory.example.com", "names alone")):
        done = cli({**base, name: value}, "serve", "--port", "0", timeout=120)
        _one_error_line(done, f"({name}): ", says)
    # Origins (a trailing slash, a port, any scheme) and host names (a port) as before.
    assert shown({**base, "AMPUP_MEMORY_ALLOWED_ORIGINS":
                  "https://app.example.com/, http://localhost:3000, chrome-extension://abc",
                  "AMPUP_MEMORY_ALLOWED_HOSTS": "memory.example.com, ampup:8765"})


def test_a_short_password_is_masked_where_it_stands_not_in_every_word(tmp_path: Path) -> None:
    """A password of one letter was replaced everywhere in the driver's message: `status`
    and `doctor` said `(•••syco•••g.O•••erationalError)` and `•••ort 1 failed`. It is
    masked where the message quotes it, and the rest reads as the driver wrote it."""
    for name in ("AMPUP_MEMORY_CATALOG_URI", "AMP_STORE_URI"):
        (tmp_path / name).mkdir()  # a home that exists: `status` refuses a missing one
        env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / name), **QUIET,
                        **{name: "postgresql://u:p@127.0.0.1:1/x"})
        for args in (["status"], ["doctor"]):
            done = cli_here(env, *args)
            said = done.stdout + done.stderr
            assert done.returncode in (1, 2) and "Traceback" not in said, said
            assert "port 1 failed" in said and "•••ort" not in said, said
            assert "u:p@" not in said, said
            # The cell store's place reads as words (`x on 127.0.0.1:1`), not a dict.
            assert "{'host'" not in said and "Is the server running" not in said.split(
                "port 1 failed", 1)[0], said


def test_a_catalog_or_index_that_does_not_connect_is_named_in_the_drivers_words(
        tmp_path: Path) -> None:
    """A PostgreSQL catalog that does not connect: the line carried SQLAlchemy's wrapping,
    `(psycopg.OperationalError) …` and `(Background on this error at:
    https://sqlalche.me/…)`, around what was wrong; a read index that does not connect
    was a bare `database error: …`, naming none of the three URIs. Each is named, in the
    driver's words, the password masked."""
    for name, says in (("AMPUP_MEMORY_CATALOG_URI", "cannot open the Iceberg catalog"),
                       ("AMPUP_MEMORY_INDEX_URI", "cannot open the read index")):
        env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET,
                        **{name: "postgresql://loader:Sekr1t-pw@127.0.0.1:1/x"})
        for args in (["load", str(tmp_path), "--scope", "acme/sales"],
                     ["principal", "show", "alice"]):
            done = cli_here(env, *args)
            _one_error_line(done, says, "loader:•••@127.0.0.1:1/x", "port 1 failed")
            assert "sqlalche.me" not in done.stderr, done.stderr
            assert "OperationalError" not in done.stderr, done.stderr
            assert "Sekr1t-pw" not in done.stderr, done.stderr


def _on_a_terminal(env: dict[str, str], *args: str) -> str:
    """What the command writes when stdout and stderr are one terminal (a pty), raw."""
    import pty

    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "ampup_memory.cli", *args],
                                env={**env, "TERM": "xterm", "COLUMNS": "200"},
                                stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
        os.close(follower)
        said = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the command ended: the terminal is gone
                break
            if not chunk:
                break
            said += chunk
        assert proc.wait(timeout=300) in (0, 1), said
    finally:
        os.close(leader)
    return said.decode(errors="replace")


def test_a_line_printed_under_a_progress_bar_starts_its_own_line(tmp_path: Path) -> None:
    """On a terminal `doctor`'s first result was written after its bar's text, on the
    bar's line (`checking AMP store ━━━ 0/4 0:00:01ok    AMP store: …`): each line now
    starts on a line of its own (after a line break, or after the bar's line is erased)."""
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    said = _on_a_terminal(env, "doctor")
    assert "━" in said, said  # a bar was drawn: this is the terminal case
    for name in ("AMP store", "catalog", "warehouse", "index"):
        at = said.index(f"ok    {name}: ")
        assert said[:at].endswith(("\n", "\x1b[2K")), repr(said[max(0, at - 80):at + 30])


def test_a_progress_bar_off_a_terminal_is_one_plain_line(tmp_path: Path) -> None:
    """Off a terminal (a log, a pipe) a bar's last state was forty bar glyphs and its
    count; it is one plain line, what it did and how far: `index rebuild` twice, on an
    empty home and after a load, as a cron job's log would hold it."""
    import re

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("Acme budget is 40k.\n")
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    assert cli_here(env, "load", str(corpus), "--scope", "acme/sales").returncode == 0
    done = cli_here(env, "index", "rebuild")
    assert done.returncode == 0, done.stderr
    assert "━" not in done.stderr, done.stderr
    for description in ("rebuilding the read index", "indexing commits"):
        assert re.fullmatch(rf"{description}: 1/1 \d+:\d\d:\d\d",
                            bar_line(done.stderr, description)), done.stderr
    # A pass that learns its size as it goes ended at `1/?`; done, it is `1/1`.
    clustered = cli_here(env, "advice", "cluster")
    assert clustered.returncode == 0, clustered.stderr
    assert re.fullmatch(r"clustering scopes: 1/1 \d+:\d\d:\d\d",
                        bar_line(clustered.stderr, "clustering scopes")), clustered.stderr


def test_json_output_is_unicode(tmp_path: Path) -> None:
    done = cli_here(clean_env(AMPUP_MEMORY_HOME=str(tmp_path)), "episode-type", "show",
                    "call")
    assert done.returncode == 0, done.stderr
    assert "…" in done.stdout and "\\u2026" not in done.stdout
    assert "…" in json.loads(done.stdout)["split"]


def test_a_host_given_as_a_url_or_with_its_port_is_one_line(tmp_path: Path) -> None:
    """`--host http://127.0.0.1` or `--host 127.0.0.1:9000` was bound as given: "Name or
    service not known", which says nothing of what to type. Each names the form it takes
    and where the port goes."""
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    for host, says in (("http://127.0.0.1", "give the address alone"),
                       ("127.0.0.1:9000", "the port as AMPUP_MEMORY_PORT or --port")):
        done = cli(env, "serve", "--host", host, "--port", "0", timeout=120)
        _one_error_line(done, "invalid setting host (--host)", says)
    # IPv6 addresses, bracketed or not, are hosts as before.
    for host in ("::1", "[::1]"):
        assert shown({**env, "AMPUP_MEMORY_HOST": host})["host"] == host


def test_a_setting_error_names_where_its_value_came_from(tmp_path: Path) -> None:
    """A value from an environment variable ended "(see `ampup-memory doctor --help`)",
    pointing at a flag the user never gave. The line names the variable and
    docs/settings.md when the environment set it, the flag (and `--help`) when the flag
    did; a rule across settings never shows the values it read (an admin token among
    them was printed whole)."""
    base = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    by_env = cli_here({**base, "AMPUP_MEMORY_MODEL_BASE_URL": "localhost:11434/v1"}, "doctor")
    _one_error_line(by_env, "invalid setting model_base_url (AMPUP_MEMORY_MODEL_BASE_URL)",
                    "from the environment; see docs/settings.md")
    assert "--help" not in by_env.stderr and "--model-base-url" not in by_env.stderr
    by_flag = cli_here(base, "doctor", "--model-base-url", "localhost:11434/v1")
    _one_error_line(by_flag, "invalid setting model_base_url (--model-base-url)",
                    "(see `ampup-memory doctor --help`)")
    assert "AMPUP_MEMORY_MODEL_BASE_URL" not in by_flag.stderr
    assert "environment" not in by_flag.stderr
    # Both wrong: each named by its source; no flag's --help for the variable's value.
    both = cli_here({**base, "AMPUP_MEMORY_PORT": "http"}, "doctor", "--model-timeout-seconds",
                    "-1")
    _one_error_line(both, "port (AMPUP_MEMORY_PORT)", "model_timeout_seconds "
                    "(--model-timeout-seconds)")
    assert "--help" not in both.stderr
    missing = str(tmp_path / "nope.toml")
    named = cli_here({**base, "AMPUP_MEMORY_CONFIG": missing}, "settings")
    _one_error_line(named, f"config file {missing} does not exist (named by "
                    "AMPUP_MEMORY_CONFIG in the environment; see docs/settings.md)")
    flagged = cli_here(base, "settings", "--config", missing)
    _one_error_line(flagged, "does not exist (see `ampup-memory settings --help`)")
    across = cli_here({**base, "AMP_ADMIN_TOKEN": "t0k3n-never-shown",
                       "AMPUP_MEMORY_SEARCH_ANN_CONNECTIVITY": "64",
                       "AMPUP_MEMORY_SEARCH_ANN_EXPANSION_ADD": "100"}, "settings")
    _one_error_line(across, "invalid settings: AMPUP_MEMORY_SEARCH_ANN_EXPANSION_ADD must be "
                    "at least twice", "see docs/settings.md")
    assert "t0k3n" not in across.stderr and "--help" not in across.stderr


def test_an_s3_endpoint_that_is_no_server_url_is_one_line(tmp_path: Path) -> None:
    """`AMPUP_MEMORY_S3_ENDPOINT` was taken as given and failed at the first table write,
    as pyarrow's S3 client read it: `minio:9000` as https (a TLS error against an http
    server), `HTTP://` as a host name, a path as the bucket ("NoSuchBucket"), a query or
    fragment as "not a valid URI", `user:pw@` as a host to resolve. Each is refused where
    the settings are read, naming the form it takes; a password is not shown."""
    base = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    name = "AMPUP_MEMORY_S3_ENDPOINT"
    for value, says in (("minio:9000", "http://minio:9000"),
                        ("ftp://minio:9000", "http:// or https://"),
                        ("http://:9000", "with a host"),
                        ("http://minio:port", "is not a URL"),
                        ("http://minio:9000/bucket", "the bucket and prefix go in "
                         "AMPUP_MEMORY_WAREHOUSE"),
                        ("http://minio:9000?region=x", "holds a query or fragment"),
                        ("http://minio:9000#", "holds a query or fragment"),
                        ("http://key:Sekr1t-pw@minio:9000", "AMPUP_MEMORY_S3_ACCESS_KEY_ID")):
        done = cli_here({**base, name: value}, "settings")
        _one_error_line(done, f"invalid setting s3_endpoint ({name})", says)
        assert "Sekr1t-pw" not in done.stderr, done.stderr
    # A server alone, either scheme, a trailing slash or an IPv6 address, is an endpoint as
    # before; an upper-case scheme is written as pyarrow reads it.
    for value, kept in (("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
                        ("https://s3.example.com/", "https://s3.example.com/"),
                        ("http://[::1]:9000", "http://[::1]:9000"),
                        ("HTTP://minio:9000", "http://minio:9000")):
        assert shown({**base, name: value})["s3_endpoint"] == kept


def test_a_warehouse_of_another_form_is_one_line_where_settings_are_read(
        tmp_path: Path) -> None:
    """A warehouse that is neither file:///path nor s3://bucket/prefix was refused only by
    the commands that open the tables (`settings` and `keys list` took it), and a query,
    a fragment or `user:pw@` in an s3:// location was taken as part of the bucket. Each
    is refused where the settings are read, naming the form; a password is not shown."""
    base = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    name = "AMPUP_MEMORY_WAREHOUSE"
    for value, says in (("/var/lib/wh", "for a folder, file:///var/lib/wh"),
                        ("gs://bucket/wh", "must be file:///path or s3://bucket/prefix"),
                        ("s3:///prefix", "names no bucket"),
                        ("file://", "names no folder"),
                        ("s3://bucket/wh?versionId=1", "holds a query or fragment"),
                        ("s3://key:Sekr1t-pw@bucket/wh", "AMPUP_MEMORY_S3_ACCESS_KEY_ID")):
        for args in (["settings"], ["keys", "list"]):
            done = cli_here({**base, name: value}, *args)
            _one_error_line(done, f"invalid setting warehouse ({name})", says)
            assert "Sekr1t-pw" not in done.stderr, done.stderr
    for value in ("s3://bucket", "s3a://bucket/wh", f"file://{tmp_path}/wh"):
        assert shown({**base, name: value})["warehouse"] == value


def test_the_banner_of_an_ipv6_bind_is_a_url_a_browser_takes(tmp_path: Path) -> None:
    """`serve --host ::1` said `AmpUp Memory on http://::1:8765`, which no browser or curl
    opens; the address goes in brackets."""
    import pytest

    with socket.socket(socket.AF_INET6) as probe:
        try:
            probe.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback on this machine")
        port = probe.getsockname()[1]
    server = ServerProcess(tmp_path / "home", env=QUIET, port=port,
                           command=[sys.executable, "-m", "ampup_memory.cli", "serve",
                                    "--host", "::1", "--port", str(port)])
    server.url = f"http://[::1]:{port}"
    with server:
        said = server.log_path.read_text()
        assert f"AmpUp Memory on http://[::1]:{port} " in said, said
        assert httpx.get(f"http://[::1]:{port}/amp/v1/health").status_code == 200


def test_a_bad_grace_period_names_its_option(tmp_path: Path) -> None:
    """`maintenance --orphan-grace 5` said `Invalid value: '5': …`, naming no option."""
    done = cli_here(clean_env(AMPUP_MEMORY_HOME=str(tmp_path), **QUIET),
                    "maintenance", "--orphan-grace", "5")
    _one_error_line(done, "Invalid value for '--orphan-grace': '5'")


def test_taken_port_fails_fast_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        done = cli(clean_env(AMPUP_MEMORY_HOME=str(home), **QUIET), "serve", "--port",
                   str(port), timeout=120)
        took = time.monotonic() - started
    assert done.returncode == 2, done.stderr  # the documented exit code of a CLI error
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert f"127.0.0.1:{port}" in done.stderr and "in use" in done.stderr
    assert "AmpUp Memory on" not in done.stdout + done.stderr  # no banner, no start-up
    assert not (home / "amp.db").exists() and not (home / "catalog.db").exists()
    assert took < 10, f"took {took:.1f} s to report a taken port"


# -- E: config file, precedence, logging ------------------------------------------------------
def test_flags_over_environment_over_config_file_over_defaults(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        'port = 1111\nretention_days = 45\nlog_level = "info"\n'
        'store_uri = "postgresql://me:filepw@db/amp"\n')
    base = clean_env(AMPUP_MEMORY_HOME=str(home))

    defaults = shown(clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "empty")))
    assert (defaults["port"], defaults["retention_days"]) == (8765, 30)

    from_file = shown(base)
    assert (from_file["port"], from_file["retention_days"], from_file["log_level"]) == (
        1111, 45, "info")
    assert from_file["store_uri"] == "postgresql://me:•••@db/amp"

    env = {**base, "AMPUP_MEMORY_PORT": "2222"}
    from_env = shown(env)
    assert (from_env["port"], from_env["retention_days"]) == (2222, 45)  # file still counts

    from_flag = shown(env, "--port", "3333", "--retention-days", "60")
    assert (from_flag["port"], from_flag["retention_days"]) == (3333, 60)

    # Another file by flag or environment (it replaces the home folder's file).
    other = tmp_path / "other.toml"
    other.write_text("port = 4444\n")
    assert shown(base, "--config", str(other))["port"] == 4444
    by_env = shown({**base, "AMPUP_MEMORY_CONFIG": str(other)})
    assert (by_env["port"], by_env["retention_days"]) == (4444, 30)
    assert shown({**base, "AMPUP_MEMORY_CONFIG": str(other), "AMPUP_MEMORY_PORT": "5"},
                 "--port", "6")["port"] == 6

    # A typo, a bad value, a bad file or a missing named file: one line, exit 2.
    for text, says in (("prot = 1\n", f"{other}: unknown setting(s) 'prot' (did you mean "
                                     "'port'?)"),
                       ("AMPUP_MEMORY_PORT = 1\n", "'AMPUP_MEMORY_PORT' (the file takes names: "
                                                  "'port')"),
                       ("port = \n", f"config file {other}: "),
                       ("fault = 'after-rows'\n", "unknown setting(s) 'fault'"),
                       # The file named: its reader set no AMPUP_MEMORY_PORT.
                       ("port = 99999\n", f"config file {other}: invalid setting port")):
        other.write_text(text)
        done = cli_here(base, "settings", "--config", str(other))
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert says in done.stderr, done.stderr
    missing = cli_here(base, "settings", "--config", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    # A folder named as the file exists: said so, not "does not exist".
    folder = cli_here(base, "settings", "--config", str(tmp_path))
    assert folder.returncode == 2 and f"config file {tmp_path} is a folder" in folder.stderr


def test_json_logs_with_access_log(tmp_path: Path) -> None:
    env = {**QUIET, "AMPUP_MEMORY_LOG_JSON": "true", "AMPUP_MEMORY_ACCESS_LOG": "true",
           "AMPUP_MEMORY_LOG_LEVEL": "info"}
    proc = ServerProcess(tmp_path / "home", env=env, args=["--host", "0.0.0.0"]).start(90)
    try:
        assert httpx.get(f"{proc.url}/amp/v1/health?probe=1").status_code == 200
    finally:
        proc.stop()
    # Every line is JSON, the start line too (it was plain text: a log shipper parsing
    # JSON got one line it could not read at every start).
    lines = [json.loads(line) for line in proc.log_path.read_text().splitlines() if line]
    assert any(x["message"].startswith("AmpUp Memory on http://") and x["level"] == "info"
               for x in lines), lines
    assert any(x["message"].startswith("serving on 0.0.0.0 without API keys")
               and x["level"] == "warning" for x in lines), lines
    access = [x for x in lines if x["logger"] == "uvicorn.access"]
    assert any("GET /amp/v1/health?probe=1" in x["message"] and x["level"] == "info"
               for x in access), lines
    assert any(x["logger"] == "uvicorn.error" and x["level"] == "info" for x in lines), lines
    assert all({"time", "level", "logger", "message"} <= set(x) for x in lines)
    assert all(x["time"].endswith("Z") for x in lines), lines  # as every answer spells it


def test_a_caller_cannot_forge_or_colour_a_log_line(tmp_path: Path) -> None:
    """A caller's text reaches log lines (the access log's client, which uvicorn takes from
    X-Forwarded-For on a connection from 127.0.0.1; a decoded path in a debug line): CR, LF
    and ESC are written as escapes, and a forwarded client that is no address is not
    written at all."""
    env = {**QUIET, "AMPUP_MEMORY_ACCESS_LOG": "true", "AMPUP_MEMORY_LOG_LEVEL": "debug"}
    proc = ServerProcess(tmp_path / "home", env=env).start(90)
    forged = '6.6.6.6 - "GET /forged HTTP/1.1" 200'
    try:
        for extra in (f"X-Forwarded-For: {forged}\r\n", "X-Forwarded-For: \x1b[2J\r\n",
                      "X-Forwarded-For: 10.1.2.3\r\n"):
            with socket.create_connection(("127.0.0.1", proc.port), timeout=30) as conn:
                conn.sendall((f"GET /amp/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}"
                              "Connection: close\r\n\r\n").encode("latin-1"))
                assert conn.recv(100).startswith(b"HTTP/1.1 200")
        # A body left unfinished: a debug line names the (decoded) path.
        with socket.create_connection(("127.0.0.1", proc.port), timeout=30) as conn:
            conn.sendall(b"POST /amp/v1/x%0d%0aFORGED%1b[31m HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Length: 100\r\n\r\n{")
            conn.shutdown(socket.SHUT_WR)
            conn.recv(100)
        time.sleep(0.5)
    finally:
        proc.stop()
    log = proc.log_path.read_bytes()
    assert b"\x1b" not in log and b"\rFORGED" not in log, log
    lines = log.decode().splitlines()
    assert not any(line.startswith("FORGED") for line in lines), lines
    assert any("POST /amp/v1/x\\r\\nFORGED\\x1b[31m: the client went away" in line
               for line in lines), lines
    access = [line for line in lines if "uvicorn.access" in line]
    assert not any("forged" in line or "[2J" in line for line in access), access
    assert sum("invalid-x-forwarded-for - \"GET /amp/v1/health" in line
               for line in access) == 2, access
    assert any("10.1.2.3:0 - " in line for line in access), access


def test_python_dash_m_runs_the_command(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "ampup_memory", "episode-type", "show",
                           "call"], env=clean_env(AMPUP_MEMORY_HOME=str(tmp_path)),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["type"] == "call"


def test_ctrl_c_stops_a_long_command_in_one_line_with_130(tmp_path: Path) -> None:
    """Every command stopped by Ctrl-C answers alike: `error: …interrupted…`, exit code 130
    (128 + SIGINT), and the home opens again (load said `aborted` with 1, backup 2)."""
    import signal

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "big.jsonl").write_text("".join(
        json.dumps({"source": f"doc:n{i}", "body": f"Note {i}: the Porto office plan."}) + "\n"
        for i in range(20_000)))
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    proc = subprocess.Popen([sys.executable, "-m", "ampup_memory.cli", "load", str(corpus),
                             "--scope", "big/team", "--batch-size", "100"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "home").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3)  # into the batches
        assert proc.poll() is None, "load finished before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("error: ") and "interrupted" in err, err
    assert "Traceback" not in err
    done = cli_here(env, "status")
    assert done.returncode == 0, done.stderr


WRAPPED_INTERRUPT = """
import os, signal, time
from ampup_memory import cli

@cli.cli.command("wrapped-interrupt")
def wrapped() -> None:
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    except KeyboardInterrupt:
        # as pydantic-core does when Ctrl-C lands in a Python callback it called
        raise ValueError("Error calling function `ser_model`: KeyboardInterrupt: ") from None

cli.run(["wrapped-interrupt"])
"""


def test_ctrl_c_that_a_library_wraps_still_stops_in_one_line_with_130(tmp_path: Path) -> None:
    """Ctrl-C landing inside native code that calls back into Python (pydantic-core writing
    Iceberg metadata during `load`) came back as that library's own error: a traceback and
    exit code 1 (seen once in CI). The command here stands in for that library; the rule
    under test is cli.run's."""
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    done = subprocess.run([sys.executable, "-c", WRAPPED_INTERRUPT], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "error: interrupted", done.stderr


def test_owner_indexes_on_sqlite_says_there_are_none_to_make(tmp_path: Path) -> None:
    """`ampup-memory owner-indexes` is for the PostgreSQL cell store: on SQLite it says
    why in one line and exits 2 (the PostgreSQL side: test_amp_pg_owner_search.py)."""
    done = cli_here(clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"),
                              AMP_EMBEDDING_PROVIDER="hash"), "owner-indexes")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert "for the PostgreSQL cell store" in done.stderr and len(
        done.stderr.strip().splitlines()) == 1, done.stderr


def test_json_files_nested_10000_deep_are_one_error_line(tmp_path: Path) -> None:
    """A JSON file the CLI reads (a backup's manifest for `restore`, AMP_API_KEYS_FILE for
    `serve`) nested 10,000 deep was a RecursionError's traceback (exit 1), found by
    tools/cli_audit.py: it is read as a request body is, one line naming the file."""
    deep = "[" * 10_000 + "]" * 10_000
    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / "manifest.json").write_text(deep)
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    _one_error_line(cli_here(env, "restore", str(backup)), "manifest.json unreadable",
                    "nests deeper than 128")
    keys = tmp_path / "keys.json"
    keys.write_text(deep)
    _one_error_line(cli({**env, "AMP_API_KEYS_FILE": str(keys)}, "serve", "--port", "0",
                        timeout=120), f"AMP_API_KEYS_FILE {keys}", "nests deeper than 128")


def test_a_whole_number_setting_too_big_for_a_timer_is_one_line(tmp_path: Path) -> None:
    """AMPUP_MEMORY_LEASE_SECONDS=2^70 (any interval, any count) passed the settings and
    stopped `serve` with an OverflowError's traceback where a timedelta first met it; a
    retention of a million days would date its window before year 1 (found by
    tools/cli_audit.py). Both are refused when the settings are read, in one line."""
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    _one_error_line(cli({**env, "AMPUP_MEMORY_LEASE_SECONDS": str(2**70)}, "serve", "--port",
                        "0", timeout=120),
                    "lease_seconds (AMPUP_MEMORY_LEASE_SECONDS): must be at most 2,147,483,647")
    _one_error_line(cli_here({**env, "AMP_RETENTION_DAYS": "1000000"}, "settings"),
                    "retention_days (AMP_RETENTION_DAYS)", "36500")


def test_an_empty_host_is_refused_not_bound_to_every_interface(tmp_path: Path) -> None:
    """AMPUP_MEMORY_HOST="" (a script's empty variable) was taken, and `serve` bound every
    interface with it (found by tools/cli_audit.py): one line, exit 2."""
    env = clean_env(AMPUP_MEMORY_HOME=str(tmp_path / "home"), **QUIET)
    for host in ("", " "):
        _one_error_line(cli_here({**env, "AMPUP_MEMORY_HOST": host}, "settings"),
                        "invalid setting host (AMPUP_MEMORY_HOST): is empty")
