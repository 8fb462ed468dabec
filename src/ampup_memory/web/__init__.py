"""Shared HTTP plumbing, below every face (`amp/`, `memory/`, `search/`, `mcp/`).

- `body`: request bodies into validated models (`parse_body`, `validation_errors`) and the
  body field types (`JsonInt`);
- `jsontext`: the one JSON parser for client input (depth limit, finite numbers);
- `errors`: the error envelope and the one mapping of `ampup_memory.errors` to HTTP;
- `limits`: the request-size middleware (``max_request_bytes``);
- `routing`: path parameters that leave room for fixed routes beside them, and which
  methods a path is served with;
- `head`: HEAD answered as GET without the body wherever a GET route is;
- `openapi`: documentation of hand-parsed bodies, headers and error answers.

It imports nothing from the faces above it (tests/test_layout.py keeps that true).
"""
