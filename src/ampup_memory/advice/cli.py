"""Advice commands: ``ampup-memory advice judge [--scope S]``.

``advice_commands`` takes the shared settings helpers from ``ampup_memory.cli`` as
arguments instead of importing them, as the other command modules do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ampup_memory.cliutil import dumps, fail, progress
from ampup_memory.errors import AmpError, ConfigurationError
from ampup_memory.settings import Settings

if TYPE_CHECKING:
    from ampup_memory.memory.cli import SettingsOptions


def advice_commands(settings_options: SettingsOptions,
                    settings_from: Callable[[dict[str, Any]], Settings]) -> list[click.Command]:
    @click.group("advice")
    def advice() -> None:
        """The advice loop: judging ended sessions (more passes to come)."""

    @advice.command("judge")
    @click.option("--scope", default=None, help="Only this org/team.")
    @settings_options("common", "tables", "models")
    def judge(scope: str | None, **kwargs: Any) -> None:
        """Judge every ended session nobody rewarded, once, with the judge model.

        Without a judge model nothing is judged (and nothing fails). A session the model
        could not judge stays pending for the next pass. Prints the counts as JSON."""
        from ampup_memory.advice.judge import judge_pass
        from ampup_memory.memory.scopes import parse_scope
        from ampup_memory.memory.service import MemoryService
        from ampup_memory.models.chat import Role, chat_model

        settings = settings_from(kwargs)
        try:
            svc = MemoryService.open(settings)
        except ConfigurationError as exc:
            fail(str(exc))
        try:
            only = parse_scope(scope, "--scope") if scope else None
            model = chat_model(settings, Role.JUDGE)
            with progress() as bar:
                task = bar.add_task("judging sessions", total=None)
                report = judge_pass(svc, model, only,
                                    on_total=lambda n: bar.update(task, total=n),
                                    on_one=lambda: bar.advance(task))
        except AmpError as exc:
            fail(f"{exc.code}: {exc.message}")
        finally:
            svc.close()
        click.echo(dumps(report))

    return [advice]
