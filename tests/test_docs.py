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
