"""The `ampup-memory` command (alias `memstore`).

Every setting in `ampup_memory.settings.Settings` becomes a flag of the commands that read
it (`settings.SETTING_GROUPS`), built from the one declaration (name, env var, help).

This module imports only click and the settings: each command imports what it needs when
it runs, so `--help`, `settings` and `keys` answer without loading the server stack.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, get_args

import click

from ampup_memory.advice.cli import advice_commands
from ampup_memory.cliutil import (
    ctrl_c_seen,
    interrupted,
    task_progress,
    user_option,
    watch_ctrl_c,
)
from ampup_memory.cliutil import dumps as _dumps
from ampup_memory.cliutil import error_line as _error_line
from ampup_memory.cliutil import fail as _fail
from ampup_memory.errors import (
    AccessDenied,
    AmpError,
    ConfigurationError,
    driver_said,
    storage_down,
    storage_trouble,
)
from ampup_memory.memory.branch_cli import branch_commands
from ampup_memory.memory.cli import memory_commands
from ampup_memory.memory.extraction_cli import extraction_commands
from ampup_memory.memory.schema_cli import schema_commands
from ampup_memory.memory.workspace_cli import workspace_commands
from ampup_memory.ops.cli import ops_commands
from ampup_memory.search.cli import search_commands
from ampup_memory.settings import (
    SETTING_GROUPS,
    Settings,
    SettingsError,
    ensure_home,
    env_name,
    file_in_the_way,
    flag_name,
    load_settings,
    setting_group,
    shown_value,
)

if TYPE_CHECKING:
    import socket

    from ampup_memory.amp.store.base import CellStore

F = TypeVar("F", bound=Callable[..., Any])
SETTING_FIELDS = list(Settings.model_fields)
PROG_NAMES = ("ampup-memory", "memstore")
ALL_GROUPS = (*SETTING_GROUPS, "server")


def settings_options(*groups: str) -> Callable[[F], F]:
    """One option per setting of these groups (`settings.SETTING_GROUPS`; ``server`` holds
    the rest); values left unset fall back to env, then the config file, then defaults."""
    unknown = set(groups) - set(ALL_GROUPS)
    assert not unknown, unknown

    def decorate(func: F) -> F:
        for name in reversed(SETTING_FIELDS):
            if setting_group(name) in groups:
                func = _option(name)(func)
        return func

    return decorate


def _option(name: str) -> Callable[[F], F]:
    info = Settings.model_fields[name]
    help_text = f"{info.description} [env: {env_name(name)}]"
    annotation = info.annotation
    if annotation is bool:
        return click.option(f"{flag_name(name)}/--no-{name.replace('_', '-')}", name,
                            default=None, help=help_text)
    choices = [a for a in get_args(annotation) if isinstance(a, str)]
    kind: Any = click.Choice(choices) if choices else (
        int if annotation in (int, int | None) else str
    )
    # A float setting is read by its pydantic field (its bounds, its one error line); the
    # help says what it takes rather than click's TEXT.
    metavar = "PATH" if name == "config" else (
        "NUMBER" if annotation in (float, float | None) else None)
    return click.option(flag_name(name), name, type=kind, default=None, help=help_text,
                        metavar=metavar)


def settings_from(kwargs: dict[str, Any]) -> Settings:
    from ampup_memory.logs import configure_logging

    values = {k: kwargs.pop(k) for k in SETTING_FIELDS if k in kwargs}
    try:
        settings = load_settings(**values)
    except SettingsError as exc:
        if exc.by_flag:  # the command's --help says what the flag takes
            raise click.UsageError(str(exc)) from exc
        _fail(str(exc))  # the line names the variable or file it came from
    configure_logging(settings)
    return settings


def _runtime(settings: Settings, *, reembed: bool = True) -> Any:
    """``reembed=False`` for commands that write no vector (see `runtime.open_runtime`);
    a re-embedding, when there is one, shows a progress bar."""
    from ampup_memory.cliutil import progress_if_work
    from ampup_memory.runtime import open_runtime

    try:
        with progress_if_work("re-embedding cells") as bar:
            return open_runtime(settings, reembed=reembed, progress=bar)
    except (ConfigurationError, AmpError) as exc:  # AmpError: the store went away at start
        _fail(str(exc))


@contextmanager
def _lease(lease: Callable[[Settings], AbstractContextManager[None]],
           settings: Settings) -> Iterator[None]:
    """``lease`` held for the block (`serving.py`); one it cannot take is one error line."""
    with ExitStack() as stack:
        try:
            stack.enter_context(lease(settings))
        except ConfigurationError as exc:
            _fail(str(exc))
        yield


@contextmanager
def _cell_store(settings: Settings) -> Iterator[CellStore]:
    """The AMP cell store alone (keys live there): no embedder, no tables, no server."""
    from ampup_memory.amp.store.registry import open_store

    try:
        ensure_home(settings)
        store = open_store(settings.resolved_store_uri, None, ann_params=settings.ann_params)
    except (ConfigurationError, AmpError) as exc:
        _fail(str(exc))
    try:
        yield store
    finally:
        store.close()


@contextmanager
def _existing_cell_store(settings: Settings) -> Iterator[CellStore | None]:
    """`_cell_store` for commands that only read or revoke: None where no store was made
    yet, and nothing is made (not the home folder either)."""
    from ampup_memory.amp.store.registry import open_existing_store

    try:
        if settings.store_uri is None and file_in_the_way(settings.home) is not None:
            # A file where the home should be is no "no keys yet": `ensure_home` makes
            # nothing here (mkdir fails) and says what is in the way, as every command does.
            ensure_home(settings)
        store = open_existing_store(settings.resolved_store_uri, ann_params=settings.ann_params)
    except (ConfigurationError, AmpError) as exc:
        _fail(str(exc))
    try:
        yield store
    finally:
        if store is not None:
            store.close()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ampup-memory")
def cli() -> None:
    """AmpUp Memory: shared long-term memory for AI agents (AMP v0.1 + AmpUp)."""


@cli.command()
@settings_options("common", "cells", "pool", "tables", "embedding", "access", "retention",
                  "maintenance", "models", "ann", "lease", "situations", "notes", "server")
def serve(**kwargs: Any) -> None:
    """Run the server: REST (AMP + AmpUp), MCP at /mcp and the background timers."""
    settings = settings_from(kwargs)
    # Take the port first: a port in use is one line now, not after the start-up work.
    sock = _listen(settings.host, settings.port)
    port = sock.getsockname()[1]
    _warn_if_open(settings)
    _open_files(settings)

    import uvicorn

    from ampup_memory.logs import announce
    from ampup_memory.server import create_app
    from ampup_memory.serving import serving as serving_lease

    # The lease first: no start-up work (a re-embedding, the index's catch-up) under a rebuild.
    with _lease(serving_lease, settings):
        runtime = _runtime(settings)
        app = create_app(settings, runtime)
        # An IPv6 address goes in brackets in a URL (`http://[::1]:8765`), as a browser takes.
        shown_host = f"[{settings.host}]" if ":" in settings.host.strip("[]") \
            and not settings.host.startswith("[") else settings.host
        announce(settings, f"AmpUp Memory on http://{shown_host}:{port}  "
                           f"(store: {runtime.store.info.name}, home: {settings.home})")
        # log_config=None: logging is ours (`logs.py`); uvicorn only sets its access log.
        config = uvicorn.Config(app, log_config=None, access_log=settings.access_log,
                                timeout_graceful_shutdown=5)
        uvicorn.Server(config).run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port as uvicorn would bind it (uvicorn then serves on it), or
    one error line and exit 2."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, as getaddrinfo gives uvicorn: asyncio turns Nagle off (TCP_NODELAY) only
    # on connections whose socket says so. With proto 0 a response's body (written after
    # its headers) waited for the client's delayed ACK: 40 ms on every keep-alive request.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        why = (f"the port is already in use (choose another with --port or "
               f"{env_name('port')})" if exc.errno == errno.EADDRINUSE
               else exc.strerror or str(exc))
        _fail(f"cannot listen on {host}:{port}: {why}")
    sock.set_inheritable(True)
    return sock


def _open_files(settings: Settings) -> None:
    """Raise the soft limit on open files to the hard one; warn when it stays low."""
    from ampup_memory.logs import announce
    from ampup_memory.web.filelimit import low_limit_warning, raise_open_file_limit

    warning = low_limit_warning(raise_open_file_limit())
    if warning is not None:
        announce(settings, warning, warning=True)


def _warn_if_open(settings: Settings) -> None:
    """Trust mode (no keys: any caller may claim any agent or user) off loopback is a risk
    the operator must see."""
    # The guard's own rule: what it treats as a loopback bind is what needs no warning.
    from ampup_memory.logs import announce
    from ampup_memory.web.origin import is_loopback

    if settings.require_keys or is_loopback(settings.host):
        return
    announce(settings, f"serving on {settings.host} without API keys: anyone who can reach"
                       " this port may act as any agent or user; set "
                       f"{env_name('require_keys')}=true and create keys (see "
                       "docs/security-model.md)", warning=True)


@cli.command()
@settings_options("common", "cells", "pool", "tables", "embedding", "access", "retention", "mcp",
                  "ann", "situations", "notes")
def mcp(**kwargs: Any) -> None:
    """Serve the MCP tools over stdio as AMP_MCP_AGENT_ID (for desktop agents)."""
    import anyio

    from ampup_memory.auth import UserMismatch
    from ampup_memory.mcp.stdio import serve_stdio, stdio_caller
    from ampup_memory.serving import serving as serving_lease

    settings = settings_from(kwargs)
    if not settings.mcp_agent_id:
        _fail("AMP_MCP_AGENT_ID is not set: the stdio MCP server needs the agent id it acts "
              "as (set AMP_MCP_AGENT_ID or pass --mcp-agent-id).")
    from ampup_memory.amp.model import agent_id_problem

    problem = agent_id_problem(settings.mcp_agent_id)
    if problem:  # not "X-AMP-Agent-ID is not ...": stdio has no headers
        _fail(f"AMP_MCP_AGENT_ID {settings.mcp_agent_id[:80]!r} is not a valid agent id: it "
              f"{problem}")
    user = settings.mcp_user_id
    if user is not None and not settings.require_keys:
        from ampup_memory.memory.acl import ID_RULE, valid_id

        if not valid_id(user):  # else every AmpUp tool call refuses, the process runs on
            _fail(f"AMPUP_MEMORY_MCP_USER {user!r} is not a valid user id: {ID_RULE}")
    with _lease(serving_lease, settings):  # before any start-up work, as `serve`
        rt = _runtime(settings)
        try:
            try:
                stdio_caller(rt)  # a bad key stops the process here; calls check it again
            except UserMismatch as exc:  # stdio has no headers: name the settings
                _fail(f"AMPUP_MEMORY_MCP_USER {user!r} is not the user AMP_MCP_API_KEY speaks "
                      "for" + (" (the key speaks for no user: make one with `keys create "
                               "--agent ID --user USER`)" if exc.key_user is None else "")
                      + ": unset AMPUP_MEMORY_MCP_USER, or set it to the key's user.")
            except (AmpError, ConfigurationError) as exc:
                _fail(f"cannot act as {settings.mcp_agent_id!r}: {exc}"
                      + (" (keys are required: set AMP_MCP_API_KEY to this agent's key)"
                         if settings.require_keys else ""))
            anyio.run(serve_stdio, rt)
        finally:
            rt.close()


@cli.group()
def lifecycle() -> None:
    """The AMP lifecycle engine."""


@lifecycle.command("run")
@click.option("--now", "now_text", default=None, help="Evaluate as of this RFC 3339 instant.")
@click.option("--dry-run", is_flag=True, help="Report what would change; change nothing.")
@settings_options("common", "cells", "pool", "tables", "embedding", "ann", "retention")
def lifecycle_run(now_text: str | None, dry_run: bool, **kwargs: Any) -> None:
    """Run one lifecycle pass now (what the timer does)."""
    from pydantic import ValidationError

    from ampup_memory.amp.model import LifecycleRunRequest
    from ampup_memory.cliutil import progress as _progress

    settings = settings_from(kwargs)
    try:  # the rule of POST /amp/v1/lifecycle/run's `now`: a date alone, or no offset, is none
        request = LifecycleRunRequest.model_validate({"now": now_text, "dry_run": dry_run})
    except ValidationError as exc:
        _fail(f"--now {now_text!r}: "
              + str(exc.errors()[0]["msg"]).removeprefix("Value error, "))
    rt = _runtime(settings, reembed=False)
    try:
        with _progress() as bar:
            report = rt.amp.run_lifecycle(
                request, progress=task_progress(bar, "evaluating cells"))
    except AmpError as exc:
        _fail(exc.message)
    finally:
        rt.close()
    click.echo(_dumps(report.wire(), indent=2))


@cli.command()
@click.argument("cell_id")
@settings_options("common", "cells", "pool", "tables", "embedding", "ann", "retention")
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
    click.echo(_dumps({"purged": purged}))


@cli.group()
def keys() -> None:
    """API keys (stored as SHA-256 hashes; a key is shown once)."""


@keys.command("create")
@click.option("--agent", "agent_id", required=True, help="Agent id the key authenticates.")
@click.option("--admin", is_flag=True,
              help="The key may also do what only an admin may (run the lifecycle, purge, "
              "set principals; docs/security-model.md).")
@click.option("--expires-in", "lifetime", default=None, callback=lambda _c, _p, v: _lifetime(v),
              help="Lifetime such as 30d, 12h, 1d12h.")
@click.option("--user", "user_id", default=None, callback=user_option,
              help="AmpUp user the key speaks for.")
@settings_options("common", "cells")
def keys_create(agent_id: str, admin: bool, lifetime: timedelta | None, user_id: str | None,
                **kwargs: Any) -> None:
    """Create a key. The key itself is printed alone on the last line."""
    from ampup_memory.amp.model import agent_id_problem
    from ampup_memory.auth import KeyRing

    if problem := agent_id_problem(agent_id):
        _fail(f"--agent {agent_id[:80]!r} is not a valid agent id: it {problem}")
    settings = settings_from(kwargs)
    with _cell_store(settings) as store:
        key, record = KeyRing(store, None).create(agent_id, admin, lifetime, user_id)
    click.echo(f"key id: {record.key_id}")
    click.echo(f"agent: {record.agent_id}{'  (admin)' if admin else ''}")
    if record.expires_at:
        from ampup_memory.timefmt import format_time

        click.echo(f"expires: {format_time(record.expires_at)}")
    click.echo("Store this key now; it is not shown again:")
    click.echo(key)


def _lifetime(text: str | None) -> timedelta | None:
    """``--expires-in``, as a usage error naming the option (it was a bare `bad
    duration` line, no option named)."""
    from ampup_memory.auth import parse_duration

    try:
        return parse_duration(text) if text else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@keys.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per key, for scripts.")
@settings_options("common", "cells")
def keys_list(as_json: bool, **kwargs: Any) -> None:
    """List keys (never the keys themselves)."""
    settings = settings_from(kwargs)
    with _existing_cell_store(settings) as store:
        records = [] if store is None else store.list_keys()
    if not records and not as_json:
        click.echo("no API keys (create one with `ampup-memory keys create --agent ID`)")
        return
    if as_json:
        from ampup_memory.timefmt import format_time

        for r in records:
            click.echo(_dumps({
                "key_id": r.key_id, "agent_id": r.agent_id, "admin": r.admin,
                "user_id": r.user_id, "created_at": format_time(r.created_at),
                "expires_at": format_time(r.expires_at) if r.expires_at else None,
                "revoked_at": format_time(r.revoked_at) if r.revoked_at else None,
            }))
        return
    from rich.console import Console
    from rich.table import Table

    # The key id is what `keys revoke` takes: never cut to `key_65ca…` by a narrow
    # terminal; agents and users fold instead. Off a terminal (a pipe, a file) no fold.
    table = Table(box=None, header_style="bold")
    table.add_column("key id", no_wrap=True, min_width=max(len(r.key_id) for r in records))
    table.add_column("agent", overflow="fold")
    table.add_column("user", overflow="fold")
    for name in ("admin", "created", "expires", "revoked"):
        table.add_column(name, no_wrap=True)
    for r in records:
        table.add_row(
            r.key_id, r.agent_id, r.user_id or "", "yes" if r.admin else "",
            *(_minute(t) for t in (r.created_at, r.expires_at, r.revoked_at)))
    console = Console()
    if not console.is_terminal:
        console = Console(width=1000)
    console.print(table)


def _minute(at: datetime | None) -> str:
    return "" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")


@keys.command("revoke")
@click.argument("key_id")
@settings_options("common", "cells")
def keys_revoke(key_id: str, **kwargs: Any) -> None:
    """Revoke a key by its id; it stops working at once."""
    settings = settings_from(kwargs)
    with _existing_cell_store(settings) as store:
        done = store is not None and store.revoke_key(key_id, datetime.now(UTC))
    if not done:
        _fail(f"no active key {key_id!r}")
    click.echo(f"revoked {key_id}")


@cli.command()
@click.option("--force", is_flag=True,
              help="Re-embed even when the store already records this embedder.")
@settings_options("common", "cells", "pool", "tables", "embedding", "ann")
def reembed(force: bool, **kwargs: Any) -> None:
    """Re-embed every AMP cell with the configured embedder and record it in the store.

    `serve` does the same at start when the embedder changed; this does it up front, with
    a progress bar. Run it with the servers stopped (they keep their own embedder).
    """
    from ampup_memory.amp.reembed import ensure_embedding_model
    from ampup_memory.cliutil import progress as _progress

    settings = settings_from(kwargs)
    rt = _runtime(settings, reembed=False)
    try:
        with _progress() as bar:
            report = ensure_embedding_model(
                rt.store, rt.embedder, force=force,
                progress=task_progress(bar, "re-embedding cells", rt.store.count()),
            )
    except (AmpError, ConfigurationError) as exc:
        _fail(str(exc))
    finally:
        rt.close()
    click.echo(_dumps(report.wire()))


@cli.command("owner-indexes")
@settings_options("common", "cells", "pool", "tables", "embedding", "ann")
def owner_indexes(**kwargs: Any) -> None:
    """Give each owner of more than 5,000 live AMP cells a vector index of its own, now.

    PostgreSQL cell store only: what `serve` does every
    AMP_OWNER_INDEX_INTERVAL_SECONDS. A search naming such an owner then walks
    only that owner's cells. Builds run CONCURRENTLY, the largest owners first (writers
    never wait; a build reads the whole table and can take a minute at a million cells);
    an owner under half that loses its index. Prints the owners whose index was built,
    dropped, kept or failed.
    """
    from ampup_memory.cliutil import progress as _progress

    settings = settings_from(kwargs)
    rt = _runtime(settings, reembed=False)
    try:
        if rt.store.info.name != "postgresql":
            _fail("owner indexes are for the PostgreSQL cell store; SQLite builds a large"
                  " owner's block in memory as it searches")
        with _progress() as bar:
            report = rt.store.tend_owner_indexes(
                progress=task_progress(bar, "owner vector indexes: table blocks read"))
    except (AmpError, ConfigurationError) as exc:
        _fail(str(exc))
    finally:
        rt.close()
    if report is None:
        _fail("the cell store has no embedding width to index")
    if report.skipped:
        _fail("another process is tending the owner indexes; try again when it is done")
    click.echo(_dumps(report.wire()))


def command_tree(group: click.Group | None = None, prefix: str = ""
                 ) -> Iterator[tuple[str, click.Command]]:
    """Every group and command under ``group`` (the whole CLI by default) by its path
    (``keys create``), depth first, in the order they were added: what the settings
    reference and `tools/cli_audit.py` read off the tree itself."""
    for name, command in (group or cli).commands.items():
        path = f"{prefix}{name}"
        yield path, command
        if isinstance(command, click.Group):
            yield from command_tree(command, f"{path} ")


def _readers() -> dict[str, list[str]]:
    """Setting -> the commands that take its flag (all but `settings`, which takes every
    one), read off the command tree itself so the docs cannot drift from it."""
    readers: dict[str, list[str]] = {name: [] for name in SETTING_FIELDS}
    for path, command in command_tree():
        if isinstance(command, click.Group) or path == "settings":
            continue
        for param in command.params:
            if param.name in readers:
                readers[param.name].append(path)
    return readers


def settings_markdown() -> str:
    """The settings reference (docs/settings.md is this text; a test keeps them equal)."""
    readers = _readers()
    everyone = set().union(*readers.values())
    lines = [
        "# Settings",
        "",
        "Each setting is read, first match wins, from:",
        "",
        "1. the command-line flag (each command offers the flags of the settings it reads;",
        "   see the last column);",
        "2. its environment variable (only the names below: a bare `HOME`, `HOST` or `PORT`",
        "   is never read);",
        "3. the config file: TOML, settings by name at the top level (`port = 9000`,",
        '   `store_uri = "postgresql://…"`); `config.toml` in the home folder (the default',
        "   `~/.ampup-memory/config.toml`, or in `AMPUP_MEMORY_HOME` / `--home`), or the file",
        "   `--config PATH` / `AMPUP_MEMORY_CONFIG` names (which must exist). An unknown name",
        "   in the file is an error;",
        "4. the default.",
        "",
        "A value that cannot work stops every command and `serve` at once, with one line",
        "naming the setting and where its value came from, never at first use: the",
        "environment variable (`invalid setting model_name (AMPUP_MEMORY_MODEL): … (got …",
        "from the environment; see docs/settings.md)`), the flag (`invalid setting",
        "model_name (--model-name): …`, then the command's `--help`) or the config file",
        "(`config file PATH: invalid setting …`). A model's or embedder's name, base URL or",
        "key (and the other names, tokens and keys sent over HTTP: S3, MCP, the admin",
        "token) holding a control character (a NUL, a tab, a line break) is refused so,",
        "and so is a model's or embedder's base URL that is not `http://` or `https://`",
        "with a host and no query (`localhost:11434/v1`, `…/v1?api-version=1`), an S3",
        "endpoint that is not `http://` or `https://` with a host and nothing else (no",
        "path, query or `user:password@`: the bucket and prefix go in the warehouse, the",
        "keys in their settings), a warehouse",
        "that is not `file:///path` or `s3://bucket/prefix` (a bare path, `gs://`, no",
        "bucket, a query, `user:password@`), and a store, index or catalog URI that is not",
        "`sqlite:///path` or `postgresql://…` (`sqlite://amp.db`, a bare path); a key's",
        "value is not shown. A whole number (seconds, counts, bytes) is at most",
        "2,147,483,647 (68 years of seconds).",
        "",
        "`ampup-memory settings` shows the effective values (`--json` for scripts); secrets",
        "and passwords inside URIs are masked. This page is generated by",
        "`ampup-memory settings --markdown`; a test fails when it drifts from",
        "`src/ampup_memory/settings.py`.",
        "",
        "| flag | environment | default | commands | meaning |",
        "|---|---|---|---|---|",
    ]
    for name in SETTING_FIELDS:
        info = Settings.model_fields[name]
        default = info.default
        text = str(default).lower() if isinstance(default, bool) else str(default)
        shown = "—" if default is None else f"`{text}`"
        used = ("all" if set(readers[name]) == everyone
                else ", ".join(f"`{c}`" for c in readers[name]) or "`settings`")
        lines.append(f"| `{flag_name(name)}` | `{env_name(name)}` | {shown} | {used} "
                     f"| {info.description} |")
    return "\n".join(lines) + "\n"


@cli.command("settings")
@click.option("--markdown", is_flag=True, help="Print the settings reference as Markdown.")
@click.option("--json", "as_json", is_flag=True, help="Effective values as one JSON object.")
@settings_options(*ALL_GROUPS)
def show_settings(markdown: bool, as_json: bool, **kwargs: Any) -> None:
    """Show every setting with its effective value (secrets and URI passwords masked)."""
    if markdown and as_json:  # two outputs asked for: neither silently wins
        raise click.UsageError("--markdown and --json print different things: give one")
    if markdown:
        click.echo(settings_markdown(), nl=False)
        return
    settings = settings_from(kwargs)
    values = {name: shown_value(name, getattr(settings, name)) for name in SETTING_FIELDS}
    if as_json:
        click.echo(_dumps({k: str(v) if isinstance(v, Path) else v
                           for k, v in values.items()}))
        return
    from rich.console import Console
    from rich.table import Table

    # Names and values whole: a narrow terminal folds them, a pipe or a file (80 columns to
    # rich) cut them to `postgresql://amp:•••@d…`, so `settings | grep` lost the value.
    table = Table("setting", "environment", "value")
    for column in table.columns:
        column.overflow = "fold"
    for name, value in values.items():
        table.add_row(name, env_name(name), "" if value is None else str(value))
    console = Console()
    if not console.is_terminal:
        console = Console(width=1000)
    console.print(table)


@cli.command("openapi")
@settings_options("common", "cells", "pool", "tables", "embedding", "ann")
def openapi(**kwargs: Any) -> None:
    """Print the server's OpenAPI schema (docs/openapi.json is this output)."""
    from ampup_memory.server import create_app

    settings = settings_from(kwargs)
    app = create_app(settings, _runtime(settings, reembed=False))
    click.echo(json.dumps(app.openapi(), indent=2, sort_keys=True))


