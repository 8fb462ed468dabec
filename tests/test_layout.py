"""The layering rules of DESIGN.md's layout, read from the code's own imports.

Every import counts, including those inside functions and under ``TYPE_CHECKING``: a
lower layer that names a higher one, even lazily, is tangled with it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import ampup_memory
from ampup_memory.errors import ConfigurationError

PACKAGE = Path(ampup_memory.__file__).parent
NAME = "ampup_memory"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").exists() or (
        PACKAGE.parent / rel / "__init__.py"
    ).exists()


def _imports(path: Path) -> Iterator[str]:
    """Every ampup_memory module ``path`` imports (``from a import b`` counts ``a.b`` when
    ``b`` is a module)."""
    module = _module_name(path)
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == NAME)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != NAME:
                continue
            yield base
            yield from (f"{base}.{a.name}" for a in node.names if _is_module(f"{base}.{a.name}"))


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): set(_imports(p)) for p in sorted(PACKAGE.rglob("*.py"))}


def _within(module: str, area: str) -> bool:
    full = f"{NAME}.{area}"
    return module == full or module.startswith(full + ".")


def _violations(importers: str, forbidden: tuple[str, ...]) -> list[str]:
    graph = _graph()
    assert any(_within(module, importers) for module in graph), f"no package {importers}/"
    return sorted(
        f"{module} imports {target}"
        for module, targets in graph.items() if _within(module, importers)
        for target in targets if any(_within(target, area) for area in forbidden)
    )


def test_the_graph_sees_every_kind_of_import() -> None:
    """The reader itself: top-level, ``from x import module``, lazy and TYPE_CHECKING."""
    graph = _graph()
    assert f"{NAME}.settings" in graph[f"{NAME}.cli"]  # top level
    assert f"{NAME}.runtime" in graph[f"{NAME}.cli"]  # inside a function
    assert f"{NAME}.runtime" in graph[f"{NAME}.mcp.tools"]  # under TYPE_CHECKING
    assert f"{NAME}.web.jsontext" in graph[f"{NAME}.web.body"]  # from package import module


@pytest.mark.parametrize(
    ("importers", "forbidden"),
    [
        ("web", ("amp", "memory", "search", "mcp", "advice", "ops", "runtime", "server",
                 "cli")),
        # search/ serves the AmpUp search face over memory/ (feed, api), so it may import
        # memory/; amp/ uses search/, never the other way round.
        ("search", ("amp", "mcp", "advice", "runtime", "server")),
        ("memory", ("amp", "mcp", "advice", "runtime", "server")),
        ("amp", ("memory", "mcp", "advice", "runtime", "server")),
    ],
)
def test_lower_layers_never_import_higher_ones(importers: str, forbidden: tuple[str, ...]) -> None:
    assert _violations(importers, forbidden) == []


def test_a_backend_contract_imports_none_of_its_implementations() -> None:
    """``base.py`` declares the contract; the registry beside it picks an implementation."""
    found = []
    for path in sorted(PACKAGE.rglob("base.py")):
        family = _module_name(path).rsplit(".", 1)[0]
        found.append(family)
        for target in _imports(path):
            assert not target.startswith(family + "."), f"{family}.base imports {target}"
        assert (path.parent / "registry.py").exists(), f"{family} has no registry beside base"
    assert {f"{NAME}.amp.store", f"{NAME}.search.index"} <= set(found)


def test_only_the_cli_imports_the_asgi_assembly() -> None:
    importers = sorted(m for m, targets in _graph().items() if f"{NAME}.server" in targets)
    assert importers == [f"{NAME}.cli"]


def test_registries_name_the_schemes_they_know() -> None:
    from ampup_memory.amp.store.registry import open_store
    from ampup_memory.search.index.registry import open_index

    with pytest.raises(ConfigurationError, match="unsupported store URI scheme 'mysql'"):
        open_store("mysql://db/cells", None)
    with pytest.raises(ConfigurationError, match="must start with sqlite:/// or postgresql://"):
        open_index("sqlite://relative.db")
