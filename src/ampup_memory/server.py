"""ASGI assembly: a runtime (`runtime.py`) → routes, plus the background timers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from ampup_memory.advice.api import router as advice_router
from ampup_memory.advice.judge import judge_timer
from ampup_memory.advice.loop import learning_timers
from ampup_memory.advice.procedures import compile_timer
from ampup_memory.amp.api import API_PREFIX, health, spec
from ampup_memory.amp.api import router as amp_router
from ampup_memory.amp.inspect_api import router as amp_cells_router
from ampup_memory.background import LifespanHook, TimerRecord, periodic, stop_timers
from ampup_memory.mcp.http import mount as mount_mcp
from ampup_memory.memory.api import router as memory_router
from ampup_memory.memory.branch_api import router as branch_router
from ampup_memory.memory.browse_api import router as browse_router
from ampup_memory.memory.extraction_api import router as extraction_router
from ampup_memory.memory.schema_api import router as schema_router
from ampup_memory.memory.snapshots_api import router as holds_router
from ampup_memory.memory.timer import (
    extraction_timer,
    maintenance_timer,
    warm_timer,
    workspace_timer,
)
from ampup_memory.memory.workspace_api import router as workspace_router
from ampup_memory.ops.api import router as ops_router
from ampup_memory.runtime import Runtime, open_runtime
from ampup_memory.search.api import mount as mount_search
from ampup_memory.search.index.common import join_graph_threads
from ampup_memory.settings import Settings
from ampup_memory.web import apidocs, inspector
from ampup_memory.web import errors as http_errors
from ampup_memory.web.answer_headers import AnswerHeaders
from ampup_memory.web.filelimit import quiet_accept_errors
from ampup_memory.web.head import HeadAsGet
from ampup_memory.web.limits import BodyLimit, NulGuard
from ampup_memory.web.openapi import install_schemas
from ampup_memory.web.origin import OriginGuard

log = logging.getLogger("ampup_memory")


def _lifecycle_timer(runtime: Runtime, records: list[TimerRecord]) -> LifespanHook:
    def one_pass() -> str | None:
        report = runtime.amp.run_lifecycle_if_free()
        return None if report is None else str(report.wire())

    return periodic(one_pass, runtime.settings.lifecycle_interval_seconds, "lifecycle pass", log,
                    records=records)


def _owner_index_timer(runtime: Runtime, records: list[TimerRecord]) -> LifespanHook:
    def one_pass() -> str | None:
        report = runtime.store.tend_owner_indexes()
        if report is None or report.skipped or not (
                report.built or report.dropped or report.failed):
            return None
        return str(report.wire())

    return periodic(one_pass, runtime.settings.owner_index_interval_seconds,
                    "owner vector indexes", log, records=records)


def _end_now(left: list[str], grace: float) -> None:
    """Shutdown past its grace with work still running: end the process here, before
    anything closes under that work. That is what a kill does, and what a kill leaves is
    safe: each commit is whole or invisible, a lease runs out. Closing the stores instead
    would fail the work in the middle, and the interpreter would still wait for its
    thread before it exits."""
    log.warning("%s still running after the shutdown grace of %g s "
                "(AMPUP_MEMORY_SHUTDOWN_GRACE_SECONDS): ending the process as a kill would; "
                "what was committed stays, the rest was not written", ", ".join(left), grace)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(1)


async def _wait_graph_threads(deadline: float, grace: float) -> None:
    """Shutdown, stores closed: wait for the search graph threads (a build stops at its
    next chunk, a save finishes its file) within what is left of the grace, then end as
    `_end_now` does. A thread left running would be killed by the signal uvicorn raises
    again, or, after Ctrl-C, abort the interpreter's exit from inside usearch."""
    if not join_graph_threads(0):
        return
    log.info("shutting down: waiting up to %.3g s for the search graph builds",
             max(0.0, deadline - time.monotonic()))
    left = await asyncio.to_thread(join_graph_threads, max(0.0, deadline - time.monotonic()))
    if left:
        _end_now([f"{left} search graph build(s)"], grace)