for _command in memory_commands(settings_options, settings_from): cli.add_command(_command)  # noqa: E701,E501
for _command in branch_commands(settings_options, settings_from): cli.add_command(_command)  # noqa: E701,E501
for _command in workspace_commands(settings_options, settings_from): cli.add_command(_command)  # noqa: E701,E501
for _command in schema_commands(settings_options, settings_from): cli.add_command(_command)  # noqa: E701,E501
for _command in extraction_commands(settings_options, settings_from): cli.add_command(_command)  # noqa: E701,E501
for _command in search_commands(settings_options, settings_from): cli.add_command(_command)  # noqa: E701,E501
for _command in advice_commands(settings_options, settings_from): cli.add_command(_command)  # noqa: E701,E501
for _command in ops_commands(settings_options, settings_from, _runtime): cli.add_command(_command)  # noqa: E701,E501


def main() -> None:
    # One BLAS thread: a query embedding times a matrix is too small to split, and on a busy
    # 2-core machine a second spinning thread doubled vector-search latency (measured).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # `memstore --help` says memstore; `python -m ampup_memory.cli` says ampup-memory.
    invoked = Path(sys.argv[0]).name
    run(prog_name=invoked if invoked in PROG_NAMES else PROG_NAMES[0])


def _missing_command(exc: click.ClickException) -> str | None:
    """A group run without its command (`ampup-memory keys`): click's error carries the
    group's whole help; one line naming its commands says what to type instead."""
    ctx = getattr(exc, "ctx", None)
    if ctx is None or not isinstance(ctx.command, click.Group) \
            or not isinstance(exc, click.exceptions.NoArgsIsHelpError):
        return None
    names = ctx.command.list_commands(ctx)
    if len(names) > 8:
        return "missing a command"
    return f"missing a command: {', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 \
        else f"missing a command: {names[0]}"


def run(args: list[str] | None = None, prog_name: str = PROG_NAMES[0]) -> None:
    """Run the CLI; a usage error is one line (``error: …``, exit code 2), as in
    docs/cli.md, not click's usage block."""
    watch_ctrl_c()
    try:
        code = cli.main(args, prog_name, standalone_mode=False)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt) or ctrl_c_seen():
            interrupted()  # Ctrl-C: what was committed stays, the rest is not written
        _error_line("aborted")
        sys.exit(1)
    except click.ClickException as exc:
        message = _missing_command(exc) or exc.format_message()
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            path = exc.ctx.command_path
            message = f"{path}: {message} (see `{path} --help`)"
        _error_line(message)
        sys.exit(exc.exit_code)
    except ConfigurationError as exc:  # wherever a command met it, not only at its start
        _fail(str(exc))
    except Exception as exc:
        if ctrl_c_seen():  # a KeyboardInterrupt a library wrapped in its own error
            interrupted()
        # A store that failed (a disk, the warehouse, a database down) is no bug: the one
        # rule the HTTP faces and the timers ask too. Anything else keeps its traceback.
        if storage_down(exc) is None:
            raise
        _fail(f"{storage_trouble(exc)}: {driver_said(exc)}")
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
