"""The engine client, with docker-py's connection pools keyed by engine instead of by URL.

docker-py (7.x with requests >= 2.32.2) keys the connection pools of its
unix-socket, npipe and ssh adapters by the *whole request URL*, in an LRU of
`num_pools` (25). When more than 25 URLs are in flight — fifty acquires at
once inspect, create, start and exec into fifty containers — the least
recently used pool is closed while another thread still uses it, and that
request fails with urllib3's "Pool is closed" (or an AttributeError on the
pool's queue): a spurious UNAVAILABLE/INTERNAL under load. Keyed by scheme
and host, an engine has one pool, which nothing closes while it is used.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import docker
from docker.transport.basehttpadapter import BaseHTTPAdapter

# Connections kept per engine: enough for every concurrent caller of a busy
# provider to get one back instead of opening (and discarding) a new one.
POOL_SIZE = 64
_FIXED = "_sandkit_one_pool"


def connect(docker_host: str | None) -> docker.DockerClient:
    """A client for `docker_host` (None: DOCKER_HOST or the local socket), pools fixed."""
    if docker_host:
        client = docker.DockerClient(base_url=docker_host, max_pool_size=POOL_SIZE)
    else:
        client = docker.from_env(max_pool_size=POOL_SIZE)
    return one_pool_per_engine(client)


def one_pool_per_engine(client: docker.DockerClient) -> docker.DockerClient:
    """Make `client`'s adapters keep one pool per engine (idempotent); returns `client`."""
    for adapter in set(client.api.adapters.values()):
        if not isinstance(adapter, BaseHTTPAdapter) or not hasattr(adapter, "pools"):
            continue  # requests' own adapters already key pools by host
        if getattr(adapter, _FIXED, False):
            continue
        get = adapter.get_connection

        def by_engine(url: str, proxies: Any = None, _get: Any = get) -> Any:
            parts = urlsplit(url)
            return _get(f"{parts.scheme}://{parts.netloc}", proxies)

        adapter.get_connection = by_engine  # type: ignore[method-assign,assignment]
        setattr(adapter, _FIXED, True)
    return client
