"""Audit every command of the command line as a user or a script would: each one run as a
real process (``python -m ampup_memory.cli``), its commands and options read off the click
app itself.

    PYTHONPATH=src:. python tools/cli_audit.py [--parts help,args,homes,env,start,serve]
                                               [--commands "keys create,load"]
                                               [--jobs 3] [--out DIR]

Parts (docs/testing.md, "The CLI audit"):

- ``help``: every group, command and option has help text; ``COMMAND --help`` answers
  (exit 0, no traceback) for every command and group.
- ``args``: every argument and option of every command, one at a time over a valid
  command line run on a copy of a seeded home (a loaded scope, a branch, a pin, a
  snapshot, a workspace, a key, a backup): left out (when required), empty, blank,
  right-to-left and combining marks, 10,000 characters, an id of the wrong form, an
  unknown id; for numbers -1, 0, 1.5, NaN, 1e400 and 2^70; for files a missing path, a
  directory, an unreadable file, bytes that are not UTF-8, invalid JSON, JSON nested
  10,000 deep, an empty and a huge (20 MB) file.
- ``homes``: every command with a home that is a file, an immutable (read-only) folder,
  and a missing folder under a missing parent; with the cell store and the catalog at a
  PostgreSQL that is not there; the model commands with a model URL that is not there.
- ``env``: every setting, through its environment variable and its flag, given values of
  the wrong type or out of range (and the config file missing, a folder, not UTF-8, not
  TOML): one line at start-up.
- ``start``: ``serve`` with each whole-number setting at 2^70 through its variable (a
  value ``settings`` reads but a timer cannot take).
- ``serve``: a real ``serve`` on a seeded home, then every command run against that home
  while it serves, and a second ``serve`` on its port.

A finding is: a traceback on stdout or stderr, a run over 60 s, exit code 0 with an
``error:`` line, a refusal (exit code not 0) with no message or a message of more than
three lines, a value that must be refused (a required argument left out, an unknown or
malformed id, a missing file, a value of the wrong type) accepted with exit code 0, and a
command or option with no help. Findings go to ``DIR/findings.json`` (and, as they are found, to
``DIR/findings.jsonl``), what was seen (exit
codes, the slowest commands and whether they drew a progress line) to ``DIR/notes.json``;
the exit code is 1 when there are findings.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, get_args

import click

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ampup_memory.cli import SETTING_FIELDS, cli, command_tree  # noqa: E402
from ampup_memory.settings import Settings, env_name, flag_name  # noqa: E402

TIMEOUT = 60.0
QUIET = {"AMP_EMBEDDING_PROVIDER": "hash", "AMP_LIFECYCLE_ENABLED": "false",
         "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0"}
USER, AGENT, SCOPE = "aud.user", "aud_agent", "aud/main"
NOWHERE_PG = "postgresql://aud:aud@127.0.0.1:1/aud"
NOWHERE_HTTP = "http://127.0.0.1:1/v1"
MODEL_COMMANDS = {"extract", "advice judge", "advice learn", "advice compile",
                  "advice cluster"}
PROGRESS = re.compile(r"^[^:]{1,80}: \d+/(\d+|\?) \d+:\d\d:\d\d$")

# Parameters that name a thing: an empty, blank or malformed value must be refused.
IDS = {"scope", "user", "user_id", "agent_id", "name", "source", "into", "branch",
       "at_commit", "pin_id", "snapshot_id", "workspace_id", "key_id", "cell_id", "scopes",
       "groups", "roles", "acl", "builtin", "now_text"}
# ... but these are labels of printable text (1-200 characters, not blank), named like an
# id: "Not An/../Id!" is a good one (docs/api.md, POST /workspaces).
LABELS = {("workspace create", "name")}
# ... and of those, the ones that look a record up: an unknown one must be refused.
LOOKUPS = {"pin_id", "snapshot_id", "workspace_id", "key_id", "cell_id"}
DURATIONS = {"ttl", "lifetime", "grace"}

TEXT_EDGES: list[tuple[str, str]] = [
    ("empty", ""), ("blank", " \t "), ("rtl+combining", "\u202eab\u202c" + "e\u0301" * 40),
    ("10k chars", "x" * 10_000), ("wrong form", "Not An/../Id!"),
    ("unknown", "zz_unknown_0000000000000000"),
]
NUMBER_EDGES = [("-1", "-1"), ("0", "0"), ("1.5", "1.5"), ("NaN", "nan"), ("1e400", "1e400"),
                ("2^70", str(2**70)), ("empty", "")]
DURATION_EDGES = [("-1h", "-1h"), ("0s", "0s"), ("NaN", "nan"), ("huge", "99999999999999d")]


@dataclass
class Run:
    argv: list[str]
    code: int | None
    out: str
    err: str
    seconds: float


@dataclass
class Finding:
    part: str
    kind: str
    command: str
    param: str
    edge: str
    detail: str


@dataclass
class Audit:
    findings: list[Finding] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    runs: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    live: Path | None = None  # each finding also goes here as it is found, one JSON a line

    def find(self, part: str, kind: str, command: str, param: str, edge: str,
             detail: str) -> None:
        finding = Finding(part, kind, command, param, edge, detail[-600:])
        with self.lock:
            self.findings.append(finding)
            if self.live is not None:
                with self.live.open("a") as f:
                    f.write(json.dumps(asdict(finding), ensure_ascii=False) + "\n")

    def note(self, key: str, value: Any) -> None:
        with self.lock:
            self.notes.setdefault(key, []).append(value)


# -- the command tree ----------------------------------------------------------------------
def tree() -> Iterator[tuple[str, click.Command]]:
    """Every group and command, by its path (``keys create``), the root as ``""``, in
    name order (a space sorts before any character of a name, so paths sort as the tree
    does level by level)."""
    yield "", cli
    yield from sorted(command_tree(), key=lambda item: item[0])


def leaf_commands() -> dict[str, click.Command]:
    return {p: c for p, c in tree() if p and not isinstance(c, click.Group)}


def own_params(command: click.Command) -> list[click.Parameter]:
    """A command's parameters other than the settings flags (audited once, in ``env``)."""
    return [p for p in command.params if p.name not in SETTING_FIELDS]


