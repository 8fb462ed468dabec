"""AmpUp Memory commands: episode-type, load, close, principal, maintenance, pin, snapshot.

``memory_commands`` takes the shared settings helpers from ``ampup_memory.cli`` as
arguments instead of importing them, so the two modules never import each other.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click

from ampup_memory.cliutil import (
    acl_option,
    count_type,
    dumps,
    fail,
    task_progress,
    user_option,
)
from ampup_memory.cliutil import progress as _progress
from ampup_memory.errors import AmpError, ConfigurationError, ValidationFailed
from ampup_memory.memory.acl import require_id
from ampup_memory.settings import Settings
from ampup_memory.timefmt import duration_seconds

if TYPE_CHECKING:
    from ampup_memory.memory.facts import FactIn
    from ampup_memory.memory.load import CiteTargets, Item
    from ampup_memory.memory.scopes import Scope
    from ampup_memory.memory.service import MemoryService

F = TypeVar("F", bound=Callable[..., Any])
_fail = fail


class Decorator(Protocol):
    def __call__(self, func: F, /) -> F: ...


SettingsOptions = Callable[..., Decorator]  # settings_options("common", ...) in ampup_memory.cli


def _amp_message(exc: AmpError) -> str:
    """``CODE: message``, then each field error the message does not already say as
    ``; at <loc>: <msg>``, or ``; at <loc>`` when the message is the error's own but does
    not name its field ("Field required") (the JSON API's ``details.errors``, read by a
    person; one line, as `cliutil.fail` prints)."""
    errors = exc.details.get("errors") if isinstance(exc.details, dict) else None
    lines = [f"{exc.code}: {exc.message}"]
    for e in errors if isinstance(errors, list) else []:
        if not isinstance(e, dict):
            continue
        msg = str(e.get("msg", ""))
        loc = [str(part) for part in e.get("loc", [])]
        where = ".".join(loc)
        if msg and msg != exc.message:
            lines.append(f"at {where}: {msg}" if where else msg)
        elif msg and loc and loc[-1] not in exc.message:
            lines.append(f"at {where}")
    if len(lines) > 1:
        lines[0] = lines[0].rstrip(".")
    return "; ".join(lines)


@contextmanager
def _service(settings: Settings, *, replace_newer_index: bool = False
             ) -> Iterator[MemoryService]:
    from ampup_memory.memory.service import MemoryService

    try:
        svc = MemoryService.open(settings, replace_newer_index=replace_newer_index)
    except ConfigurationError as exc:
        _fail(str(exc))
    try:
        yield svc
    except AmpError as exc:
        _fail(_amp_message(exc))
    finally:
        svc.close()


def existing_scope(svc: MemoryService, text: str | None) -> Scope | None:
    """A pass's ``--scope`` (maintenance, extract, the advice passes): valid by the scope
    rule, and a scope this home holds. One it never held is NOT_FOUND (one error line,
    exit 2), not a pass over nothing reported as done: a typo must not pass for success.
    None (the option left out) is every scope; ``--scope ""`` (a script's empty variable)
    is refused by the rule, not read as every scope, as it was by the passes that asked
    ``if scope``."""
    from ampup_memory.errors import NotFound
    from ampup_memory.memory.scopes import parse_scope

    if text is None:
        return None
    scope = parse_scope(text, "--scope")
    if scope not in svc.tables.scopes():
        raise NotFound(f"No scope {scope} in this home: a scope is made by its first write.",
                       details={"scope": str(scope)})
    return scope


def parse_duration(text: str) -> timedelta:
    """A grace period (0 allowed): timefmt's one spelling of a duration."""
    seconds = duration_seconds(text)
    if seconds is None:
        raise click.BadParameter(f"{text.strip()!r}: use a number and s, m, h, d or w "
                                 "(e.g. 0s, 1h, 1d12h)")
    return timedelta(seconds=seconds)


def memory_commands(settings_options: SettingsOptions,
                    settings_from: Callable[[dict[str, Any]], Settings]) -> list[click.Command]:
    """The AmpUp Memory commands, built on the main CLI's settings helpers."""

    @click.group("episode-type")
    def episode_type() -> None:
        """Episode types: how each source's body splits into units."""

    @episode_type.command("list")
    def type_list() -> None:
        """Every episode type: prefix, unit, how a body splits, typical predicates."""
        from ampup_memory.memory.episode_types import client_types

        for n, t in enumerate(client_types()):
            click.echo(("\n" if n else "") + f"{t.name}  prefix {t.prefix}  unit {t.unit_kind}")
            click.echo(f"  split: {t.split_rule}")
            click.echo(f"  predicates: {', '.join(t.predicates) or '-'}")

    @episode_type.command("show")
    @click.argument("name")
    def type_show(name: str) -> None:
        """One type (by name or prefix) in full, as JSON."""
        from ampup_memory.memory.episode_types import client_type, client_types

        found = client_type(name)
        if found is None:
            _fail(f"no episode type {name!r}; known: "
                  + ", ".join(t.name for t in client_types()))
        click.echo(dumps(found.wire(), indent=2))

    @click.command("load")
    @click.argument("path", type=click.Path(exists=True, path_type=Path))
    @click.option("--scope", required=True, help="org/team to load into.")
    @click.option("--acl", "acl", multiple=True, metavar="ENTRY", callback=acl_option,
                  help="ACL entry for episodes that name none (repeat for more: '*', "
                  "user:<id>, group:<id>, role:<name>). Default: only the loading user "
                  "(user:<--user>), as MCP remember_memory does.")
    @click.option("--user", default="loader", show_default=True, callback=user_option,
                  help="Who loads: the author in the ledger and the default reader.")
    @click.option("--batch-size", default=None, type=count_type(),
                  help="Episodes, then facts, per commit (default: the most one commit "
                  "holds, 1000).")
    @click.option("--branch", default=None, help="Branch (default main).")
    @settings_options("common", "tables", "embedding", "ann")
    def load(path: Path, scope: str, acl: tuple[str, ...], user: str, batch_size: int | None,
             branch: str | None, **kwargs: Any) -> None:
        """Load a folder of text, Markdown and JSONL files (or one such file), many
        episodes per commit.

        A JSONL line {"fact": {...}} is a fact, shaped as one fact of the API's facts
        batch (docs/api.md), whose cites may also name a corpus episode by "source" or
        "document"; facts are written after the episodes. Re-running it writes nothing
        new: episodes and facts already held are skipped. Episodes without an ACL of their
        own are readable by the loading user only, unless --acl says otherwise. Prints
        the counts as JSON; files not loaded are counted by kind.
        """
        from ampup_memory.memory.acl import own_acl
        from ampup_memory.memory.episodes import MAX_BATCH
        from ampup_memory.memory.load import CiteTargets, loadable, read_corpus
        from ampup_memory.memory.scopes import parse_scope

        if path.is_file() and not loadable(path):
            _fail(f"cannot load {path}: load reads {_loaded_suffixes()} files, or a folder "
                  "of them")
        if batch_size is not None and batch_size > MAX_BATCH:
            raise click.BadParameter(f"at most {MAX_BATCH} (one commit's limit)",
                                     param_hint="--batch-size")
        batch_size = batch_size or MAX_BATCH
        settings = settings_from(kwargs)
        try:
            parse_scope(scope, "--scope")
        except AmpError as exc:
            _fail(_amp_message(exc))
        skipped: Counter[str] = Counter()
        items = list(read_corpus(path, list(acl) or own_acl(user), skipped))
        counts: dict[str, Any] = {"created": 0, "existing": 0, "conflict": 0, "invalid": 0,
                                  "facts_created": 0, "facts_existing": 0,
                                  "facts_invalid": 0, "commits": 0}
        problems: list[str] = []
        targets = CiteTargets()
        from ampup_memory.search.feed import attached_feed  # loads the embedder: only here

        with _service(settings) as svc, attached_feed(settings, svc), \
                _progress() as progress:
            task = progress.add_task("loading", total=len(items))
            batch: list[Item] = []
            facts: list[Item] = []
            for item in items:
                if item.fact is not None:
                    facts.append(item)  # after every episode: they may cite any of them
                    continue
                if item.episode is None:
                    problems.append(f"{item.where}: {item.error}")
                    counts["facts_invalid" if item.is_fact else "invalid"] += 1
                    progress.advance(task)
                    continue
                batch.append(item)
                if len(batch) >= batch_size:
                    _write_valid(svc, user, scope, branch, batch, counts, problems, targets)
                    progress.advance(task, len(batch))
                    batch = []
            if batch:
                _write_valid(svc, user, scope, branch, batch, counts, problems, targets)
                progress.advance(task, len(batch))
            if facts:
                _order_documents(svc, user, scope, branch, targets)
            for start in range(0, len(facts), batch_size):
                chunk = facts[start:start + batch_size]
                _post_facts(svc, user, scope, branch, chunk, targets, counts, problems)
                progress.advance(task, len(chunk))
        for line in problems[:50]:
            click.echo(f"{click.style('skipped', fg='yellow')} {line}", err=True)
        if len(problems) > 50:
            click.echo(f"… and {len(problems) - 50} more", err=True)
        if skipped:
            click.echo(_skipped_line(skipped), err=True)
        counts["skipped_files"] = dict(sorted(skipped.items()))
        click.echo(dumps(counts))
        if counts["invalid"] or counts["facts_invalid"]:
            sys.exit(1)

    @click.command("close")
    @click.option("--scope", required=True, help="org/team")
    @click.option("--entity", required=True, help="The entity whose value ends (acme).")
    @click.option("--predicate", required=True, help="Its attribute (budget).")
    @click.option("--reason", required=True, help="Why; stored as its own episode.")
    @click.option("--user", required=True, callback=user_option,
                  help="Who closes it (author and reader).")
    @click.option("--acl", "acl", multiple=True, callback=acl_option,
                  help="ACL of the reason episode.")
    @click.option("--branch", default=None, help="Branch (default main).")
    @click.option("--value", default=None,
                  help="The one value to end, for a many-valued attribute (schema "
                  "cardinality many); as text, which the schema reads as its type.")
    @settings_options("common", "tables")
    def close(scope: str, entity: str, predicate: str, reason: str, user: str,
              acl: tuple[str, ...], branch: str | None, value: str | None,
              **kwargs: Any) -> None:
        """End a value with no successor; the reason becomes its own episode."""
        from ampup_memory.memory.facts import CloseValue
        from ampup_memory.memory.service import build

        settings = settings_from(kwargs)
        with _service(settings) as svc:
            try:
                req = build(CloseValue, scope=scope, branch=branch, entity=entity,
                            predicate=predicate, reason=reason, acl=list(acl) or None,
                            value=value)
                click.echo(dumps(svc.close_value(user, req)))
            except ValidationFailed as exc:
                # Named as the command takes them ("at --entity", not "at entity"), as
                # `pin create` and `workspace create` name theirs.
                exc.rename({(name,): f"--{name}" for name in (
                    "scope", "branch", "entity", "predicate", "reason", "acl", "value")})
                raise

    @click.group("principal")
    def principal() -> None:
        """Principals: a user's groups and roles."""

    @principal.command("set")
    @click.argument("user")
    @click.option("--group", "groups", multiple=True, help="A group held (repeat).")
    @click.option("--role", "roles", multiple=True, help="A role held (repeat).")
    @settings_options("common", "tables")
    def principal_set(user: str, groups: tuple[str, ...], roles: tuple[str, ...],
                      **kwargs: Any) -> None:
        """Replace a user's groups and roles; takes effect on their next read."""
        settings = settings_from(kwargs)
        with _service(settings) as svc:
            done = svc.set_principal(user, list(groups), list(roles), by="cli")
            click.echo(dumps(done.wire()))

    @principal.command("show")
    @click.argument("user")
    @settings_options("common", "tables")
    def principal_show(user: str, **kwargs: Any) -> None:
        """A user's groups and roles (none if never set)."""
        settings = settings_from(kwargs)
        with _service(settings) as svc:
            require_id(user, ["user"], "user id")  # as `principal set` and GET /principals
            click.echo(dumps(svc.principal(user).wire()))

    @click.command("maintenance")
    @click.option("--scope", default=None, help="Only this org/team (and the system tables).")
    @click.option("--orphan-grace", "grace", default=None,
                  callback=lambda _c, _p, v: None if v is None else parse_duration(v),
                  help="Override the orphan grace period, e.g. 0s after a known crash.")
    @click.option("--rebuild-index", is_flag=True,
                  help="Also recreate the whole read index (every scope, whatever --scope"
                  " names) from the tables alone.")
    @settings_options("common", "tables", "maintenance")
    def maintenance(scope: str | None, grace: timedelta | None, rebuild_index: bool,
                    **kwargs: Any) -> None:
        """Remove orphan rows and files, compact small files, expire old snapshots."""
        from ampup_memory.serving import alone

        settings = settings_from(kwargs)
        if grace is None:
            grace = timedelta(seconds=settings.memory_orphan_grace_seconds)
        with ExitStack() as held:
            if rebuild_index:  # refused before any work, not after the maintenance pass
                try:
                    held.enter_context(alone(settings))
                except ConfigurationError as exc:
                    fail(str(exc))
            svc = held.enter_context(_service(settings))
            progress = held.enter_context(_progress())
            only = existing_scope(svc, scope)
            task = progress.add_task("maintenance", total=None)

            def table_done(total: int) -> None:
                progress.update(task, total=total, advance=1)

            report: dict[str, Any] = {"tables": svc.maintain(only, grace, table_done)}
            if rebuild_index:
                report["index_rebuilt_commits"] = svc.sync.rebuild(
                    task_progress(progress, "rebuilding the read index"))
            click.echo(dumps(report, indent=2))

    @click.group("pin")
    def pin() -> None:
        """Pins: one scope and branch held at one commit for a leased time."""

    @pin.command("create")
    @click.option("--scope", required=True, help="org/team")
    @click.option("--branch", default=None, help="Branch (default main).")
    @click.option("--at-commit", default=None, help="Commit to hold (default: the head).")
    @click.option("--ttl", required=True, help="Time to live: 30s, 15m, 1h, 7d (max 366d).")
    @click.option("--user", required=True, callback=user_option,
                  help="Who holds it (may renew and release it).")
    @settings_options("common", "tables")
    def pin_create(scope: str, branch: str | None, at_commit: str | None, ttl: str,
                   user: str, **kwargs: Any) -> None:
        """Hold a scope's branch at a commit; reads with pin=<id> see exactly it."""
        from ampup_memory.memory import snapshots
        from ampup_memory.timefmt import parse_ttl

        settings = settings_from(kwargs)
        with _service(settings) as svc:
            click.echo(dumps(snapshots.create_pin(svc, user, scope, branch, at_commit,
                                                  parse_ttl(ttl, ["--ttl"]))))

    @pin.command("renew")
    @click.argument("pin_id")
    @click.option("--ttl", required=True, help="New time to live, from now.")
    @click.option("--user", required=True, callback=user_option, help="The pin's creator.")
    @settings_options("common", "tables")
    def pin_renew(pin_id: str, ttl: str, user: str, **kwargs: Any) -> None:
        """Extend a live pin: it now expires ttl from now."""
        from ampup_memory.memory import snapshots
        from ampup_memory.timefmt import parse_ttl

        settings = settings_from(kwargs)
        with _service(settings) as svc:
            click.echo(dumps(snapshots.renew_pin(svc, user, pin_id, parse_ttl(ttl, ["--ttl"]))))

    @pin.command("release")
    @click.argument("pin_id")
    @click.option("--user", required=True, callback=user_option, help="The pin's creator.")
    @settings_options("common", "tables")
    def pin_release(pin_id: str, user: str, **kwargs: Any) -> None:
        """Release a pin now: reads through it are refused (PIN_RELEASED), maintenance may
        drop what it held."""
        from ampup_memory.memory import snapshots

        settings = settings_from(kwargs)
        with _service(settings) as svc:
            click.echo(dumps(snapshots.release(svc, user, pin_id, snapshots.PIN)))

    @click.group("snapshot")
    def snapshot() -> None:
        """Snapshots: the heads of several scopes held under one id until released."""

    @snapshot.command("create")
    @click.option("--scope", "scopes", multiple=True, required=True,
                  help="org/team whose heads to hold (repeat for more).")
    @click.option("--user", required=True, callback=user_option,
                  help="Who holds it (may release it).")
    @settings_options("common", "tables")
    def snapshot_create(scopes: tuple[str, ...], user: str, **kwargs: Any) -> None:
        """Hold the current head of main and of every live branch of each scope; reads
        with snapshot=<id> see them."""
        from ampup_memory.memory import snapshots
        from ampup_memory.memory.scopes import parse_scope

        settings = settings_from(kwargs)
        with _service(settings) as svc:
            named = sorted({parse_scope(s, "--scope") for s in scopes})
            click.echo(dumps(snapshots.create_snapshot(svc, user, named)))

    @snapshot.command("release")
    @click.argument("snapshot_id")
    @click.option("--user", required=True, callback=user_option,
                  help="The snapshot's creator.")
    @settings_options("common", "tables")
    def snapshot_release(snapshot_id: str, user: str, **kwargs: Any) -> None:
        """Release a snapshot: reads through it are refused (SNAPSHOT_RELEASED)."""
        from ampup_memory.memory import snapshots

        settings = settings_from(kwargs)
        with _service(settings) as svc:
            click.echo(dumps(snapshots.release(svc, user, snapshot_id, snapshots.SNAPSHOT)))

    return [episode_type, load, close, principal, maintenance, pin, snapshot]


def _loaded_suffixes() -> str:
    from ampup_memory.memory.load import JSONL_SUFFIXES, TEXT_SUFFIXES

    return " ".join(sorted(TEXT_SUFFIXES | JSONL_SUFFIXES))


def _skipped_line(skipped: Counter[str]) -> str:
    """One line: how many files were left out, by kind, and what `load` reads."""
    total = sum(skipped.values())
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(skipped.items()))
    return (f"skipped {total} file{'s' if total != 1 else ''} not loaded: {kinds} "
            f"(load reads {_loaded_suffixes()}; hidden files and folders are left out)")


