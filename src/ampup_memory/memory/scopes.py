"""Scope and branch names: validated here, before any of them reaches a catalog or a path.

A scope ``org/team`` is the Iceberg namespace ``org__team``. Org and team are lower-case
letters, digits and single underscores (no leading, trailing or doubled underscore), so the
``__`` separator is unambiguous and ``memory_system`` (no ``__``) can never be a scope.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import WithJsonSchema

from ampup_memory.blank import is_blank
from ampup_memory.errors import field_error

_NAME = r"[a-z0-9]+(?:_[a-z0-9]+)*"
_BRANCH_PART = r"[a-z0-9]+(?:[_-][a-z0-9]+)*"
# Parts joined by single slashes ("team/alice/try-1"): never "..", a leading or trailing
# "/", or "//"; bound as SQL parameters everywhere and never part of a path.
_BRANCH = rf"{_BRANCH_PART}(?:/{_BRANCH_PART})*"
NAME_RE = re.compile(rf"^{_NAME}$")
BRANCH_RE = re.compile(rf"^{_BRANCH}$")
MAX_NAME = 64
SEPARATOR = "__"
SYSTEM_NAMESPACE = "memory_system"
MAIN = "main"


# What the OpenAPI schema publishes, built from the same fragments the checks below use
# (the checks stay here so a bad name is 422 `scope_invalid` after identity, never before).
SCOPE_SCHEMA: dict[str, Any] = {
    "type": "string", "pattern": f"^{_NAME}/{_NAME}$", "maxLength": 2 * MAX_NAME + 1,
    "description": f"org/team; each part at most {MAX_NAME} characters."}
BRANCH_SCHEMA: dict[str, Any] = {
    "type": "string", "pattern": f"^{_BRANCH}$", "minLength": 1, "maxLength": MAX_NAME,
    "description": "Default: main (blank is refused)."}
ScopeText = Annotated[str, WithJsonSchema(SCOPE_SCHEMA)]
BranchText = Annotated[str, WithJsonSchema(BRANCH_SCHEMA)]
# A branch to make: the same rule, with no default.
BranchName = Annotated[str, WithJsonSchema({
    **BRANCH_SCHEMA, "description": "The new branch's name."})]


def valid_name(name: str) -> bool:
    return len(name) <= MAX_NAME and NAME_RE.fullmatch(name) is not None


@dataclass(frozen=True, order=True)
class Scope:
    org: str
    team: str

    def __post_init__(self) -> None:
        # A Scope object is proof of a valid name: every constructor path checks.
        if not (valid_name(self.org) and valid_name(self.team)):
            raise bad_scope(f"{self.org}/{self.team}")

    @property
    def namespace(self) -> str:
        return f"{self.org}{SEPARATOR}{self.team}"

    def __str__(self) -> str:
        return f"{self.org}/{self.team}"


def bad_scope(text: str, loc: str = "scope") -> Exception:
    return field_error(
        [loc],
        f"invalid scope {text[:80]!r}: use org/team, each lower-case letters, digits and "
        "single underscores (not starting or ending with one)",
        "scope_invalid",
    )


def parse_scope(text: object, loc: str = "scope") -> Scope:
    """``"org/team"`` → Scope, or a 422 naming the rule."""
    if not isinstance(text, str):
        raise bad_scope(str(text), loc)
    org, sep, team = text.partition("/")
    if not sep or not valid_name(org) or not valid_name(team):
        raise bad_scope(text, loc)
    return Scope(org, team)


def scope_of_parts(org: str, team: str) -> Scope:
    """A scope given as two fields (a route's ``/{org}/{team}``), or a 422 naming the one
    that breaks the rule."""
    for name, value in (("org", org), ("team", team)):
        if not valid_name(value):
            raise field_error(
                [name], f"invalid {name} {value[:80]!r}: lower-case letters, digits and "
                "single underscores (not starting or ending with one)", "scope_invalid")
    return Scope(org, team)


def scope_from_namespace(namespace: str) -> Scope | None:
    """The scope a catalog namespace holds, or None for anything that is not a scope."""
    org, sep, team = namespace.partition(SEPARATOR)
    if not sep or not valid_name(org) or not valid_name(team):
        return None
    return Scope(org, team)


def parse_branch(text: object, loc: str = "branch", *, required: bool = False) -> str:
    """A branch named in a request (query, body, MCP tool or CLI option), or ``main`` when
    it names none (None). Blank text names no branch either, but is refused rather than
    read as main: `?branch=` from a template whose variable was empty read main's data
    as if it were the branch asked for. ``required``: a branch the request must name (a
    merge's ``from``, a new or deleted branch's ``name``), whose refusal does not offer
    leaving it out."""
    if text is None:
        return MAIN
    if isinstance(text, str) and is_blank(text):
        raise field_error([loc], f"{loc} is blank: name a branch" if required else
                          f"{loc} is blank: name a branch, or leave {loc} out for main",
                          "string_blank")
    if not isinstance(text, str) or len(text) > MAX_NAME or not BRANCH_RE.fullmatch(text):
        raise field_error(
            [loc],
            "invalid branch name: lower-case letters, digits, '-', '_' and single '/' "
            "separators (max 64)",
            "branch_invalid",
        )
    return text
