"""deploy/kubernetes/sandkit: the runtime class value (gVisor), rendered with the pinned helm."""

from __future__ import annotations

import pytest
from test_k8s_helm import CHART, helm, render, run  # noqa: F401 - helm is a fixture
from tests.gvisor_support import RUNTIME_CLASS

pytestmark = pytest.mark.kubernetes

CHART_DIR = str(CHART)


def test_no_runtime_class_by_default(helm: str) -> None:  # noqa: F811
    assert not any(kind == "RuntimeClass" for kind, _ in render(helm))


def test_runtime_class_created_with_handler_and_overhead(helm: str) -> None:  # noqa: F811
    objs = render(
        helm,
        f"runtimeClass.name={RUNTIME_CLASS}",
        "runtimeClass.create=true",
        "runtimeClass.overhead.memory=64Mi",
    )
    made = objs[("RuntimeClass", RUNTIME_CLASS)]
    assert made["apiVersion"] == "node.k8s.io/v1"
    assert made["handler"] == "runsc"
    assert made["overhead"] == {"podFixed": {"memory": "64Mi"}}
    assert "namespace" not in made["metadata"]  # cluster-scoped


@pytest.mark.parametrize("create", ["true", "false"])
def test_notes_name_the_runtime_class_for_the_provider(helm: str, create: str) -> None:  # noqa: F811
    # A name no cluster has: `install --dry-run=client` still asks a reachable cluster
    # whether the RuntimeClass exists (the dev cluster's gvisor one is not Helm's).
    name = "sandkit-notes-probe"
    out = run(
        helm,
        "install",
        "rel",
        CHART_DIR,
        "--dry-run=client",
        "--namespace",
        "sandkit-system",
        "--set",
        f"runtimeClass.name={name}",
        "--set",
        f"runtimeClass.create={create}",
    )
    assert f"runtime_class_name: {name}" in out
