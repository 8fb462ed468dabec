"""docs/quickstart.md runs as written, pasted into bash and into zsh (the macOS default).

Each ```bash block is fed, unchanged apart from the port, to an interactive shell on its
standard input, as a terminal paste is: interactive zsh reads `#` as a command
(INTERACTIVE_COMMENTS is off), does not split `$H` into words, globs an unquoted `?`,
and both shells expand `!` in double quotes. A block must print nothing on standard
error and answer what the page says it answers, against a real server.

`ampup-memory serve` runs in the foreground, so a block that starts it ends with it; the
shell runs everything before it for real (the virtualenv too) and the test then starts
that server with the same arguments. Only `pip install .` is recorded, not run: the
package under test is already installed (CI installs from scratch in `.ci/run`).
The three-agent demo block is `tests/test_demo.py`'s own command, run there.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.server_process import ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "quickstart.md"
DEMO = "python examples/multi_agent_demo.py"
SERVE = re.compile(r"(?:^|&& )ampup-memory serve(?P<args>[^\n]*)$")

# Shell functions defined before each block (not part of the page): `serve` records its
# arguments for the test to start, `pip` records what it would install.
PRELUDE = """\
ampup-memory() { if [ "$1" = serve ]; then shift; printf '%s\\n' "$*" >> "$QS_SERVE"; \
else command ampup-memory "$@"; fi; }
pip() { printf '%s\\n' "$*" >> "$QS_PIP"; }
"""

SHELLS = {
    "bash": ["bash", "--norc", "--noprofile", "--noediting", "-i"],
    "zsh": ["zsh", "-f", "-i", "+o", "promptsp", "+o", "promptcr"],
}
# What interactive bash says when its standard input is not a terminal.
SHELL_NOISE = re.compile(r"^(bash: cannot set terminal process group .*|"
                         r"bash: no job control in this shell|exit)$")


def blocks(language: str, text: str | None = None) -> list[str]:
    return [b for lang, b in fenced(text) if lang == language]


def fenced(text: str | None = None) -> list[tuple[str, str]]:
    """Every fenced block of the page in order, as (language, text)."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text or DOC.read_text(), re.S | re.M)


@dataclass
class Ran:
    block: str
    out: str