def create_app(settings: Settings, runtime: Runtime | None = None) -> FastAPI:
    rt = runtime or open_runtime(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        quiet_accept_errors()  # out of open files: one line, not a traceback per accept
        hooks = list(app.state.lifespan_hooks)
        if settings.lifecycle_enabled:
            hooks.append(_lifecycle_timer(rt, app.state.timers))
        if rt.store.info.name == "postgresql" and settings.owner_index_interval_seconds > 0:
            hooks.append(_owner_index_timer(rt, app.state.timers))
        async with contextlib.AsyncExitStack() as stack:
            for enter in hooks:
                await stack.enter_async_context(enter())
            yield
            grace = settings.shutdown_grace_seconds
            deadline = time.monotonic() + grace
            left = await stop_timers(app.state.timers, grace, log)
            if left:
                _end_now(left, grace)
        rt.close()  # asks every search graph build to stop at its next chunk
        await _wait_graph_threads(deadline, grace)

    # FastAPIOffline serves the Swagger UI and ReDoc files its wheel ships (under
    # /static-offline-docs), never from a CDN, so the pages work on a machine with no
    # internet; the pages themselves are web/apidocs.py's, with a Content-Security-Policy.
    app = FastAPIOffline(
        docs_url=None,
        redoc_url=None,
        title="AmpUp Memory",
        version="0.1.0",
        description="Agent Memory Protocol v0.1 and AmpUp Memory: shared long-term memory "
        "for AI agents.",
        lifespan=lifespan,
        # A trailing slash is another route: 404 with the envelope, not a bare 307 that
        # clients which do not follow redirects would see.
        redirect_slashes=False,
    )
    app.state.settings = settings
    app.state.runtime = rt
    app.state.amp = rt.amp
    app.state.auth = rt.auth
    app.state.memory = rt.memory
    app.state.timers = []  # what each periodic job has done, for GET /status
    app.state.lifespan_hooks = [maintenance_timer(rt.memory, settings, app.state.timers),
                                workspace_timer(rt.memory, settings, app.state.timers),
                                warm_timer(rt.memory, settings, app.state.timers),
                                extraction_timer(rt.memory, settings, app.state.timers),
                                judge_timer(rt.memory, settings, app.state.timers),
                                *learning_timers(rt.memory, settings, rt.embedder,
                                                 app.state.timers),
                                compile_timer(rt.memory, settings, rt.embedder,
                                              app.state.timers)]
    http_errors.install(app)
    app.add_middleware(HeadAsGet)  # added first, so it runs last: just before the routes
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(NulGuard)
    # Added last, so it runs first: a refused browser request reads no body.
    app.add_middleware(OriginGuard, bound_to=settings.host, keys_required=settings.require_keys,
                       allowed_hosts=settings.allowed_hosts,
                       allowed_origins=settings.allowed_origins)
    # Outermost: every answer, a refusal of the guards above included, gets its caching,
    # browser and challenge headers here.
    app.add_middleware(AnswerHeaders, keys_required=settings.require_keys)
    app.include_router(amp_router, prefix=API_PREFIX)
    app.include_router(memory_router)  # AmpUp Memory answers at the root paths
    app.include_router(branch_router)
    app.include_router(browse_router)  # GET /scopes, /episodes, /entities
    app.include_router(amp_cells_router)  # GET /amp-cells, /amp-lifecycle
    app.include_router(workspace_router)
    app.include_router(holds_router)  # pins and snapshots
    app.include_router(schema_router)
    app.include_router(extraction_router)
    app.include_router(ops_router)  # GET /status
    app.include_router(advice_router)  # runs and sessions
    # /health and /spec also answer at the root, where load balancers look first.
    app.add_api_route("/health", health, methods=["GET", "HEAD"], include_in_schema=False)
    app.add_api_route("/spec", spec, methods=["GET"], include_in_schema=False)
    _mount_optional(app, rt)
    inspector.mount(app)  # the web inspector at / (static files, no API of its own)
    apidocs.mount(app, app.title)  # /docs and /redoc
    install_schemas(app)
    return app


def _mount_optional(app: FastAPI, rt: Runtime) -> None:
    """Faces that live in their own packages: MCP over streamable HTTP, AmpUp search."""
    search = mount_search(app, rt)
    mount_mcp(app, rt, search)