def option_flag(param: click.Parameter) -> str:
    return max(param.opts, key=len)


# -- running ------------------------------------------------------------------------------
def base_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMP_", "AMPUP_"))}
    return {**env, **QUIET, "PYTHONPATH": str(ROOT / "src"), "AMPUP_MEMORY_HOME": str(home),
            "COLUMNS": "100", **extra}


def run(argv: list[str], env: dict[str, str], cwd: Path,
        timeout: float = TIMEOUT) -> Run:
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ampup_memory.cli", *argv], env=env,
                            cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    return Run(argv, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
               time.monotonic() - started)


def message_lines(text: str) -> list[str]:
    """stderr without progress lines and warnings: what a refusal said."""
    return [line for line in text.strip().splitlines()
            if line.strip() and not PROGRESS.match(line.strip())
            and not line.startswith("warning:")]


def judge(audit: Audit, part: str, command: str, param: str, edge: str, done: Run,
          must_refuse: bool = False, may_run_on: bool = False) -> None:
    """The findings of one run (see the module's docstring)."""
    shown = " ".join(a if len(a) < 60 else a[:40] + f"…({len(a)} chars)" for a in done.argv)
    audit.runs += 1
    audit.note("exit codes", f"{done.code}: {command} [{param}={edge}]")
    if "Traceback (most recent call last)" in done.out + done.err:
        audit.find(part, "traceback", command, param, edge, f"{shown}\n{done.err[-500:]}")
        return
    if done.code is None:
        if not may_run_on:
            audit.find(part, "hang", command, param, edge, f"{shown}: over {TIMEOUT:.0f} s")
        return
    lines = message_lines(done.err)
    if done.code == 0:
        if any(line.startswith("error:") for line in lines):
            audit.find(part, "exit 0 on an error", command, param, edge,
                       f"{shown}\n{done.err[-300:]}")
        elif must_refuse:
            audit.find(part, "accepted", command, param, edge,
                       f"{shown}\n{done.out[:200]}{done.err[-200:]}")
        return
    if not lines:
        audit.find(part, "no message", command, param, edge, f"{shown}: exit {done.code}")
    elif len(lines) > 3:
        audit.find(part, "long message", command, param, edge,
                   f"{shown}: {len(lines)} lines\n" + "\n".join(lines[:8]))
    elif not lines[-1].startswith("error:") and not any(
            line.startswith("error:") for line in lines):
        audit.note("refusals without `error:`", f"{shown}: {lines[-1][:200]}")