def _valid(item: Item, problems: list[str]) -> bool:
    """Check one episode alone, so one bad record never sinks its whole batch."""
    from ampup_memory.memory.episode_types import DOC
    from ampup_memory.memory.episodes import prepare
    from ampup_memory.memory.service import utcnow

    assert item.episode is not None
    try:
        prepare(item.episode, "main", utcnow(), [], DOC if _unclaimed(item) else None)
    except AmpError as exc:
        problems.append(f"{item.where}: {exc.message}")
        return False
    return True


def _write_valid(svc: MemoryService, user: str, scope: str, branch: str | None,
                 batch: list[Item], counts: dict[str, int], problems: list[str],
                 targets: CiteTargets) -> None:
    """Write a batch; only when it is refused as invalid, check its episodes one by one
    and write the valid ones, so one bad record never sinks its whole batch. (Checking
    every episode first prepared each one twice: a sixth of a load's time.)"""
    try:
        _write(svc, user, scope, branch, batch, counts, problems, targets)
        return
    except ValidationFailed:
        pass
    valid = [item for item in batch if _valid(item, problems)]
    counts["invalid"] += len(batch) - len(valid)
    if valid:
        _write(svc, user, scope, branch, valid, counts, problems, targets)


def _unclaimed(item: Item) -> bool:
    from ampup_memory.memory.episode_types import type_for_source

    assert item.episode is not None
    return type_for_source(item.episode.source) is None


