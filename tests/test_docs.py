"""Docs that cannot drift: settings, commands and routes must all be documented."""

from __future__ import annotations

from pathlib import Path

import click

from ampup_memory.cli import cli, settings_markdown

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_settings_page_is_generated_from_settings() -> None:
    assert (DOCS / "settings.md").read_text() == settings_markdown(), (
        "docs/settings.md is stale: run `ampup-memory settings --markdown > docs/settings.md`"
    )


def _commands(group: click.Group, prefix: str = "ampup-memory") -> list[str]:
    names = []
    for name, command in group.commands.items():
        full = f"{prefix} {name}"
        if isinstance(command, click.Group):
            names += _commands(command, full)
        else:
            names.append(full)
    return names


def test_every_command_is_documented() -> None:
    text = (DOCS / "cli.md").read_text()
    missing = [c for c in _commands(cli) if f"`{c}" not in text]
    assert not missing, f"undocumented commands in docs/cli.md: {missing}"


def _leaves(group: click.Group, prefix: str = "ampup-memory") -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    for name, command in group.commands.items():
        full = f"{prefix} {name}"
        found += (_leaves(command, full) if isinstance(command, click.Group)
                  else [(full, command)])
    return found


def test_every_option_of_a_command_is_documented() -> None:
    """Each option a command has beside the settings' flags is named where docs/cli.md
    describes that command (its table row, its line or its line in a code block)."""
    from ampup_memory.settings import Settings

    lines = (DOCS / "cli.md").read_text().splitlines()
    missing = []
    for full, command in _leaves(cli):
        told = "\n".join(line for line in lines if f"`{full} " in line
                         or f"`{full}`" in line or line.startswith(f"{full} "))
        for param in command.params:
            if isinstance(param, click.Option) and param.name not in Settings.model_fields:
                missing += [f"{full} {o}" for o in param.opts
                            if o.startswith("--") and o not in told]
    assert not missing, f"options docs/cli.md does not name: {missing}"


def test_every_route_is_documented(tmp_path: Path) -> None:
    from ampup_memory.server import create_app
    from ampup_memory.settings import load_settings

    settings = load_settings(home=tmp_path, embedding_provider="hash")
    app = create_app(settings)
    text = (DOCS / "api.md").read_text()
    missing = []
    for path, item in app.openapi()["paths"].items():
        for method in item:
            if f"{method.upper()} {path}" not in text:
                missing.append(f"{method.upper()} {path}")
    assert not missing, f"undocumented routes in docs/api.md: {missing}"


def test_committed_openapi_matches_the_server(tmp_path: Path) -> None:
    import json

    from ampup_memory.server import create_app
    from ampup_memory.settings import load_settings

    app = create_app(load_settings(home=tmp_path, embedding_provider="hash"))
    committed = json.loads((DOCS / "openapi.json").read_text())
    assert committed == app.openapi(), (
        "docs/openapi.json is stale: run `ampup-memory openapi > docs/openapi.json`"
    )


ROOT = DOCS.parent
NODE_README = ROOT / "clients" / "node" / "README.md"


def test_readme_starts_with_the_two_setup_commands_ci_runs() -> None:
    import re
    import tomllib

    readme = (ROOT / "README.md").read_text()
    first, second = re.findall(r"^```bash\n(.*?)^```", readme, re.S | re.M)[:2]
    assert readme.index("```bash") < readme.index("\n## ")
    venv = "python3 -m venv .venv && . .venv/bin/activate && "
    assert first.strip() == venv + "pip install . && ampup-memory serve"
    assert second.strip().startswith(venv) and second.strip().endswith("python -m pytest")
    assert second.strip() in (ROOT / ".ci" / "run").read_text()
    python = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python == ">=3.11" and "Python 3.11 or newer" in readme


def test_every_page_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in DOCS.glob("*.md"):
        assert f"(docs/{page.name})" in readme, f"README does not link docs/{page.name}"


def test_user_docs_carry_no_internal_jargon() -> None:
    import re

    for page in [*DOCS.glob("*.md"), ROOT / "README.md", NODE_README]:
        text = page.read_text()
        for pattern in (r"\bissue #?\d", r"\bauditor\b", r"#\d+\b",
                        r"\bfound by an audit\b"):
            assert not re.search(pattern, text, re.I), (page.name, pattern)