# -- the seeded home and the files --------------------------------------------------------
@dataclass
class Seed:
    root: Path
    home: Path
    ids: dict[str, str]
    files: dict[str, Path]
    counter: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        """`base_env` for a copy of the seeded home: the catalog's tables stay in the
        seeded home's warehouse (their locations are absolute), new files land beside."""
        return base_env(home, AMPUP_MEMORY_WAREHOUSE=f"file://{self.home / 'warehouse'}",
                        **extra)

    def fresh(self, copy: bool = True) -> tuple[Path, Path]:
        """A new work folder and a copy of the seeded home in it."""
        with self.lock:
            self.counter += 1
            work = self.root / f"run{self.counter}"
        work.mkdir()
        home = work / "home"
        if copy:
            shutil.copytree(self.home, home, symlinks=True)
        return work, home


def seed(root: Path) -> Seed:
    home = root / "seed" / "home"
    notes = root / "notes.md"
    notes.write_text("Acme plan is basic.\nThe Lisbon office opens in May.\n")
    env = base_env(home)

    def must(*argv: str) -> dict[str, Any]:
        done = run(list(argv), env, root, timeout=300)
        if done.code != 0:
            raise SystemExit(f"seeding failed: {' '.join(argv)}: {done.err}")
        if done.out.strip().startswith("{"):
            value: dict[str, Any] = json.loads(done.out.strip().splitlines()[0])
            return value
        return {"text": done.out}

    must("load", str(notes), "--scope", SCOPE, "--acl", "*", "--user", USER)
    must("branch", "create", SCOPE, "b1", "--user", USER)
    ids = {"pin_id": must("pin", "create", "--scope", SCOPE, "--ttl", "1h",
                          "--user", USER)["id"],
           "snapshot_id": must("snapshot", "create", "--scope", SCOPE, "--user", USER)["id"],
           "workspace_id": must("workspace", "create", "w1", "--ttl", "1h",
                                "--user", USER)["id"]}
    key_text = must("keys", "create", "--agent", AGENT)["text"]
    ids["key_id"] = key_text.splitlines()[0].removeprefix("key id: ").strip()
    backup = root / "backup"
    must("backup", str(backup))
    schema = root / "schema.json"
    schema.write_text(json.dumps({"name": "aud", "description": "audit schema",
                                  "entities": [{"name": "account", "attributes": [
                                      {"name": "plan", "type": "string"}]}]}))
    files = make_files(root)
    files.update({"notes": notes, "backup": backup, "schema": schema})
    return Seed(root, home, ids, files)


def make_files(root: Path) -> dict[str, Path]:
    """The bad files every path parameter is given."""
    bad = root / "files"
    bad.mkdir()
    (bad / "a-folder").mkdir()
    (bad / "a-folder" / "x.md").write_text("in a folder\n")
    (bad / "latin1.md").write_bytes("caf\xe9 \xff\xfe\n".encode("latin-1"))
    (bad / "invalid.json").write_text('{"name": "x", "entities": [1, 2,,]')
    (bad / "deep.json").write_text("[" * 10_000 + "]" * 10_000)
    (bad / "empty.json").write_text("")
    with (bad / "huge.json").open("w") as f:  # 20 MB, one JSON list of short strings
        f.write("[" + ",".join(['"' + "x" * 98 + '"'] * 200_000) + "]")
    return {"no such file": bad / "no-such-file.json", "directory": bad / "a-folder",
            "unreadable": Path("/proc/self/mem"), "not UTF-8": bad / "latin1.md",
            "invalid JSON": bad / "invalid.json", "JSON 10,000 deep": bad / "deep.json",
            "empty file": bad / "empty.json", "20 MB": bad / "huge.json"}


