"""deploy/kubernetes/sandkit: `helm lint`, `helm template` checked, and a real `helm install`.

The installed chart is then used the way a deployment would: the provider runs with the
chart's ServiceAccount (a token from the TokenRequest API), on the chart's claim, and must be
able to do its whole job with exactly that Role, and nothing more.
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_support import ENV_HELM, ROOT, SESSION, SESSION_LABEL, unavailable
from sandkit_kubernetes.provider import KubernetesProvider

from sandkit import SandboxKey, Settings

pytestmark = pytest.mark.kubernetes

CHART = ROOT / "deploy" / "kubernetes" / "sandkit"
INSTALL_HELM = ROOT / "deploy" / "kubernetes" / "install-helm.sh"
MINIMAL_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["create", "get", "list", "watch", "delete", "patch"],
    },
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
]


@pytest.fixture(scope="module")
def helm() -> str:
    """The pinned helm (built once from the Go module proxy by install-helm.sh)."""
    if ENV_HELM:
        return ENV_HELM
    try:
        done = subprocess.run(
            ["bash", str(INSTALL_HELM)], capture_output=True, text=True, timeout=1800
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        unavailable(f"cannot build helm: {exc}")
    if done.returncode != 0:
        unavailable(f"cannot build helm: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


def run(helm: str, *args: str, kubeconfig: str | None = None) -> str:
    env = {
        **os.environ,
        "HELM_CACHE_HOME": "/tmp/sandkit-helm-cache",
        "HELM_CONFIG_HOME": "/tmp/sandkit-helm-config",
        "HELM_DATA_HOME": "/tmp/sandkit-helm-data",
    }
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    done = subprocess.run([helm, *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def render(helm: str, *sets: str, namespace: str = "sandkit-system") -> dict[tuple[str, str], Any]:
    args = ["template", "rel", str(CHART), "--namespace", namespace]
    for item in sets:
        args += ["--set", item]
    docs = [d for d in yaml.safe_load_all(run(helm, *args)) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_port_forward_is_granted_only_when_asked(helm: str) -> None:
    rule = {"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["create", "get"]}
    assert rule not in render(helm)[("Role", "sandkit-provider")]["rules"]
    rules = render(helm, "rbac.portForward=true")[("Role", "sandkit-provider")]["rules"]
    assert rules == [*MINIMAL_RULES[:2], rule, MINIMAL_RULES[2]]


def test_network_policies_are_granted_only_when_asked(helm: str) -> None:
    rule = {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": ["get", "create", "update", "delete"],
    }
    assert rule not in render(helm)[("Role", "sandkit-provider")]["rules"]
    rules = render(helm, "rbac.egressPolicies=true")[("Role", "sandkit-provider")]["rules"]
    assert rules == [*MINIMAL_RULES[:2], rule, MINIMAL_RULES[2]]


def test_lint(helm: str) -> None:
    out = run(helm, "lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in out


def test_template_has_the_objects_and_minimal_rbac(helm: str) -> None:
    objs = render(helm)
    assert set(objs) == {
        ("Namespace", "sandkit"),
        ("ServiceAccount", "sandkit-backend"),
        ("Role", "sandkit-provider"),
        ("RoleBinding", "sandkit-provider"),
        ("NetworkPolicy", "sandkit-sandboxes"),
        ("PersistentVolumeClaim", "sandkit-data"),
    }
    role = objs[("Role", "sandkit-provider")]
    assert role["metadata"]["namespace"] == "sandkit"
    assert role["rules"] == MINIMAL_RULES
    binding = objs[("RoleBinding", "sandkit-provider")]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "sandkit-provider",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sandkit-backend", "namespace": "sandkit-system"}
    ]
    # No cluster-wide rights at all.
    assert not any(kind.startswith("Cluster") for kind, _ in objs)
    namespace = objs[("Namespace", "sandkit")]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_template_network_policy(helm: str) -> None:
    policy = render(helm)[("NetworkPolicy", "sandkit-sandboxes")]["spec"]
    assert policy["podSelector"] == {
        "matchLabels": {
            "app.kubernetes.io/component": "sandkit-sandbox",
            "sandkit.owner": "sandkit",
        }
    }
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8765}]
    (peer,) = rule["from"]
    assert peer["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "sandkit-system"}
    }
    assert peer["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "sandkit-backend"}}
    assert policy["egress"] == []  # default: no egress at all
    opened = render(helm, "networkPolicy.egress.allowAll=true")
    assert opened[("NetworkPolicy", "sandkit-sandboxes")]["spec"]["egress"] == [{}]
    some = render(
        helm, "networkPolicy.egress.allowDNS=true", "networkPolicy.egress.cidrs={10.1.0.0/16}"
    )[("NetworkPolicy", "sandkit-sandboxes")]["spec"]["egress"]
    assert some[0]["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert some[1] == {"to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}]}
    assert ("NetworkPolicy", "sandkit-sandboxes") not in render(helm, "networkPolicy.enabled=false")


def test_template_storage_options(helm: str) -> None:
    dev = render(helm, "storage.hostPath.enabled=true", "storage.hostPath.path=/srv/x")
    pv = dev[("PersistentVolume", "sandkit-sandkit-data")]
    assert pv["spec"]["hostPath"]["path"] == "/srv/x"
    assert pv["spec"]["claimRef"] == {"namespace": "sandkit", "name": "sandkit-data"}
    claim = dev[("PersistentVolumeClaim", "sandkit-data")]
    assert claim["spec"]["volumeName"] == "sandkit-sandkit-data"
    fast = render(helm, "storage.storageClassName=fast")[("PersistentVolumeClaim", "sandkit-data")]
    assert fast["spec"]["storageClassName"] == "fast"
    assert ("PersistentVolumeClaim", "sandkit-data") not in render(helm, "storage.create=false")


@pytest.fixture(scope="module")
def installed(
    helm: str, kubeconfig: str, core: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The chart installed into the dev cluster with a hostPath-backed claim."""
    release_ns = f"sandkit-sys-{SESSION}"
    sandbox_ns = f"sandkit-box-{SESSION}"
    data = tmp_path_factory.mktemp("helm-data") / "data"
    data.mkdir()
    os.chown(data, 1000, 1000)
    release = f"sandkit-{SESSION}"
    run(
        helm,
        "install",
        release,
        str(CHART),
        "--namespace",
        release_ns,
        "--create-namespace",
        "--set",
        f"sandboxNamespace.name={sandbox_ns}",
        "--set",
        f"sandboxes.owner=t{SESSION}",
        "--set",
        "storage.hostPath.enabled=true",
        "--set",
        f"storage.hostPath.path={data}",
        "--set",
        "storage.size=1Gi",
        "--wait",
        "--timeout",
        "120s",
        kubeconfig=kubeconfig,
    )
    try:
        yield {"release_ns": release_ns, "sandbox_ns": sandbox_ns, "data": data}
    finally:
        run(helm, "uninstall", release, "--namespace", release_ns, "--wait", kubeconfig=kubeconfig)
        # The claim is kept by design (helm.sh/resource-policy: keep); the test removes it.
        for delete in (
            lambda: core.delete_namespace(sandbox_ns),
            lambda: core.delete_namespace(release_ns),
            lambda: core.delete_persistent_volume(f"{sandbox_ns}-sandkit-data"),
        ):
            with contextlib.suppress(Exception):  # already gone
                delete()


