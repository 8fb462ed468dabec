"""Text fields whose rule is a published pattern, refused in words.

pydantic's own pattern check answers "String should match pattern '^[0-9a-f]{64}$'": the
regex, not what to send. A field typed ``Annotated[str, ruled(...), published(...)]``
publishes the same pattern in the OpenAPI document and refuses a value that misses it with
``invalid <what> '<value>': <rule>``. The check uses Python's ``re``, so it is for patterns
of ASCII classes, where Python and ECMA-262 (JSON Schema's dialect) agree.

Names that may hold any character (entity ids, predicates, document keys) have one more
rule no JSON Schema pattern can say: `composed` (Unicode NFC).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any

from pydantic import AfterValidator, WithJsonSchema
from pydantic_core import PydanticCustomError


def ruled(pattern: str, type_: str, what: str, rule: str) -> AfterValidator:
    """The check of ``pattern``; a refusal of type ``type_`` names the value and ``rule``."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if compiled.fullmatch(value) is None:
            raise PydanticCustomError(type_, f"invalid {what} {{value}}: {rule}",
                                      {"value": repr(value[:80])})
        return value

    return AfterValidator(check)


def published(pattern: str, **schema: Any) -> WithJsonSchema:
    """What the OpenAPI document says of the field: a string of ``pattern``."""
    return WithJsonSchema({"type": "string", "pattern": pattern, **schema})


def composed(value: str) -> str:
    """A name (an entity id, a predicate, a document key) in Unicode NFC, or a refusal.

    Names are matched as sent, code point for code point: "café" spelled with U+00E9 (NFC,
    what keyboards type) and with "e" + U+0301 (NFD, what some file systems hand back) would
    be two entities that print alike. Refused rather than normalised, so a stored name is
    always exactly what its writer sent and a reader's spelling finds it or is told why."""
    if not unicodedata.is_normalized("NFC", value):
        raise PydanticCustomError(
            "string_not_nfc", "{value} is not in Unicode NFC: send the composed form "
            "(e.g. 'é' as U+00E9, not 'e' + U+0301)", {"value": repr(value[:80])})
    return value


Composed = Annotated[str, AfterValidator(composed)]
