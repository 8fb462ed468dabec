"""deploy/compose.yaml cannot run here (no Docker in CI); this checks what can be checked
without it: the YAML parses, every AMP_*/AMPUP_* variable it sets is a real setting (the
settings module's own list), both servers get the same settings and point at the engines
tests/test_fleet.py runs (PostgreSQL for cells, catalog and index, an S3 warehouse with an
endpoint), and the load balancer's upstreams are those servers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml  # PyYAML comes with moto[server], a test dependency

from ampup_memory.settings import Settings

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def _setting_names() -> set[str]:
    names: set[str] = set()
    for info in Settings.model_fields.values():
        alias: Any = info.validation_alias
        names.update(str(c) for c in getattr(alias, "choices", [alias]) if c)
    return names


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return data


def test_every_ampup_variable_in_the_compose_file_is_a_real_setting() -> None:
    known = _setting_names()
    assert {"AMP_STORE_URI", "AMPUP_MEMORY_WAREHOUSE"} <= known  # the list is the real one
    used = {name for svc in _compose()["services"].values()
            for name in (svc.get("environment") or {})
            if re.match(r"AMPUP?_", name)}
    assert used, "no AmpUp settings found in the compose file"
    assert sorted(used - known) == []


def test_the_compose_file_matches_the_fleet_test() -> None:
    services = _compose()["services"]
    servers = {n: s for n, s in services.items() if n.startswith("memory-")}
    assert len(servers) == 2
    envs = [s["environment"] for s in servers.values()]
    assert envs[0] == envs[1]  # any server answers any request: one configuration
    env = envs[0]
    for name in ("AMP_STORE_URI", "AMPUP_MEMORY_CATALOG_URI", "AMPUP_MEMORY_INDEX_URI"):
        assert env[name].startswith("postgresql://"), name
    assert env["AMPUP_MEMORY_WAREHOUSE"].startswith("s3://")
    assert env["AMPUP_MEMORY_S3_ENDPOINT"].startswith("http://minio:")
    assert "pgvector" in services["postgres"]["image"]
    nginx = (DEPLOY / "nginx.conf").read_text()
    upstreams = set(re.findall(r"server (memory-\d+):8765", nginx))
    assert upstreams == set(servers)
    assert str(env["AMPUP_MEMORY_PORT"]) == "8765"
    for path in ("./postgres-init.sql", "./nginx.conf"):
        assert (DEPLOY / path).is_file(), path


def test_the_compose_file_without_keys_answers_its_public_name() -> None:
    """Keys off on 0.0.0.0: the servers answer a browser only under a name no rebinding
    page can have (web/origin.py), so nginx must pass the client's Host on and the
    operator's public name must reach AMPUP_MEMORY_ALLOWED_HOSTS."""
    env = next(s["environment"] for n, s in _compose()["services"].items()
               if n.startswith("memory-"))
    assert env["AMPUP_MEMORY_HOST"] == "0.0.0.0"
    if str(env.get("AMP_REQUIRE_KEYS", "false")).lower() != "true":
        assert env["AMPUP_MEMORY_ALLOWED_HOSTS"] == "${AMPUP_MEMORY_ALLOWED_HOSTS:-}"
        nginx = (DEPLOY / "nginx.conf").read_text()
        assert re.search(r"proxy_set_header\s+(Host\s+\$host|X-Forwarded-Host\s)", nginx)
