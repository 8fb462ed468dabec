"""Body field types that accept exactly what their published JSON Schema says."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def _integral(value: Any) -> Any:
    # JSON Schema's "integer" includes 36.0; strict parsing would refuse it.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_integral)]
