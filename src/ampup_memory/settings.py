"""Every setting of the server, declared once.

Each field names its environment variable and carries its help text; the CLI builds its
flags from this list and `docs/settings.md` is checked against it by a test. Nothing else
in the package reads ``os.environ``.

Order (first wins): command-line flags, the documented environment variables (only those:
never a bare ``HOME`` or ``PORT``), the TOML config file, the defaults.
"""

from __future__ import annotations

import difflib
import os
import re
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal
from urllib.parse import SplitResult, urlsplit, urlunsplit

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from ampup_memory.errors import ConfigurationError
from ampup_memory.search.index.ann import (
    CONNECTIVITY,
    EXPANSION_ADD,
    PGVECTOR_DEFAULTS,
    GraphParams,
)

EmbeddingProvider = Literal[
    "wordllama", "minilm", "sentence-transformers", "openai-compatible", "hash"
]
LogLevel = Literal["debug", "info", "warning", "error"]
# What the store, index and catalog URIs may name: the schemes the AMP store registry
# (`amp/store/registry.py`) and the tables (`memory/tables.sqlalchemy_url`) open; a copy,
# as importing the registry would load the stores into every command (a test holds them equal).
DATABASE_SCHEMES = ("sqlite", "postgresql", "postgres", "postgresql+psycopg")


def _env(name: str, *more: str) -> Any:
    return AliasChoices(name, *more)


# Model roles (models/chat.py `Role`): each has its own endpoint settings, falling back to
# the default `model_*` ones.
MODEL_ROLES = ("extract", "judge", "learn", "compile")
_ROLE_MODEL_FIELDS = tuple(f"{role}_model_{what}" for role in MODEL_ROLES
                           for what in ("base_url", "name", "api_key", "timeout_seconds",
                                        "concurrency"))


MAX_WHOLE = 2**31 - 1  # 68 years of seconds, 2 GiB: what every whole-number setting fits


