"""Who is calling: trust-header mode, API keys, and the admin credential.

Keys are stored only as ``sha256:<hex>`` (the reference's key-file format), so a leaked
database leaks no usable key. Every identity or key failure with keys on is the same
401 ``UNAUTHENTICATED``: which part was wrong is nobody's business but the log's.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ampup_memory.amp.model import agent_id_problem
from ampup_memory.amp.store.base import CellStore, KeyRecord
from ampup_memory.errors import (
    AdminDisabled,
    AdminRequired,
    ConfigurationError,
    Unauthenticated,
)
from ampup_memory.timefmt import duration_seconds

AGENT_HEADER = "x-amp-agent-id"
KEY_HEADER = "x-amp-api-key"
ADMIN_HEADER = "x-amp-admin-token"
USER_HEADER = "x-ampup-user"
# The headers that say who calls. Sent twice with two values, which copy names the caller
# would depend on which copy a reader (or a proxy in front) takes: refused instead.
CREDENTIAL_HEADERS = {AGENT_HEADER: "X-AMP-Agent-ID", KEY_HEADER: "X-AMP-API-Key",
                      ADMIN_HEADER: "X-AMP-Admin-Token", USER_HEADER: "X-AmpUp-User",
                      "authorization": "Authorization"}

log = logging.getLogger("ampup_memory")


def hash_key(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    return "ampk_" + secrets.token_urlsafe(32)


def parse_duration(text: str) -> timedelta:
    """A key's lifetime: ``30d``, ``12h``, ``1d12h`` (timefmt's one spelling) → a positive
    timedelta."""
    seconds = duration_seconds(text)
    if seconds is None or seconds <= 0:
        raise ValueError(f"bad duration {text.strip()!r}: use a positive number and s, m, h, "
                         "d or w (parts may follow each other: 1d12h)")
    return timedelta(seconds=seconds)


def parse_keys_file(content: bytes) -> dict[str, str]:
    """The reference format: ``{"agent_id": "sha256:<hex>"}``; ValueError if it is not."""
    from ampup_memory.web.jsontext import loads

    # Nested 10,000 deep, it stopped `serve` with a RecursionError's traceback.
    data = loads(content.decode("utf-8"), "the file", finite=False)
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.startswith("sha256:")
        for k, v in data.items()
    ):
        raise ValueError('it must be a JSON object of "agent_id": "sha256:<hex>" entries')
    return data


@dataclass(frozen=True)
class Caller:
    agent_id: str
    user_id: str | None = None
    admin: bool = False


class KeyRing:
    """API keys from the store plus the optional reference-format file."""

    def __init__(self, store: CellStore, keys_file: Path | None) -> None:
        self.store = store
        self.keys_file = keys_file
        self._file_keys: dict[str, str] = {}  # hash -> agent
        self._file_content: bytes | None = None
        # One reload at a time: two requests reading the file across a rewrite could
        # otherwise install the older content last, and a key removed from the file would
        # work again until the next reload.
        self._file_lock = threading.Lock()
        self._reload_file(at_start=True)

    def _reload_file(self, at_start: bool = False) -> None:
        """Re-read the key file when its bytes changed (not its mtime: a rewrite within one
        clock tick, or a copy that keeps the old mtime, would go unseen).

        At start-up a bad file stops the server. Once running, a file that cannot be read
        or parsed (say, half-written) grants no file key until it can: a failed read never
        keeps a revoked key alive, and never turns a request into a 500. A missing file
        grants none.
        """
        if self.keys_file is None:
            return
        if at_start and not self.keys_file.exists():
            # Not an error (the operator may write the file later), but a typo in the path
            # would lock every agent out without a word.
            log.warning("AMP_API_KEYS_FILE %s does not exist: it grants no key until a file "
                        "is created there; meanwhile only keys made with `ampup-memory keys "
                        "create` are accepted", self.keys_file)
        with self._file_lock:
            try:
                content = self.keys_file.read_bytes() if self.keys_file.exists() else b"{}"
                if content == self._file_content:
                    return
                entries = parse_keys_file(content)
            except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
                problem = f"cannot read AMP_API_KEYS_FILE {self.keys_file}: {exc}"
                if at_start:
                    raise ConfigurationError(problem) from exc
                log.error("%s; no key from that file is accepted until it is fixed", problem)
                self._file_keys, self._file_content = {}, None
                return
            self._file_keys = {h.lower(): agent for agent, h in entries.items()}
            self._file_content = content

    def lookup(self, key: str, now: datetime) -> KeyRecord | None:
        digest = hash_key(key)
        record = self.store.key_by_hash(digest)
        if record is not None:
            if record.revoked_at is not None:
                return None
            if record.expires_at is not None and record.expires_at <= now:
                return None
            return record
        self._reload_file()
        agent = self._file_keys.get(digest)
        if agent is None:
            return None
        return KeyRecord(key_id="file", agent_id=agent, key_hash=digest, admin=False,
                         created_at=now)

    def create(self, agent_id: str, admin: bool, expires_in: timedelta | None,
               user_id: str | None = None) -> tuple[str, KeyRecord]:
        """A new key for ``agent_id``; ValueError when that is no valid agent id."""
        problem = agent_id_problem(agent_id)
        if problem:
            raise ValueError(f"{agent_id[:80]!r} is not a valid agent id: it {problem}")
        key = new_key()
        now = datetime.now(UTC)
        record = KeyRecord(
            key_id="key_" + secrets.token_hex(8),
            agent_id=agent_id,
            key_hash=hash_key(key),
            admin=admin,
            created_at=now,
            expires_at=now + expires_in if expires_in else None,
            user_id=user_id,
        )
        self.store.put_key(record)
        return key, record

    def any_admin_key(self) -> bool:
        now = datetime.now(UTC)
        return any(
            r.admin and r.revoked_at is None and (r.expires_at is None or r.expires_at > now)
            for r in self.store.list_keys()
        )


def header_map(headers: Mapping[str, str]) -> dict[str, str]:
    """A request's headers by lower-case name, for the checks below. ``headers.items()``
    yields every copy of a repeated header (Starlette's and the MCP SDK's do); a credential
    header with two different values is a 401."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        if key in CREDENTIAL_HEADERS and key in out and out[key] != value:
            raise Unauthenticated(f"The {CREDENTIAL_HEADERS[key]} header is sent more than "
                                  "once, with different values: send it once.")
        out[key] = value
    return out