def _write(svc: MemoryService, user: str, scope: str, branch: str | None, batch: list[Item],
           counts: dict[str, Any], problems: list[str], targets: CiteTargets) -> None:
    from ampup_memory.memory.episode_types import DOC

    episodes = [i.episode for i in batch if i.episode is not None]
    result = svc.write_episodes(user, scope, branch, episodes, on_conflict="skip",
                                unclaimed=DOC)
    counts["commits"] += result.commit is not None
    conflicts = {c["index"]: c for c in result.conflicts}
    for n, (item, (episode_id, status)) in enumerate(zip(batch, result.episodes, strict=True)):
        assert item.episode is not None
        if status == "conflict" and _same_file_again(svc, user, scope, branch, item,
                                                     conflicts[n]):
            status = "existing"
            del conflicts[n]
        counts[status] += 1
        if status == "conflict":
            targets.not_loaded(item.episode)
        else:
            targets.add(item.episode, episode_id)
    for conflict in conflicts.values():
        item = batch[conflict["index"]]
        where = item.where
        fields = conflict.get("fields")
        if fields == ["occurred_at"] and item.file_time:
            assert item.episode is not None
            problems.append(f"{where}: the text of an earlier version of document "
                            f"{item.episode.document!r} (episode {conflict['id'][:12]}…); a "
                            "load never rewrites one, so it is not made the newest version: "
                            "change the text to make it one")
        elif fields:
            problems.append(f"{where}: already loaded with a different {' and '.join(fields)}; "
                            f"the episode held (id {conflict['id'][:12]}…) is kept unchanged, "
                            "as a load never rewrites one")
        else:
            problems.append(f"{where}: held already, in an episode you may not read; a load "
                            "never rewrites one")


