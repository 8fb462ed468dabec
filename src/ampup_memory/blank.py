"""What counts as blank text, one rule for every field that must not be blank.

The rule is published as a JSON Schema ``pattern`` and checked with the same pattern, so a
client that validates against the OpenAPI document and the server agree on every string.
Python's ``\\s`` and ECMA-262's ``\\s`` (the dialect JSON Schema patterns are read in)
disagree on six characters (U+001C to U+001F and U+0085 are blank only to Python, U+FEFF
only to ECMA-262), so the pattern names every blank character of either, explicitly.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

# One character that is not white space to Python or to ECMA-262.
NOT_BLANK_PATTERN = (
    "[^\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f"
    "\\u3000\\ufeff]"
)
_NOT_BLANK = re.compile(NOT_BLANK_PATTERN)
# Text that begins and ends with a character other than white space (what a key must be).
UNPADDED_PATTERN = f"^{NOT_BLANK_PATTERN}(?:[\\s\\S]*{NOT_BLANK_PATTERN})?$"
_UNPADDED = re.compile(UNPADDED_PATTERN[1:-1])


def is_blank(text: str) -> bool:
    """True when ``text`` holds no character other than white space (or nothing)."""
    return _NOT_BLANK.search(text) is None


def not_blank(value: str) -> str:
    """A field's check (``AfterValidator``): white space alone is refused, as
    ``string_blank``. Its message names no field: the error's ``loc`` does, as each face
    names it (an MCP tool's ``content`` is the cell's ``content.text``)."""
    if is_blank(value):
        raise PydanticCustomError("string_blank", "must hold a character other than white space")
    return value


def unpadded(value: str) -> str:
    """A key's check (``AfterValidator``): blank is refused as ``string_blank``, white space
    at either end as ``string_padded``. A key is matched as sent, so " runbook" would be a
    second key printing like "runbook": almost always a slip (a pasted cell, a trailing
    newline), and refused rather than trimmed, so a stored key is exactly what was sent."""
    not_blank(value)
    if _UNPADDED.fullmatch(value) is None:
        raise PydanticCustomError(
            "string_padded", "{value} begins or ends with white space: send it trimmed",
            {"value": repr(value[:80])})
    return value


class _PublishedNotBlank:
    """Adds the not-blank pattern to the schema published for a field, keeping its other
    bounds (a query parameter's ``max_length``), so a schema-checking client refuses
    what the server refuses."""

    def __get_pydantic_json_schema__(self, core: CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core)
        schema["pattern"] = NOT_BLANK_PATTERN
        return schema


# A query parameter that names something (`?situation=`, `?predicate=`): blank is refused,
# never read as absent (what leaving the parameter out means).
NotBlankText = Annotated[str, AfterValidator(not_blank), _PublishedNotBlank()]
