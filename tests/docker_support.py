"""Access to a Docker engine and local images for tests.

On a laptop without Docker the Docker tests skip with the reason; under ``CI=true`` the same
situation is a failure, so a broken CI set-up cannot pass by skipping everything.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    import docker
    from docker.models.images import Image

ROOT = Path(__file__).resolve().parent.parent
BUILD_BASE_IMAGE = ROOT / "deploy" / "images" / "build-base-image.sh"
DOCKERD_SH = ROOT / "deploy" / "docker" / "dockerd.sh"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it under CI=true where nothing may skip."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: Docker tests must run, not skip)", pytrace=False)
    pytest.skip(reason)


def default_base_image() -> str:
    """The tag build-base-image.sh produces on this machine (override: SANDKIT_BASE_IMAGE)."""
    explicit = os.environ.get("SANDKIT_BASE_IMAGE")
    if explicit:
        return explicit
    number = "12"
    try:
        fields = dict(
            line.split("=", 1)
            for line in Path("/etc/os-release").read_text().splitlines()
            if "=" in line
        )
        if fields.get("ID", "").strip('"') == "debian":
            number = fields.get("VERSION_ID", number).strip('"') or number
    except OSError:
        pass
    return f"sandkit/base:debian{number}"


@functools.cache
def _connect() -> tuple[docker.DockerClient | None, str]:
    try:
        import docker
    except ImportError:
        return None, "the docker SDK is not installed (pip install docker)"
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:
        return None, (
            f"no Docker engine reachable ({type(exc).__name__}: {exc}); "
            f"start one with `{DOCKERD_SH.relative_to(ROOT)} up`"
        )
    _prepare_testcontainers(client)
    try:  # tests share this client across threads: one connection pool per engine
        from sandkit_docker.client import one_pool_per_engine
    except ImportError:  # sandkit-docker not installed: only the core's tests run
        return client, ""
    return one_pool_per_engine(client), ""


def _prepare_testcontainers(client: docker.DockerClient) -> None:
    """Run testcontainers without Ryuk when its image cannot be had (no registry).

    Ryuk only cleans up after a crashed test run; our fixtures remove their containers
    themselves. An explicit TESTCONTAINERS_RYUK_DISABLED setting is respected.
    """
    if "TESTCONTAINERS_RYUK_DISABLED" in os.environ:
        return
    try:
        from testcontainers.core.config import testcontainers_config
    except ImportError:
        return
    import docker.errors

    try:
        client.images.get(testcontainers_config.ryuk_image)
    except docker.errors.ImageNotFound:
        testcontainers_config.ryuk_disabled = True


def require_docker() -> docker.DockerClient:
    """A client for a live engine, or skip (fail under CI) saying how to get one."""
    client, reason = _connect()
    if client is None:
        unavailable(reason)
    return client


def require_image(tag: str | None = None) -> Image:
    """A local image (default: the base image for this machine), or skip/fail with the fix."""
    import docker.errors

    tag = tag or default_base_image()
    client = require_docker()
    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        hint = ""
        if tag.startswith("sandkit/base:"):
            flag = " --with-ripgrep" if tag.endswith("-ripgrep") else ""
            hint = f"; build it with `{BUILD_BASE_IMAGE.relative_to(ROOT)}{flag}`"
        unavailable(f"Docker image {tag} is not present locally{hint}")
