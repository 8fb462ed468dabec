"""The MCP tools' arguments: what each tool publishes in its input schema and how a call
whose arguments do not fit it is answered.

The SDK derives a tool's input schema and argument check from the Python signature alone,
so without this module a model reading ``tools/list`` saw bare titles (no argument
descriptions, no bounds such as ``limit`` 1–100 or ``reward`` -1..1), an unknown argument
(``sesion`` for ``session``) was dropped without a word where the REST routes refuse it,
and a value of the wrong type came back as pydantic's several-line report with a link and
the value's Python repr. `publish` fixes all three for one tool:

- descriptions and bounds are copied from the REST request models the tool's service
  already checks (``WriteEpisode``, ``RewardRun``, ...), so the schema states the rule the
  server enforces, from its one place; the tool's own texts add what a model needs
  beyond the REST docs;
- ``strict`` refuses unknown arguments (``additionalProperties: false``), as the REST
  bodies do (``extra="forbid"``), and checks types as strictly as they do (`parse_body`
  validates JSON in pydantic's strict mode): ``limit: "10"`` or ``dry_run: "true"`` is
  refused, not turned into a number or a boolean;
- a refused argument is the same one line the services' own refusals are:
  ``Invalid request: <argument>: <problem>``.
"""

from __future__ import annotations

import functools
import json
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, cast

import pydantic_core
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo

from ampup_memory.errors import ValidationFailed

# Keywords copied from a REST model's field schema: bounds and shapes, not its type (the
# tool's signature gives that) nor `enum` (a tool may take more values than one route).
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
          "maxLength", "minItems", "maxItems", "pattern", "format")
# Arguments several tools share, in the words a model needs (the REST texts are terser).
COMMON = {
    "scope": "Team memory to use: org/team, each part lower-case letters, digits and single "
             "underscores (acme/sales).",
    "branch": "The branch to use (default main).",
    "at_commit": "A ledger commit id (26 characters): memory as that commit left it.",
    "acl": "Who may read it: '*', 'user:<id>', 'group:<id>' or 'role:<name>' "
           "(default: only you).",
}
# Not an identifier, so it never collides with a tool argument's name.
_REFUSED = " refused"


def _union_arg(err: Mapping[str, Any]) -> bool:
    """An error of one branch of a union argument (``value``: text, number, ...). The
    tools' arguments have no nested models, so a name after the argument's is a branch."""
    loc = err["loc"]
    return len(loc) > 1 and isinstance(loc[1], str)


def refusal(exc: ValidationError) -> str:
    """The SDK's argument check failing, as the tools' one-line ``Invalid request: …``."""
    from ampup_memory.mcp.tools import error_text
    from ampup_memory.web.body import validation_errors

    # One problem per union argument, not one per type it did not match.
    unions = sorted({str(e["loc"][0]) for e in exc.errors() if _union_arg(e)})
    problems = validation_errors(exc, ()).details["errors"]
    problems = [p for p in problems if not _union_arg(p)] + [
        {"loc": [name], "msg": "Input is none of the types the input schema allows",
         "type": "union_type"} for name in unions]
    return error_text(ValidationFailed("Request validation failed.", problems))


def _takes_text(field: FieldInfo) -> bool:
    annotation = field.annotation
    return annotation is str or str in typing.get_args(annotation)