# -- valid command lines ------------------------------------------------------------------
def valid_value(command: str, param: click.Parameter, s: Seed) -> str | None:
    """What a valid command line gives this parameter (None: leave it out)."""
    name = param.name or ""
    special = {
        ("episode-type show", "name"): "slack", ("workspace create", "name"): "w2",
        ("branch create", "name"): "b2", ("branch delete", "name"): "b1",
        ("merge", "source"): "b1", ("branch create", "source"): "main",
        ("backup", "dest"): str(s.root / "backups" / f"b{time.monotonic_ns()}"),
        ("restore", "src"): str(s.files["backup"]), ("load", "path"): str(s.files["notes"]),
        ("schema set", "path"): str(s.files["schema"]),
        ("purge", "cell_id"): "amp_00000000000000000000000000",
    }
    if (command, name) in special:
        return special[(command, name)]
    if name in s.ids:
        return s.ids[name]
    by_name = {"scope": SCOPE, "scopes": SCOPE, "user": USER, "user_id": USER,
               "agent_id": AGENT, "ttl": "1h", "reason": "audit", "entity": "acme",
               "predicate": "plan", "groups": "g1", "roles": "r1", "acl": "*",
               "lifetime": "1d", "kind": "extract"}
    if name in by_name:
        return by_name[name]
    if param.required:
        raise SystemExit(f"no valid value for {command} {name}: add it to valid_value")
    return None


def command_line(command: str, cmd: click.Command, s: Seed,
                 replace: dict[str, str | None] | None = None) -> list[str]:
    """A valid command line, with ``replace``'s parameters given (or left out: None)."""
    replace = replace or {}
    argv = command.split()
    for param in own_params(cmd):
        name = param.name or ""
        value = replace[name] if name in replace else valid_value(command, param, s)
        if value is None:
            continue
        if isinstance(param, click.Argument):
            argv.append(value)
        elif isinstance(param, click.Option) and param.is_flag:
            if name in replace:
                argv.append(option_flag(param))
        else:
            argv += [option_flag(param), value]
    if command == "restore":  # a restore needs an empty home: that of the run is one
        argv += ["--home", "{EMPTY_HOME}"]
    return argv


def with_home(argv: list[str], work: Path) -> list[str]:
    return [str(work / "empty-home") if a == "{EMPTY_HOME}" else a for a in argv]


# -- the parts ----------------------------------------------------------------------------
def part_help(audit: Audit, s: Seed, pool: ThreadPoolExecutor) -> None:
    futures = []
    for path, command in tree():
        shown = path or "(root)"
        if not (command.help or command.short_help or "").strip():
            audit.find("help", "no help", shown, "", "", "the command has no help text")
        for param in command.params:
            if isinstance(param, click.Option) and not (param.help or "").strip():
                audit.find("help", "no help", shown, option_flag(param), "",
                           "the option has no help text")
            if isinstance(param, click.Argument) and param.name and \
                    param.name.upper() not in (command.help or "").upper() and \
                    not param.required:
                audit.note("optional arguments the help does not name",
                           f"{shown} {param.name}")
        work, home = s.fresh(copy=False)
        futures.append((shown, pool.submit(run, [*path.split(), "--help"],
                                           base_env(home), work)))
    for shown, future in futures:
        done = future.result()
        judge(audit, "help", shown, "--help", "", done)
        if done.code != 0:
            audit.find("help", "help refused", shown, "--help", "",
                       f"exit {done.code}: {done.err[-300:]}")