def presented_key(headers: dict[str, str]) -> str | None:
    key = headers.get(KEY_HEADER, "").strip()
    if key:
        return key
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return None


class UserMismatch(Unauthenticated):
    """An ``X-AmpUp-User`` that is not the presented key's user (keys on)."""

    def __init__(self, key_user: str | None) -> None:
        self.key_user = key_user
        if key_user is None:
            super().__init__("X-AmpUp-User is sent, but this API key speaks for no AmpUp user: "
                             "leave the header out, or use a key made with `keys create "
                             "--agent ID --user USER`.")
        else:
            super().__init__("X-AmpUp-User names another user than the one this API key "
                             "speaks for: leave the header out, or send the key's user.")


class Authenticator:
    def __init__(self, keyring: KeyRing, require_keys: bool, admin_token: str | None) -> None:
        self.keyring = keyring
        self.require_keys = require_keys
        self.admin_token = admin_token

    def caller(self, headers: dict[str, str]) -> Caller:
        """The calling agent, or 401. Runs before any body is looked at."""
        # The server reads header bytes as Latin-1, so UTF-8 arrives as two or three
        # characters above '~': refused as non-ASCII by the agent-id rule, never stored.
        agent = headers.get(AGENT_HEADER, "").strip()
        user = headers.get(USER_HEADER, "").strip() or None
        problem = agent_id_problem(agent) if agent else None
        if not self.require_keys:
            if not agent:
                raise Unauthenticated(
                    "The X-AMP-Agent-ID header is required.", code="MISSING_AGENT_ID"
                )
            if problem:
                raise Unauthenticated(f"X-AMP-Agent-ID is not a valid agent id: it {problem}.")
            return Caller(agent_id=agent, user_id=user)
        key = presented_key(headers)
        record = self.keyring.lookup(key, datetime.now(UTC)) if key else None
        if (not agent or problem or record is None
                or not hmac.compare_digest(record.agent_id.encode(), agent.encode())):
            raise Unauthenticated("A valid API key for this agent is required.")
        # With keys on, the key alone says which AmpUp user speaks: a header could name
        # anyone. One naming someone else is refused, not ignored: a client configured
        # with another user would otherwise write ACLs naming that user and read as this.
        if user is not None and user != record.user_id:
            raise UserMismatch(record.user_id)
        return Caller(agent_id=agent, user_id=record.user_id, admin=record.admin)

    def optional_caller(self, headers: dict[str, str]) -> Caller | None:
        """For POST /memories with keys off: the header may be absent (body names creator)."""
        agent = headers.get(AGENT_HEADER, "").strip()
        if not self.require_keys and not agent:
            return None
        return self.caller(headers)

    def require_admin(self, headers: dict[str, str]) -> None:
        token = headers.get(ADMIN_HEADER, "")
        if self.admin_token and token and hmac.compare_digest(
            token.encode("utf-8"), self.admin_token.encode("utf-8")
        ):
            return
        key = presented_key(headers)
        if key:
            record = self.keyring.lookup(key, datetime.now(UTC))
            if record is not None and record.admin:
                return
        if not self.admin_token and not self.keyring.any_admin_key():
            raise AdminDisabled(
                "Admin routes are disabled: set AMP_ADMIN_TOKEN or create an admin key "
                "(ampup-memory keys create --agent ID --admin)."
            )
        raise AdminRequired()
