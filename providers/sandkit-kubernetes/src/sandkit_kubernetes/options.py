"""`providers.kubernetes` in the settings, validated.

Every hardening default is on; `pod_template` can change anything in the
generated pod (it is deep-merged last), so the fields below are the common
knobs, not a limit on what can be configured.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from sandkit.boxkit import BoxOptions
from sandkit.network import EgressOptions

# Pod names are `<owner>-<sandbox_id>` (sandbox_id is 23 characters): a DNS-1123 label.
_OWNER_RE = re.compile(r"[a-z0-9]([a-z0-9-]{0,37}[a-z0-9])?")
_DNS_LABEL_RE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def _default_resources() -> dict[str, dict[str, str]]:
    return {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"},
    }


class KubernetesEgressOptions(EgressOptions):
    """`providers.kubernetes.egress`: the shared policy settings plus the proxy pod's."""

    network_policies: bool = Field(
        True,
        description="Write the owner's two NetworkPolicies (box pods may reach only the proxy "
        "pod; the proxy pod accepts only them): RBAC networkpolicies get/create/update/delete. "
        "false: the cluster's admin keeps equivalent ones in place.",
    )
    image: str | None = Field(
        None, description="Image of the proxy pod; None: the boxes' image (python3)."
    )
    resources: dict[str, dict[str, str]] = Field(
        default_factory=lambda: {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "1", "memory": "256Mi"},
        },
        description="Resources of the proxy pod's container.",
    )
    start_timeout_s: float = Field(
        120.0, gt=0, le=3600, description="Bound on the proxy pod's create -> answering."
    )


