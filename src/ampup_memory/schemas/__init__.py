"""Built-in schemas (package data): ``sales``, ``engineering``, ``corpus``.

Read through :func:`ampup_memory.memory.schemas.builtin`; see docs/schemas-and-queries.md.
"""
