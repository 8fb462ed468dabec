"""Branch commands: ``branch create|list|delete`` and ``merge``, on the home's tables.

They run the same service functions as POST /branches and POST /merge (memory/branches.py),
in this process, so a server sharing the catalog sees their commits on its next read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ampup_memory.cliutil import dumps, user_option
from ampup_memory.memory.cli import SettingsOptions, _service
from ampup_memory.settings import Settings


def branch_commands(settings_options: SettingsOptions,
                    settings_from: Callable[[dict[str, Any]], Settings]) -> list[click.Command]:

    @click.group("branch")
    def branch() -> None:
        """Branches of a scope: fork, list, delete (merge with `merge`)."""

    @branch.command("create")
    @click.argument("scope")
    @click.argument("name")
    @click.option("--from", "source", default=None, help="Branch to fork (default main).")
    @click.option("--at-commit", default=None, help="Fork at this commit (default its head).")
    @click.option("--user", required=True, callback=user_option,
                  help="Who makes it (the ledger's author).")
    @settings_options("common", "tables")
    def create(scope: str, name: str, source: str | None, at_commit: str | None, user: str,
               **kwargs: Any) -> None:
        """Fork NAME from main (or --from) in SCOPE; copies no rows."""
        from ampup_memory.memory import branches
        from ampup_memory.memory.service import build

        with _service(settings_from(kwargs)) as svc:
            req = build(branches.CreateBranch, scope=scope, name=name, at_commit=at_commit,
                        **{"from": source})
            click.echo(dumps(branches.create(svc, user, req)))

    @branch.command("list")
    @click.argument("scope")
    @settings_options("common", "tables")
    def list_(scope: str, **kwargs: Any) -> None:
        """Every live branch of SCOPE with head, base, creator and commits ahead/behind."""
        from ampup_memory.memory import branches

        with _service(settings_from(kwargs)) as svc:
            click.echo(dumps(branches.list_branches(svc, scope), indent=2))

    @branch.command("delete")
    @click.argument("scope")
    @click.argument("name")
    @click.option("--user", required=True, callback=user_option,
                  help="The branch's creator (the CLI is admin: any user may be named).")
    @settings_options("common", "tables")
    def delete(scope: str, name: str, user: str, **kwargs: Any) -> None:
        """Delete NAME: the name is free again; its commits stay in the ledger."""
        from ampup_memory.memory import branches

        with _service(settings_from(kwargs)) as svc:
            click.echo(dumps(branches.delete(svc, user, scope, name, admin=True)))

    @click.command("merge")
    @click.argument("scope")
    @click.argument("source", metavar="FROM")
    @click.option("--into", default=None, help="Branch merged into (default main).")
    @click.option("--message", default=None,
                  help="The merge commit's message in the ledger (default: merge FROM "
                  "into BRANCH).")
    @click.option("--dry-run", is_flag=True, help="Report what would change; write nothing.")
    @click.option("--user", required=True, callback=user_option,
                  help="Who merges (the ledger's author).")
    @settings_options("common", "tables")
    def merge(scope: str, source: str, into: str | None, message: str | None, dry_run: bool,
              user: str, **kwargs: Any) -> None:
        """Merge FROM into main (or --into): three-way per (entity, predicate).

        On a conflict nothing is written; the conflicts are printed and the exit code is 1.
        """
        from ampup_memory.errors import Conflict, ValidationFailed
        from ampup_memory.memory import branches
        from ampup_memory.memory.service import build

        with _service(settings_from(kwargs)) as svc:
            try:
                req = build(branches.MergeRequest, scope=scope, into=into, message=message,
                            dry_run=dry_run, **{"from": source})
                click.echo(dumps(branches.merge(svc, user, req, admin=True)))
            except ValidationFailed as exc:  # "at FROM", not the body's "at from"
                exc.rename({("from",): "FROM", ("into",): "--into", ("message",): "--message"})
                raise
            except Conflict as exc:
                click.echo(dumps({"error": exc.code, "message": exc.message,
                                  "conflicts": exc.details.get("conflicts", [])}, indent=2))
                raise SystemExit(1) from exc

    return [branch, merge]