class KubernetesOptions(BoxOptions):
    """Options of the Kubernetes provider (`providers: {kubernetes: {...}}` in sandkit.yaml).

    The shared ones (owner, python, http_port, token_secret, execute_enabled,
    reap_interval_s, max_running) are `BoxOptions`'s; the owner prefixes pod names.
    """

    provider_name: ClassVar[str] = "kubernetes"
    owner_pattern: ClassVar[re.Pattern[str]] = _OWNER_RE
    owner_rule: ClassVar[str] = (
        "owner must be lowercase letters, digits and '-', at most 39 characters"
    )

    # -- where ------------------------------------------------------------------------
    namespace: str = Field("sandkit", description="Namespace of the sandbox pods.")
    kubeconfig: str | None = Field(
        None,
        description="kubeconfig file; None: in-cluster config inside a pod, else "
        "$KUBECONFIG or ~/.kube/config.",
    )
    context: str | None = Field(None, description="kubeconfig context (None: current).")

    # -- what -------------------------------------------------------------------------
    image: str = Field(
        "python:3.12-slim", description="Any image with python3 (>= 3.9) and its standard library."
    )
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    image_pull_secrets: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, description="Extra container environment.")
    labels: dict[str, str] = Field(default_factory=dict, description="Extra pod labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Extra pod annotations.")

    # -- carrier ----------------------------------------------------------------------
    carrier: Literal["stdio", "http"] = Field(
        "stdio",
        description="stdio: the agent over one long-lived exec stream (works from anywhere the "
        "API is, RBAC pods/exec). http: the agent listens on the pod IP with a bearer token "
        "(the provider must reach pod IPs, i.e. run in the cluster).",
    )

    # -- thread data ------------------------------------------------------------------
    storage: Literal["hostPath", "pvc"] = Field(
        "hostPath",
        description="hostPath: {host_path_root}/users/... on the node (single-node dev); "
        "pvc: subPaths users/{user}/threads/{thread}/user-data/... of `pvc_claim_name`.",
    )
    host_path_root: str | None = Field(
        None, description="storage hostPath: data root on the node (None: settings.data_root)."
    )
    prepare_host_dirs: bool = Field(
        True,
        description="storage hostPath: create the thread dirs and chown them to uid:gid from "
        "this process (it must run on the node, as root or as that uid).",
    )
    pvc_claim_name: str = Field("sandkit-data", description="storage pvc: the claim's name.")
    pvc_mount_path: str | None = Field(
        None,
        description="storage pvc: where this process sees the claim's root (the backend pod "
        "mounts the claim there); `provider.upload` writes the thread's uploads below it. "
        "None: uploads are refused (UNAVAILABLE), the provider cannot reach the claim.",
    )
    init_thread_dirs: bool = Field(
        True,
        description="storage pvc: an init container (same image, same uid) creates the thread "
        "dirs on the claim before the sandbox container mounts them.",
    )
    hide_paths: list[str] = Field(
        default_factory=lambda: ["/var/lib/kubelet"],
        description="Host path prefixes masked as [hidden] in everything the box prints "
        "(mount sources appear in /proc/self/mountinfo).",
    )

    # -- hardening --------------------------------------------------------------------
    uid: int = Field(1000, ge=0, description="runAsUser of the sandbox container.")
    gid: int = Field(1000, ge=0, description="runAsGroup of the sandbox container.")
    fs_group: int | None = Field(None, ge=0, description="Pod fsGroup (None: not set).")
    allow_root: bool = Field(False, description="Allow uid 0 (drops runAsNonRoot).")
    read_only_root_filesystem: bool = True
    tmp_size_limit: str = Field("256Mi", description="sizeLimit of the /tmp emptyDir.")
    tmp_medium: Literal["", "Memory"] = Field("", description='"Memory": /tmp is a tmpfs.')
    resources: dict[str, dict[str, str]] = Field(default_factory=_default_resources)
    runtime_class_name: str | None = Field(None, description="e.g. gvisor or kata.")
    service_account_name: str | None = Field(
        None, description="ServiceAccount of the pods (its token is never mounted)."
    )
    pod_template: dict[str, Any] = Field(
        default_factory=dict,
        description="Deep-merged into the generated Pod (metadata/spec): dicts merge, lists of "
        "named items (containers, volumes, volumeMounts, env) merge by name, other lists are "
        "replaced, null deletes a key.",
    )

    # -- lifecycle --------------------------------------------------------------------
    start_timeout_s: float = Field(
        120.0, gt=0, le=3600, description="Bound on pod create -> Running (image pulls count)."
    )
    schedule_timeout_s: float = Field(
        15.0, gt=0, le=3600, description="An unschedulable pod fails with CAPACITY after this."
    )
    termination_grace_s: int = Field(2, ge=0, le=300, description="Pod deletion grace period.")
    delete_wait_s: float = Field(
        30.0, ge=0, le=600, description="How long recreate/shutdown wait for a pod to be gone."
    )
    request_timeout_s: float = Field(30.0, gt=0, description="Timeout of one API request.")
    egress: KubernetesEgressOptions = Field(
        default_factory=KubernetesEgressOptions,
        description="Where boxes may connect to, through the owner's egress proxy pod "
        "(docs/network.md); off by default (no network).",
    )

    @field_validator("namespace", "pvc_claim_name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not _DNS_LABEL_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a DNS-1123 label")
        return value

    @field_validator("hide_paths")
    @classmethod
    def _absolute(cls, value: list[str]) -> list[str]:
        for path in value:
            if not path.startswith("/") or path.rstrip("/") == "":
                raise ValueError(f"hide_paths entries must be absolute and not /: {path!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> KubernetesOptions:
        if self.warm_pool.size and not (self.storage == "hostPath" and self.prepare_host_dirs):
            raise ValueError(
                "warm_pool needs storage hostPath with prepare_host_dirs: a pool pod's storage "
                "becomes its thread's by a rename on the node (docs/pools.md)"
            )
        if self.pvc_mount_path is not None and not self.pvc_mount_path.startswith("/"):
            raise ValueError(f"pvc_mount_path must be absolute: {self.pvc_mount_path!r}")
        if self.uid == 0 and not self.allow_root:
            raise ValueError("uid 0 runs as root; set allow_root: true if you really mean it")
        if self.schedule_timeout_s > self.start_timeout_s:
            raise ValueError("schedule_timeout_s must be <= start_timeout_s")
        return self