def _same_file_again(svc: MemoryService, user: str, scope: str, branch: str | None,
                     item: Item, conflict: dict[str, Any]) -> bool:
    """A text file loaded again with its text unchanged and only its mtime moved (a
    checkout, a copy): the held episode is its document's newest version, so the load
    writes nothing new and says nothing, as a re-run should. Its occurred_at is the file's
    mtime, not a time anyone stated. A text an earlier version had stays a conflict."""
    from ampup_memory.errors import NotFound

    if not item.file_time or conflict.get("fields") != ["occurred_at"]:
        return False
    assert item.episode is not None and item.episode.document is not None
    try:
        newest = svc.document(user, item.episode.document, svc.view(scope, branch), None)
    except NotFound:
        return False
    return bool(newest["id"] == conflict["id"])


def _order_documents(svc: MemoryService, user: str, scope: str, branch: str | None,
                     targets: CiteTargets) -> None:
    """Tell ``targets`` when each version of a document the corpus wrote more than once
    occurred (as held: a line without ``occurred_at`` took its first write's time)."""
    ids = targets.versioned()
    if not ids:
        return
    view = svc.view(scope, branch)
    held = svc.readable_episodes(svc.principal(user), str(view.scope), view.segments, ids)
    targets.order({i: rec.occurred_at for i, rec in held.items()})


