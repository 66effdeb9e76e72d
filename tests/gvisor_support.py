"""gVisor (runsc) as a test target: is it there, and is a box really inside it.

The gVisor targets run the same suites as runc with one option changed
(`providers.docker.runtime: runsc`, `providers.kubernetes.runtime_class_name: gvisor`).
Without the runtime they skip with the way to set it up; under ``CI=true`` they fail,
like every other platform test.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from tests.docker_support import unavailable

ROOT = Path(__file__).resolve().parent.parent
DOCKERD_SH = ROOT / "deploy" / "docker" / "dockerd.sh"
DOCKER_RUNTIME = "runsc"  # the name deploy/docker/dockerd.sh registers
RUNTIME_CLASS = "gvisor"  # the RuntimeClass deploy/dev-cluster/up.sh creates
# The version string gVisor's kernel reports (uname -v), whatever release it claims.
GVISOR_VERSION = "#1 SMP Sun Jan 10 15:06:54 PST 2016"


@functools.cache
def docker_runtimes(client: Any) -> frozenset[str]:
    return frozenset((client.info().get("Runtimes") or {}).keys())


def require_docker_runsc(client: Any) -> str:
    """The engine's gVisor runtime name, or skip (fail under CI) saying how to add it."""
    if DOCKER_RUNTIME not in docker_runtimes(client):
        unavailable(
            f"the Docker engine has no {DOCKER_RUNTIME!r} runtime; register gVisor with "
            f"`{DOCKERD_SH.relative_to(ROOT)} gvisor` (or SANDKIT_GVISOR=1 ... up)"
        )
    return DOCKER_RUNTIME


def require_runtime_class(cluster_api: Any) -> str:
    """The cluster's gVisor RuntimeClass, or skip (fail under CI) saying how to get it."""
    from kubernetes import client as k8s

    try:
        k8s.NodeV1Api(cluster_api).read_runtime_class(RUNTIME_CLASS)
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise
        unavailable(
            f"the cluster has no RuntimeClass {RUNTIME_CLASS!r}; start the dev cluster with "
            "`SANDKIT_GVISOR=1 deploy/dev-cluster/up.sh`"
        )
    return RUNTIME_CLASS


def kernel_of(box: Any) -> tuple[str, str]:
    """(release, version) of the kernel a box's commands see."""
    release, _, version = box.execute("uname -r; uname -v").stdout.strip().partition("\n")
    return release, version


def assert_in_gvisor(box: Any) -> None:
    """A box whose commands see gVisor's kernel, not this host's."""
    release, version = kernel_of(box)
    assert release.endswith("-gvisor") or version == GVISOR_VERSION, (
        f"the box runs on kernel {release!r} {version!r}: not inside gVisor"
    )
    assert (release, version) != (os.uname().release, os.uname().version)
