"""What a process opens once: settings → stores → models → services.

The HTTP app (`server.create_app`), the MCP servers (`mcp/`) and the CLI all run on one
`Runtime`; `open_runtime` builds it. Nothing here knows about routes or ASGI.
"""

from __future__ import annotations

from dataclasses import dataclass

from ampup_memory.amp.reembed import ensure_embedding_model
from ampup_memory.amp.service import AmpService, ScoringLimit
from ampup_memory.amp.store.base import CellStore
from ampup_memory.amp.store.registry import open_configured_store
from ampup_memory.auth import Authenticator, KeyRing
from ampup_memory.memory.service import MemoryService
from ampup_memory.ops.backup import refuse_marked_store, refuse_unfinished_restore
from ampup_memory.progress import Progress
from ampup_memory.search.embed import Embedder, build_embedder
from ampup_memory.settings import Settings, ensure_home


@dataclass
class Runtime:
    """Everything a process opens once: shared by the HTTP app, MCP and the CLI."""

    settings: Settings
    store: CellStore
    embedder: Embedder
    amp: AmpService
    auth: Authenticator
    memory: MemoryService

    def close(self) -> None:
        self.memory.close()
        self.store.close()


def open_runtime(settings: Settings, *, reembed: bool = True,
                 progress: Progress | None = None) -> Runtime:
    """Open stores and models; raises ConfigurationError on a setting that cannot work.

    With ``reembed`` the cell store's vectors are then brought to the configured embedder
    (`amp/reembed.py`; ``progress`` is told how far, and only when there is work).
    Commands that never write a vector pass False, so a maintenance command run with other
    settings never rewrites the vectors under a running server. Every store is opened
    first: one that refuses to open (say, a newer layout) is said before a long
    re-embedding, not after it."""
    ensure_home(settings)
    refuse_unfinished_restore(settings)
    embedder = build_embedder(settings)
    store = open_configured_store(settings, embedder.dimensions)
    try:
        refuse_marked_store(store)
        memory = MemoryService.open(settings)
    except BaseException:
        store.close()
        raise
    if reembed:
        try:
            ensure_embedding_model(store, embedder, progress=progress)
        except BaseException:
            memory.close()
            store.close()
            raise
    amp = AmpService(
        store=store,
        embedder=embedder,
        scoring_limit=ScoringLimit(
            settings.scoring_patch_limit, settings.scoring_patch_window_seconds
        ),
        retention_days=settings.retention_days,
        purge_retention=settings.purge_retention,
    )
    auth = Authenticator(
        KeyRing(store, settings.api_keys_file), settings.require_keys, settings.admin_token
    )
    return Runtime(settings=settings, store=store, embedder=embedder, amp=amp, auth=auth,
                   memory=memory)