def edges_for(param: click.Parameter, command: str = "",
              ) -> list[tuple[str, str | None, bool]]:
    """(label, value, must be refused) for one parameter of ``command``; value None: left
    out."""
    name = param.name or ""
    refused = {"empty", "blank", "10k chars"} | (
        set() if (command, name) in LABELS else {"wrong form"}) if name in IDS else set()
    edges: list[tuple[str, str | None, bool]] = []
    if param.required:
        edges.append(("missing", None, True))
    if isinstance(param, click.Option) and param.is_flag:
        return edges
    kind = param.type
    if isinstance(kind, (click.IntRange, click.types.IntParamType, click.FloatRange,
                         click.types.FloatParamType)):
        return edges + [(label, value, label in ("NaN", "1.5", "1e400", "empty", "-1", "0"))
                        for label, value in NUMBER_EDGES]
    if name == "dest":  # `backup`'s new folder: a missing path is what it takes
        return edges + [("non-empty folder", str(FILES["directory"]), True),
                        ("a file", str(FILES["not UTF-8"]), True),
                        ("under a file", str(FILES["not UTF-8"] / "x"), True)]
    if isinstance(kind, click.Path) or name in ("path", "src"):
        return edges + [(label, str(path), label in ("no such file", "unreadable"))
                        for label, path in FILES.items()]
    if isinstance(kind, click.Choice):
        return edges + [("not a choice", "bogus", True), ("empty", "", True)]
    text = [(label, value, label in refused
             or (name in LOOKUPS and label == "unknown")) for label, value in TEXT_EDGES]
    if name in DURATIONS:
        # A grace period may be 0 (after a known crash); a time to live may not.
        text += [(label, value, label != "huge" and not (name == "grace" and label == "0s"))
                 for label, value in DURATION_EDGES]
    return edges + text


FILES: dict[str, Path] = {}


def part_args(audit: Audit, s: Seed, pool: ThreadPoolExecutor,
              only: set[str] | None) -> None:
    jobs = []
    for command, cmd in leaf_commands().items():
        if command in ("serve", "mcp") or (only and command not in only):
            continue  # no parameters of their own; their settings are in `env`
        jobs.append((command, "(valid)", "", command_line(command, cmd, s), False))
        for param in own_params(cmd):
            for label, value, must in edges_for(param, command):
                argv = command_line(command, cmd, s, {param.name or "": value}) \
                    if not (isinstance(param, click.Option) and param.is_flag) else []
                if argv:
                    jobs.append((command, param.name or "", label, argv, must))

    def one(command: str, pname: str, label: str, argv: list[str], must: bool) -> None:
        work, home = s.fresh()
        env = base_env(home) if command == "restore" else s.env(home)
        done = run(with_home(argv, work), env, work)
        judge(audit, "args", command, pname, label, done, must_refuse=must)
        if pname == "(valid)":
            drew = any(PROGRESS.match(line.strip()) for line in done.err.splitlines())
            audit.note("valid runs", f"{command}: exit {done.code}, {done.seconds:.1f} s, "
                       f"progress line: {'yes' if drew else 'no'}"
                       + (f", {message_lines(done.err)[-1][:160]}"
                          if done.code and message_lines(done.err) else ""))

    for future in [pool.submit(one, *job) for job in jobs]:
        future.result()


def part_homes(audit: Audit, s: Seed, pool: ThreadPoolExecutor,
               only: set[str] | None) -> None:
    def one(command: str, cmd: click.Command, case: str) -> None:
        work, home = s.fresh(copy=case in ("nowhere", "no model"))
        env = s.env(home) if case in ("nowhere", "no model") else base_env(home)
        timeout = TIMEOUT
        if case == "file":
            home.write_text("not a folder\n")
        elif case == "read-only":
            home.mkdir()
            subprocess.run(["chattr", "+i", str(home)], check=True)
        elif case == "missing":
            env = base_env(work / "no" / "such" / "home")
        elif case == "nowhere":
            env.update({"AMP_STORE_URI": NOWHERE_PG, "AMPUP_MEMORY_CATALOG_URI": NOWHERE_PG,
                        "AMPUP_MEMORY_INDEX_URI": NOWHERE_PG})
        elif case == "no model":
            env.update({"AMPUP_MEMORY_MODEL_BASE_URL": NOWHERE_HTTP,
                        "AMPUP_MEMORY_MODEL": "aud-model"})
        argv = [env["AMPUP_MEMORY_HOME"] if a == "{EMPTY_HOME}" else a
                for a in command_line(command, cmd, s)]  # restore: into the bad home
        if command == "serve":
            argv += ["--port", "0"]
            timeout = 30.0
        if command == "mcp":
            env["AMP_MCP_AGENT_ID"] = AGENT
        try:
            done = run(argv, env, work, timeout=timeout)
        finally:
            if case == "read-only":
                subprocess.run(["chattr", "-i", str(home)], check=True)
        # A serve that started (a missing home is made) runs on: that is no hang.
        runs_on = command == "serve" and "AmpUp Memory on" in done.err
        judge(audit, "homes", command, "home" if case not in ("nowhere", "no model")
              else "settings", case, done, may_run_on=runs_on)
        audit.note(f"homes: {case}", f"{command}: exit {done.code}, "
                   + (message_lines(done.err) or ["(nothing on stderr)"])[-1][:200])

    jobs = [(command, cmd, case) for command, cmd in leaf_commands().items()
            if not only or command in only
            for case in ("file", "read-only", "missing", "nowhere")
            + (("no model",) if command in MODEL_COMMANDS else ())]
    for future in [pool.submit(one, *job) for job in jobs]:
        future.result()


