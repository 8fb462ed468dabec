"""Every setting of the server, declared once.

Each field names its environment variable and carries its help text; the CLI builds its
flags from this list and `docs/settings.md` is checked against it by a test. Nothing else
in the package reads ``os.environ``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

EmbeddingProvider = Literal["wordllama", "sentence-transformers", "openai-compatible", "hash"]


def _env(name: str, *more: str) -> Any:
    return AliasChoices(name, *more)


class Settings(BaseSettings):
    """Server settings. Environment first, then CLI flags override."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True, frozen=False)

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
        description="Iceberg warehouse location (default: `file://<home>/warehouse`).",
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
        validation_alias=_env("AMP_RETENTION_DAYS"),
        description="Days a deleted cell is kept before it may be purged (the spec's minimum "
        "is 30; a longer window stays compliant).",
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
    embedding_provider: EmbeddingProvider = Field(
        default="wordllama",
        validation_alias=_env("AMP_EMBEDDING_PROVIDER"),
        description="Embedder: `wordllama` (bundled, offline), `sentence-transformers`, "
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
    memory_orphan_grace_seconds: int = Field(
        default=3600,
        ge=0,
        validation_alias=_env("AMPUP_MEMORY_ORPHAN_GRACE_SECONDS"),
        description="Rows and files not in any commit are removed only once older than "
        "this; keep it far above the longest commit.",
    )
    max_request_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=65536,
        validation_alias=_env("AMPUP_MEMORY_MAX_REQUEST_BYTES"),
        description="Largest request body accepted, in bytes, on every route and `/mcp` "
        "(batches included); a larger one is 413 `PAYLOAD_TOO_LARGE` before it is read.",
    )
    fault: str | None = Field(
        default=None,
        validation_alias=_env("AMPUP_MEMORY_FAULT"),
        description="Test hook: make the process die at a named point (`after-rows`). "
        "Never set in production.",
    )

    @field_validator("home", mode="after")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @field_validator(
        "store_uri",
        "index_uri",
        "catalog_uri",
        "warehouse",
        "admin_token",
        "api_keys_file",
        "embedding_base_url",
        "embedding_model",
        "embedding_api_key",
        "embedding_dimensions",
        "mcp_agent_id",
        "mcp_api_key",
        "mcp_user_id",
        "fault",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and value.strip() == "" else value

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


def env_name(field: str) -> str:
    """The primary environment variable of a setting (for CLI help and docs)."""
    alias = Settings.model_fields[field].validation_alias
    assert isinstance(alias, AliasChoices)
    first = alias.choices[0]
    assert isinstance(first, str)
    return first


def load_settings(**overrides: Any) -> Settings:
    """Read the environment, then apply explicit overrides (CLI flags); ``None`` = unset."""
    given = {k: v for k, v in overrides.items() if v is not None}
    return Settings(**given)
