"""Drive AmpUp Memory's MCP face with published MCP clients, as outside checkers do.

    PYTHONPATH=src:. python tools/client_matrix.py [--work DIR] [--only TEXT ...]
                                                 [--json OUT] [--no-install]

Each client is installed from its package registry into a folder of its own under
``--work`` (a virtualenv per Python client, an npm folder per TypeScript one; kept between
runs, reinstalled only when missing) and runs `client_matrix_probe.py` or
`client_matrix_probe.mjs` against real servers started here: keys off (the agent and user
headers) and keys on (the agent's key in ``X-AMP-API-Key``, then as ``Authorization:
Bearer``, then a wrong key). Each run initializes, lists the tools, writes and reads
through an AMP and an AmpUp tool, reads an unknown id (a tool error, ``Access denied.``)
and sends a bad argument (a tool error, ``Invalid request: limit: ...``). Stdio clients
start ``ampup-memory mcp`` themselves (keys off only).

A client expected to work must pass every step keys off and keys on, and be refused with
a wrong key (what it shows, and after how long, is reported); a client expected to be
refused (the old HTTP+SSE transport) must fail within 30 s. Prints a table (docs/mcp.md,
"Clients checked", holds the last one's findings); exit code 1 when any expectation
fails. docs/testing.md, "The client matrix".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.server_process import ServerProcess  # noqa: E402

PROBE = Path(__file__).with_name("client_matrix_probe.py")
NODE_PROBE = Path(__file__).with_name("client_matrix_probe.mjs")
OLD_PYDANTIC = "pydantic<2.12"  # mcp < 1.21 imports a pydantic internal later removed
USER = "dana"


@dataclass
class Entry:
    name: str  # what the table shows
    kind: str  # the probe's KIND (Python), ts-http / ts-sse (TypeScript) or inspector
    install: list[str]  # pip requirements, or npm packages
    works: bool = True  # False: expected to be refused quickly (a transport we don't serve)
    stdio: bool = False  # a stdio run (keys off only) instead of HTTP runs
    note: str = ""
    slug: str = field(init=False)

    def __post_init__(self) -> None:
        self.slug = "".join(c if c.isalnum() or c in ".-" else "_" for c in
                            "-".join(self.install)).strip("_")[:80]

    @property
    def node(self) -> bool:
        return self.kind.startswith("ts-") or self.kind == "inspector"


MATRIX: list[Entry] = [
    Entry("MCP Python SDK 1.0.0 (stdio)", "sdk1-stdio", ["mcp==1.0.0", OLD_PYDANTIC],
          stdio=True),
    Entry("MCP Python SDK 1.6.0 (HTTP+SSE, its only HTTP)", "sdk1-sse",
          ["mcp==1.6.0", OLD_PYDANTIC], works=False,
          note="HTTP+SSE (protocol 2024-11-05) is not served: 405 at once"),
    Entry("MCP Python SDK 1.6.0 (stdio)", "sdk1-stdio", ["mcp==1.6.0", OLD_PYDANTIC],
          stdio=True),
    Entry("MCP Python SDK 1.8.0", "sdk1-http", ["mcp==1.8.0", OLD_PYDANTIC],
          note="wrong key: the client waits out its own timeout (it drops the 401)"),
    Entry("MCP Python SDK 1.9.4", "sdk1-http", ["mcp==1.9.4", OLD_PYDANTIC]),
    Entry("MCP Python SDK 1.12.4", "sdk1-http", ["mcp==1.12.4", OLD_PYDANTIC]),
    Entry("MCP Python SDK 1.20.0", "sdk1-http", ["mcp==1.20.0", OLD_PYDANTIC]),
    Entry("MCP Python SDK 1.30.0", "sdk1-http", ["mcp==1.30.0"]),
    Entry("MCP Python SDK 1.30.0 (stdio)", "sdk1-stdio", ["mcp==1.30.0"], stdio=True),
    Entry("MCP Python SDK 2.0.0", "sdk2-http", ["mcp==2.0.0"]),
    Entry("MCP Python SDK 2.3.0", "sdk2-http", ["mcp==2.3.0"]),
    Entry("fastmcp 2.14.7", "fastmcp", ["fastmcp==2.14.7"]),
    Entry("fastmcp 4.2.3", "fastmcp", ["fastmcp==4.2.3"]),
    Entry("openai-agents 0.24.0", "agents", ["openai-agents==0.24.0"],
          note="query_memory is not OpenAI-strict (its open `where`): the SDK sends it "
               "non-strict"),
    Entry("pydantic-ai-slim 2.78.0", "pydantic-ai", ["pydantic-ai-slim[mcp]==2.78.0"]),
    Entry("langchain-mcp-adapters 0.3.2", "langchain", ["langchain-mcp-adapters==0.3.2"]),
    Entry("llama-index-tools-mcp 0.6.0", "llama-index", ["llama-index-tools-mcp==0.6.0"]),
    Entry("mcp-use 1.7.1", "mcp-use", ["mcp-use==1.7.1"],
          note="wrong key: takes the 401 for an OAuth challenge"),
    Entry("TypeScript SDK 1.10.0 (HTTP+SSE)", "ts-sse", ["@modelcontextprotocol/sdk@1.10.0"],
          works=False, note="HTTP+SSE is not served: 405 at once"),
    Entry("TypeScript SDK 1.10.0", "ts-http", ["@modelcontextprotocol/sdk@1.10.0"]),
    Entry("TypeScript SDK 1.12.3", "ts-http", ["@modelcontextprotocol/sdk@1.12.3"]),
    Entry("TypeScript SDK 1.17.5", "ts-http", ["@modelcontextprotocol/sdk@1.17.5"]),
    Entry("TypeScript SDK 1.24.3", "ts-http", ["@modelcontextprotocol/sdk@1.24.3"]),
    Entry("TypeScript SDK 1.32.2", "ts-http", ["@modelcontextprotocol/sdk@1.32.2"]),
    Entry("MCP Inspector 2.12.0 (--cli)", "inspector", ["@modelcontextprotocol/inspector@2.12.0"],
          note="wrong key: asks for an OAuth sign-in it cannot do headless"),
]


def install(entry: Entry, work: Path, allowed: bool) -> Path:
    """The entry's own folder, installed once (a marker file records it)."""
    home = work / ("npm" if entry.node else "venvs") / entry.slug
    marker = home / ".installed"
    if marker.exists():
        return home
    if not allowed:
        raise SystemExit(f"{entry.name}: not installed in {home} (run without --no-install)")
    home.mkdir(parents=True, exist_ok=True)
    print(f"installing {' '.join(entry.install)} in {home}", flush=True)
    if entry.node:
        (home / "package.json").write_text('{"private": true, "type": "module"}\n')
        steps = [["npm", "install", "--no-audit", "--no-fund", *entry.install]]
    else:
        steps = [[sys.executable, "-m", "venv", str(home)],
                 [str(home / "bin" / "pip"), "install", *entry.install]]
    for cmd in steps:
        done = subprocess.run(cmd, cwd=home, capture_output=True, text=True, timeout=900)
        (home / "install.log").open("a").write(done.stdout + done.stderr)
        if done.returncode:
            raise SystemExit(f"{entry.name}: {' '.join(cmd)} failed; see {home}/install.log")
    marker.write_text(" ".join(entry.install) + "\n")
    return home