def setting_edges(name: str) -> list[tuple[str, str, bool]]:
    """(label, value, must be refused) for one setting."""
    annotation = Settings.model_fields[name].annotation
    if annotation is bool:
        return [("not a bool", "maybe", True), ("empty", "", False)]
    choices = [a for a in get_args(annotation) if isinstance(a, str)]
    if choices:
        return [("not a choice", "bogus", True), ("empty", "", True)]
    if annotation in (int, int | None):
        return [("text", "abc", True), ("-1", "-1", False), ("2^70", str(2**70), False),
                ("1.5", "1.5", True)]
    if annotation in (float, float | None):
        return [("NaN", "nan", True), ("inf", "inf", True), ("-1", "-1", False),
                ("text", "abc", True)]
    return [("empty", "", False), ("rtl+combining", "\u202eab\u202c" + "e\u0301" * 40, False),
            ("control", "a\tb\nc", False), ("10k chars", "x" * 10_000, False)]


def part_env(audit: Audit, s: Seed, pool: ThreadPoolExecutor) -> None:
    """Each setting's bad values through its variable (on `status`, which opens the stores)
    and through its flag (on `settings`, which takes every flag)."""
    def one(name: str, label: str, value: str, must: bool, how: str) -> None:
        work, home = s.fresh()
        if how == "env":
            env = s.env(home)
            env[env_name(name)] = value
            done = run(["status"], env, work)
        else:
            done = run(["settings", "--json", f"{flag_name(name)}={value}"],
                       s.env(home), work)
        judge(audit, "env", "status" if how == "env" else "settings", f"{name} ({how})",
              label, done, must_refuse=must)

    # Every value through the flag; the first two (a wrong type, the likeliest slip)
    # also through the variable, on a command that opens the stores.
    jobs = [(name, label, value, must, how) for name in SETTING_FIELDS
            for i, (label, value, must) in enumerate(setting_edges(name))
            for how in (("env", "flag") if i < 2 else ("flag",))]
    jobs += [("config", label, str(path), True, "env") for label, path in FILES.items()
             if label in ("no such file", "directory", "not UTF-8", "invalid JSON", "20 MB",
                          "unreadable")]
    for future in [pool.submit(one, *job) for job in jobs]:
        future.result()


def part_start(audit: Audit, s: Seed, pool: ThreadPoolExecutor) -> None:
    """Each whole-number setting at 2^70 through its variable, on `serve`: `settings` only
    reads a value, `serve` hands it to its timers and timedeltas, where a value that
    parses but cannot work shows (an OverflowError's traceback)."""
    def one(name: str) -> None:
        work, home = s.fresh()
        done = run(["serve", "--port", "0"], s.env(home, **{env_name(name): str(2**70)}),
                   work, timeout=45)
        started = done.code is None and "AmpUp Memory on" in done.err
        if started:
            audit.find("start", "accepted", "serve", name, "2^70",
                       "serve started with it: " + done.err[-300:])
            return
        judge(audit, "start", "serve", name, "2^70", done, must_refuse=True)

    names = [n for n in SETTING_FIELDS if n != "port"  # --port 0 is given: flag over env
             and Settings.model_fields[n].annotation in (int, int | None)]
    for future in [pool.submit(one, n) for n in names]:
        future.result()


