"""How JSON input is read: every JSON text a client sends is parsed by `loads`.

A key named twice in one object is refused (`loads` for request bodies, `check_message`
for ``/mcp`` messages): RFC 8259 leaves the answer to each reader, and readers differ (the
first wins in some, the last in Python and JavaScript), so a gateway that checked
``"acl": ["user:x"]`` could pass on a body this server reads as ``"acl": ["*"]``.

Request bodies (`web.body.parse_body`, on every AMP and AmpUp route) and JSON inside
episode bodies (``crm:`` records, ``slack:``/``gmail:`` exports) share the one depth limit,
checked before parsing by `shape` (which never recurses), so a body nested 100,000 deep is a
clear 422 instead of a ``RecursionError`` in whichever parser meets it first. (``/mcp``
messages are parsed by the MCP SDK: `check_message` holds them to the same bounds first.)
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

MAX_DEPTH = 128  # arrays and objects inside each other; real payloads stay far below
# Arrays and objects in one request body. Parsing allocates one Python object each, and the
# cyclic collector walks them again and again while they pile up: a 4 MB body of `[[]]`s
# (1.6M containers) took 1.8 s to parse, 85 % of it collection, 3 s of CPU in all a request
# and a lasting 600 MB, where 4 MB of text takes milliseconds. The largest real bodies (a
# batch of 1,000 facts with their citations) hold a few thousand.
MAX_CONTAINERS = 100_000

_QUOTE = ord('"')
_NOT_MARK = bytes(b for b in range(256) if b not in b'[]{}"')


@cache
def _steps() -> np.ndarray:
    """What each mark does to the nesting depth: +1 for [ and {, -1 for ] and }. (Built on
    first use: numpy loads only when a body is read, not when a command imports this.)"""
    import numpy as np

    step = np.zeros(256, dtype=np.int8)
    step[list(b"[{")] = 1
    step[list(b"]}")] = -1
    return step


class JsonRefused(ValueError):
    """Well-formed or not, this JSON is refused (too deep, or a number that is not finite)."""


def shape(text: bytes | str) -> tuple[int, int]:
    """How deep arrays and objects nest in ``text``, and how many there are, brackets
    inside strings not counted.

    Vectorised and iterative, so it never recurses and costs about what parsing the text costs
    whatever the input. Only strings hold backslashes in JSON: with escaped backslashes and
    quotes dropped, every quote left opens or closes a string. (Malformed JSON gets some
    number; its parser refuses it anyway.)"""
    import numpy as np

    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = np.frombuffer(raw.translate(None, _NOT_MARK), dtype=np.uint8)  # quotes, brackets
    if not len(marks):
        return 0, 0
    outside = (np.cumsum(marks == _QUOTE, dtype=np.int64) & 1) == 0
    steps = _steps()[marks] * outside
    levels = np.cumsum(steps, dtype=np.int64)
    return max(0, int(levels.max())), int(np.count_nonzero(steps == 1))


def check_depth(text: bytes | str, where: str = "the body", *,
                containers: bool = False) -> None:
    """`JsonRefused` for JSON nested past MAX_DEPTH; with ``containers``, also for one
    holding more than MAX_CONTAINERS arrays and objects (request bodies)."""
    deep, many = shape(text)
    if deep > MAX_DEPTH:
        raise JsonRefused(f"JSON in {where} nests deeper than {MAX_DEPTH} arrays or objects")
    if containers and many > MAX_CONTAINERS:
        raise JsonRefused(f"JSON in {where} holds {many} arrays and objects; at most "
                          f"{MAX_CONTAINERS} are read")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400
        raise JsonRefused(f"numbers must be finite JSON numbers, not {text}")
    return value


# An integer literal of 309 digits or more may be beyond every double (1.8e308): written
# as 2e308 it is refused, and most JSON readers (JavaScript's among them) read it as
# Infinity. Only a text holding such a run of digits pays for checking each integer.
_LONG_DIGITS = re.compile(r"[0-9]{309}")
_LONG_DIGIT_BYTES = re.compile(rb"[0-9]{309}")


def _finite_int(text: str) -> int:
    value = int(text)  # over 4,300 digits a ValueError: malformed, as without the check
    try:
        float(value)  # rounds as a reader of doubles does; past the largest, no double
    except OverflowError:
        raise JsonRefused(f"numbers must be finite JSON numbers, not {text[:40]}… "
                          f"({len(text.lstrip('-'))} digits, beyond a double)") from None
    return value


def _no_constant(text: str) -> float:
    raise JsonRefused(f"numbers must be finite JSON numbers, not {text}")  # NaN, Infinity


def _keys_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JsonRefused(f"the key {json.dumps(key[:100], ensure_ascii=False)} "
                                  "appears more than once in one object; send each key once")
            seen.add(key)
    return obj


def check_message(text: bytes | str, where: str = "the message") -> None:
    """`JsonRefused` for a JSON message nested too deep, holding more than MAX_CONTAINERS
    arrays and objects, or naming a key twice in one object: for bodies another parser
    reads (the MCP SDK's, at ``/mcp``), which does none of these checks. Numbers are not
    checked (the MCP tools check their arguments' numbers themselves) and malformed JSON
    passes (its parser reports it)."""
    check_depth(text, where, containers=True)
    try:
        json.loads(text, object_pairs_hook=_keys_once)
    except JsonRefused:
        raise
    except ValueError:  # malformed: not ours to report
        return


def loads(text: bytes | str, where: str = "the body", *, finite: bool = True) -> Any:
    """Parse JSON from a client. `JsonRefused` for too deep or, with ``finite``, for a
    number that is not finite (JSON has no NaN or Infinity, and a number too big for a
    double is one in disguise); other malformed JSON raises ``json.JSONDecodeError``. Both
    are ``ValueError``. Episode bodies pass ``finite=False``: they were always read with
    Python's lenient parser, and a stored body must split the same way it did when written.
    With ``finite``, a key named twice in one object is refused too (see above)."""
    check_depth(text, where, containers=finite)
    if not finite:
        return json.loads(text)
    long = (_LONG_DIGITS.search(text) if isinstance(text, str)
            else _LONG_DIGIT_BYTES.search(text))
    return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant,
                      parse_int=_finite_int if long else None, object_pairs_hook=_keys_once)