def probe_env(**extra: str) -> dict[str, str]:
    """The client's environment: ours without PYTHONPATH (the client imports nothing of
    ours), plus what the probe reads."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, **extra}


def run_probe(entry: Entry, home: Path, url: str, headers: dict[str, str],
              stdio_home: Path) -> dict[str, Any]:
    if entry.kind == "inspector":
        return run_inspector(home, url, headers)
    if entry.node:
        cmd = ["node", str(NODE_PROBE)]
        env = probe_env(SDKDIR=str(home), MODE=entry.kind[3:], URL=url,
                        HEADERS=json.dumps(headers))
    else:
        cmd = [str(home / "bin" / "python"), str(PROBE)]
        env = probe_env(KIND=entry.kind, URL=url, HEADERS=json.dumps(headers),
                        SERVER_PYTHON=sys.executable)
        if entry.stdio:  # the server process the client starts runs our code
            env.update(PYTHONPATH=os.environ.get("PYTHONPATH", ""),
                       AMPUP_MEMORY_HOME=str(stdio_home))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"ok": False, "error": f"probe printed nothing: {done.stderr[-300:]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def run_inspector(home: Path, url: str, headers: dict[str, str]) -> dict[str, Any]:
    """The Inspector's CLI mode: one process per method, each answer printed as JSON."""
    cli = [str(home / "node_modules" / ".bin" / "mcp-inspector"), "--cli", url,
           "--transport", "http"]
    for name, value in headers.items():
        cli += ["--header", f"{name}: {value}"]
    agent = headers.get("X-AMP-Agent-ID", "agent_matrix")
    out: dict[str, Any] = {"kind": "inspector"}

    def run(*args: str) -> Any:
        done = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120)
        text = done.stdout.strip()
        try:
            return json.JSONDecoder().raw_decode(text)[0]
        except ValueError:
            return {"error": {"message": (text or done.stderr)[-300:]}}

    def tool(name: str, **args: str) -> list[Any]:
        pairs = [a for key, value in args.items() for a in ("--tool-arg", f"{key}={value}")]
        reply = run("--method", "tools/call", "--tool-name", name, *pairs)
        if "content" not in reply:
            raise RuntimeError(reply.get("error", {}).get("message", reply))
        return [reply.get("isError", False), " ".join(reply["content"][0]["text"].split())[:90]]

    try:
        listed = run("--method", "tools/list")
        if "tools" not in listed:
            raise RuntimeError(listed.get("error", {}).get("message", listed))
        out["tools"] = len(listed["tools"])
        out["amp_write"] = tool("amp_remember", content="The matrix client likes green tea",
                                owner_id=agent, readable_by='["agent_matrix_*"]')
        out["amp_read"] = tool("amp_recall", query="green tea", owner_id=agent, limit="3")
        out["ampup_write"] = tool("remember_memory", scope="acme/matrix",
                                  text="The client matrix runs on Sundays.", acl='["*"]')
        out["ampup_read"] = tool("search_memory", scope="acme/matrix", query="client matrix")
        out["tool_error"] = tool("amp_get", memory_id="mem_01HZZZZZZZZZZZZZZZZZZZZZZZ")
        out["bad_argument"] = tool("amp_recall", query="x", owner_id=agent, limit="1000")
        out["ok"] = True
    except RuntimeError as exc:
        out["ok"], out["error"] = False, " ".join(str(exc).split())[:300]
    return out


