"""Advice commands: ``ampup-memory advice judge|cluster|learn|compile [--scope S]``.

``advice_commands`` takes the shared settings helpers from ``ampup_memory.cli`` as
arguments instead of importing them, as the other command modules do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ampup_memory.cliutil import dumps, fail_if_model_failed, no_model_line, progress
from ampup_memory.memory.cli import _service, existing_scope
from ampup_memory.models.setaside import KINDS
from ampup_memory.settings import Settings

if TYPE_CHECKING:
    from ampup_memory.memory.cli import SettingsOptions


def advice_commands(settings_options: SettingsOptions,
                    settings_from: Callable[[dict[str, Any]], Settings]) -> list[click.Command]:
    @click.group("advice")
    def advice() -> None:
        """The advice loop: judging sessions, clustering situations, learning notes,
        compiling procedures."""

    @advice.command("judge")
    @click.option("--scope", default=None, help="Only this org/team.")
    @settings_options("common", "tables", "models")
    def judge(scope: str | None, **kwargs: Any) -> None:
        """Judge every ended session nobody rewarded, once, with the judge model.

        Without a judge model nothing is judged (and nothing fails). A session the model
        could not judge stays pending for the next pass; one whose answers were of the
        wrong shape, or that the model endpoint refused (too long, say), on 3
        passes in a row is set aside (not asked again by this model).
        Prints the counts as JSON."""
        from ampup_memory.advice.judge import judge_pass
        from ampup_memory.models.chat import Role, chat_model

        settings = settings_from(kwargs)
        with _service(settings) as svc:
            only = existing_scope(svc, scope)
            model = chat_model(settings, Role.JUDGE)
            with progress() as bar:
                task = bar.add_task("judging sessions", total=None)
                report = judge_pass(svc, model, only,
                                    on_total=lambda n: bar.update(task, total=n),
                                    on_one=lambda: bar.advance(task))
        click.echo(dumps(report))
        if model is None:
            no_model_line("judge", "nothing was judged (sessions stay pending)")
        fail_if_model_failed(report["failed"], "session(s)",
                             "they stay pending for the next pass", report["set_aside"])

    @advice.command("cluster")
    @click.option("--scope", default=None, help="Only this org/team.")
    @settings_options("common", "tables", "models", "embedding", "situations")
    def cluster(scope: str | None, **kwargs: Any) -> None:
        """Sort each scope's rewarded runs and sessions into situations, once.

        A changed map is committed as the scope's next version (situations that still
        exist keep their ids); the learning model, if any, names the groups. Prints JSON."""
        from ampup_memory.advice.loop import cluster_pass
        from ampup_memory.models.chat import Role, chat_model
        from ampup_memory.search.embed import build_embedder

        settings = settings_from(kwargs)
        with _service(settings) as svc:
            only = existing_scope(svc, scope)
            embedder = build_embedder(settings)
            with progress() as bar:
                task = bar.add_task("clustering scopes", total=None)
                report = cluster_pass(svc, embedder, chat_model(settings, Role.LEARN),
                                      settings.advice_situation_min_similarity, only,
                                      on_one=lambda: bar.advance(task))
        click.echo(dumps(report))

    @advice.command("learn")
    @click.option("--scope", default=None, help="Only this org/team.")
    @settings_options("common", "tables", "models", "notes")
    def learn(scope: str | None, **kwargs: Any) -> None:
        """Update every note's evidence (promote, retire), then learn a note for each
        situation with enough rewarded tasks and none yet, once.

        Without a learning model no note is learned (evidence is still updated); a
        situation the model could not write a note for is tried again next time, unless
        its answers were of the wrong shape, or its request refused, on 3 passes in a row
        (set aside until the model or its tasks change)."""
        from ampup_memory.advice.gate import GateRules
        from ampup_memory.advice.loop import learn_pass
        from ampup_memory.models.chat import Role, chat_model

        settings = settings_from(kwargs)
        with _service(settings) as svc:
            only = existing_scope(svc, scope)
            model = chat_model(settings, Role.LEARN)
            with progress() as bar:
                task = bar.add_task("learning notes", total=None)
                report = learn_pass(svc, model, GateRules.from_settings(settings),
                                    settings.advice_min_runs_for_note, only,
                                    on_one=lambda: bar.advance(task))
        click.echo(dumps(report))
        if model is None:
            no_model_line("learn", "no note was learned (evidence was updated)")
        fail_if_model_failed(sum(s["failed"] for s in report["scopes"]), "situation(s)",
                             "they are tried again next pass",
                             sum(s["set_aside"] for s in report["scopes"]))

    @advice.command("compile")
    @click.option("--scope", default=None, help="Only this org/team.")
    @settings_options("common", "tables", "models", "embedding")
    def compile_(scope: str | None, **kwargs: Any) -> None:
        """Compile each scope's chosen documents (an admin chooses them over the API;
        see docs/advice.md) into procedures with the compile model, once.

        A scope whose documents did not change since its last compilation is skipped; one
        the model failed on keeps its procedures and is tried again next time (set aside
        after 3 passes of answers of the wrong shape or refused requests, until the model
        or the documents change). Without a
        compile model nothing is compiled (and the report says so). Prints JSON."""
        from ampup_memory.advice.procedures import compile_pass
        from ampup_memory.models.chat import Role, chat_model
        from ampup_memory.search.embed import build_embedder

        settings = settings_from(kwargs)
        with _service(settings) as svc:
            only = existing_scope(svc, scope)
            model = chat_model(settings, Role.COMPILE)
            if model is None:
                report = compile_pass(svc, None, build_embedder(settings), only)
                no_model_line("compile", "nothing compiled")
            else:
                embedder = build_embedder(settings)
                with progress() as bar:
                    task = bar.add_task("compiling procedures", total=None)
                    report = compile_pass(svc, model, embedder, only,
                                          on_one=lambda: bar.advance(task))
        click.echo(dumps(report))
        fail_if_model_failed(sum(s["failed"] for s in report["scopes"]), "scope(s)",
                             "they keep their procedures until the next pass",
                             sum(s["set_aside"] for s in report["scopes"]))

    @click.command("set-aside")
    @click.option("--scope", default=None, help="One scope (org/team); default: every scope.")
    @click.option("--kind", type=click.Choice(KINDS), default=None,
                  help="One kind of model work; default: every kind.")
    @settings_options("common", "tables", "models")
    def set_aside(scope: str | None, kind: str | None, **kwargs: Any) -> None:
        """List the items a model pass set aside (extraction's episodes, the judge's
        sessions, learn's situations, compile's scopes: no usable answer on 3 passes in a
        row), oldest first, one JSON line each. They are not asked again until the model
        or their inputs change; a read index rebuild forgets them (asked again). Records
        of items gone since (deleted, or a session rewarded) are dropped."""
        from ampup_memory.advice.aside import listing, models_now

        settings = settings_from(kwargs)
        with _service(settings) as svc:
            named = None if scope is None else str(existing_scope(svc, scope))
            for item in listing(svc, None, named, kind, models_now(settings)):
                click.echo(dumps(item))

    return [advice, set_aside]