def part_serve(audit: Audit, s: Seed, pool: ThreadPoolExecutor,
               only: set[str] | None) -> None:
    """Every command on the home of a running `serve`, then a second `serve` on its port."""
    work, home = s.fresh()
    env = s.env(home)
    server = subprocess.Popen([sys.executable, "-m", "ampup_memory.cli", "serve", "--port",
                               "0"], env=env, cwd=work, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True)
    try:
        assert server.stderr is not None
        port = None
        deadline = time.monotonic() + 120
        while port is None and time.monotonic() < deadline:
            line = server.stderr.readline().decode("utf-8", "replace")
            if not line and server.poll() is not None:
                raise SystemExit("serve did not start")
            if m := re.search(r"http://[^ ]+:(\d+)", line):
                port = m.group(1)
        threading.Thread(target=server.stderr.read, daemon=True).start()
        jobs = [(command, cmd) for command, cmd in leaf_commands().items()
                if command not in ("serve", "restore") and (not only or command in only)]

        def one(command: str, cmd: click.Command) -> None:
            run_env = dict(env)
            if command == "mcp":
                run_env["AMP_MCP_AGENT_ID"] = AGENT
            argv = with_home(command_line(command, cmd, s), work)
            done = run(argv, run_env, work)
            judge(audit, "serve", command, "", "beside a running serve", done)
            audit.note("serve: beside", f"{command}: exit {done.code}, {done.seconds:.1f} s")

        for future in [pool.submit(one, *job) for job in jobs]:
            future.result()
        if port:
            done = run(["serve", "--port", port], env, work, timeout=30)
            judge(audit, "serve", "serve", "--port", "the port in use", done,
                  must_refuse=True)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="help,args,homes,env,start,serve")
    parser.add_argument("--commands", default="",
                        help="comma-separated command paths (default: all)")
    parser.add_argument("--jobs", type=int, default=3, help="commands run at once")
    parser.add_argument("--out", type=Path, default=Path("cli-audit-report"))
    opts = parser.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    only = {c.strip() for c in opts.commands.split(",") if c.strip()} or None
    audit = Audit(live=opts.out / "findings.jsonl")
    audit.live.write_text("")  # type: ignore[union-attr]
    started = time.monotonic()
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="cli-audit-") as tmp:
        root = Path(tmp)
        s = seed(root)
        FILES.update({k: v for k, v in s.files.items()
                      if k not in ("notes", "backup", "schema")})
        with ThreadPoolExecutor(opts.jobs) as pool:
            for part in opts.parts.split(","):
                t0 = time.monotonic()
                count = audit.runs
                if part == "help":
                    part_help(audit, s, pool)
                elif part == "args":
                    part_args(audit, s, pool, only)
                elif part == "homes":
                    part_homes(audit, s, pool, only)
                elif part == "env":
                    part_env(audit, s, pool)
                elif part == "start":
                    part_start(audit, s, pool)
                elif part == "serve":
                    part_serve(audit, s, pool, only)
                timings[part] = round(time.monotonic() - t0, 1)
                print(f"{part}: {audit.runs - count} runs, {timings[part]} s, "
                      f"{len(audit.findings)} findings so far", flush=True)
    findings = [asdict(f) for f in audit.findings]
    (opts.out / "findings.json").write_text(json.dumps(findings, indent=2,
                                                       ensure_ascii=False))
    audit.notes["timings (s)"] = {**timings, "total": round(time.monotonic() - started, 1)}
    audit.notes["runs"] = audit.runs
    (opts.out / "notes.json").write_text(json.dumps(audit.notes, indent=2,
                                                    ensure_ascii=False))
    seen: set[tuple[str, str, str]] = set()
    for f in findings:
        key = (f["kind"], f["command"], f["param"])
        if key not in seen:
            seen.add(key)
            print(f"{f['part']}: {f['kind']}: {f['command']} [{f['param']}={f['edge']}]: "
                  f"{f['detail'][:300]}")
    print(f"{audit.runs} runs in {time.monotonic() - started:.0f} s; "
          f"{len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