def test_installed_objects(installed: dict[str, Any], core: Any) -> None:
    from kubernetes import client

    api = core.api_client
    rbac = client.RbacAuthorizationV1Api(api)
    net = client.NetworkingV1Api(api)
    ns = installed["sandbox_ns"]
    role = rbac.read_namespaced_role("sandkit-provider", ns)
    assert [api.sanitize_for_serialization(r) for r in role.rules] == MINIMAL_RULES
    binding = rbac.read_namespaced_role_binding("sandkit-provider", ns)
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [
        ("ServiceAccount", "sandkit-backend", installed["release_ns"])
    ]
    policy = net.read_namespaced_network_policy("sandkit-sandboxes", ns)
    assert policy.spec.policy_types == ["Ingress", "Egress"]
    assert policy.spec.pod_selector.match_labels == {
        "app.kubernetes.io/component": "sandkit-sandbox",
        "sandkit.owner": f"t{SESSION}",
    }
    assert policy.spec.ingress[0].ports[0].port == 8765
    assert policy.spec.egress is None or policy.spec.egress == []
    claim = core.read_namespaced_persistent_volume_claim("sandkit-data", ns)
    assert claim.status.phase == "Bound"
    core.read_namespaced_service_account("sandkit-backend", installed["release_ns"])


@pytest.fixture(scope="module")
def sa_kubeconfig(
    installed: dict[str, Any], kubeconfig: str, core: Any, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """A kubeconfig that authenticates as the chart's ServiceAccount."""
    from kubernetes import client

    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = core.create_namespaced_service_account_token(
        "sandkit-backend", installed["release_ns"], request
    ).status.token
    admin = yaml.safe_load(Path(kubeconfig).read_text())
    cluster = admin["clusters"][0]["cluster"]
    if "certificate-authority" in cluster:
        ca = base64.b64encode(Path(cluster["certificate-authority"]).read_bytes()).decode()
    else:
        ca = cluster["certificate-authority-data"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "sa",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": cluster["server"], "certificate-authority-data": ca},
            }
        ],
        "contexts": [
            {
                "name": "sa",
                "context": {"cluster": "c", "user": "sa", "namespace": installed["sandbox_ns"]},
            }
        ],
        "users": [{"name": "sa", "user": {"token": token}}],
    }
    path = tmp_path_factory.mktemp("sa") / f"kubeconfig-{uuid.uuid4().hex[:6]}"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_the_provider_works_with_exactly_the_charts_role(
    installed: dict[str, Any], sa_kubeconfig: str, image: str
) -> None:
    settings = Settings(
        data_root=installed["data"],
        providers={
            "kubernetes": {
                "kubeconfig": sa_kubeconfig,
                "namespace": installed["sandbox_ns"],
                "owner": f"t{SESSION}",
                "image": image,
                "image_pull_policy": "Never",
                "storage": "pvc",
                "pvc_claim_name": "sandkit-data",
                "labels": {SESSION_LABEL: SESSION},
                "reap_interval_s": 0,
            }
        },
    )
    provider = KubernetesProvider(settings)
    key = SandboxKey("helm", "thread")
    try:
        box = provider.acquire(key)  # create, watch, exec: all through the Role
        box.write_file("hello.txt", "through the chart\n")
        assert box.execute("cat hello.txt; id -u").stdout == "through the chart\n1000\n"
        provider.release(key)
        # PodSecurity "restricted" admitted the pod; the data is on the claim.
        thread = installed["data"] / "users/helm/threads/thread/user-data/workspace"
        assert (thread / "hello.txt").read_text() == "through the chart\n"
        assert provider.acquire(key).read_file("hello.txt").content == "through the chart\n"
    finally:
        provider.shutdown()


def test_the_charts_role_grants_nothing_else(installed: dict[str, Any], sa_kubeconfig: str) -> None:
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    configuration = client.Configuration()
    config.load_kube_config(config_file=sa_kubeconfig, client_configuration=configuration)
    api = client.ApiClient(configuration)
    core = client.CoreV1Api(api)
    for attempt in (
        lambda: core.list_namespaced_secret(installed["sandbox_ns"]),
        lambda: core.list_namespaced_pod("default"),
        lambda: core.list_namespaced_config_map(installed["sandbox_ns"]),
        lambda: client.RbacAuthorizationV1Api(api).list_namespaced_role(installed["sandbox_ns"]),
        lambda: core.list_node(),
    ):
        with pytest.raises(ApiException) as info:
            attempt()
        assert info.value.status == 403