class OneLineArguments(FuncMetadata):
    """The SDK's argument check, its refusal answered as a tool error of one line;
    ``strict``: types checked as the REST bodies check them."""

    strict: bool = False

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        try:
            if not self.strict:  # the SDK's own coercions (the AMP reference's leniency)
                return super().validate_arguments(arguments_to_validate)
            # The arguments arrived as JSON: checked as JSON, in strict mode, exactly as
            # `parse_body` reads a REST body (a time is text in JSON; "10" is no number).
            parsed = self.arg_model.model_validate_json(
                json.dumps(self._unquoted(arguments_to_validate)), strict=True)
            return parsed.model_dump_one_level()
        except ValidationError as exc:
            # The SDK would wrap this in "Error executing tool …" with pydantic's report;
            # carried to call_fn instead, which answers it without running the tool.
            return {_REFUSED: refusal(exc)}

    def _unquoted(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """A list or object argument sent as JSON text, decoded: some clients (Claude
        Desktop) send them so, and the SDK decodes them for every tool. Only for an
        argument that takes no text: the SDK also decoded ``query: "null"`` or ``"[1]"``
        of a text argument that may be left out, into a value that is not text."""
        fields = self.arg_model.model_fields
        decoded = dict(arguments)
        for name, value in arguments.items():
            field = fields.get(name)
            if field is None or not isinstance(value, str) or _takes_text(field):
                continue
            try:
                parsed = json.loads(value)
                # Nested deeper than the check's parser reads it inside the arguments
                # (pydantic's recursion limit): left as text, so it is refused naming
                # this argument, not as "Invalid JSON" of arguments the caller never sent.
                if isinstance(parsed, list | dict):
                    pydantic_core.from_json(f"[{value}]")
            except (ValueError, RecursionError):
                continue
            if isinstance(parsed, list | dict):
                decoded[name] = parsed
        return decoded

    async def call_fn(self, fn: Callable[..., Any | Awaitable[Any]], fn_is_async: bool,
                      arguments: dict[str, Any],
                      arguments_to_pass_directly: dict[str, Any] | None = None) -> Any:
        refused = arguments.get(_REFUSED)
        if refused is not None:
            return CallToolResult(content=[TextContent(type="text", text=refused)],
                                  is_error=True)
        return await super().call_fn(fn, fn_is_async, arguments, arguments_to_pass_directly)


def _branch(prop: dict[str, Any]) -> dict[str, Any]:
    """Where a property's value constraints go: its one non-null ``anyOf`` branch for an
    optional argument (as pydantic writes them), else the property itself."""
    branches = [b for b in prop.get("anyOf", []) if b.get("type") != "null"]
    return branches[0] if len(branches) == 1 else prop


@functools.cache
def _properties(model: type[BaseModel]) -> dict[str, Any]:
    """A REST model's field schemas, built once (pydantic builds the schema anew per call)."""
    properties: dict[str, Any] = model.model_json_schema(by_alias=True)["properties"]
    return properties


def _rest_field(models: Iterable[type[BaseModel]], name: str) -> tuple[str | None,
                                                                       dict[str, Any]]:
    """A field's description and bounds in the REST models; a bound the models disagree on
    (``limit`` of passages vs typed queries) is left out: the service checks each."""
    description: str | None = None
    bounds: dict[str, Any] = {}
    dropped: set[str] = set()
    for model in models:
        prop = _properties(model).get(name)
        if prop is None:
            continue
        branch = _branch(prop)
        description = description or prop.get("description") or branch.get("description")
        for key in BOUNDS:
            value = branch.get(key, prop.get(key))
            if value is None:
                continue
            if key in bounds and bounds[key] != value:
                dropped.add(key)
            bounds.setdefault(key, value)
        items = branch.get("items", prop.get("items"))
        if isinstance(items, dict):
            item_bounds = {k: items[k] for k in BOUNDS if k in items}
            if item_bounds:
                bounds.setdefault("items", item_bounds)
    return description, {k: v for k, v in bounds.items() if k not in dropped}


def publish(server: MCPServer[Any], name: str, *, texts: Mapping[str, str],
            models: Iterable[type[BaseModel]] = (), renames: Mapping[str, str] | None = None,
            own: Iterable[str] = (), strict: bool = True) -> None:
    """Describe tool ``name``'s arguments and answer a bad call in one line (see above).

    ``models``: the REST request models its service checks; ``renames``: a tool argument
    whose REST field is named otherwise (``text`` → ``body``); ``own``: arguments that share
    a REST field's name but not its meaning (bounds not copied); ``texts``: descriptions,
    over `COMMON`'s, over the REST ones. ``strict`` refuses unknown arguments and values of
    another type (not for the AMP tools, whose reference server drops the former and
    coerces the latter).
    """
    # The SDK has no public way to reach a registered tool; its manager is the one place.
    tool = server._tool_manager.get_tool(name)
    if tool is None:
        raise ValueError(f"no MCP tool {name!r}")
    old = tool.fn_metadata
    arg_model = old.arg_model
    if strict:
        arg_model = cast(type[ArgModelBase], type(arg_model.__name__, (arg_model,), {
            "model_config": ConfigDict(extra="forbid"), "__module__": arg_model.__module__}))
    tool.fn_metadata = OneLineArguments(arg_model=arg_model, output_schema=old.output_schema,
                                        output_model=old.output_model,
                                        wrap_output=old.wrap_output, strict=strict)
    schema = arg_model.model_json_schema(by_alias=True)
    models = tuple(models)
    skip = set(own)
    for arg, prop in schema["properties"].items():
        description, bounds = (None, {}) if arg in skip else _rest_field(
            models, (renames or {}).get(arg, arg))
        target = _branch(prop)
        item_bounds = bounds.pop("items", None)
        target.update(bounds)
        if item_bounds and isinstance(target.get("items"), dict):
            target["items"].update(item_bounds)
        text = texts.get(arg) or COMMON.get(arg) or description
        if text:
            prop["description"] = text
    tool.parameters = schema
