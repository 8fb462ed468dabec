"""Conditional requests (RFC 9110 section 13): ``ETag`` on reads and writes, ``If-Match`` and
``If-None-Match`` on writes, so two writers holding the same version never overwrite each
other silently: the second gets 412 PRECONDITION_FAILED and changes nothing.

A resource's tag is derived from stored data only (a hash of what a write changes, or the
commit that wrote it), never from process state: every server sharing a store answers the
same tag, and a write through any face (REST, MCP, CLI) changes it.

The services evaluate a :class:`Condition` themselves, inside the lock or compare-and-set
their write already takes, so the check and the write are one step; a route only parses
the headers (:func:`condition`) and sets the answer's ``ETag`` (:func:`with_etag`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

# Starlette's (what FastAPI re-exports), not fastapi's: the services import `Condition`,
# and the CLI's light commands must not load FastAPI (tests/test_cli.py).
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ampup_memory.errors import PreconditionFailed

# One entity-tag: optional weakness prefix, then a quoted opaque string (RFC 9110 8.8.3).
_TAG = re.compile(r'\s*(W/)?"([\x21\x23-\x7e\x80-\xff]*)"\s*(?:,|$)')
ANY = "*"


def etag_of(data: Any) -> str:
    """A strong entity-tag for JSON-like ``data``: the same data gives the same tag on every
    server (canonical JSON, SHA-256, 128 bits kept)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return quote(hashlib.sha256(text.encode("utf-8")).hexdigest()[:32])


def quote(opaque: str) -> str:
    """``opaque`` as a strong entity-tag (a commit id, a hash)."""
    return f'"{opaque}"'


def _tags(value: str) -> list[tuple[bool, str]] | None:
    """The (weak, opaque) tags of an If-Match / If-None-Match value; None for ``*``. A
    value that does not parse holds no tag, so it matches nothing (RFC 9110 13.1: a
    malformed condition must not be read as absent), even when it begins with one: a
    write under `If-Match: <tag>, garbage` is refused, not let through on its first tag."""
    value = value.strip()
    if value == ANY:
        return None
    tags: list[tuple[bool, str]] = []
    pos = 0
    while True:
        # Empty list elements (`"a",,"b"`, a leading or trailing comma) are ignored (RFC
        # 9110 5.6.1.2): a tag after one still counts.
        pos = len(value) - len(value[pos:].lstrip(" \t,"))
        if pos == len(value):
            return tags
        found = _TAG.match(value, pos)
        if found is None:
            return []
        tags.append((found.group(1) is not None, found.group(2)))
        pos = found.end()


def _opaque(etag: str) -> str:
    return etag[1:-1] if etag.startswith('"') and etag.endswith('"') else etag


@dataclass(frozen=True)
class Condition:
    """A write's preconditions as the request sent them (``None``: header absent)."""

    if_match: str | None = None
    if_none_match: str | None = None

    @property
    def empty(self) -> bool:
        return self.if_match is None and self.if_none_match is None

    def check(self, current: str | None) -> None:
        """412 unless the resource's ``current`` tag (None: it has no current version)
        meets the conditions, in RFC 9110 13.2.2's order. A caller who may not read the
        resource never gets here: it has its not-found answer first."""
        if self.if_match is not None and not _matches(self.if_match, current, strong=True):
            raise PreconditionFailed(
                "If-Match: the resource is no longer the version you read (or has none); "
                "nothing was changed. Read it again and retry.")
        if self.if_none_match is not None and _matches(self.if_none_match, current,
                                                       strong=False):
            raise PreconditionFailed(
                "If-None-Match: the resource exists (or is the version you named); "
                "nothing was changed.")

    def not_modified(self, current: str) -> bool:
        """A read's If-None-Match: the caller holds ``current`` already (304)."""
        return self.if_none_match is not None and _matches(self.if_none_match, current,
                                                           strong=False)


def _matches(header: str, current: str | None, *, strong: bool) -> bool:
    if current is None:
        return False
    tags = _tags(header)
    if tags is None:  # "*": any current version
        return True
    want = _opaque(current)
    return any(opaque == want and not (strong and weak) for weak, opaque in tags)


def condition(request: Request) -> Condition:
    """The request's If-Match / If-None-Match (a FastAPI dependency). A header sent on
    several lines is one list (RFC 9110 5.3): reading only the first line refused a write
    whose current tag came on the second."""
    return Condition(_header(request, "if-match"), _header(request, "if-none-match"))


def _header(request: Request, name: str) -> str | None:
    lines = request.headers.getlist(name)
    return ", ".join(lines) if lines else None


def with_etag(response: Response, etag: str | None) -> Response:
    if etag is not None:
        response.headers["ETag"] = etag
    return response


def not_modified(etag: str) -> Response:
    return Response(status_code=304, headers={"ETag": etag})


def check_read_if_match(condition: Condition, etag: str | None) -> None:
    """A read's If-Match alone (412 unless it names ``etag``), for a read that must know
    before it has effects (an AMP cell's GET counts an access only when it answers)."""
    if condition.if_match is not None:
        Condition(if_match=condition.if_match).check(etag)


def read_answer(condition: Condition, body: Any, etag: str | None) -> Response:
    """A read's answer: 412 when its If-Match names no current version (RFC 9110 13.1.1:
    a read evaluates it too, before If-None-Match; ignored, it served a version the caller
    said it did not want), 304 when the caller's If-None-Match holds ``etag`` already,
    else ``body`` as JSON with its ``ETag`` (none when the resource has no version yet).
    Called only once the caller may read the resource: a 412 confirms nothing."""
    check_read_if_match(condition, etag)
    if etag is not None and condition.not_modified(etag):
        return not_modified(etag)
    return JSONResponse(body, headers={"ETag": etag} if etag is not None else None)


_ETAG_HEADER = {"ETag": {"description": "The resource's version (strong entity-tag): send "
                         "it back in If-Match to write only over that version.",
                         "schema": {"type": "string"}}}


def etag_response(description: str = "Successful Response") -> dict[str, Any]:
    """A 200 answer's documentation with its ``ETag`` header."""
    return {"description": description, "headers": _ETAG_HEADER}


def _header_doc(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": False, "description": description,
            "schema": {"type": "string"}}


def conditional_doc(*, read: bool = False) -> dict[str, Any]:
    """The If-Match / If-None-Match header parameters, for ``openapi_extra``."""
    if read:
        return {"parameters": [
            _header_doc("If-Match", "Answer only if the resource is still this ETag (`*`: if "
                        "it has a version); otherwise 412 PRECONDITION_FAILED."),
            _header_doc("If-None-Match", "An ETag this resource gave: 304 Not Modified when "
                        "it is still the current version.")]}
    return {"parameters": [
        _header_doc("If-Match", "Write only if the resource is still this ETag (`*`: if it "
                    "exists); otherwise 412 PRECONDITION_FAILED and nothing changes."),
        _header_doc("If-None-Match", "`*`: write only if the resource does not exist yet; an "
                    "ETag: only if it is not that version. Otherwise 412."),
    ]}


PRECONDITION_DOC = ("PRECONDITION_FAILED: If-Match names a version that is no longer "
                    "current, or If-None-Match one that is; nothing changed")
READ_PRECONDITION_DOC = ("PRECONDITION_FAILED: If-Match names no current version (`*`: "
                         "the resource has none)")


__all__ = ["ANY", "Condition", "PRECONDITION_DOC", "READ_PRECONDITION_DOC", "condition",
           "conditional_doc", "etag_of", "etag_response", "not_modified", "quote",
           "read_answer", "with_etag"]