class Settings(BaseSettings):
    """Server settings: flags over environment over config file over defaults.

    Read them with `load_settings`. Fields are set by their environment names only: no
    ``populate_by_name``, which made pydantic-settings also read the bare field names
    (``HOME``, ``HOST``, ``PORT``, ...) from the environment.
    """

    # allow_inf_nan: "inf" seconds (or shares) is never meant; refused as any bad number.
    model_config = SettingsConfigDict(extra="ignore", frozen=False, allow_inf_nan=False)

    config: Path | None = Field(
        default=None,
        validation_alias=_env("AMPUP_MEMORY_CONFIG"),
        description="TOML config file of settings by name (`port = 8765`); default "
        "`config.toml` in the home folder, read when it exists.",
    )
    home: Path = Field(
        default=Path("~/.ampup-memory"),
        validation_alias=_env("AMPUP_MEMORY_HOME"),
        description="Folder for the embedded stores (SQLite files, Iceberg warehouse).",
    )
    host: str = Field(
        default="127.0.0.1",
        validation_alias=_env("AMPUP_MEMORY_HOST"),
        description="Address `serve` binds to.",
    )
    port: int = Field(
        default=8765,
        ge=0,
        le=65535,
        validation_alias=_env("AMPUP_MEMORY_PORT"),
        description="Port `serve` listens on.",
    )
    store_uri: str | None = Field(
        default=None,
        validation_alias=_env("AMP_STORE_URI"),
        description="AMP cell store: `sqlite:///path.db` (default: `amp.db` in the home "
        "folder) or `postgresql://user:pass@host/db`.",
    )
    store_pool_wait_seconds: float = Field(
        default=30.0,
        gt=0,
        validation_alias=_env("AMP_STORE_POOL_WAIT_SECONDS"),
        description="PostgreSQL cell store: seconds a request waits for a pooled connection "
        "(all busy, or the database unreachable) before its 503 `UNAVAILABLE`.",
    )
    index_uri: str | None = Field(
        default=None,
        validation_alias=_env("AMPUP_MEMORY_INDEX_URI"),
        description="AmpUp search index: `sqlite:///path` (default: `index.db` in the home "
        "folder) or `postgresql://…`.",
    )
    catalog_uri: str | None = Field(
        default=None,
        validation_alias=_env("AMPUP_MEMORY_CATALOG_URI"),
        description="Iceberg SQL catalog: `sqlite:///path` (default: `catalog.db` in the home "
        "folder) or `postgresql://…`.",
    )
    warehouse: str | None = Field(
        default=None,
        validation_alias=_env("AMPUP_MEMORY_WAREHOUSE"),
        description="Iceberg warehouse location: `file:///path` (default: "
        "`file://<home>/warehouse`) or `s3://bucket/prefix` on any S3-compatible store "
        "(with the `s3_*` settings).",
    )
    s3_endpoint: str | None = Field(
        default=None,
        validation_alias=_env("AMPUP_MEMORY_S3_ENDPOINT"),
        description="Endpoint of an S3-compatible store for an `s3://` warehouse "
        "(`http://minio:9000`, R2, Ceph, SeaweedFS ...): `http://` or `https://`, the host "
        "and port alone (the bucket goes in the warehouse); unset: AWS S3.",
    )
    s3_region: str | None = Field(
        default=None,
        validation_alias=_env("AMPUP_MEMORY_S3_REGION"),
        description="Region of the `s3://` warehouse's bucket (`us-east-1`, `auto` ...).",
    )
    s3_access_key_id: str | None = Field(
        default=None,
        validation_alias=_env("AMPUP_MEMORY_S3_ACCESS_KEY_ID"),
        description="Access key id for the `s3://` warehouse; unset: the usual AWS "
        "credential chain (environment, profile, instance role).",
    )
    s3_secret_access_key: str | None = Field(
        default=None,
        validation_alias=_env("AMPUP_MEMORY_S3_SECRET_ACCESS_KEY"),
        description="Secret access key for the `s3://` warehouse.",
    )
    s3_virtual_addressing: bool = Field(
        default=False,
        validation_alias=_env("AMPUP_MEMORY_S3_VIRTUAL_ADDRESSING"),
        description="Address the bucket as `bucket.endpoint` (virtual-hosted style) "
        "rather than `endpoint/bucket` (path style, what MinIO, Ceph and SeaweedFS "
        "expect) when `s3_endpoint` is set.",
    )
    s3_connect_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        le=300,
        validation_alias=_env("AMPUP_MEMORY_S3_CONNECT_TIMEOUT_SECONDS"),
        description="Seconds an S3 request waits for its connection to the store before "
        "that attempt fails.",
    )
    s3_request_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=600,
        validation_alias=_env("AMPUP_MEMORY_S3_REQUEST_TIMEOUT_SECONDS"),
        description="Seconds an S3 request may go without a byte moving (the store not "
        "answering) before that attempt fails; a slow transfer that keeps moving is not "
        "cut.",
    )
    s3_attempts: int = Field(
        default=2,
        ge=1,
        le=10,
        validation_alias=_env("AMPUP_MEMORY_S3_ATTEMPTS"),
        description="Attempts of each S3 request (the first and its retries, after a "
        "timeout, throttling or a 5xx) before the request needing it answers 503 "
        "`UNAVAILABLE`. A store that stops answering fails a request after about "
        "attempts × (request timeout + 7 s) when it was sending a file, attempts × request "
        "timeout otherwise, attempts × connect timeout when it cannot be reached.",
    )
    purge_retention: bool = Field(
        default=False,
        validation_alias=_env("AMP_PURGE_RETENTION"),
        description="When on, each lifecycle pass hard-deletes cells deleted more than "
        "`retention_days` ago. Off by default: erasure is opt-in.",
    )
    retention_days: int = Field(
        default=30,
        ge=30,
        le=36_500,  # a century: far more, and "now minus the window" is before year 1
        validation_alias=_env("AMP_RETENTION_DAYS"),
        description="Days a deleted cell is kept before it may be purged, 30 to 36,500 (the "
        "spec's minimum is 30; a longer window stays compliant).",
    )
    require_keys: bool = Field(
        default=False,
        validation_alias=_env("AMP_REQUIRE_KEYS"),
        description="Require an API key on every memory route (also on when "
        "`api_keys_file` is set).",
    )
    api_keys_file: Path | None = Field(
        default=None,
        validation_alias=_env("AMP_API_KEYS_FILE"),
        description='Reference-format key file `{"agent": "sha256:<hex>"}`, read in '
        "addition to keys created with `ampup-memory keys create`.",
    )
    admin_token: str | None = Field(
        default=None,
        validation_alias=_env("AMP_ADMIN_TOKEN"),
        description="Admin credential accepted in `X-AMP-Admin-Token` for admin routes.",
    )
    scoring_patch_limit: int = Field(
        default=5,
        ge=0,
        validation_alias=_env("AMP_SCORING_PATCH_LIMIT"),
        description="Most PATCHes carrying `scoring` per cell per window (0 = no limit).",
    )
    scoring_patch_window_seconds: int = Field(
        default=3600,
        ge=0,
        validation_alias=_env("AMP_SCORING_PATCH_WINDOW_SECONDS"),
        description="Length of the scoring PATCH window in seconds (0 = no limit).",
    )
    lifecycle_enabled: bool = Field(
        default=True,
        validation_alias=_env("AMP_LIFECYCLE_ENABLED"),
        description="Run the lifecycle engine on a background timer in `serve`.",
    )
    lifecycle_interval_seconds: int = Field(
        default=3600,
        ge=1,
        validation_alias=_env("AMP_LIFECYCLE_INTERVAL_SECONDS"),
        description="Seconds between background lifecycle passes.",
    )
    owner_index_interval_seconds: int = Field(
        default=900,
        ge=0,
        validation_alias=_env("AMP_OWNER_INDEX_INTERVAL_SECONDS"),
        description="PostgreSQL cell store: seconds between `serve`'s passes that give "
        "each owner of more than 5,000 live cells a vector index of its own (a partial "
        "HNSW index, built `CONCURRENTLY`, the largest owners first; dropped under 2,500), "
        "so a search naming that owner neither ranks all its cells one by one nor walks "
        "every other owner's (0 = never; `ampup-memory owner-indexes` runs one pass "
        "now). One server does it at a time.",
    )
    lifecycle_run_wait_seconds: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        validation_alias=_env("AMP_LIFECYCLE_RUN_WAIT_SECONDS"),
        description="How long `POST /amp/v1/lifecycle/run` waits for another process's "
        "pass to finish before answering 503 UNAVAILABLE.",
    )
    embedding_provider: EmbeddingProvider = Field(
        default="wordllama",
        validation_alias=_env("AMP_EMBEDDING_PROVIDER"),
        description="Embedder: `wordllama` (bundled, offline), `minilm` (all-MiniLM-L6-v2 "
        "int8 ONNX, offline, the `minilm` extra), `sentence-transformers`, "
        "`openai-compatible`, or `hash` (tiny deterministic fallback, for tests).",
    )
    embedding_base_url: str | None = Field(
        default=None,
        validation_alias=_env("AMP_EMBEDDING_BASE_URL"),
        description="Base URL of an OpenAI-compatible embeddings endpoint (`…/v1`).",
    )
    embedding_model: str | None = Field(
        default=None,
        validation_alias=_env("AMP_EMBEDDING_MODEL"),
        description="Embedding model name (required for `openai-compatible` and "
        "`sentence-transformers`).",
    )
    embedding_api_key: str | None = Field(
        default=None,
        validation_alias=_env("AMP_EMBEDDING_API_KEY"),
        description="API key sent as a Bearer token to the embeddings endpoint.",
    )
    embedding_dimensions: int | None = Field(
        default=None,
        ge=1,
        validation_alias=_env("AMP_EMBEDDING_DIMENSIONS"),
        description="Requested embedding dimensions (the endpoint must honour it).",
    )
    rerank: Literal["off", "minilm-l12"] = Field(
        default="off",
        validation_alias=_env("AMPUP_MEMORY_RERANK"),
        description="A query-time reranker for passage search (`POST /query`, "
        "`find: passages`) and fact search (`POST /search`): `minilm-l12` (the "
        "cross-encoder ms-marco-MiniLM-L-12-v2, int8 ONNX, offline; the `rerank` extra) "
        "reorders the hybrid ranking's top results below its first. Better evidence in the "
        "top 5, at a cost of about a second of CPU per passage query, half a second on "
        "two cores (docs/search.md). A request's `rerank: false` skips it.",
    )
    rerank_top: int = Field(
        default=50,
        ge=3,  # the first stays first: 2 would leave one result, nothing to reorder
        le=100,
        validation_alias=_env("AMPUP_MEMORY_RERANK_TOP"),
        description="How many of the hybrid ranking's top results the reranker sees (the "
        "first stays first; the next ones are reordered), 3-100. The cost grows with it.",
    )
    rerank_weight: float = Field(
        default=0.3,
        gt=0,
        le=1,
        validation_alias=_env("AMPUP_MEMORY_RERANK_WEIGHT"),
        description="The reranker's share of a reranked result's score: "
        "(1 − w) · hybrid + w · the cross-encoder's score scaled to [0, 1] per query.",
    )
    rerank_threads: int = Field(
        default=0,
        ge=0,
        le=64,
        validation_alias=_env("AMPUP_MEMORY_RERANK_THREADS"),
        description="CPU threads the reranker scores passages on, one passage per thread "
        "at a time (shared by concurrent queries); 0: the cores this process may use.",
    )
    rerank_concurrency: int = Field(
        default=2,
        ge=1,
        le=64,
        validation_alias=_env("AMPUP_MEMORY_RERANK_CONCURRENCY"),
        description="Reranked searches (`POST /query`, `POST /search`, their MCP tools) "
        "in flight at once per process; more wait their turn without holding one of the "
        "request threads, so other requests keep answering during a burst (docs/search.md).",
    )
    shutdown_grace_seconds: float = Field(
        default=20.0,
        ge=0,
        le=3600,
        validation_alias=_env("AMPUP_MEMORY_SHUTDOWN_GRACE_SECONDS"),
        description="On SIGTERM or Ctrl-C, once requests have ended (or after 5 s), how "
        "long `serve` waits for a timer's pass still running (maintenance, extraction, "
        "advice learning, the warm-up ...) before it closes its stores, then for a search "
        "graph build to stop; no pass starts meanwhile. Past it the process ends at once "
        "with exit code 1, as a kill would (each commit is whole or invisible). Keep the "
        "supervisor's stop timeout above this plus 5 s (docs/operations.md).",
    )
    rerank_queue: int = Field(
        default=64,
        ge=0,
        le=100_000,
        validation_alias=_env("AMPUP_MEMORY_RERANK_QUEUE"),
        description="Reranked searches that may wait for one of the "
        "AMPUP_MEMORY_RERANK_CONCURRENCY slots per process; one more is refused at once "
        "with 503 `UNAVAILABLE` and `Retry-After` (the line's length at the recent pace), "
        "rather than waiting behind searches whose clients may have given up. A request's "
        "`rerank: false` is never refused by it.",
    )
    mcp_agent_id: str | None = Field(
        default=None,
        validation_alias=_env("AMP_MCP_AGENT_ID"),
        description="Agent id the stdio MCP server (`ampup-memory mcp`) acts as.",
    )
    mcp_api_key: str | None = Field(
        default=None,
        validation_alias=_env("AMP_MCP_API_KEY"),
        description="API key the stdio MCP server presents when keys are required.",
    )
    search_refresh_interval_seconds: int = Field(
        default=30,
        ge=0,
        validation_alias=_env("AMPUP_MEMORY_SEARCH_REFRESH_SECONDS"),
        description="Seconds between passes of `serve` that bring the search index level "
        "with ledger commits written by other processes; 0 turns the timer off (a search "
        "still catches up its own scope first).",
    )
    search_ann_min_vectors: int = Field(
        default=50_000,
        ge=0,
        validation_alias=_env("AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS"),
        description="Vectors of one scope and branch (facts and passages counted apart) "
        "from which the embedded (SQLite) search index finds vector candidates with an "
        "HNSW graph and re-scores them exactly, instead of scoring every vector; below it, "
        "and with 0, search is exact. The graph is built (or loaded from the file saved "
        "beside the index) in the background while exact search answers. The same "
        "threshold applies to the AMP cells of the embedded cell store (all cells "
        "counted). PostgreSQL uses pgvector's HNSW index at any size.",
    )
    search_ann_connectivity: int | None = Field(
        default=None,
        ge=4,
        le=100,
        validation_alias=_env("AMPUP_MEMORY_SEARCH_ANN_CONNECTIVITY"),
        description="Links per node (HNSW M) of every vector graph: the embedded index's "
        "and cell store's (usearch), and pgvector's HNSW indexes on PostgreSQL. Unset: "
        f"{CONNECTIVITY} (recall@10 0.99 against exact search on 960k cells of real text "
        "embedded, where 16 gave 0.954; on PostgreSQL 0.9845 at 300k, where 16 stayed under "
        "0.98); on PostgreSQL an index that exists is then kept as it was built (an older "
        f"version's {PGVECTOR_DEFAULTS[0]}), so an upgrade rebuilds none. More links find "
        "more of the exact nearest vectors on text spread over many words, at more build "
        "time and memory (docs/search.md has the measured table). A graph saved with "
        "another value is rebuilt on the next open, in the background; on PostgreSQL, with "
        "a value set, an index built with another is built again when a server starts, "
        "before it answers.",
    )
    search_ann_expansion_add: int | None = Field(
        default=None,
        ge=8,
        le=1000,
        validation_alias=_env("AMPUP_MEMORY_SEARCH_ANN_EXPANSION_ADD"),
        description="Candidates kept while linking a new node into a vector graph (HNSW "
        "efConstruction), for the same graphs as AMPUP_MEMORY_SEARCH_ANN_CONNECTIVITY: "
        f"higher builds a better graph, more slowly. Unset: {EXPANSION_ADD} (an existing "
        "PostgreSQL index kept as built, as for the connectivity). At least twice the "
        "connectivity (as pgvector requires). A graph saved with another value is rebuilt "
        "on the next open.",
    )
    mcp_user_id: str | None = Field(
        default=None,
        validation_alias=_env("AMPUP_MEMORY_MCP_USER"),
        description="AmpUp user the stdio MCP server's memory tools (`remember_memory`, "
        "`search_memory`, ...) act for in trust mode; with keys required the key's bound "
        "user is used instead. Unset: those tools refuse to run.",
    )
    memory_maintenance_interval_seconds: int = Field(
        default=3600,
        ge=0,
        validation_alias=_env("AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS"),
        description="Seconds between background passes of Iceberg table maintenance in "
        "`serve` (orphan rows and files, compaction, snapshot expiry); 0 turns the timer off.",
    )
    extraction_interval_seconds: int = Field(
        default=300,
        ge=0,
        validation_alias=_env("AMPUP_MEMORY_EXTRACTION_INTERVAL_SECONDS"),
        description="Seconds between extraction passes in `serve` (every scope's main "
        "branch, one server at a time; docs/extraction.md); 0 turns the timer off. No "
        "extract model configured: the timer does nothing.",
    )
    lease_seconds: int = Field(
        default=60,
        ge=3,
        validation_alias=_env("AMPUP_MEMORY_LEASE_SECONDS"),
        description="Length of the lease under which one server of a fleet runs a timed "
        "pass (maintenance, extraction, workspace gc, advice judge/cluster/learn); the "
        "holder renews it every third of it while the pass runs, so a killed holder's pass "
        "moves to another server within this time.",
    )
    memory_orphan_grace_seconds: int = Field(
        default=3600,
        ge=0,
        validation_alias=_env("AMPUP_MEMORY_ORPHAN_GRACE_SECONDS"),
        description="Rows and files not in any commit are removed only once older than "
        "this; keep it far above the longest commit.",
    )
    workspace_gc_interval_seconds: int = Field(
        default=60,
        ge=0,
        validation_alias=_env("AMPUP_MEMORY_WORKSPACE_GC_INTERVAL_SECONDS"),
        description="Seconds between `serve`'s passes that drop expired and deleted "
        "workspaces (what `workspace gc` does once); 0 turns the timer off.",
    )
    query_warm: bool = Field(
        default=True,
        validation_alias=_env("AMPUP_MEMORY_QUERY_WARM"),
        description="At start, `serve` builds in the background what the first typed "
        "query (`find: \"entities\"`/`\"facts\"`) of each scope's entity types would "
        "build, so that query does not pay for it (seconds at 50k facts); false skips it "
        "(a server that answers no typed queries, or must start reading no tables). "
        "`GET /status` then shows the timer `enabled: false`.",
    )
    advice_judge_interval_seconds: int = Field(
        default=300,
        ge=0,
        validation_alias=_env("AMPUP_MEMORY_ADVICE_JUDGE_INTERVAL_SECONDS"),
        description="Seconds between `serve`'s passes that judge ended advice sessions with "
        "no explicit reward (what `advice judge` does once; needs a judge model); 0 turns "
        "the timer off.",
    )
    advice_cluster_interval_seconds: int = Field(
        default=900,
        ge=0,
        validation_alias=_env("AMPUP_MEMORY_ADVICE_CLUSTER_INTERVAL_SECONDS"),
        description="Seconds between `serve`'s passes that re-cluster each scope's rewarded "
        "runs and sessions into situations (what `advice cluster` does once); 0 turns the "
        "timer off.",
    )
    advice_learn_interval_seconds: int = Field(
        default=900,
        ge=0,
        validation_alias=_env("AMPUP_MEMORY_ADVICE_LEARN_INTERVAL_SECONDS"),
        description="Seconds between `serve`'s passes that update notes' evidence, promote "
        "or retire them and learn new notes (what `advice learn` does once); 0 turns the "
        "timer off.",
    )
    advice_compile_interval_seconds: int = Field(
        default=900,
        ge=0,
        validation_alias=_env("AMPUP_MEMORY_ADVICE_COMPILE_INTERVAL_SECONDS"),
        description="Seconds between `serve`'s passes that compile each scope's chosen "
        "documents into procedures (what `advice compile` does once; a scope whose "
        "documents did not change is not recompiled); 0 turns the timer off.",
    )
    model_base_url: str | None = Field(
        default=None,
        validation_alias=_env("AMPUP_MEMORY_MODEL_BASE_URL"),
        description="Base URL of an OpenAI-compatible chat endpoint (`…/v1`: Ollama, vLLM, "
        "llama.cpp server, hosted APIs) for extraction, judging, learning and compiling. "
        "Unset (or no model name): none of that work runs, and nothing fails.",
    )
    model_name: str | None = Field(
        default=None,
        validation_alias=_env("AMPUP_MEMORY_MODEL"),
        description="Chat model name sent to that endpoint; it is recorded on what the model "
        "writes (`written_by: extract:<model>`).",
    )
    model_api_key: str | None = Field(
        default=None,
        validation_alias=_env("AMPUP_MEMORY_MODEL_API_KEY"),
        description="API key sent as a Bearer token to the chat endpoint.",
    )
    model_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        validation_alias=_env("AMPUP_MEMORY_MODEL_TIMEOUT_SECONDS"),
        description="Seconds one model request may take before it counts as failed.",
    )
    model_concurrency: int = Field(
        default=4,
        ge=1,
        le=256,
        validation_alias=_env("AMPUP_MEMORY_MODEL_CONCURRENCY"),
        description="Model requests one server process sends at once.",
    )
    model_retries: int = Field(
        default=3,
        ge=0,
        le=20,
        validation_alias=_env("AMPUP_MEMORY_MODEL_RETRIES"),
        description="Retries of one model request after a 429, a 5xx, a timeout or an answer "
        "that is not the asked-for JSON, with back-off (a 429's Retry-After is honoured); "
        "then the work stays pending for a later pass.",
    )
    extract_model_base_url: str | None = Field(
        default=None, validation_alias=_env("AMPUP_MEMORY_EXTRACT_MODEL_BASE_URL"),
        description="Chat endpoint for extraction; unset: `AMPUP_MEMORY_MODEL_BASE_URL`.",
    )
    extract_model_name: str | None = Field(
        default=None, validation_alias=_env("AMPUP_MEMORY_EXTRACT_MODEL"),
        description="Model for extraction; unset: `AMPUP_MEMORY_MODEL`.",
    )
    extract_model_api_key: str | None = Field(
        default=None, validation_alias=_env("AMPUP_MEMORY_EXTRACT_MODEL_API_KEY"),
        description="API key for extraction's endpoint; unset: `AMPUP_MEMORY_MODEL_API_KEY`.",
    )
    extract_model_timeout_seconds: float | None = Field(
        default=None, gt=0, validation_alias=_env("AMPUP_MEMORY_EXTRACT_MODEL_TIMEOUT_SECONDS"),
        description="Request timeout for extraction; unset: `AMPUP_MEMORY_MODEL_TIMEOUT_SECONDS`.",
    )
    extract_model_concurrency: int | None = Field(
        default=None, ge=1, le=256,
        validation_alias=_env("AMPUP_MEMORY_EXTRACT_MODEL_CONCURRENCY"),
        description="Requests at once for extraction; unset: `AMPUP_MEMORY_MODEL_CONCURRENCY`.",
    )
    judge_model_base_url: str | None = Field(
        default=None, validation_alias=_env("AMPUP_MEMORY_JUDGE_MODEL_BASE_URL"),
        description="Chat endpoint for judging; unset: `AMPUP_MEMORY_MODEL_BASE_URL`.",
    )
    judge_model_name: str | None = Field(
        default=None, validation_alias=_env("AMPUP_MEMORY_JUDGE_MODEL"),
        description="Model for judging; unset: `AMPUP_MEMORY_MODEL`.",
    )
    judge_model_api_key: str | None = Field(
        default=None, validation_alias=_env("AMPUP_MEMORY_JUDGE_MODEL_API_KEY"),
        description="API key for judging's endpoint; unset: `AMPUP_MEMORY_MODEL_API_KEY`.",
    )
    judge_model_timeout_seconds: float | None = Field(
        default=None, gt=0, validation_alias=_env("AMPUP_MEMORY_JUDGE_MODEL_TIMEOUT_SECONDS"),
        description="Request timeout for judging; unset: `AMPUP_MEMORY_MODEL_TIMEOUT_SECONDS`.",
    )
    judge_model_concurrency: int | None = Field(
        default=None, ge=1, le=256,
        validation_alias=_env("AMPUP_MEMORY_JUDGE_MODEL_CONCURRENCY"),
        description="Requests at once for judging; unset: `AMPUP_MEMORY_MODEL_CONCURRENCY`.",
    )
    learn_model_base_url: str | None = Field(
        default=None, validation_alias=_env("AMPUP_MEMORY_LEARN_MODEL_BASE_URL"),
        description="Chat endpoint for learning; unset: `AMPUP_MEMORY_MODEL_BASE_URL`.",
    )
    learn_model_name: str | None = Field(
        default=None, validation_alias=_env("AMPUP_MEMORY_LEARN_MODEL"),
        description="Model for learning; unset: `AMPUP_MEMORY_MODEL`.",
    )
    learn_model_api_key: str | None = Field(
        default=None, validation_alias=_env("AMPUP_MEMORY_LEARN_MODEL_API_KEY"),
        description="API key for learning's endpoint; unset: `AMPUP_MEMORY_MODEL_API_KEY`.",
    )
    learn_model_timeout_seconds: float | None = Field(
        default=None, gt=0, validation_alias=_env("AMPUP_MEMORY_LEARN_MODEL_TIMEOUT_SECONDS"),
        description="Request timeout for learning; unset: `AMPUP_MEMORY_MODEL_TIMEOUT_SECONDS`.",
    )
    learn_model_concurrency: int | None = Field(
        default=None, ge=1, le=256,
        validation_alias=_env("AMPUP_MEMORY_LEARN_MODEL_CONCURRENCY"),
        description="Requests at once for learning; unset: `AMPUP_MEMORY_MODEL_CONCURRENCY`.",
    )
    compile_model_base_url: str | None = Field(
        default=None, validation_alias=_env("AMPUP_MEMORY_COMPILE_MODEL_BASE_URL"),
        description="Chat endpoint for compiling; unset: `AMPUP_MEMORY_MODEL_BASE_URL`.",
    )
    compile_model_name: str | None = Field(
        default=None, validation_alias=_env("AMPUP_MEMORY_COMPILE_MODEL"),
        description="Model for compiling; unset: `AMPUP_MEMORY_MODEL`.",
    )
    compile_model_api_key: str | None = Field(
        default=None, validation_alias=_env("AMPUP_MEMORY_COMPILE_MODEL_API_KEY"),
        description="API key for compiling's endpoint; unset: `AMPUP_MEMORY_MODEL_API_KEY`.",
    )
    compile_model_timeout_seconds: float | None = Field(
        default=None, gt=0, validation_alias=_env("AMPUP_MEMORY_COMPILE_MODEL_TIMEOUT_SECONDS"),
        description="Request timeout for compiling; unset: `AMPUP_MEMORY_MODEL_TIMEOUT_SECONDS`.",
    )
    compile_model_concurrency: int | None = Field(
        default=None, ge=1, le=256,
        validation_alias=_env("AMPUP_MEMORY_COMPILE_MODEL_CONCURRENCY"),
        description="Requests at once for compiling; unset: `AMPUP_MEMORY_MODEL_CONCURRENCY`.",
    )
    # The advice loop's learning half (advice/situations.py, notes.py, gate.py).
    advice_trial_share: float = Field(
        default=0.2, ge=0.0, le=1.0,
        validation_alias=_env("AMPUP_MEMORY_ADVICE_TRIAL_SHARE"),
        description="Share of sessions (0-1) in which a candidate note is served while it "
        "earns evidence; the draw is deterministic per note and session.",
    )
    advice_promote_after_people: int = Field(
        default=3, ge=1,
        validation_alias=_env("AMPUP_MEMORY_ADVICE_PROMOTE_AFTER_PEOPLE"),
        description="Distinct users a candidate note must have helped before it is promoted "
        "and served always (one user helped many times counts once).",
    )
    advice_retire_min_served: int = Field(
        default=20, ge=1,
        validation_alias=_env("AMPUP_MEMORY_ADVICE_RETIRE_MIN_SERVED"),
        description="Times a note must have been served before its help rate can retire it.",
    )
    advice_retire_max_help_rate: float = Field(
        default=0.1, ge=0.0, le=1.0,
        validation_alias=_env("AMPUP_MEMORY_ADVICE_RETIRE_MAX_HELP_RATE"),
        description="A note served at least `AMPUP_MEMORY_ADVICE_RETIRE_MIN_SERVED` times "
        "that helped in this share of servings or fewer is retired (no longer served).",
    )
    advice_min_runs_for_note: int = Field(
        default=5, ge=1,
        validation_alias=_env("AMPUP_MEMORY_ADVICE_MIN_RUNS_FOR_NOTE"),
        description="Rewarded runs and sessions a situation needs (at least one with a "
        "positive reward) before the learning model writes its note.",
    )
    advice_situation_min_similarity: float = Field(
        default=0.35, ge=-1.0, le=1.0,
        validation_alias=_env("AMPUP_MEMORY_ADVICE_SITUATION_MIN_SIMILARITY"),
        description="Cosine similarity a task's embedding needs to a situation's centre to "
        "get that situation's advice; below it the task is unrelated and gets none.",
    )
    log_level: LogLevel = Field(
        default="warning",
        validation_alias=_env("AMPUP_MEMORY_LOG_LEVEL"),
        description="Level of AmpUp Memory's own log lines on stderr (other libraries log "
        "warnings and above).",
    )
    log_json: bool = Field(
        default=False,
        validation_alias=_env("AMPUP_MEMORY_LOG_JSON"),
        description="Write log lines as JSON objects (`time`, `level`, `logger`, `message`), "
        "one per line.",
    )
    access_log: bool = Field(
        default=False,
        validation_alias=_env("AMPUP_MEMORY_ACCESS_LOG"),
        description="Log one line per HTTP request in `serve` (client, method, path, "
        "status), whatever the log level. Off by default.",
    )
    allowed_hosts: str = Field(
        default="",
        validation_alias=_env("AMPUP_MEMORY_ALLOWED_HOSTS"),
        description="Comma-separated host names the server also answers to, for a reverse "
        "proxy that passes the public `Host` (or `X-Forwarded-Host`) on. Bound to a loopback "
        "address it answers to loopback names (`localhost`, `127.0.0.1`, `::1`) and these; "
        "bound to another address with keys off, to IP addresses, names without a dot (a "
        "compose service), `*.localhost` and these. Any other `Host` is 421 "
        "`MISDIRECTED_REQUEST`: a web page that re-points its own name at the server (DNS "
        "rebinding) gets nothing. Not checked on a non-loopback bind with keys on.",
    )
    allowed_origins: str = Field(
        default="",
        validation_alias=_env("AMPUP_MEMORY_ALLOWED_ORIGINS"),
        description="Comma-separated browser origins (`https://app.example.com`) whose "
        "pages may call the server, besides loopback pages and the server's own host. A "
        "request whose `Origin` is another site is 403 `FORBIDDEN_ORIGIN`, so a web page "
        "cannot write to or read from a local server; requests without `Origin` (curl, "
        "SDKs, agents) are not affected.",
    )
    max_request_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=65536,
        validation_alias=_env("AMPUP_MEMORY_MAX_REQUEST_BYTES"),
        description="Largest request body accepted, in bytes, on every route and `/mcp` "
        "(batches included); a larger one is 413 `PAYLOAD_TOO_LARGE` before it is read.",
    )
    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = _config_file.get()
        if path is None:
            return init_settings, env_settings
        return init_settings, env_settings, ConfigFile(settings_cls, path)

    @field_validator("*", mode="after")
    @classmethod
    def _whole_number_fits(cls, value: Any) -> Any:
        """Every whole-number setting (seconds, counts, bytes) fits a C int: 2^70 seconds
        passed here and stopped `serve` with an OverflowError's traceback where a timer
        or a timedelta first met it (`lease_seconds`, the intervals)."""
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_WHOLE:
            raise ValueError(f"must be at most {MAX_WHOLE:,}")
        return value

    @field_validator("home", mode="before")
    @classmethod
    def _home_named(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():  # "" would silently mean "."
            raise ValueError("is empty: name a folder, or unset it for ~/.ampup-memory")
        return value

    @field_validator("home", "config", mode="after")
    @classmethod
    def _expand_home(cls, value: Path | None) -> Path | None:
        # Absolute: the catalog keeps each table's metadata location as a path built from
        # the home, and a relative one only opens from the directory it was written in.
        return None if value is None else value.expanduser().absolute()

    @field_validator("store_uri", "index_uri", "catalog_uri", "warehouse", mode="after")
    @classmethod
    def _local_paths_absolute(cls, value: str | None) -> str | None:
        # As the home: a relative file in an SQLite URI or a file:// warehouse is written
        # into the catalog's metadata locations, which then open only from that directory.
        if value is None:
            return None
        for scheme in ("sqlite:///", "file://"):
            if value.startswith(scheme):
                rest, sep, query = value[len(scheme):].partition("?")
                if rest and not rest.startswith("/") and rest != ":memory:":
                    return f"{scheme}{Path(rest).expanduser().absolute()}{sep}{query}"
        return value

    @field_validator("warehouse", mode="after")
    @classmethod
    def _warehouse_location(cls, value: str | None) -> str | None:
        # Was checked only by the commands that open the tables (`settings`, `keys` and
        # `doctor`'s other checks took `gs://…` or `s3://` with no bucket), and a query,
        # a fragment or `user:pw@` in an s3:// location was taken as part of the bucket.
        problem = None if value is None else warehouse_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("store_uri", "index_uri", "catalog_uri", mode="after")
    @classmethod
    def _database_uri(cls, value: str | None) -> str | None:
        # Checked where every command reads it: `sqlite://file.db` (two slashes) was a
        # traceback in the first command that opened the index or catalog, and a path
        # alone was refused only by a command that opened that store.
        if value is None:
            return None
        scheme = urlsplit(value).scheme.lower()
        if scheme == "sqlite":
            if not value.lower().startswith("sqlite:///"):
                raise ValueError("is no SQLite URI: a file is sqlite:///path (three "
                                 "slashes; four before an absolute path: "
                                 "sqlite:////var/lib/ampup/amp.db)")
        elif scheme not in DATABASE_SCHEMES:
            hint = (f"; for a file, sqlite:///{Path(value).expanduser().absolute()}"
                    if not scheme else "")
            raise ValueError("must be sqlite:///path or "
                             f"postgresql://user:password@host:5432/database{hint}")
        return value

    @field_validator(
        "store_uri",
        "index_uri",
        "catalog_uri",
        "warehouse",
        "s3_endpoint",
        "s3_region",
        "s3_access_key_id",
        "s3_secret_access_key",
        "admin_token",
        "api_keys_file",
        "embedding_base_url",
        "embedding_model",
        "embedding_api_key",
        "embedding_dimensions",
        "mcp_agent_id",
        "mcp_api_key",
        "mcp_user_id",
        "config",
        "model_base_url",
        "model_name",
        "model_api_key",
        *_ROLE_MODEL_FIELDS,
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and value.strip() == "" else value

    @field_validator(
        "s3_endpoint",
        "s3_region",
        "s3_access_key_id",
        "s3_secret_access_key",
        "admin_token",
        "embedding_base_url",
        "embedding_model",
        "embedding_api_key",
        "mcp_agent_id",
        "mcp_api_key",
        "mcp_user_id",
        "model_base_url",
        "model_name",
        "model_api_key",
        *_ROLE_MODEL_FIELDS,
        mode="after",
    )
    @classmethod
    def _no_control_characters(cls, value: Any) -> Any:
        # These go into URLs, HTTP headers and request bodies: a NUL or a line break there
        # failed only at the first call (an extraction pass "cannot connect"), not here.
        if isinstance(value, str):
            bad = next((c for c in value if unicodedata.category(c) in ("Cc", "Cs")), None)
            if bad is not None:
                raise ValueError(f"holds the control character U+{ord(bad):04X}: a name, "
                                 "URL or key is printable text")
        return value

    @field_validator(
        "embedding_base_url", "model_base_url", *(f"{r}_model_base_url" for r in MODEL_ROLES),
        mode="after",
    )
    @classmethod
    def _endpoint_is_http(cls, value: str | None) -> str | None:
        # An endpoint without its scheme (`localhost:11434/v1`) was taken, and failed only
        # at the first model call, minutes into `serve`, as a timer's log line.
        if value is not None:
            _http_url(value, "http://localhost:11434/v1")
        return value

    @field_validator("s3_endpoint", mode="after")
    @classmethod
    def _s3_endpoint_is_a_server(cls, value: str | None) -> str | None:
        # pyarrow's S3 client (pyiceberg's FileIO) takes it as the server alone and failed
        # only at the first table write: `minio:9000` as https (a TLS error against an
        # http server), `HTTP://` as a host name, a path as the bucket ("NoSuchBucket"),
        # a query or fragment as "not a valid URI", `user:pw@` as a host to resolve.
        if value is None:
            return value
        parts = _http_url(value, "http://minio:9000")
        if "@" in parts.netloc:
            raise ValueError(_credentials_in_s3_location())
        if parts.path not in ("", "/"):
            raise ValueError("is more than a server: give scheme://host[:port] alone "
                             "(http://minio:9000); the bucket and prefix go in "
                             f"{env_name('warehouse')} (s3://bucket/prefix)")
        return parts.scheme.lower() + value[len(parts.scheme):]

    @field_validator("host", mode="after")
    @classmethod
    def _host_is_an_address(cls, value: str) -> str:
        # `serve` binds it as given: a URL or `host:port` was "Name or service not known".
        if not value.strip():  # a script's empty variable bound every interface
            raise ValueError("is empty: give an address (127.0.0.1, or 0.0.0.0 for every "
                             "interface), or unset it for 127.0.0.1")
        if "/" in value:
            raise ValueError("is a URL: give the address alone (127.0.0.1, 0.0.0.0, ::1)")
        if value.count(":") == 1:
            raise ValueError("holds a port: give the address alone, and the port as "
                             "AMPUP_MEMORY_PORT or --port")
        return value

    @field_validator("allowed_origins", mode="after")
    @classmethod
    def _origins_are_origins(cls, value: str) -> str:
        # A browser's Origin is matched whole (`web/origin.py`): `app.example.com`, `*` or
        # a page's URL never equals one, so every call from that site was refused while
        # the setting looked right.
        for entry in (part.strip() for part in value.split(",")):
            if not entry:
                continue
            try:
                parts = urlsplit(entry)
                parts.port  # noqa: B018 (a port that is no number raises here)
            except ValueError:
                parts = urlsplit("")
            if not parts.scheme or not parts.netloc or parts.path not in ("", "/") \
                    or parts.query or parts.fragment:
                raise ValueError(f"{entry!r} is no origin: list each site as a browser "
                                 "names it, scheme://host[:port] with no path "
                                 "(https://app.example.com)")
        return value

    @field_validator("allowed_hosts", mode="after")
    @classmethod
    def _hosts_are_names(cls, value: str) -> str:
        # Matched against the `Host` header's name: a URL or a path here never matches.
        for entry in (part.strip() for part in value.split(",")):
            if "/" in entry or "@" in entry:
                raise ValueError(f"{entry!r} is no host name: list names alone, "
                                 "memory.example.com (sites with their scheme go in "
                                 "AMPUP_MEMORY_ALLOWED_ORIGINS)")
        return value

    @model_validator(mode="after")
    def _graph_breadth_covers_its_links(self) -> Settings:
        # pgvector refuses an HNSW index with ef_construction below 2 × m; one rule for
        # both backends, so a setting that works embedded works on PostgreSQL too.
        m, ef = self.ann_params.values()
        if ef < 2 * m:
            raise ValueError(
                "AMPUP_MEMORY_SEARCH_ANN_EXPANSION_ADD must be at least twice "
                f"AMPUP_MEMORY_SEARCH_ANN_CONNECTIVITY ({ef} < 2 × {m}; an unset value is "
                f"the default, {CONNECTIVITY} / {EXPANSION_ADD})")
        return self

    @model_validator(mode="after")
    def _keys_file_turns_keys_on(self) -> Settings:
        if self.api_keys_file is not None:
            self.require_keys = True
        return self

    # Derived locations: computed, never stored, so a changed home moves them all.
    @property
    def resolved_store_uri(self) -> str:
        return self.store_uri or f"sqlite:///{self.home / 'amp.db'}"

    @property
    def ann_params(self) -> GraphParams:
        """The vector graphs' build parameters (M, efConstruction), for every backend
        (a value left unset: each backend's default)."""
        return GraphParams(self.search_ann_connectivity, self.search_ann_expansion_add)

    @property
    def resolved_index_uri(self) -> str:
        return self.index_uri or f"sqlite:///{self.home / 'index.db'}"

    @property
    def resolved_catalog_uri(self) -> str:
        return self.catalog_uri or f"sqlite:///{self.home / 'catalog.db'}"

    @property
    def resolved_warehouse(self) -> str:
        return self.warehouse or f"file://{self.home / 'warehouse'}"

    @property
    def scoring_limit_enabled(self) -> bool:
        return self.scoring_patch_limit > 0 and self.scoring_patch_window_seconds > 0


S3_SCHEMES = ("s3", "s3a")


def _credentials_in_s3_location() -> str:
    """What the S3 endpoint's and the warehouse's checks say of ``user:pw@`` in them."""
    return (f"holds credentials: give them as {env_name('s3_access_key_id')} and "
            f"{env_name('s3_secret_access_key')}")


def warehouse_problem(location: str) -> str | None:
    """What is wrong with a warehouse location (``file:///path`` or ``s3://bucket/prefix``,
    the forms pyiceberg's FileIO opens), in words that follow the setting's name; None
    when it is one of them."""
    try:
        parts = urlsplit(location)
    except ValueError as exc:
        return f"is not a location ({exc})"
    scheme = parts.scheme.lower()
    if scheme not in ("file", *S3_SCHEMES):
        hint = (f"; for a folder, file://{Path(location).expanduser().absolute()}"
                if not scheme else "")
        return f"must be file:///path or s3://bucket/prefix{hint}"
    if parts.query or parts.fragment or location.endswith(("?", "#")):
        return "holds a query or fragment: a warehouse is file:///path or s3://bucket/prefix"
    if scheme == "file":
        return None if parts.path else "names no folder (file:///path)"
    if "@" in parts.netloc:
        return _credentials_in_s3_location()
    return None if parts.netloc else "names no bucket (s3://bucket/prefix)"


def _http_url(value: str, example: str) -> SplitResult:
    """``value`` split, when it is an http:// or https:// URL with a host (and a port, if
    any, that is a number) and no query or fragment; else the ValueError a setting's check
    raises. Requests add their own paths to an endpoint: one after a query or fragment
    (`…/v1?api-version=1` + `/chat/completions`) went into it, to the wrong URL."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (a port that is no number raises here)
    except ValueError as exc:
        raise ValueError(f"is not a URL ({exc})") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError("is not an http:// or https:// URL with a host: name the "
                         f"endpoint in full, as {example}")
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        raise ValueError(f"holds a query or fragment: give the endpoint alone, as {example} "
                         "(each request adds its own path)")
    return parts


def flag_name(field: str) -> str:
    """A setting's command-line flag (``--model-base-url``)."""
    return "--" + field.replace("_", "-")


def env_name(field: str) -> str:
    """The primary environment variable of a setting (for CLI help and docs)."""
    alias = Settings.model_fields[field].validation_alias
    assert isinstance(alias, AliasChoices)
    first = alias.choices[0]
    assert isinstance(first, str)
    return first


# The config file the next `Settings()` reads, set by `load_settings` only (a plain
# `Settings()` reads flags and environment alone).
_config_file: ContextVar[Path | None] = ContextVar("ampup_memory_config_file", default=None)


SETTINGS_DOCS = "docs/settings.md"


class SettingsError(ValueError):
    """A setting that cannot work, said in one line. ``by_flag``: every value at fault
    came from a command-line flag, so the command's ``--help`` is where to look; else
    the line itself names the environment variable or config file it came from."""

    def __init__(self, message: str, *, by_flag: bool = False) -> None:
        super().__init__(message)
        self.by_flag = by_flag


class ConfigFile(TomlConfigSettingsSource):
    """The TOML config file: settings by field name (`port = 8765`), top level only.

    An unknown name is an error, so a typo never silently leaves a default in place."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path) -> None:
        self.path = path
        super().__init__(settings_cls, toml_file=path)

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:
            data = super()._read_file(file_path)
        except ValueError as exc:  # tomllib.TOMLDecodeError
            raise SettingsError(f"config file {self.path}: {exc}") from exc
        unknown = [k for k in data if k not in Settings.model_fields or k == "config"]
        if unknown:
            raise SettingsError(f"config file {self.path}: unknown setting(s) "
                             + ", ".join(repr(k) + _did_you_mean(k) for k in unknown))
        return {env_name(k): v for k, v in data.items()}


def _did_you_mean(name: str) -> str:
    """`` (did you mean 'port'?)`` for a config-file key that is a typo of a setting's name,
    or one of its environment names (the file takes names: `port`, not `AMPUP_MEMORY_PORT`);
    else nothing."""
    names = [n for n in Settings.model_fields if n != "config"]
    by_env = {choice.lower(): n for n in names
              for choice in getattr(Settings.model_fields[n].validation_alias, "choices", ())
              if isinstance(choice, str)}
    if name.lower() in by_env:
        return f" (the file takes names: {by_env[name.lower()]!r})"
    close = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def file_in_the_way(home: Path) -> Path | None:
    """The file standing where the home folder, or a folder above it, should be (the
    nearest existing path at or above ``home``, when it is no folder); else None."""
    at = home.absolute()
    while not at.exists() and at != at.parent:
        at = at.parent
    return None if at.is_dir() else at


def ensure_home(settings: Settings) -> None:
    """Make the home folder if missing; one it cannot make (a read-only disk, a file in
    the way) is a setting that cannot work, said in one line, never an OSError."""
    try:
        settings.home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        # mkdir's own words for a file in the way are "File exists" / "Not a directory"
        blocker = file_in_the_way(settings.home)
        why = (exc.strerror or str(exc) if blocker is None
               else "it is a file, not a folder" if blocker == settings.home
               else f"{blocker} is a file, not a folder")
        raise ConfigurationError(f"cannot use the home folder {settings.home}: {why} "
                                 f"(set {env_name('home')} or --home to a folder you may "
                                 "write in)") from exc


def config_path(settings: Settings) -> Path:
    """The config file these settings point at: `config`, else `config.toml` in home."""
    return settings.config or settings.home / "config.toml"


def load_settings(**overrides: Any) -> Settings:
    """Flags (``overrides``; ``None`` = unset) over environment over config file over
    defaults. Raises `SettingsError` (one readable line, naming where the value at fault
    came from) on a setting that is invalid."""
    given = {env_name(k): v for k, v in overrides.items() if v is not None}
    try:
        first = Settings(**given)  # flags and environment: where is the config file?
        path = config_path(first)
        if first.config is not None and not path.is_file():
            by_flag = env_name("config") in given
            said = (f"config file {path} is a folder: name the TOML file in it"
                    if path.is_dir() else f"config file {path} does not exist")
            raise SettingsError(said if by_flag else f"{said} (named by {env_name('config')} "
                                f"in the environment; see {SETTINGS_DOCS})", by_flag=by_flag)
        if not path.is_file():
            return first
    except ValidationError as exc:
        line, by_flag = _validation_line(exc, given)
        raise SettingsError(line, by_flag=by_flag) from None
    with _reading(path):
        try:
            return Settings(**given)
        except ValidationError as exc:
            # Flags and environment alone were valid: the file's value is the one wrong
            # (named as its setting, `port`, beside the environment name it stands for).
            line, _ = _validation_line(exc, given, in_file=True)
            raise SettingsError(f"config file {path}: {line}") from None


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    token = _config_file.set(path)
    try:
        yield
    finally:
        _config_file.reset(token)


def _validation_line(exc: ValidationError, flags: dict[str, Any], *,
                     in_file: bool = False) -> tuple[str, bool]:
    """The errors in one line, each naming where its value came from (the flag, the
    environment variable, the config file), and whether all came from flags. A value
    set in the environment pointed at the command's ``--help``, a flag never given."""
    parts = []
    all_flags = True
    environment = {name.lower() for name in os.environ}
    for err in exc.errors():
        # pydantic's "Value error, " prefix is its own wording, not what is wrong
        msg = str(err["msg"]).removeprefix("Value error, ")
        if not err["loc"]:
            # A rule across settings (its message names them). Its input is every value
            # read, secrets too: never shown.
            all_flags = False
            parts.append(f"invalid settings: {msg} (see {SETTINGS_DOCS})")
            continue
        name = str(err["loc"][0])
        field = next((f for f in Settings.model_fields if env_name(f) == name), None)
        got = shown_value(field, err.get("input")) if field else err.get("input")
        if field and name in flags:
            parts.append(f"invalid setting {field} ({flag_name(field)}): {msg} (got {got!r})")
            continue
        all_flags = False
        shown = f"{field} ({name})" if field else name
        source = ("" if in_file or name.lower() not in environment
                  else " from the environment")
        parts.append(f"invalid setting {shown}: {msg} (got {got!r}{source}; see "
                     f"{SETTINGS_DOCS})")
    return "; ".join(parts), all_flags


# -- Showing settings -------------------------------------------------------------------------
SECRET_SETTINGS = frozenset({"admin_token", "embedding_api_key", "mcp_api_key",
                             "s3_secret_access_key",
                             "model_api_key", *(f"{role}_model_api_key" for role in MODEL_ROLES)})
MASK = "•••"


def shown_value(name: str, value: Any) -> Any:
    """A setting's value fit to print: secrets hidden, passwords inside URIs masked."""
    if value is None or isinstance(value, bool | int | float):  # numbers stay numbers in JSON
        return value
    if name in SECRET_SETTINGS:
        return MASK
    return mask_uri(str(value))


def mask_uri(text: str) -> str:
    """``postgresql://user:secret@host/db`` -> ``postgresql://user:•••@host/db``."""
    try:
        parts = urlsplit(text)
        password = parts.password
    except ValueError:
        return text
    if not password or "@" not in parts.netloc:
        return text
    userinfo, _, hostinfo = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{hostinfo}"))


def mask_secrets(text: str, secrets: list[str | None]) -> str:
    """``text`` (a driver's or store's error) with each secret it quotes shown as •••.
    Only where the secret stands alone, between characters that are not letters or
    digits (``u:p@host``, ``password=p``): a short password replaced everywhere turned
    ``psycopg`` and ``port`` into ``•••syco•••g`` and ``•••ort``."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", MASK, text)
    return text


# -- Which commands read which settings (the CLI offers a flag only where it counts) ---------
SETTING_GROUPS: dict[str, tuple[str, ...]] = {
    "common": ("config", "home", "log_level", "log_json"),
    "cells": ("store_uri",),  # the AMP cell store (also holds the API keys)
    # The PostgreSQL cell store's pool, opened with the embedder by `runtime.open_runtime`.
    "pool": ("store_pool_wait_seconds",),
    # AmpUp episodes, facts, ledger
    "tables": ("index_uri", "catalog_uri", "warehouse", "s3_endpoint", "s3_region",
               "s3_access_key_id", "s3_secret_access_key", "s3_virtual_addressing",
               "s3_connect_timeout_seconds", "s3_request_timeout_seconds", "s3_attempts"),
    "embedding": ("embedding_provider", "embedding_base_url", "embedding_model",
                  "embedding_api_key", "embedding_dimensions"),
    "access": ("require_keys", "api_keys_file", "admin_token", "scoring_patch_limit",
               "scoring_patch_window_seconds"),
    "retention": ("purge_retention", "retention_days"),
    "mcp": ("mcp_agent_id", "mcp_api_key", "mcp_user_id"),
    "maintenance": ("memory_orphan_grace_seconds",),
    # The vector graphs of the cell store and of the search index: whoever opens either.
    "ann": ("search_ann_min_vectors", "search_ann_connectivity", "search_ann_expansion_add"),
    # The lease of a timed pass, held as well by a backup and a workspace drop.
    "lease": ("lease_seconds",),
    # Which situation a task is in: clustering and serving advice.
    "situations": ("advice_situation_min_similarity",),
    # The evidence gate and when a note is learned: learning and serving advice.
    "notes": ("advice_trial_share", "advice_promote_after_people", "advice_retire_min_served",
              "advice_retire_max_help_rate", "advice_min_runs_for_note"),
    # The chat model endpoints (models/chat.py), each role falling back to the default.
    "models": ("model_base_url", "model_name", "model_api_key", "model_timeout_seconds",
               "model_concurrency", "model_retries", *_ROLE_MODEL_FIELDS),
}


def setting_group(field: str) -> str:
    """The group of a setting; one not listed is read by `serve` alone (``server``)."""
    return next((g for g, names in SETTING_GROUPS.items() if field in names), "server")


# -- Crash hook for tests ---------------------------------------------------------------------
TEST_FAULT_ENV = "AMPUP_MEMORY_TEST_FAULT"


def armed_fault(settings: Settings) -> str | None:
    """The crash point a crash-safety test armed, or None.

    Not a setting (no flag, no config key, never in `settings`): armed only by
    ``AMPUP_MEMORY_TEST_FAULT=<point>@<home>`` naming this process's own home folder, so
    neither a stray variable nor a copied environment can arm it in a release."""
    point, sep, home = os.environ.get(TEST_FAULT_ENV, "").partition("@")
    if not (point and sep and home):
        return None
    if Path(home).expanduser().resolve() != settings.home.resolve():
        return None
    return point
