"""The engine client keeps one connection pool per engine (no engine needed)."""

from __future__ import annotations

from typing import Any

import docker
import requests
from sandkit_docker.client import one_pool_per_engine

API = "http+docker://localhost/v1.41"


def _pool_for(adapter: Any, path: str) -> Any:
    request = requests.Request("GET", f"{API}{path}").prepare()
    return adapter.get_connection_with_tls_context(request, True)


def test_fifty_urls_in_flight_share_one_pool_that_stays_open() -> None:
    """docker-py keys pools by URL in an LRU of 25: a pool in use was closed under load."""
    client = docker.DockerClient(base_url="unix:///nonexistent/docker.sock", version="1.41")
    one_pool_per_engine(one_pool_per_engine(client))
    adapter = client.api.get_adapter(API)
    first = _pool_for(adapter, "/containers/a/json")
    others = [_pool_for(adapter, f"/containers/c{n}/json?size=0") for n in range(50)]
    assert all(pool is first for pool in others)
    assert first.pool is not None, "the pool in use was closed"
    client.close()