def _post_facts(svc: MemoryService, user: str, scope: str, branch: str | None,
                chunk: list[Item], targets: CiteTargets, counts: dict[str, Any],
                problems: list[str]) -> None:
    """Post a chunk of corpus facts in one commit, as ``POST /facts/batch`` would, skipping
    those held already. Refused as a whole for one bad fact, it is posted again without
    that one (listed), until the rest is written: one bad fact among a thousand costs one
    more check, not a thousand commits."""
    from ampup_memory.memory.load import fact_error

    ready: list[tuple[Item, FactIn]] = []
    for item in chunk:
        assert item.fact is not None
        try:
            ready.append((item, targets.resolve(item.fact)))
        except ValidationFailed as exc:
            problems.append(f"{item.where}: {fact_error(exc)}")
            counts["facts_invalid"] += 1
    while ready:
        try:
            ids, entry = svc.post_new_facts(user, scope, branch, [f for _, f in ready])
        except ValidationFailed as exc:
            refused = _refused_fact(exc, len(ready))
            if refused is None:
                raise  # not one fact's fault (the branch, say): the load stops, as for episodes
            n, loc = refused
            item, fact = ready.pop(n)
            told = _unreadable_cite(fact, loc, targets, user) or fact_error(exc, loc)
            problems.append(f"{item.where}: {told}")
            counts["facts_invalid"] += 1
            continue
        counts["commits"] += entry is not None
        counts["facts_created"] += sum(i is not None for i in ids)
        counts["facts_existing"] += sum(i is None for i in ids)
        return


