"""The pod a key gets: name, labels, volumes and hardening, as a manifest dict.

The manifest (after the `pod_template` merge) is hashed into the
`sandkit.spec` annotation, so a pod created under other settings is
recreated instead of adopted.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

from sandkit.boxkit import AGENT_DIR
from sandkit.boxkit.bootstrap import INIT
from sandkit.paths import OUTPUTS, UPLOADS, WORKSPACE, ThreadLayout
from sandkit.provider import SandboxKey

from .options import KubernetesOptions

LABEL_SANDBOX_ID = "sandkit.sandbox-id"
LABEL_USER = "sandkit.user"
LABEL_THREAD = "sandkit.thread"
LABEL_OWNER = "sandkit.owner"
LABEL_COMPONENT = "app.kubernetes.io/component"
COMPONENT = "sandkit-sandbox"
ANNOTATION_SPEC = "sandkit.spec"
# The owner's egress proxy pod (not LABEL_OWNER: it is not a box, the sweeps leave it alone).
LABEL_EGRESS_PROXY = "sandkit.egress-proxy-of"
PROXY_CONTAINER = "proxy"
PROXY_ROOT = "/tmp/sandkit-net"
# A warm pool pod: its slot. A claim adds the key's labels to it (pods cannot be renamed).
LABEL_POOL = "sandkit.pool"
ANNOTATION_USER = "sandkit.user"
ANNOTATION_THREAD = "sandkit.thread"
CONTAINER = "sandbox"
INIT_CONTAINER = "thread-dirs"
DATA_MOUNT = "/sandkit-data"

_LABEL_VALUE_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]")
_USER_DATA_VIRTUAL = {WORKSPACE: "workspace", UPLOADS: "uploads", OUTPUTS: "outputs"}


def pod_name(options: KubernetesOptions, key: SandboxKey) -> str:
    # The owner is part of the name: two deployments in one namespace never collide.
    return f"{options.owner}-{key.sandbox_id}"


def owner_selector(options: KubernetesOptions) -> str:
    return f"{LABEL_OWNER}={options.owner}"


def label_value(value: str) -> str:
    """`value` when it is a valid label value, else a stable hash of it.

    Ids may be 128 characters and end in '.', '-' or '_'; label values may
    not. The exact ids are always in the annotations.
    """
    if _LABEL_VALUE_RE.fullmatch(value):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:40]


def thread_sub_path(key: SandboxKey) -> str:
    return f"users/{key.user_id}/threads/{key.thread_id}/user-data"


def pool_pod_name(options: KubernetesOptions, slot: str) -> str:
    return f"{options.owner}-pool-{slot}"


def key_labels(key: SandboxKey) -> dict[str, str]:
    return {
        LABEL_SANDBOX_ID: key.sandbox_id,
        LABEL_USER: label_value(key.user_id),
        LABEL_THREAD: label_value(key.thread_id),
    }


def pod_manifest(
    options: KubernetesOptions, layout: ThreadLayout, pool_slot: str | None = None
) -> dict[str, Any]:
    """Everything `create_namespaced_pod` needs for `layout.key` (or, with `pool_slot`, for
    a warm pool pod whose storage `layout` describes)."""
    key = layout.key
    volumes: list[dict[str, Any]] = [
        {"name": "sandkit-agent", "emptyDir": {"sizeLimit": "64Mi"}},
        {"name": "tmp", "emptyDir": _empty_dir(options)},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "sandkit-agent", "mountPath": AGENT_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    init_containers: list[dict[str, Any]] = []
    if options.storage == "pvc":
        volumes.append(
            {"name": "thread-data", "persistentVolumeClaim": {"claimName": options.pvc_claim_name}}
        )
    for index, mount in enumerate(layout.mounts):
        sub = _USER_DATA_VIRTUAL.get(mount.virtual)
        entry: dict[str, Any] = {"mountPath": mount.virtual, "readOnly": mount.read_only}
        if options.storage == "pvc" and sub is not None:
            entry |= {"name": "thread-data", "subPath": f"{thread_sub_path(key)}/{sub}"}
        else:
            name = f"data-{sub}" if sub is not None else f"mount-{index}"
            volumes.append(
                {
                    "name": name,
                    "hostPath": {
                        "path": _node_path(options, layout, mount.real),
                        "type": "Directory",
                    },
                }
            )
            entry["name"] = name
        mounts.append(entry)
    container_security: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": options.read_only_root_filesystem,
        "capabilities": {"drop": ["ALL"]},
        "runAsUser": options.uid,
        "runAsGroup": options.gid,
        "runAsNonRoot": options.uid != 0,
    }
    if options.storage == "pvc" and options.init_thread_dirs:
        init_containers.append(_init_dirs_container(options, key, container_security))
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": options.image,
        "imagePullPolicy": options.image_pull_policy,
        "command": [options.python, "-I", "-c", INIT],
        "env": [{"name": k, "value": v} for k, v in sorted(options.env.items())],
        "resources": copy.deepcopy(options.resources),
        "securityContext": container_security,
        "volumeMounts": mounts,
        "stdin": False,
        "tty": False,
    }
    if options.carrier == "http":
        container["ports"] = [{"name": "agent", "containerPort": options.http_port}]
    pod_security: dict[str, Any] = {
        "runAsNonRoot": options.uid != 0,
        "runAsUser": options.uid,
        "runAsGroup": options.gid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if options.fs_group is not None:
        pod_security["fsGroup"] = options.fs_group
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": options.termination_grace_s,
        "securityContext": pod_security,
        "containers": [container],
        "volumes": volumes,
    }
    if init_containers:
        spec["initContainers"] = init_containers
    if options.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in options.image_pull_secrets]
    if options.runtime_class_name:
        spec["runtimeClassName"] = options.runtime_class_name
    if options.service_account_name:
        spec["serviceAccountName"] = options.service_account_name
    identity = key_labels(key) if pool_slot is None else {LABEL_POOL: pool_slot}
    labels = {**options.labels, **identity, LABEL_OWNER: options.owner, LABEL_COMPONENT: COMPONENT}
    annotations = dict(options.annotations)
    if pool_slot is None:
        annotations |= {ANNOTATION_USER: key.user_id, ANNOTATION_THREAD: key.thread_id}
    name = pod_name(options, key) if pool_slot is None else pool_pod_name(options, pool_slot)
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": options.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }
    manifest = deep_merge(manifest, options.pod_template)
    # Identity is not the template's to change.
    manifest["metadata"]["name"] = name
    manifest["metadata"]["namespace"] = options.namespace
    forced = {LABEL_SANDBOX_ID: key.sandbox_id} if pool_slot is None else {LABEL_POOL: pool_slot}
    meta_labels = manifest["metadata"].setdefault("labels", {})
    meta_labels.update({**forced, LABEL_OWNER: options.owner})
    if pool_slot is not None:
        meta_labels.pop(LABEL_SANDBOX_ID, None)
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:16]
    manifest["metadata"].setdefault("annotations", {})[ANNOTATION_SPEC] = digest
    return manifest


# The proxy pod's main process: write the proxy's config, wait for the payload (installed by
# the provider through an exec, as in a box), then become the proxy in TCP mode. SIGTERM ends
# it (the proxy stops on it).
PROXY_MAIN = """\
import os, sys, time
home, root, listen, config = sys.argv[1:5]
os.makedirs(root, exist_ok=True)
with open(root + '/proxy.json.tmp', 'w') as f:
    f.write(config)
