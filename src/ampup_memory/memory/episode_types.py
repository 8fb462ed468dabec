"""Episode types: which sources each claims, how its body splits into units, and the
predicates such records typically carry (a guide for a schema's extract rules; those rules,
not this list, decide what extraction reads: docs/extraction.md).

Units are what facts cite (``{episode, unit}``), numbered from 1. A type is chosen by the
longest source prefix that claims it; a source no type claims is refused (``load`` reads
unclaimed sources as ``doc``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ampup_memory.errors import field_error
from ampup_memory.web import jsontext


@dataclass(frozen=True)
class Unit:
    n: int
    kind: str
    text: str

    def wire(self) -> dict[str, Any]:
        return {"n": self.n, "kind": self.kind, "text": self.text}


class SplitError(ValueError):
    """The body does not have the shape its type needs (e.g. a CRM record that is not JSON)."""


Splitter = Callable[[str], list[str]]

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
# "Alice: …", "[00:01:02] Bob Smith: …" begin a turn; other lines continue the current one.
_SPEAKER = re.compile(r"^\s*(?:\[[^\]\n]{1,20}\]\s*)?[A-Za-z][\w .'@-]{0,40}:\s")
_MAIL_START = re.compile(r"^From:\s", re.IGNORECASE)


def paragraphs(body: str) -> list[str]:
    return [p.strip() for p in _PARAGRAPH_BREAK.split(body.strip()) if p.strip()]


def _json_list(body: str) -> list[dict[str, Any]] | None:
    text = body.lstrip()
    if not text.startswith("["):
        return None
    try:
        data = jsontext.loads(text, "the episode body", finite=False)
    except jsontext.JsonRefused as exc:
        raise SplitError(str(exc)) from None
    except ValueError:
        return None
    if isinstance(data, list) and all(isinstance(m, dict) for m in data):
        return data
    return None


def _grouped(body: str, starts: Callable[[str], bool]) -> list[str]:
    """Lines grouped into blocks; a block begins at a line ``starts`` accepts."""
    blocks: list[list[str]] = []
    for line in body.strip().splitlines():
        if not blocks or starts(line):
            blocks.append([line])
        else:
            blocks[-1].append(line)
    return [t for t in ("\n".join(b).strip() for b in blocks) if t]


def speaker_turns(body: str) -> list[str]:
    return _grouped(body, lambda line: _SPEAKER.match(line) is not None)


def slack_messages(body: str) -> list[str]:
    """A JSON export (``[{"user", "text"}]``) or one message per line (indented lines
    continue the message above)."""
    data = _json_list(body)
    if data is not None:
        return [
            f"{m.get('user') or m.get('username') or '?'}: {m.get('text', '')}".strip()
            for m in data
            if str(m.get("text", "")).strip()
        ]
    return _grouped(body, lambda line: bool(line.strip()) and not line[:1].isspace())


def mail_messages(body: str) -> list[str]:
    """A JSON thread (``[{"from", "subject", "body"}]``) or messages each opened by a
    ``From:`` header line."""
    data = _json_list(body)
    if data is not None:
        out = []
        for m in data:
            head = [f"{k.capitalize()}: {m[k]}" for k in ("from", "to", "subject") if m.get(k)]
            text = str(m.get("body") or m.get("text") or "").strip()
            out.append("\n".join([*head, "", text]).strip() if head else text)
        return [t for t in out if t]
    return _grouped(body, lambda line: _MAIL_START.match(line) is not None)


def _flatten(prefix: str, value: Any, out: list[str]) -> None:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
    else:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        out.append(f"{prefix}: {text}")


def crm_fields(body: str) -> list[str]:
    """A JSON object; each field (nested fields by dotted name) is one unit."""
    try:
        data = jsontext.loads(body, "the episode body", finite=False)
    except jsontext.JsonRefused as exc:
        raise SplitError(str(exc)) from None
    except ValueError as exc:
        raise SplitError("a crm: episode body must be a JSON object") from exc
    if not isinstance(data, dict):
        raise SplitError("a crm: episode body must be a JSON object")
    if not data:  # no field, no unit (it was one unit ": {}", a field with no name)
        return []
    out: list[str] = []
    _flatten("", data, out)
    return out


def whole(body: str) -> list[str]:
    return [body.strip()] if body.strip() else []


@dataclass(frozen=True)
class EpisodeType:
    name: str
    prefix: str
    unit_kind: str
    split_rule: str
    predicates: tuple[str, ...]
    # Whether the episode id hashes the source too: the same words in two Slack channels are
    # two episodes; the same document text loaded from two paths is one.
    id_includes_source: bool
    splitter: Splitter
    # Written only by the server itself (a scope's schema): refused as a client's source,
    # and not searched (its text is configuration, not memory).
    reserved: bool = False

    def units(self, body: str) -> list[Unit]:
        return [Unit(n, self.unit_kind, text) for n, text in enumerate(self.splitter(body), 1)]

    def wire(self) -> dict[str, Any]:
        return {
            "type": self.name,
            "prefix": self.prefix,
            "unit": self.unit_kind,
            "split": self.split_rule,
            "predicates": list(self.predicates),
            "id_includes_source": self.id_includes_source,
        }


NOTE_PREFIX = "mcp:remember_memory:"  # + author + ":" + label: the MCP tool's notes

TYPES: tuple[EpisodeType, ...] = (
    EpisodeType("slack", "slack:", "message",
                "one unit per message: a JSON export [{user, text}] or one message per line "
                "(indented lines continue it)",
                ("decision", "owner", "status", "deadline", "preference"), True, slack_messages),
    EpisodeType("gmail", "gmail:", "message",
                "one unit per e-mail of the thread: a JSON thread [{from, subject, body}] or "
                "messages each opened by a 'From:' line",
                ("contact", "commitment", "deadline", "price", "status"), True, mail_messages),
    EpisodeType("call", "call:", "turn",
                "one unit per speaker turn: a line 'Name: …' (optionally after a [timestamp]) "
                "starts a turn, other lines continue it",
                ("budget", "objection", "next_step", "decision_maker", "timeline"), True,
                speaker_turns),
    EpisodeType("crm", "crm:", "field",
                "one unit per field of a JSON record, nested fields by dotted name",
                ("stage", "amount", "close_date", "owner", "contact"), True, crm_fields),
    EpisodeType("doc", "doc:", "paragraph",
                "one unit per paragraph (blank-line separated)",
                ("definition", "policy", "procedure", "owner", "requirement"), False,
                paragraphs),
    EpisodeType("mcp", NOTE_PREFIX, "note",
                "one unit per paragraph of the note",
                ("preference", "fact", "instruction", "decision"), True, paragraphs),
    EpisodeType("close", "close:", "reason",
                "the whole body is one unit: the reason a value was closed",
                (), True, whole),
    EpisodeType("schema", "schema:", "note",
                "the whole body is one unit: a scope's schema as JSON (PUT /schemas)",
                (), False, whole, reserved=True),
)
DOC = next(t for t in TYPES if t.name == "doc")
_BY_NAME = {t.name: t for t in TYPES}


def foreign_author(source: str, user: str) -> bool:
    """Whether ``source`` passes a note off as another's: a note's source names its author
    (``mcp:remember_memory:<author>:<label>``, as the MCP tool writes it), and a reader
    takes it at its word, so only that author may write one."""
    return source.startswith(NOTE_PREFIX) and not source.startswith(f"{NOTE_PREFIX}{user}:")


def client_types() -> list[EpisodeType]:
    """The types a client may write (the reserved ones are the server's own)."""
    return [t for t in TYPES if not t.reserved]


def known_prefixes() -> list[str]:
    return [t.prefix for t in client_types()]


def type_for_source(source: str) -> EpisodeType | None:
    claims = [t for t in TYPES if source.startswith(t.prefix)]
    return max(claims, key=lambda t: len(t.prefix)) if claims else None


def by_name(name: str) -> EpisodeType | None:
    return _BY_NAME.get(name) or type_for_source(name)


def client_type(name: str) -> EpisodeType | None:
    """A type a client names (by name or prefix, as `by_name`), among `client_types` only:
    the reserved ones are the server's own, listed nowhere a client lists types."""
    found = by_name(name)
    return None if found is None or found.reserved else found


def require_type(source: str, loc: list[str | int]) -> EpisodeType:
    found = type_for_source(source)
    if found is None or found.reserved:
        raise field_error(
            loc,
            f"no episode type claims source {source[:80]!r}; known prefixes: "
            + ", ".join(known_prefixes()),
            "source_unclaimed",
        )
    return found
