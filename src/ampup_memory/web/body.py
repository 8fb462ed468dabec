"""Request bodies into validated models, the same way on every route and MCP tool.

`parse_body` reads a raw body strictly (identity is checked before it, so routes read raw
bodies themselves); `validation_errors` turns pydantic's errors into the envelope's
``details.errors``; `JsonInt` (a body field's type) and `DECIMAL` (a query integer's check)
accept exactly what their published JSON Schema says.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ValidationError
from pydantic_core import PydanticCustomError

from ampup_memory.errors import ValidationFailed, field_error, refuse_nul
from ampup_memory.web import jsontext

M = TypeVar("M", bound=BaseModel)


def _integral(value: Any) -> Any:
    # JSON Schema's "integer" includes 36.0; strict parsing would refuse it.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_integral)]

_DECIMAL = re.compile(r"-?[0-9]+")


def _decimal(value: Any) -> Any:
    # A query parameter is text, and pydantic's lax int also read "1_0", "+5", " 5 " and
    # "5.0" as numbers: a page size no client that follows the published "integer" sends,
    # more likely a slip than a request. A minus stays, so -1 is refused by its bound.
    if isinstance(value, str) and _DECIMAL.fullmatch(value) is None:
        raise PydanticCustomError("int_parsing",
                                  "Input should be a whole number in decimal digits")
    return value


# After the parameter's Query(...) (`Annotated[int, Query(ge=1), DECIMAL]`): before it,
# FastAPI publishes the bounds as "ge"/"le" rather than "minimum"/"maximum".
DECIMAL = BeforeValidator(_decimal)


# A 422's ``details.errors`` lists at most this many problems (`message` counts them all):
# a 3.6 MB body of 400,000 wrong list items was answered with each, 43 MB built in 17 s.
MAX_REPORTED_ERRORS = 100


def validation_message(errors: list[dict[str, Any]], total: int | None = None) -> str:
    """A 422's ``message``: its first problem and where, so a client that shows only the
    message (an SDK's exception, a log line) says what to fix, not just that something
    was wrong: ``Request validation failed: body.type: Input should be …``. ``total``:
    how many problems there are, when ``errors`` holds only the first of them."""
    if not errors:
        return "Request validation failed."
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", []))
    total = len(errors) if total is None else total
    if total > MAX_REPORTED_ERRORS:
        more = f" (and {total - 1} more; details.errors lists the first {MAX_REPORTED_ERRORS})"
    else:
        more = f" (and {total - 1} more in details.errors)" if total > 1 else ""
    return f"Request validation failed: {where}: {first.get('msg', '')}{more}"


def reported(errors: list[dict[str, Any]], message: str | None = None, *,
             located: bool = True) -> ValidationFailed:
    """The 422 for these problems: the message counts them all, ``details.errors`` lists
    the first `MAX_REPORTED_ERRORS`."""
    return ValidationFailed(message or validation_message(errors), errors[:MAX_REPORTED_ERRORS],
                            located=located)


def validation_errors(
    exc: ValidationError, prefix: tuple[str, ...] = ("body",), message: str | None = None,
) -> ValidationFailed:
    """Pydantic's errors in the envelope's ``details.errors`` shape. A ``prefix`` names
    the request part the model was read from (located); none leaves that to the caller.
    Only the reported ones are converted (pydantic's own list is built whole regardless)."""
    found = exc.errors(include_url=False, include_context=False, include_input=False)
    errors = [{"loc": [*prefix, *e["loc"]], "msg": e["msg"], "type": e["type"]}
              for e in found[:MAX_REPORTED_ERRORS]]
    return ValidationFailed(message or validation_message(errors, len(found)), errors,
                            located=bool(prefix))


# How a JSON text in another encoding starts: a byte order mark, or (UTF-16 and UTF-32
# without one) a NUL beside its first character, which is ASCII (RFC 4627, 3).
_NOT_UTF_8 = ((b"\xef\xbb\xbf", "a UTF-8 byte order mark"),
              (b"\xff\xfe", "a UTF-16 or UTF-32 byte order mark"),
              (b"\xfe\xff", "a UTF-16 byte order mark"))


def _reject_other_encodings(raw: bytes) -> None:
    """A 422 saying what is wrong for a body in UTF-16 or UTF-32, or behind a byte order
    mark: the parser said only "expected value at line 1 column 1" (the mark is no JSON).
    RFC 8259 (8.1) has JSON on the wire in UTF-8, without the mark."""
    found = next((name for mark, name in _NOT_UTF_8 if raw.startswith(mark)), None)
    if found is None and b"\x00" in raw[:4]:
        found = "UTF-16 or UTF-32 text"
    if found is not None:
        msg = (f"Invalid JSON: the body starts with {found}; send UTF-8 JSON without a byte "
               "order mark (RFC 8259)")
        errors = [{"loc": ["body"], "msg": msg, "type": "json_invalid"}]
        raise ValidationFailed(validation_message(errors), errors, located=True)


def _reject_refused_json(raw: bytes, nul: bool) -> None:
    """JSON nested too deep, NaN, Infinity or a number too big for a double: a 422 here
    (`jsontext.loads`), before pydantic's parser, which accepts non-finite numbers (a stored
    NaN would later break the cell's JSON). Unless ``nul``, a string holding U+0000 too
    (`refuse_nul`; in JSON it can only be spelled ``\\u0000``)."""
    try:
        parsed = jsontext.loads(raw)
    except jsontext.JsonRefused as exc:
        raise field_error(["body"], str(exc), "json_invalid", located=True) from None
    except ValueError:
        return  # malformed JSON: pydantic reports it with its position
    if not nul and b"\\u0000" in raw:
        refuse_nul(parsed, ["body"], located=True)  # ["body", "source"], as pydantic says


def parse_body(model: type[M], raw: bytes | None, *, nul: bool = False) -> M:
    """Decode and validate a JSON body, strictly: ``"offset": false`` or ``"expires_at": 0``
    is a 422, not a silent coercion. Malformed JSON is a 422 like any other. ``nul``: the
    AMP face's cells may carry U+0000 (its store maps it away); elsewhere it is a 422."""
    # No body at all is an empty object (optional bodies); whitespace alone is not JSON.
    body = raw if raw else b"{}"
    _reject_other_encodings(body)
    _reject_refused_json(body, nul)
    try:
        return model.model_validate_json(body, strict=True)
    except ValidationError as exc:
        raise validation_errors(exc) from exc
