"""Python clients for the Agent Memory Protocol (AMP v0.1) and the AmpUp routes.

Code written against the reference ``amp-client`` 0.1.0 moves over by changing one import::

    from ampup_memory.client import AMPClient, AMPError   # was: from amp_client import ...

    client = AMPClient("http://127.0.0.1:8765", "agent_assistant")
    cell = client.remember("User prefers email.", "user_123", readable_by=["agent_billing_*"])
    hits = client.recall("contact preference", "user_123")

Cells come back as plain dicts, exactly as the server sends them (as in the reference).
Beyond the reference: `update`, `archive`, full-filter `search`, `list_page`, `spec`,
the page-walking iterators `iter_memories` / `iter_search`, conditional writes (an
answer's ``etag``, sent back as ``if_match=``; see `Versioned`), and one exception class per
HTTP status (see `ampup_memory.client.errors`). The LangChain chat history lives in
`ampup_memory.client.langchain` (extra ``ampup-memory[langchain]``). `AmpUpClient` and
`AsyncAmpUpClient` cover the AmpUp face (episodes, facts, search and queries, advice,
branches, pins, snapshots, workspaces, schemas, the ledger) with the same errors.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from ampup_memory.client._ampup import AmpUpClient, AsyncAmpUpClient
from ampup_memory.client._async import AsyncAMPClient
from ampup_memory.client._base import (
    DEFAULT_SERVER_URL,
    MemoryCell,
    Page,
    SearchPage,
    Versioned,
)
from ampup_memory.client._sync import AMPClient
from ampup_memory.client.errors import (
    AccessDeniedError,
    AMPConnectionError,
    AMPError,
    AuthenticationError,
    ConflictError,
    GoneError,
    NotFoundError,
    NotModifiedError,
    PayloadTooLargeError,
    PreconditionFailedError,
    RateLimitedError,
    ServerError,
    ValidationError,
)

try:  # the reference exports its version too; ours is the server package's
    __version__ = _version("ampup-memory")
except PackageNotFoundError:  # a source checkout never installed
    __version__ = "0.1.0"

__all__ = [
    "__version__",
    "AMPClient",
    "AsyncAMPClient",
    "AmpUpClient",
    "AsyncAmpUpClient",
    "AMPError",
    "AMPConnectionError",
    "AuthenticationError",
    "AccessDeniedError",
    "NotFoundError",
    "ConflictError",
    "GoneError",
    "PreconditionFailedError",
    "NotModifiedError",
    "PayloadTooLargeError",
    "ValidationError",
    "RateLimitedError",
    "ServerError",
    "MemoryCell",
    "Page",
    "SearchPage",
    "Versioned",
    "DEFAULT_SERVER_URL",
]
