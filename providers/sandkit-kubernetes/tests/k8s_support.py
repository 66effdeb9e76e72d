"""Access to a Kubernetes cluster and a node-local image for tests.

Without a reachable cluster the Kubernetes tests skip with the reason; under ``CI=true`` the
same situation is a failure, so a broken CI set-up cannot pass by skipping everything. The dev
cluster of deploy/dev-cluster is found without configuration (its admin kubeconfig).
"""

from __future__ import annotations

import functools
import os
import uuid
from pathlib import Path
from typing import Any, NoReturn

import pytest

from sandkit.testing.conformance.egress import CONNECT_PROBE as CONNECT_PROBE

ROOT = Path(__file__).resolve().parents[3]
DEV_KUBECONFIG = "/var/lib/sandkit-k8s/admin.kubeconfig"
DEFAULT_IMAGE = "docker.io/sandkit/sandbox:debian12"

# Read at import: conftest clears SANDKIT_* variables before the tests run.
ENV_KUBECONFIG = os.environ.get("SANDKIT_TEST_KUBECONFIG")
ENV_IMAGE = os.environ.get("SANDKIT_K8S_TEST_IMAGE")
ENV_HELM = os.environ.get("SANDKIT_HELM")

# One id per test session: its namespace, its pods' owner and label.
SESSION = uuid.uuid4().hex[:10]
SESSION_LABEL = "sandkit.test-session"
TEST_OWNER = f"t{SESSION}"
NAMESPACE = f"sandkit-test-{SESSION}"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it under CI=true where nothing may skip."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: Kubernetes tests must run, not skip)", pytrace=False)
    pytest.skip(reason)


def kubeconfig_path() -> str | None:
    """$SANDKIT_TEST_KUBECONFIG, $KUBECONFIG, the dev cluster's, or ~/.kube/config."""
    for candidate in (
        ENV_KUBECONFIG,
        os.environ.get("KUBECONFIG"),
        DEV_KUBECONFIG,
        str(Path.home() / ".kube" / "config"),
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def sandbox_image() -> str:
    return ENV_IMAGE or DEFAULT_IMAGE


@functools.cache
def _connect() -> tuple[Any, str]:
    try:
        from kubernetes import client, config
    except ImportError:
        return None, "the kubernetes client is not installed (pip install kubernetes)"
    path = kubeconfig_path()
    if path is None:
        return None, (
            "no kubeconfig found; start the dev cluster with "
            "`export KUBECONFIG=$(deploy/dev-cluster/up.sh)` (as root)"
        )
    try:
        configuration = client.Configuration()
        config.load_kube_config(config_file=path, client_configuration=configuration)
        core = client.CoreV1Api(client.ApiClient(configuration))
        nodes = core.list_node(_request_timeout=5)
    except Exception as exc:
        return None, (
            f"no Kubernetes cluster reachable with {path} ({type(exc).__name__}: "
            f"{str(exc)[:200]}); start the dev cluster with `deploy/dev-cluster/up.sh`"
        )
    if not nodes.items:
        return None, f"the cluster of {path} has no node"
    return (path, core), ""


def require_cluster() -> tuple[str, Any]:
    """(kubeconfig path, CoreV1Api) of a live cluster, or skip (fail under CI)."""
    found, reason = _connect()
    if found is None:
        unavailable(reason)
    path, core = found
    return path, core


def require_image(core: Any, image: str) -> None:
    """The image must already be on a node (the tests never pull)."""
    for node in core.list_node(_request_timeout=10).items:
        for entry in node.status.images or []:
            if image in (entry.names or []):
                return
    unavailable(
        f"image {image} is not on any node; the dev cluster imports it in up.sh "
        "(or set SANDKIT_K8S_TEST_IMAGE)"
    )


def session_pods(core: Any) -> list[Any]:
    """Every pod of this test session, in any namespace."""
    return list(core.list_pod_for_all_namespaces(label_selector=f"{SESSION_LABEL}={SESSION}").items)


def exec_in(core: Any, name: str, argv: list[str]) -> str:
    """Run a command in the pod through the API, outside the agent."""
    from kubernetes import client
    from kubernetes.stream import stream

    api = client.CoreV1Api(client.ApiClient(core.api_client.configuration))
    return str(
        stream(
            api.connect_get_namespaced_pod_exec,
            name,
            NAMESPACE,
            command=argv,
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
        )
    )


def server_pod(name: str, image: str, command: list[str], labels: dict[str, str]) -> dict[str, Any]:
    """A hardened pod of the offline image running `command` (a test's own server), with
    the session label (the session's clean-up finds it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {SESSION_LABEL: SESSION, **labels}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": command,
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


# A policy drops the SYN, so a denied connection is DROPPED; a port nobody listens on is
# ConnectionRefusedError (CONNECT_PROBE prints "open" or "closed <reason>").
DROPPED = "closed TimeoutError"