@dataclass
class Session:
    shell: str
    work: Path
    home: Path
    port: int = field(default_factory=free_port)
    server: ServerProcess | None = None
    ran: list[Ran] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)
        return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"],
                "HOME": str(self.work), "HISTFILE": "/dev/null", "PS1": "", "PS2": "",
                "VIRTUAL_ENV_DISABLE_PROMPT": "1",
                "AMPUP_MEMORY_HOME": str(self.home), "QS_SERVE": str(self.work / "serve"),
                "QS_PIP": str(self.work / "pip")}

    def paste(self, block: str) -> str:
        block = block.replace("8765", str(self.port))
        done = subprocess.run(SHELLS[self.shell], input=PRELUDE + block, text=True,
                              capture_output=True, cwd=self.work, env=self.env(),
                              timeout=600)
        errors = [line for line in done.stderr.splitlines()
                  if line.strip() and not SHELL_NOISE.match(line)]
        assert not errors, f"{self.shell} printed errors for:\n{block}\n" + "\n".join(errors)
        return done.stdout

    def run_python(self, code: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code.replace("8765", str(self.port)), str(DOC), "exec"), {})
        return out.getvalue()

    def serve(self, block: str) -> None:
        *before, last = [line for line in block.splitlines() if line.strip()]
        match = SERVE.search(last)
        assert match and "ampup-memory serve" not in "\n".join(before), (
            f"`ampup-memory serve` runs in the foreground: it must end its block\n{block}")
        for name in ("serve", "pip"):
            (self.work / name).unlink(missing_ok=True)
        self.paste(block)
        args = (self.work / "serve").read_text().split()
        assert args == shlex.split(match["args"])
        if "pip install" in last:
            assert (self.work / "pip").read_text().split() == ["install", "."]
        self.stop()
        self.server = ServerProcess(self.home, args=args, port=self.port).start(timeout=180)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder both shells paste into, as one user trying both would: the first makes
    `.venv` there for real (the most of a session's set-up time), the second runs the same
    `python3 -m venv .venv` on it, which keeps what is there. Each has its own server home."""
    return tmp_path_factory.mktemp("qs-work")


@pytest.fixture(scope="module", params=list(SHELLS))
def session(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            work: Path) -> Iterator[Session]:
    shell = request.param
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed here, so the quickstart was not run in it "
                    f"(.ci/run installs it: apt-get install -y {shell})")
    s = Session(shell, work, tmp_path_factory.mktemp(f"qs-home-{shell}"))
    try:
        for language, block in fenced():
            if language not in ("bash", "python") or block.strip() == DEMO:
                continue
            if "ampup-memory serve" in block:
                s.serve(block)
                continue
            assert s.server is not None, f"no server started before\n{block}"
            if language == "python":
                s.ran.append(Ran(block, s.run_python(block)))
            else:
                s.ran.append(Ran(block, s.paste(block)))
        yield s
    finally:
        s.stop()


def values(out: str) -> list[Any]:
    """The JSON answers curl printed one after another (curl adds no newline)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(out):
        if out[at].isspace():
            at += 1
            continue
        value, at = decoder.raw_decode(out, at)
        found.append(value)
    return found


def ran(session: Session, marker: str) -> str:
    (out,) = [r.out for r in session.ran if marker in r.block]
    return out


def test_every_block_runs(session: Session) -> None:
    code = [(lang, b) for lang, b in fenced() if lang in ("bash", "python")]
    served = [b for _, b in code if "ampup-memory serve" in b]
    assert len(served) == 3 and len(session.ran) == len(code) - len(served) - 1
    # the one block not run here is the demo, which tests/test_demo.py runs
    assert (ROOT / "examples" / "multi_agent_demo.py").is_file()
    assert '"examples" / "multi_agent_demo.py"' in (ROOT / "tests" / "test_demo.py").read_text()


def test_the_amp_curl_block_shares_with_billing_only(session: Session) -> None:
    out = ran(session, "agent_marketing")
    answers = values(out)
    assert len(answers) == 3, out
    created, found, listed = answers
    assert created["content"]["text"].startswith("Prefers email over phone")
    assert [c["id"] for c in found["results"]] == [created["id"]], found
    assert listed["results"] == [], listed


def test_the_ampup_blocks_write_read_and_search(session: Session) -> None:
    answers = values(ran(session, "mallory"))
    principal, fact, facts, refused, ledger = answers
    assert principal["groups"] == ["sales"]
    assert fact["id"] and fact["commit"]
    (budget,) = facts["facts"]
    assert (budget["value"], budget["quote"]) == ("40k", "budget for the pilot is 40k")
    episode = budget["cites"][0]["episode"]
    assert refused == {"error": {"code": "NOT_FOUND", "message": "No such episode.",
                                 "details": {}}}
    assert len(ledger["commits"]) == 2

    searched = ran(session, '"format": "text"')
    text, passages = searched.split("\n{", 1)
    text += "\n"
    # the page's sample answer is the real one
    (sample,) = blocks("text")
    assert text == sample.replace("<episode id>", episode)
    (query,) = values("{" + passages)
    found = query["results"]
    assert "They want to start in May." in found[0]["text"]


def test_the_keys_block_calls_with_its_new_key(session: Session) -> None:
    out = ran(session, "X-AMP-API-Key")
    (listed,) = values(out)
    assert listed["results"] and all(c["content"]["text"].startswith("Prefers email")
                                     for c in listed["results"])


def test_the_python_block_shares_with_billing(session: Session) -> None:
    out = ran(session, "iter_memories").splitlines()
    assert "Prefers email over phone." in out[0] and len(out) >= 2


async def test_the_mcp_config_gives_every_tool_its_caller(tmp_path: Path) -> None:
    """With exactly the page's env, every AmpUp tool acts (none refuses for want of a
    user) and the AMP tools too."""
    from mcp import Client, StdioServerParameters

    from tests.test_mcp import ok
    from tests.test_mcp_ampup import AMPUP_TOOLS, remember

    (config,) = [json.loads(b) for b in blocks("json")]
    server = config["mcpServers"]["memory"]
    assert server["args"] == ["mcp"] and server["command"].endswith("/ampup-memory")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AMP_", "AMPUP_MEMORY_"))}
    env.update(server["env"], AMPUP_MEMORY_HOME=str(tmp_path), AMP_EMBEDDING_PROVIDER="hash")
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "ampup_memory.cli", *server["args"]], env=env)
    scope = "acme/sales"
    async with Client(params) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert AMPUP_TOOLS <= names
        note = await remember(client, scope=scope, text="Acme budget for the pilot is 40k.")
        answers = [
            await ok(client, "get_episode", scope=scope, id=note["id"]),
            await ok(client, "search_memory", scope=scope, query="Acme budget"),
            await ok(client, "query_memory", scope=scope, query="Acme budget"),
            await ok(client, "amp_remember", content="hello", owner_id="user_1"),
        ]
        closing = await client.call_tool("close_memory", {
            "scope": scope, "entity": "acme", "predicate": "budget", "reason": "lost"})
    assert "Acme budget for the pilot is 40k." in answers[1]
    closed = " ".join(getattr(c, "text", "") for c in closing.content)
    assert "AMPUP_MEMORY_MCP_USER" not in closed, closed
