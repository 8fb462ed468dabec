"""Request-body documentation for routes that parse their bodies themselves.

Routes read raw bodies so the contract's check order holds (identity before validation);
`body_doc` still puts each body's JSON schema into the OpenAPI document, and
`install_schemas` moves the nested models into ``components/schemas``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field

REF = "#/components/schemas/{model}"
_MODELS: dict[str, type[BaseModel]] = {}


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine code, e.g. VALIDATION_ERROR.")
    message: str
    details: dict[str, Any] = Field(
        description="VALIDATION_ERROR: errors = [{loc, msg, type}], each loc led by the "
        "request part its field came from (body, query, path); others per code.")


class ErrorBody(BaseModel):
    """The one error envelope every 4xx and 5xx answer has (``http_errors``)."""

    # Rendered by `web.errors` (once ``http_errors``); the docstring is this schema's
    # published description, so it stays as docs/openapi.json has it.

    error: ErrorDetail


def errors(described: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each status it answers, described, in the envelope."""
    return {status: {"description": text, "model": ErrorBody}
            for status, text in described.items()}


def header_doc(name: str, description: str, *, pattern: str | None = None,
               max_length: int | None = None) -> dict[str, Any]:
    """An optional header parameter. Routes read headers themselves (identity first), so
    the schema documents what they accept without FastAPI validating it ahead of them."""
    schema: dict[str, Any] = {"type": "string"}
    if pattern is not None:
        schema["pattern"] = pattern
    if max_length is not None:
        schema["maxLength"] = max_length
    return {"parameters": [{"name": name, "in": "header", "required": False,
                            "description": description, "schema": schema}]}


def merged(*docs: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` pieces as one: their header parameters joined, the rest merged."""
    out: dict[str, Any] = {}
    for doc in docs:
        out.update({k: v for k, v in doc.items() if k != "parameters"})
        out["parameters"] = [*out.get("parameters", []), *doc.get("parameters", [])]
    if not out["parameters"]:
        del out["parameters"]
    return out


def body_doc(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    _MODELS[model.__name__] = model
    return {
        "requestBody": {
            "required": required,
            "content": {
                "application/json": {"schema": {"$ref": REF.format(model=model.__name__)}}
            },
        }
    }


TOO_LARGE = "PAYLOAD_TOO_LARGE: the body is over max_request_bytes, refused before it is read"
ENCODED = ("UNSUPPORTED_MEDIA_TYPE: the body has a Content-Encoding (gzip, br, ...); only "
           "identity is read (Accept-Encoding: identity)")
# What web/limits.py answers a body with before any route runs: (status, code, description).
_BODY_REFUSALS = (("413", "PAYLOAD_TOO_LARGE", TOO_LARGE),
                  ("415", "UNSUPPORTED_MEDIA_TYPE", ENCODED))


def _every_body_may_be_refused(schema: dict[str, Any]) -> None:
    """The body middleware (web/limits.py) answers every route that takes a body with 413
    or 415 before the route runs, so the route's own ``responses`` cannot know to list
    them: publish them here, once."""
    for item in schema.get("paths", {}).values():
        for op in item.values():
            if "requestBody" not in op:
                continue
            for status, code, text in _BODY_REFUSALS:
                answer = op["responses"].setdefault(status, {
                    "description": "", "content": {"application/json": {"schema": {
                        "$ref": REF.format(model="ErrorBody")}}}})
                if code not in answer["description"]:
                    answer["description"] = "; ".join(
                        d for d in (answer["description"], text) if d)
            op["responses"] = dict(sorted(op["responses"].items()))


def install_schemas(app: FastAPI) -> None:
    """Replace ``app.openapi`` with one that also publishes the hand-parsed bodies."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description,
            routes=app.routes,
        )
        _every_body_may_be_refused(schema)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, model in _MODELS.items():
            body = model.model_json_schema(ref_template=REF, mode="validation")
            for def_name, definition in body.pop("$defs", {}).items():
                components.setdefault(def_name, definition)
            components[name] = body
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