# The README's status table names capabilities by word; these words name served routes.
STATUS_ROUTES = {"branches": "/branches", "merge": "/merge", "workspaces": "/workspaces",
                 "snapshots": "/snapshots", "pins": "/pin", "procedures": "/procedures"}


def test_readme_status_calls_nothing_served_not_yet(tmp_path: Path) -> None:
    import re

    from ampup_memory.server import create_app
    from ampup_memory.settings import load_settings

    paths = set(create_app(load_settings(home=tmp_path, embedding_provider="hash"))
                .openapi()["paths"])
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Status", 1)[1].split("\n## ", 1)[0]
    stale = []
    for capability, state in re.findall(r"^\| (.+?) \| (.+?) \|$", table, re.M):
        if "not yet" not in state:
            continue
        for word in re.findall(r"[a-z]+", capability):
            if STATUS_ROUTES.get(word) in paths:
                stale.append(f"{word}: {capability} | {state}")
    assert not stale, f"README's status says 'not yet' for served routes: {stale}"


# The product page (the docs site's overview) sends readers to these pages by file name.
PAGES_THE_OVERVIEW_NAMES = ("schemas-and-queries.md", "advice.md", "security-model.md")


def test_the_pages_the_overview_names_exist() -> None:
    missing = [name for name in PAGES_THE_OVERVIEW_NAMES if not (DOCS / name).is_file()]
    assert not missing, f"pages the overview links to are missing from docs/: {missing}"


