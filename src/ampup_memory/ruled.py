"""Text fields whose rule is a published pattern, refused in words.

pydantic's own pattern check answers "String should match pattern '^[0-9a-f]{64}$'": the
regex, not what to send. A field typed ``Annotated[str, ruled(...), published(...)]``
publishes the same pattern in the OpenAPI document and refuses a value that misses it with
``invalid <what> '<value>': <rule>``. The check uses Python's ``re``, so it is for patterns
of ASCII classes, where Python and ECMA-262 (JSON Schema's dialect) agree.
"""

from __future__ import annotations

import re
from typing import Any

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