# What each step must show; a client that cannot tell a tool error from a result (LangChain
# hands the model the text either way) reports None for is_error.
CHECKS = {
    "amp_write": (False, "Memory stored: mem_"),
    "amp_read": (False, "green tea"),
    "ampup_write": (False, "id"),
    "ampup_read": (False, "client matrix"),
    "tool_error": (True, "Access denied."),
    "bad_argument": (True, "Invalid request: limit: Input should be less than or equal to 100"),
}


def problems(result: dict[str, Any], tools: int) -> list[str]:
    if not result.get("ok"):
        return [f"failed: {result.get('error')}"]
    found = [] if result.get("tools") == tools else [f"tools: {result.get('tools')} != {tools}"]
    for step, (is_error, text) in CHECKS.items():
        got = result.get(step)
        if not got or got[0] not in (is_error, None) or text not in got[1]:
            found.append(f"{step}: {got}")
    return found


def tool_count(url: str, headers: dict[str, str]) -> int:
    accept = {"Accept": "application/json, text/event-stream"}
    r = httpx.post(f"{url}/mcp", headers={**headers, **accept},
                   json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    data = next(line[5:] for line in r.text.splitlines() if line.startswith("data:"))
    return len(json.loads(data)["result"]["tools"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path,
                        default=Path(tempfile.gettempdir()) / "ampup-client-matrix",
                        help="where the clients are installed (kept between runs)")
    parser.add_argument("--only", nargs="*", default=[],
                        help="run only the clients whose name holds one of these")
    parser.add_argument("--json", type=Path, help="write every result here")
    parser.add_argument("--no-install", action="store_true",
                        help="fail rather than install a missing client")
    args = parser.parse_args()
    entries = [e for e in MATRIX if not args.only or any(o.lower() in e.name.lower()
                                                         for o in args.only)]
    if any(e.node for e in entries) and not shutil.which("node"):
        raise SystemExit("node is needed for the TypeScript clients (or --only the others)")
    homes = {e.name: install(e, args.work, not args.no_install) for e in entries}

    results: list[dict[str, Any]] = []
    failed = 0
    with tempfile.TemporaryDirectory(prefix="client-matrix-") as tmp:
        base = Path(tmp)
        (base / "on").mkdir()
        made = subprocess.run(
            [sys.executable, "-m", "ampup_memory.cli", "keys", "create", "--agent",
             "agent_matrix", "--user", USER, "--home", str(base / "on")],
            capture_output=True, text=True, check=True, timeout=120)
        key = made.stdout.strip().splitlines()[-1]
        with ServerProcess(base / "off") as off, \
                ServerProcess(base / "on", env={"AMP_REQUIRE_KEYS": "true"}) as on:
            runs = {
                "keys off": (off.url, {"X-AMP-Agent-ID": "agent_matrix", "X-AmpUp-User": USER}),
                "key": (on.url, {"X-AMP-Agent-ID": "agent_matrix", "X-AMP-API-Key": key}),
                "bearer": (on.url, {"X-AMP-Agent-ID": "agent_matrix",
                                    "Authorization": f"Bearer {key}"}),
                "wrong key": (on.url, {"X-AMP-Agent-ID": "agent_matrix",
                                       "X-AMP-API-Key": "ampk_not_a_key"}),
            }
            tools = tool_count(off.url, runs["keys off"][1])
            for entry in entries:
                row: dict[str, Any] = {"client": entry.name, "works": entry.works,
                                       "note": entry.note}
                for label, (url, headers) in runs.items():
                    if entry.stdio and label != "keys off":
                        continue
                    result = run_probe(entry, homes[entry.name], f"{url}/mcp", headers,
                                       base / "stdio")
                    if entry.works and label != "wrong key":
                        found = problems(result, tools)
                    elif entry.works:  # a wrong key: refused (how soon is the client's)
                        found = [] if not result.get("ok") else ["a wrong key was let in"]
                    else:  # a transport we don't serve: refused, and soon
                        found = [] if not result.get("ok") and result.get("seconds", 0) < 30 \
                            else [f"not refused at once: {result}"]
                    row[label] = {"result": result, "problems": found}
                    failed += bool(found)
                results.append(row)
                print(summary(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"{len(results)} clients, {failed} failed expectations")
    return 1 if failed else 0


def summary(row: dict[str, Any]) -> str:
    cells = []
    for label in ("keys off", "key", "bearer", "wrong key"):
        run = row.get(label)
        if run is None:
            cells.append("-")
            continue
        result = run["result"]
        if run["problems"]:
            cells.append("FAIL " + "; ".join(run["problems"])[:200])
        elif result.get("ok"):
            protocol = result.get("protocol")
            cells.append(f"ok ({protocol})" if protocol else "ok")
        else:
            cells.append(f"refused in {result.get('seconds', '?')} s: {result.get('error')}"[:160])
    return f"| {row['client']} | " + " | ".join(cells) + " |"


if __name__ == "__main__":
    sys.exit(main())
