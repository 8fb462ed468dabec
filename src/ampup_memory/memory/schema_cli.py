"""Schema commands: ``schema list|show|set``, on the home's tables.

They run the same functions as GET /schemas and PUT/GET /schemas/{org}/{team}
(memory/schemas.py), in this process; a server sharing the catalog sees a new schema on its
next read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ampup_memory.cliutil import dumps, user_option
from ampup_memory.memory.cli import SettingsOptions, _service
from ampup_memory.settings import Settings


def schema_commands(settings_options: SettingsOptions,
                    settings_from: Callable[[dict[str, Any]], Settings]) -> list[click.Command]:

    @click.group("schema")
    def schema() -> None:
        """A scope's schema: the built-ins, show one, set one."""

    @schema.command("list")
    def list_() -> None:
        """The built-in schemas: name, entity types and their attributes."""
        from ampup_memory.memory.schemas import builtins

        for s in builtins():
            click.echo(f"{s.name}: {s.description}")
            for e in s.entities:
                click.echo(f"  {e.name}: " + ", ".join(
                    a.name + ("*" if a.cardinality == "many" else "") for a in e.attributes))

    @schema.command("show")
    @click.argument("scope", required=False)
    @click.option("--builtin", default=None, help="Show a built-in instead of a scope's.")
    @click.option("--branch", default=None, help="Branch (default main).")
    @click.option("--history", is_flag=True, help="Every version with its window.")
    @settings_options("common", "tables")
    def show(scope: str | None, builtin: str | None, branch: str | None, history: bool,
             **kwargs: Any) -> None:
        """SCOPE's schema as JSON (schema: null when it has none)."""
        from ampup_memory.cliutil import fail
        from ampup_memory.memory.schemas import builtin as by_name
        from ampup_memory.memory.schemas import get_schema

        if builtin is not None:  # `--builtin ""` showed SCOPE's schema as if left out
            found = by_name(builtin)
            if found is None:
                fail(f"no built-in schema {builtin!r}")
            click.echo(dumps(found.model_dump(exclude_none=True), indent=2))
            return
        if not scope:
            fail("name a SCOPE (org/team) or --builtin NAME")
        with _service(settings_from(kwargs)) as svc:
            click.echo(dumps(get_schema(svc, scope, branch, None, None, history), indent=2))

    @schema.command("set")
    @click.argument("scope")
    @click.option("--builtin", default=None, help="sales, engineering or corpus.")
    @click.option("--file", "path", type=click.Path(exists=True, dir_okay=False,
                                                    path_type=Path),
                  default=None, help="A schema JSON file.")
    @click.option("--branch", default=None, help="Branch to commit on (default main).")
    @click.option("--user", default="admin", show_default=True, callback=user_option,
                  help="The ledger's author (the CLI is admin).")
    @settings_options("common", "tables")
    def set_(scope: str, builtin: str | None, path: Path | None, branch: str | None,
             user: str, **kwargs: Any) -> None:
        """Set SCOPE's schema (a commit on the branch); the same schema again commits
        nothing."""
        from ampup_memory.cliutil import fail
        from ampup_memory.errors import ValidationFailed
        from ampup_memory.memory.schemas import PutSchema, set_schema
        from ampup_memory.memory.service import build

        if (builtin is None) == (path is None):  # the API's message names its fields
            fail("give one of --builtin NAME (sales, engineering or corpus) or --file PATH")
        body: dict[str, Any] = {"builtin": builtin, "branch": branch}
        if path is not None:
            from ampup_memory.web.jsontext import loads

            try:  # the body's rule (PUT /schemas): JSON nested 10,000 deep was a traceback
                body["schema"] = loads(path.read_text("utf-8"), "the file")
            except ValueError as exc:
                fail(f"{path}: not JSON ({exc})")
        with _service(settings_from(kwargs)) as svc:
            try:
                result = set_schema(svc, user, scope, build(PutSchema, **body))
            except ValidationFailed as exc:  # "at --builtin", not the body's "at builtin"
                exc.rename({("builtin",): "--builtin", ("branch",): "--branch"})
                raise
            result.pop("schema", None)
            click.echo(dumps(result))

    return [schema]