os.replace(root + '/proxy.json.tmp', root + '/proxy.json')
while not os.path.exists(home + '/.digest'):
    time.sleep(0.1)
os.execv(sys.executable, [sys.executable, '-I', '-S', home + '/agent.pyz', '--net', 'proxy',
                          '--root', root, '--listen', listen])
"""


def proxy_pod_name(options: KubernetesOptions) -> str:
    return f"{options.owner}-egress"


def proxy_manifest(options: KubernetesOptions, config: dict[str, Any]) -> dict[str, Any]:
    """The owner's egress proxy pod: same image, same hardening as a box, no thread data;
    `config` is its proxy.json (hosts table, denied addresses). Recreated when it changes."""
    egress = options.egress
    security = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "runAsUser": options.uid,
        "runAsGroup": options.gid,
        "runAsNonRoot": options.uid != 0,
    }
    listen = f"0.0.0.0:{egress.proxy_port}"
    container = {
        "name": PROXY_CONTAINER,
        "image": egress.image or options.image,
        "imagePullPolicy": options.image_pull_policy,
        "command": [
            options.python,
            "-I",
            "-c",
            PROXY_MAIN,
            AGENT_DIR,
            PROXY_ROOT,
            listen,
            json.dumps(config, sort_keys=True),
        ],
        "ports": [{"name": "egress", "containerPort": egress.proxy_port}],
        "resources": copy.deepcopy(egress.resources),
        "securityContext": security,
        "volumeMounts": [
            {"name": "sandkit-agent", "mountPath": AGENT_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    labels = {**options.labels, LABEL_EGRESS_PROXY: options.owner}
    spec: dict[str, Any] = {
        "restartPolicy": "Always",  # the proxy is restarted in place; its state is re-sent
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": options.termination_grace_s,
        "securityContext": {
            "runAsNonRoot": options.uid != 0,
            "runAsUser": options.uid,
            "runAsGroup": options.gid,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": "sandkit-agent", "emptyDir": {"sizeLimit": "64Mi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        ],
    }
    if options.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in options.image_pull_secrets]
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": proxy_pod_name(options),
            "namespace": options.namespace,
            "labels": labels,
            "annotations": dict(options.annotations),
        },
        "spec": spec,
    }
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:16]
    manifest["metadata"]["annotations"][ANNOTATION_SPEC] = digest
    return manifest


def egress_policies(options: KubernetesOptions) -> list[dict[str, Any]]:
    """The owner's NetworkPolicies: its box pods may connect only to its proxy pod's port
    (policies add up, so this closes everything else for them), and the proxy pod accepts
    only them on it (its own way out stays as the namespace allows)."""
    port = [{"protocol": "TCP", "port": options.egress.proxy_port}]
    boxes = {"matchLabels": {LABEL_OWNER: options.owner}}
    proxy = {"matchLabels": {LABEL_EGRESS_PROXY: options.owner}}
    labels = {**options.labels, LABEL_EGRESS_PROXY: options.owner}

    def policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        meta = {"name": name, "namespace": options.namespace, "labels": labels}
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": meta,
            "spec": spec,
        }

    return [
        policy(
            f"{options.owner}-boxes-egress",
            {
                "podSelector": boxes,
                "policyTypes": ["Egress"],
                "egress": [{"to": [{"podSelector": proxy}], "ports": port}],
            },
        ),
        policy(
            f"{options.owner}-egress-proxy",
            {
                "podSelector": proxy,
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": boxes}], "ports": port}],
            },
        ),
    ]


def spec_digest(manifest: dict[str, Any]) -> str:
    annotations: dict[str, str] = manifest["metadata"]["annotations"]
    return annotations[ANNOTATION_SPEC]


def deep_merge(base: Any, override: Any) -> Any:
    """`override` merged into a copy of `base` (see `KubernetesOptions.pod_template`)."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = copy.deepcopy(base)
        for name, value in override.items():
            if value is None:
                merged.pop(name, None)
            elif name in merged:
                merged[name] = deep_merge(merged[name], value)
            else:
                merged[name] = copy.deepcopy(value)
        return merged
    if _named_list(base) and _named_list(override):
        merged_list = [copy.deepcopy(item) for item in base]
        index = {item["name"]: i for i, item in enumerate(merged_list)}
        for item in override:
            if item["name"] in index:
                merged_list[index[item["name"]]] = deep_merge(
                    merged_list[index[item["name"]]], item
                )
            else:
                merged_list.append(copy.deepcopy(item))
        return merged_list
    return copy.deepcopy(override)


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, dict) and isinstance(item.get("name"), str) for item in value
    )