def _unreadable_cite(fact: FactIn, loc: list[str | int], targets: CiteTargets,
                     user: str) -> str | None:
    """A cite refused as "no such episode" that names an episode this corpus wrote: the
    loading user may not read it (the cited episodes must be theirs to read, as for
    POST /facts). Said as that, not as a missing episode the corpus plainly holds; None for
    any other refusal."""
    if len(loc) != 4 or loc[1] != "cites" or loc[3] != "episode" or not isinstance(loc[2], int):
        return None
    episode = fact.cites[loc[2]].episode
    if not targets.wrote(episode):
        return None
    return (f"fact.cites.{loc[2]}.episode: --user {user} may not read episode "
            f"{episode[:12]}… of this corpus (its ACL names neither user:{user} nor a group "
            "or role of theirs); load as a user who may read it, or give the episode an ACL "
            "entry of theirs")


def _refused_fact(exc: ValidationFailed, count: int) -> tuple[int, list[str | int]] | None:
    """Which fact of a batch of ``count`` refused it (its error's ``facts.<n>``), and that
    error's place within the fact as a corpus line tells it (``fact.quote``)."""
    errors = exc.details.get("errors") or []
    loc = list(errors[0].get("loc", [])) if errors else []
    if len(loc) >= 2 and loc[0] == "facts" and isinstance(loc[1], int) and 0 <= loc[1] < count:
        return loc[1], ["fact", *loc[2:]]
    return None
