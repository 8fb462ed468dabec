"""The `ampup-memory` command (alias `memstore`).

Every setting in `ampup_memory.settings.Settings` becomes a flag of every command that
opens the server's state, built from the one declaration (name, env var, help).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar, get_args

import click
from rich.console import Console
from rich.table import Table

from ampup_memory.errors import AccessDenied, AmpError, ConfigurationError
from ampup_memory.memory.cli import memory_commands
from ampup_memory.search.cli import search_commands
from ampup_memory.settings import Settings, env_name, load_settings

F = TypeVar("F", bound=Callable[..., Any])
console = Console(stderr=True)
SETTING_FIELDS = list(Settings.model_fields)


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def settings_options(func: F) -> F:
    """Add one option per setting; values left unset fall back to env, then defaults."""
    for name in reversed(SETTING_FIELDS):
        info = Settings.model_fields[name]
        help_text = f"{info.description} [env: {env_name(name)}]"
        annotation = info.annotation
        is_bool = annotation is bool
        if is_bool:
            option = click.option(
                f"{flag_name(name)}/--no-{name.replace('_', '-')}",
                name,
                default=None,
                help=help_text,
            )
        else:
            choices = [a for a in get_args(annotation) if isinstance(a, str)]
            kind: Any = click.Choice(choices) if choices else (
                int if annotation in (int, int | None) else str
            )
            option = click.option(flag_name(name), name, type=kind, default=None,
                                  help=help_text)
        func = option(func)
    return func


def settings_from(kwargs: dict[str, Any]) -> Settings:
    values = {k: kwargs.pop(k) for k in SETTING_FIELDS if k in kwargs}
    try:
        return load_settings(**values)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}", soft_wrap=True)  # one line, for scripts
    sys.exit(2)


def _runtime(settings: Settings, *, reembed: bool = True) -> Any:
    """``reembed=False`` for commands that write no vector (see `server.open_runtime`)."""
    from ampup_memory.server import open_runtime

    try:
        return open_runtime(settings, reembed=reembed)
    except (ConfigurationError, AmpError) as exc:  # AmpError: the store went away at start
        _fail(str(exc))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ampup-memory")
def cli() -> None:
    """AmpUp Memory: shared long-term memory for AI agents (AMP v0.1 + AmpUp)."""


@cli.command()
@settings_options
def serve(**kwargs: Any) -> None:
    """Run the server: REST (AMP + AmpUp), MCP at /mcp and the background timers."""
    import uvicorn

    from ampup_memory.server import create_app

    settings = settings_from(kwargs)
    runtime = _runtime(settings)
    app = create_app(settings, runtime)
    console.print(
        f"AmpUp Memory on http://{settings.host}:{settings.port}  "
        f"(store: {runtime.store.info.name}, home: {settings.home})"
    )
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning",
                timeout_graceful_shutdown=5)


@cli.command()
@settings_options
def mcp(**kwargs: Any) -> None:
    """Serve the MCP tools over stdio as AMP_MCP_AGENT_ID (for desktop agents)."""
    import anyio

    from ampup_memory.mcp.stdio import serve_stdio, stdio_caller

    settings = settings_from(kwargs)
    if not settings.mcp_agent_id:
        _fail("AMP_MCP_AGENT_ID is not set: the stdio MCP server needs the agent id it acts "
              "as (set AMP_MCP_AGENT_ID or pass --mcp-agent-id).")
    rt = _runtime(settings)
    try:
        try:
            caller = stdio_caller(rt)
        except (AmpError, ConfigurationError) as exc:
            _fail(f"cannot act as {settings.mcp_agent_id!r}: {exc}"
                  + (" (keys are required: set AMP_MCP_API_KEY to this agent's key)"
                     if settings.require_keys else ""))
        anyio.run(serve_stdio, rt, caller)
    finally:
        rt.close()


@cli.group()
def lifecycle() -> None:
    """The AMP lifecycle engine."""


@lifecycle.command("run")
@click.option("--now", "now_text", default=None, help="Evaluate as of this RFC 3339 instant.")
@click.option("--dry-run", is_flag=True, help="Report what would change; change nothing.")
@settings_options
def lifecycle_run(now_text: str | None, dry_run: bool, **kwargs: Any) -> None:
    """Run one lifecycle pass now (what the timer does)."""
    from ampup_memory.amp.model import LifecycleRunRequest

    settings = settings_from(kwargs)
    rt = _runtime(settings, reembed=False)
    try:
        now = datetime.fromisoformat(now_text.replace("Z", "+00:00")) if now_text else None
        if now is not None and now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
    except ValueError:
        _fail(f"--now must be an RFC 3339 time, got {now_text!r}")
    try:
        report = rt.amp.run_lifecycle(LifecycleRunRequest(now=now, dry_run=dry_run))
    except AmpError as exc:
        _fail(exc.message)
    finally:
        rt.close()
    click.echo(json.dumps(report.wire(), indent=2))


@cli.command()
@click.argument("cell_id")
@settings_options
def purge(cell_id: str, **kwargs: Any) -> None:
    """Hard-delete one deleted cell whose retention window has passed."""
    settings = settings_from(kwargs)
    rt = _runtime(settings, reembed=False)
    try:
        purged = rt.amp.purge(cell_id)
    except AccessDenied:
        # Over HTTP an unknown id is the one 403; the operator at the store may know more.
        _fail(f"no cell {cell_id!r} in this store")
    except AmpError as exc:
        _fail(f"{exc.code}: {exc.message}")
    finally:
        rt.close()
    click.echo(json.dumps({"purged": purged}))


@cli.group()
def keys() -> None:
    """API keys (stored as SHA-256 hashes; a key is shown once)."""


@keys.command("create")
@click.option("--agent", "agent_id", required=True, help="Agent id the key authenticates.")
@click.option("--admin", is_flag=True, help="The key also opens admin routes.")
@click.option("--expires-in", default=None, help="Lifetime such as 30d, 12h, 45m.")
@click.option("--user", "user_id", default=None, help="AmpUp user the key speaks for.")
@settings_options
def keys_create(agent_id: str, admin: bool, expires_in: str | None, user_id: str | None,
                **kwargs: Any) -> None:
    """Create a key. The key itself is printed alone on the last line."""
    from ampup_memory.amp.model import agent_id_problem
    from ampup_memory.auth import parse_duration

    try:
        lifetime = parse_duration(expires_in) if expires_in else None
    except ValueError as exc:
        _fail(str(exc))
    if problem := agent_id_problem(agent_id):
        _fail(f"--agent {agent_id[:80]!r} is not a valid agent id: it {problem}")
    settings = settings_from(kwargs)
    rt = _runtime(settings, reembed=False)
    try:
        key, record = rt.auth.keyring.create(agent_id, admin, lifetime, user_id)
    finally:
        rt.close()
    click.echo(f"key id: {record.key_id}")
    click.echo(f"agent: {record.agent_id}{'  (admin)' if admin else ''}")
    if record.expires_at:
        click.echo(f"expires: {record.expires_at.isoformat()}")
    click.echo("Store this key now; it is not shown again:")
    click.echo(key)


@keys.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per key, for scripts.")
@settings_options
def keys_list(as_json: bool, **kwargs: Any) -> None:
    """List keys (never the keys themselves)."""
    settings = settings_from(kwargs)
    rt = _runtime(settings, reembed=False)
    try:
        records = rt.store.list_keys()
    finally:
        rt.close()
    if as_json:
        for r in records:
            click.echo(json.dumps({
                "key_id": r.key_id, "agent_id": r.agent_id, "admin": r.admin,
                "user_id": r.user_id, "created_at": r.created_at.isoformat(),
                "expires_at": r.expires_at.isoformat() if r.expires_at else None,
                "revoked_at": r.revoked_at.isoformat() if r.revoked_at else None,
            }))
        return
    table = Table("key id", "agent", "admin", "created", "expires", "revoked")
    for r in records:
        table.add_row(
            r.key_id, r.agent_id, "yes" if r.admin else "", r.created_at.isoformat(),
            r.expires_at.isoformat() if r.expires_at else "",
            r.revoked_at.isoformat() if r.revoked_at else "",
        )
    Console().print(table)


@keys.command("revoke")
@click.argument("key_id")
@settings_options
def keys_revoke(key_id: str, **kwargs: Any) -> None:
    """Revoke a key by its id; it stops working at once."""
    settings = settings_from(kwargs)
    rt = _runtime(settings, reembed=False)
    try:
        done = rt.store.revoke_key(key_id, datetime.now(UTC))
    finally:
        rt.close()
    if not done:
        _fail(f"no active key {key_id!r}")
    click.echo(f"revoked {key_id}")


@cli.command()
@click.option("--force", is_flag=True,
              help="Re-embed even when the store already records this embedder.")
@settings_options
def reembed(force: bool, **kwargs: Any) -> None:
    """Re-embed every AMP cell with the configured embedder and record it in the store.

    `serve` does the same at start when the embedder changed; this does it up front, with
    a progress bar. Run it with the servers stopped (they keep their own embedder).
    """
    from ampup_memory.amp.reembed import ensure_embedding_model
    from ampup_memory.memory.cli import _progress

    settings = settings_from(kwargs)
    rt = _runtime(settings, reembed=False)
    try:
        with _progress() as bar:
            task = bar.add_task("re-embedding cells", total=rt.store.count())
            report = ensure_embedding_model(
                rt.store, rt.embedder, force=force,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
    except (AmpError, ConfigurationError) as exc:
        _fail(str(exc))
    finally:
        rt.close()
    click.echo(json.dumps(report.wire()))


def settings_markdown() -> str:
    """The settings reference (docs/settings.md is this text; a test keeps them equal)."""
    lines = [
        "# Settings",
        "",
        "Every setting is read from its environment variable and can be overridden by the",
        "command-line flag of the same name on `serve`, `mcp` and the maintenance commands.",
        "This page is generated by `ampup-memory settings --markdown`; a test fails when it",
        "drifts from `src/ampup_memory/settings.py`.",
        "",
        "| flag | environment | default | meaning |",
        "|---|---|---|---|",
    ]
    for name in SETTING_FIELDS:
        info = Settings.model_fields[name]
        default = info.default
        text = str(default).lower() if isinstance(default, bool) else str(default)
        shown = "—" if default is None else f"`{text}`"
        lines.append(
            f"| `{flag_name(name)}` | `{env_name(name)}` | {shown} | {info.description} |"
        )
    return "\n".join(lines) + "\n"


@cli.command("settings")
@click.option("--markdown", is_flag=True, help="Print the settings reference as Markdown.")
@settings_options
def show_settings(markdown: bool, **kwargs: Any) -> None:
    """Show every setting with its effective value (secrets hidden)."""
    if markdown:
        click.echo(settings_markdown(), nl=False)
        return
    settings = settings_from(kwargs)
    table = Table("setting", "environment", "value")
    for name in SETTING_FIELDS:
        value = getattr(settings, name)
        if value is not None and name in ("admin_token", "embedding_api_key", "mcp_api_key"):
            value = "•••"
        table.add_row(name, env_name(name), "" if value is None else str(value))
    Console().print(table)


@cli.command("openapi")
@settings_options
def openapi(**kwargs: Any) -> None:
    """Print the server's OpenAPI schema (docs/openapi.json is this output)."""
    from ampup_memory.server import create_app

    settings = settings_from(kwargs)
    app = create_app(settings, _runtime(settings, reembed=False))
    click.echo(json.dumps(app.openapi(), indent=2, sort_keys=True))


for _command in memory_commands(settings_options, settings_from): cli.add_command(_command)  # noqa: E701,E501
for _command in search_commands(settings_options, settings_from): cli.add_command(_command)  # noqa: E701,E501


def main() -> None:
    # One BLAS thread: a query embedding times a matrix is too small to split, and on a busy
    # 2-core machine a second spinning thread doubled vector-search latency (measured).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cli(prog_name="ampup-memory")


if __name__ == "__main__":
    main()