def _empty_dir(options: KubernetesOptions) -> dict[str, Any]:
    tmp: dict[str, Any] = {"sizeLimit": options.tmp_size_limit}
    if options.tmp_medium:
        tmp["medium"] = options.tmp_medium
    return tmp


def _node_path(options: KubernetesOptions, layout: ThreadLayout, real: str) -> str:
    """Where a thread directory is on the node: `host_path_root` replaces the data root."""
    if options.host_path_root is None:
        return real
    root = str(layout.data_root)
    if real == root or real.startswith(root + "/"):
        return options.host_path_root.rstrip("/") + real[len(root) :]
    return real


def _init_dirs_container(
    options: KubernetesOptions, key: SandboxKey, security: dict[str, Any]
) -> dict[str, Any]:
    """Creates the thread dirs on the claim as the sandbox uid (kubelet would make them root's)."""
    script = (
        "import os,sys\n"
        "for name in ('workspace', 'uploads', 'outputs'):\n"
        "    os.makedirs(os.path.join(sys.argv[1], name), exist_ok=True)\n"
    )
    return {
        "name": INIT_CONTAINER,
        "image": options.image,
        "imagePullPolicy": options.image_pull_policy,
        "command": [options.python, "-I", "-c", script, f"{DATA_MOUNT}/{thread_sub_path(key)}"],
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"cpu": "500m", "memory": "64Mi"},
        },
        "securityContext": dict(security),
        "volumeMounts": [{"name": "thread-data", "mountPath": DATA_MOUNT}],
    }
