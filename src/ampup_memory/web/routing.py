"""Path parameters that leave room for the fixed routes beside them.

``/memories/{memory_id}`` also matched ``/memories/search``: a GET there read as a cell
called "search" (403) instead of a wrong method (405), and 405 answers listed methods the
fixed path does not serve. A parameter registered here matches any one path segment
except the given fixed names, so the router itself tells the two apart."""

from __future__ import annotations

import re

from starlette.convertors import StringConvertor, register_url_convertor


def segment_except(param: str, *fixed: str) -> str:
    """The path template ``{param:<convertor>}`` for one segment other than ``fixed``
    (registering that convertor with Starlette)."""
    names = "|".join(re.escape(f) for f in fixed)
    convertor = type(f"{param}_segment", (StringConvertor,),
                     {"regex": rf"(?!(?:{names})$)[^/]+"})
    register_url_convertor(f"{param}_segment", convertor())
    return f"{{{param}:{param}_segment}}"