def test_every_relative_link_to_a_page_resolves() -> None:
    import re

    broken = []
    for page in [*DOCS.glob("*.md"), ROOT / "README.md", NODE_README]:
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).is_file():
                broken.append(f"{page.name} -> {target}")
    assert not broken, f"links to missing pages: {broken}"


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: its text without markup, lower case, every character
    but letters, digits, marks, '_', '-' and spaces dropped, spaces made hyphens."""
    import re
    import unicodedata

    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    kept = "".join(c for c in text.lower()
                   if c in " -" or unicodedata.category(c)[0] in "LMN"
                   or unicodedata.category(c) == "Pc")
    return kept.replace(" ", "-")


def heading_anchors(text: str) -> set[str]:
    """Every anchor a page's headings get (outside code fences); a repeated heading gets
    -1, -2, … as GitHub numbers it."""
    import re

    seen: dict[str, int] = {}
    anchors, fenced = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            anchor = github_anchor(match.group(1))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            anchors.add(f"{anchor}-{count}" if count else anchor)
    return anchors


def broken_anchor_links(pages: list[Path]) -> tuple[int, list[str]]:
    """Links of these pages to `#anchor` or `page.md#anchor` whose page has no such
    heading: how many such links there are, and the broken ones."""
    import re

    checked, broken = 0, []
    for page in pages:
        text = page.read_text()
        # Code spans and fences may show link syntax without being links.
        prose = re.sub(r"```.*?```|`[^`\n]*`", "", text, flags=re.S)
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", prose):
            if "://" in target:
                continue
            linked = page if not target else page.parent / target
            if not linked.is_file():
                continue  # test_every_relative_link_to_a_page_resolves reports it
            checked += 1
            if anchor not in heading_anchors(linked.read_text()):
                broken.append(f"{page.name} -> {target}#{anchor}")
    return checked, broken


def test_github_anchors_of_headings_like_ours() -> None:
    # Slugs as GitHub renders them: punctuation dropped, each space a hyphen (so " / "
    # leaves two), underscores kept.
    assert github_anchor("AMP: cells over HTTP") == "amp-cells-over-http"
    assert github_anchor("The graphs' default parameters: M 32 / efConstruction 128") == (
        "the-graphs-default-parameters-m-32--efconstruction-128")
    assert github_anchor("Search: retrieval quality (LongMemEval_S subset)") == (
        "search-retrieval-quality-longmemeval_s-subset")
    assert github_anchor("Fourth round: `benchmarks/load_bench.py`") == (
        "fourth-round-benchmarksload_benchpy")
    assert heading_anchors("# A\n## A\n```\n## B\n```\n") == {"a", "a-1"}


def test_the_anchor_check_finds_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n## Some part (2026)\n\n[ok](#some-part-2026) "
                                   "[gone](#some-part) [there](b.md#b-part) [not](b.md#c)\n"
                                   "`[code](#not-a-link)`\n")
    (tmp_path / "b.md").write_text("## B part\n")
    checked, broken = broken_anchor_links([tmp_path / "a.md"])
    assert checked == 4 and broken == ["a.md -> #some-part", "a.md -> b.md#c"]


def test_every_anchor_link_in_the_docs_resolves() -> None:
    checked, broken = broken_anchor_links([*DOCS.glob("*.md"), ROOT / "README.md",
                                           NODE_README])
    assert checked >= 100, "the summary and contents of performance.md link its sections"
    assert not broken, f"links to headings that do not exist: {broken}"


def test_performance_contents_lists_every_section() -> None:
    import re

    text = (DOCS / "performance.md").read_text()
    contents = text.split("\n## Contents\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"\]\(#([^)]+)\)", contents))
    sections = [line[3:] for line in text.splitlines()
                if line.startswith("## ") and line not in ("## Contents",
                                                           "## Where the targets stand")]
    missing = [s for s in sections if github_anchor(s) not in listed]
    assert not missing, f"sections the Contents of docs/performance.md does not list: {missing}"


# ---- the Node client's README: its links (above), and its examples run ---------------------

NODE_SRC = ROOT / "clients" / "node" / "src" / "index.js"


def node_examples() -> list[tuple[str, str | None]]:
    """Every ```js block of the Node README, with the ```text block it says it prints
    (None for a fragment that shows a call without running on its own)."""
    import re

    blocks = re.findall(r"^```js\n(.*?)^```\n(?:\n+prints[^\n]*\n+```text\n(.*?)^```)?",
                        NODE_README.read_text(), re.S | re.M)
    return [(code, printed or None) for code, printed in blocks]


def _node() -> str:
    import shutil

    node = shutil.which("node")
    if node is None:
        import pytest

        pytest.skip("node is not installed: the Node README's examples are not run")
    return node


def test_every_node_example_parses(tmp_path: Path) -> None:
    import subprocess

    node = _node()
    examples = node_examples()
    assert len(examples) == NODE_README.read_text().count("```js") >= 5
    for n, (code, _) in enumerate(examples):
        script = tmp_path / f"example{n}.mjs"  # a module: top-level await parses
        script.write_text(code)
        done = subprocess.run([node, "--check", str(script)], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, (n, code, done.stderr)


def test_node_examples_print_what_the_readme_says(tmp_path: Path) -> None:
    """Each example with a ``prints`` block runs, in page order, against one fresh real
    server (the import pointed at this checkout's client)."""
    import subprocess

    from tests.server_process import ServerProcess

    node = _node()
    runnable = [(code, printed) for code, printed in node_examples() if printed is not None]
    assert len(runnable) >= 3
    with ServerProcess(tmp_path / "home") as server:
        for n, (code, printed) in enumerate(runnable):
            script = tmp_path / f"run{n}.mjs"
            script.write_text(code.replace('"@ampup/memory-client"', f'"{NODE_SRC.as_uri()}"')
                              .replace("http://127.0.0.1:8765", server.url))
            done = subprocess.run([node, str(script)], capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, (n, done.stderr)
            assert done.stdout == printed, (n, code)


def test_the_node_readme_names_every_public_method() -> None:
    """As docs/python-client.md's table for the Python clients (test_python_client_doc)."""
    import json
    import subprocess

    node = _node()
    script = f"import * as m from {json.dumps(NODE_SRC.as_uri())};" + (
        "const names = (cls) => { const out = new Set();"
        " for (let p = cls.prototype; p && p !== Object.prototype;"
        " p = Object.getPrototypeOf(p))"
        " for (const n of Object.getOwnPropertyNames(p))"
        " if (n !== 'constructor' && !n.startsWith('_')) out.add(n);"
        " return [...out]; };"
        "console.log(JSON.stringify({AMPClient: names(m.AMPClient),"
        " AmpUpClient: names(m.AmpUpClient)}));")
    done = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True,
                          text=True, timeout=60, check=True)
    text = NODE_README.read_text()
    for cls, methods in json.loads(done.stdout).items():
        assert len(methods) > 10, cls
        missing = [name for name in methods if f"`{name}(" not in text]
        assert not missing, (cls, missing)
