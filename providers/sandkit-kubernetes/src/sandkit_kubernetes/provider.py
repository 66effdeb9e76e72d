"""`KubernetesProvider`: one hardened pod per `SandboxKey`, the agent inside.

The pod's main process only reaps and waits; every operation goes to one
long-lived agent per sandbox: over a `pods/exec` stream (carrier stdio) or
over HTTP to the pod IP with a bearer token (carrier http). Pods are found
again by name (`<owner>-<sandbox_id>`) and labels, so a restarted provider
adopts its pods instead of creating duplicates. Pods cannot be stopped:
`release` deletes the pod; the thread data lives on the node or the claim.
The lifecycle itself (locks, reaping, capacity, carriers, shutdown) is
`sandkit.boxkit`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sandkit.agent import protocol as p
from sandkit.boxkit import (
    AGENT_DIR,
    BoxProvider,
    BoxRecord,
    BoxSandbox,
    ByteStream,
    Claim,
    bootstrap,
    claim_storage,
    prepare_host_dirs,
    retire_storage,
)
from sandkit.config import Settings
from sandkit.errors import ErrorCode, SandboxError
from sandkit.net.ports import PortSockets
from sandkit.network import EgressPolicy, Endpoint
from sandkit.provider import SandboxKey
from sandkit.uploads import HostUploads

from .egress import PodEgress
from .errors import api_error, api_message
from .forward import ExecForward
from .options import KubernetesOptions
from .spec import (
    ANNOTATION_SPEC,
    ANNOTATION_THREAD,
    ANNOTATION_USER,
    CONTAINER,
    LABEL_OWNER,
    LABEL_POOL,
    LABEL_SANDBOX_ID,
    key_labels,
    owner_selector,
    pod_manifest,
    pod_name,
    pool_pod_name,
    spec_digest,
    thread_sub_path,
)
from .stream import ExecOpenError, KubeExecStream, open_exec

log = logging.getLogger("sandkit.kubernetes")

# Waiting reasons that will not go away by waiting longer.
IMAGE_FAILURES = frozenset({"ErrImageNeverPull", "InvalidImageName", "ImagePullBackOff"})
START_FAILURES = frozenset(
    {
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "StartError",
        "CrashLoopBackOff",
    }
)
# Pod events that mean a pending pod will not start (checked while waiting), once the
# kubelet's retry failed again or the event has stood this long: a retry clears a passing
# one (a claim bound a moment later, a node authorizer that did not know the pod yet).
EVENT_FAILURES = frozenset({"FailedMount", "FailedAttachVolume", "FailedCreatePodSandBox"})
EVENT_FAILURE_GRACE_S = 20.0
WATCH_SLICE_S = 3.0
HANDSHAKE_TIMEOUT_S = 60.0
GREETING_TIMEOUT_S = 20.0  # the first byte of a fresh exec (see _exec_boot)


class KubernetesSandbox(BoxSandbox):
    """A sandbox in a pod; `pod_name` is the pod it lives in."""

    pod_name: str = ""


# Prints _AGENT_RUNS_LINE when the process argv[1] is a stdio agent, anything else when it is
# not (any more). The verdict is read from stdout, not from the exec's exit status: under
# gVisor an exec stream can stay open after its process exited, and the watch must not wait
# for that (it would wait out the request timeout).
_AGENT_RUNS_LINE = b"agent-runs\n"
_AGENT_RUNS = (
    "import sys\n"
    "try:\n"
    "    argv = open('/proc/%s/cmdline' % sys.argv[1], 'rb').read().split(b'\\0')\n"
    "except OSError:\n"
    "    argv = []\n"
    "print('agent-runs' if b'--stdio' in argv else 'agent-gone', flush=True)\n"
)


def _agent_pid(stream: KubeExecStream) -> int | None:
    """The new stdio agent's pid, for the stream's watch: one `info` request (allowed
    before initialize) with id 0, which the transport never uses."""
    try:
        stream.write(p.frame(p.request(0, "info", {})))
        line = stream.readline(1 << 16)
    except (OSError, EOFError):
        return None
    try:
        message = json.loads(line)
    except ValueError:
        message = None
    if not isinstance(message, dict) or message.get("id") != 0:
        stream.unread(line)  # e.g. the agent's start check failing: the transport says why
        return None
    pid = (message.get("result") or {}).get("pid")
    return pid if isinstance(pid, int) else None


@dataclasses.dataclass(eq=False)
class _Box(BoxRecord):
    """The kit's record plus the key's pod."""

    pod_uid: str | None = None
    pod_ip: str | None = None
    # The pod's name when it is not the key's (a claimed warm pool pod keeps its own).
    pod: str | None = None


class KubernetesProvider(BoxProvider[_Box, KubernetesOptions]):
    name = "kubernetes"
    supports_pool = True  # with storage hostPath (KubernetesOptions says so)
    supports_expose = True  # through the API server's port-forward (forward.py)
    supports_egress = True  # through the owner's proxy pod (egress.py)
    handshake_timeout_s = HANDSHAKE_TIMEOUT_S
    sandbox_class = KubernetesSandbox

    def __init__(self, settings: Settings | None = None) -> None:
        self._configuration: Any = None
        self._core: Any = None
        self._client_lock = threading.Lock()
        self._forwards: PortSockets | None = None
        self._egress: PodEgress | None = None
        super().__init__(settings, KubernetesOptions, _Box)  # last: it may start the pool
        self._forwards = PortSockets(self._net_root() / "ingress", self._port_forward)
        self._egress = PodEgress(self)

    # -- API ------------------------------------------------------------------------

    @property
    def core(self) -> Any:
        """A `CoreV1Api`, configured on first use (UNAVAILABLE when there is no cluster)."""
        if self._core is None:
            with self._client_lock:
                if self._core is None:
                    from kubernetes import client

                    configuration = self._load_configuration()
                    self._core = client.CoreV1Api(client.ApiClient(configuration))
                    self._configuration = configuration
        return self._core

    def _load_configuration(self) -> Any:
        from kubernetes import client, config

        configuration = client.Configuration()
        options = self.options
        try:
            if (
                options.kubeconfig is None
                and os.environ.get("KUBERNETES_SERVICE_HOST")
                and not (os.environ.get("KUBECONFIG"))
            ):
                config.load_incluster_config(client_configuration=configuration)
            else:
                config.load_kube_config(
                    config_file=options.kubeconfig,
                    context=options.context,
                    client_configuration=configuration,
                    persist_config=False,
                )
        except Exception as exc:
            raise api_error(exc, "loading the Kubernetes configuration") from None
        return configuration

    def _exec_api(self) -> Any:
        """A CoreV1Api of its own for one exec (`stream()` patches its client while connecting)."""
        from kubernetes import client

        self.core  # noqa: B018 - loads the configuration
        return client.CoreV1Api(client.ApiClient(self._configuration))

    @property
    def _timeout(self) -> float:
        return self.options.request_timeout_s

    # -- the kit's hooks --------------------------------------------------------------

    def _looks_alive(self, box: _Box) -> bool:
        return box.pod_uid is not None and super()._looks_alive(box)

    def _new_sandbox(self, box: _Box) -> KubernetesSandbox:
        sandbox = super()._new_sandbox(box)
        assert isinstance(sandbox, KubernetesSandbox)
        sandbox.pod_name = self._pod_name(box)
        return sandbox

    def _pod_name(self, box: _Box) -> str:
        return box.pod or pod_name(self.options, box.key)

    def _host_uploads(self, key: SandboxKey) -> HostUploads:
        """hostPath: below the data root (this process runs on the node); pvc: below the
        claim as this process mounts it (`pvc_mount_path`), never anywhere else."""
        if self.options.storage == "hostPath":
            return super()._host_uploads(key)
        if self.options.pvc_mount_path is None:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                "storage pvc: uploads need the claim mounted in this process; set "
                "providers.kubernetes.pvc_mount_path to where it is mounted",
            )
        root = Path(self.options.pvc_mount_path)
        return HostUploads(root / thread_sub_path(key) / "uploads", self.limits, root)

    def _hidden_paths(self) -> tuple[str, ...]:
        hidden = list(self.options.hide_paths)
        if self.options.host_path_root:
            hidden.append(self.options.host_path_root)
        return tuple(hidden)

    def _adopt_running(self, box: _Box) -> bool:
        pod = self._read_pod(box.key)
        if pod is None or not _running(pod) or not self._adoptable(pod, box.key):
            return False
        self._adopt(box, pod)
        return True

    def _stop_box(self, box: _Box, remove: bool) -> None:
        """Pods cannot be stopped: release deletes the pod too; the thread data stays."""
        if self._forwards is not None:
            self._forwards.close_box(box.key.sandbox_id)  # ports end with the box
        if self._egress is not None and self._egress.enabled:
            self._egress.remove_box(box.key.sandbox_id)
        self._delete_pod(self._pod_name(box))
        box.pod_uid = box.pod_ip = box.pod = None

    def _list_boxes(self) -> Sequence[Any]:
        try:
            pods = self.core.list_namespaced_pod(
                self.options.namespace,
                label_selector=owner_selector(self.options),
                _request_timeout=self._timeout,
            )
        except Exception as exc:
            raise api_error(exc, "listing pods") from None
        return list(pods.items)

    def _shut_box(self, pod: Any) -> None:
        self._delete_pod(pod.metadata.name)

    def _describe(self, pod: Any) -> str:
        return f"pod {pod.metadata.name}"

    def _after_shutdown(self, pods: Sequence[Any]) -> None:
        if self._forwards is not None:
            self._forwards.close_all()
        if self._egress is not None and self._egress.enabled:
            self._egress.teardown()
        self._wait_gone({pod.metadata.name for pod in pods})
        shutil.rmtree(self._pool_root(), ignore_errors=True)  # unclaimed pool pods' storage

    def _count_running(self) -> int:
        try:
            pods = self.core.list_namespaced_pod(
                self.options.namespace,
                label_selector=owner_selector(self.options),
                _request_timeout=self._timeout,
            )
        except Exception as exc:
            raise api_error(exc, "counting pods") from None
        return len([p for p in pods.items if p.metadata.deletion_timestamp is None])

    # -- warm pool ----------------------------------------------------------------------

    def _pool_spec(self, slot: str) -> str:
        return spec_digest(pod_manifest(self.options, self._pool_layout(slot), slot))

    def _pool_slots(self) -> list[str]:
        unclaimed = f"{owner_selector(self.options)},{LABEL_POOL},!{LABEL_SANDBOX_ID}"
        slots = []
        for pod in self._pods(unclaimed):
            slot = (pod.metadata.labels or {}).get(LABEL_POOL, "")
            if not _running(pod) or not self._pool_unclaimed(slot):
                continue  # starting, or claimed (the storage moved, the labels come next)
            if (pod.metadata.annotations or {}).get(ANNOTATION_SPEC) == self._pool_spec(slot):
                slots.append(slot)
            else:
                log.info("removing pool pod %s: created with other settings", pod.metadata.name)
                self._pool_remove(slot)
        return slots

    def _pool_start(self, slot: str, record: _Box) -> None:
        layout = self._pool_layout(slot)
        prepare_host_dirs(layout, (self.options.uid, self.options.gid))
        manifest = pod_manifest(self.options, layout, slot)
        mask = layout.host_mapping().mask
        pod, _ = self._create(manifest, mask)
        if pod is None:
            raise SandboxError(ErrorCode.UNAVAILABLE, f"pool pod {slot} could not be created")
        self._adopt(record, self._wait_running(pod, mask))

    def _pool_attach(self, slot: str, record: _Box) -> bool:
        pod = self._read_pod_named(pool_pod_name(self.options, slot))
        labels = (pod.metadata.labels or {}) if pod is not None else {}
        if pod is None or not _running(pod) or LABEL_SANDBOX_ID in labels:
            return False
        if not self._pool_unclaimed(slot):
            return False
        self._adopt(record, pod)
        return True

    def _pool_claim(self, slot: str, record: _Box, key: SandboxKey) -> Claim:
        """Rename the pod's storage to the key's thread dir on the node (atomic: one
        replica wins a pod, one pod wins a key), then label the pod with the key (with its
        resourceVersion as a precondition: a pod that changed meanwhile is looked at again)."""
        from kubernetes.client.exceptions import ApiException

        moved = claim_storage(self.settings, self.owner, slot, self._layout(key))
        if moved is not Claim.CLAIMED:
            return moved
        name = pool_pod_name(self.options, slot)
        for _attempt in range(5):
            pod = self._read_pod_named(name)
            if pod is None or not _running(pod):
                return Claim.GONE  # its (empty) storage stays the key's
            if LABEL_SANDBOX_ID in (pod.metadata.labels or {}):
                return Claim.GONE
            body = {
                "metadata": {
                    "resourceVersion": pod.metadata.resource_version,
                    "labels": key_labels(key),
                    "annotations": {ANNOTATION_USER: key.user_id, ANNOTATION_THREAD: key.thread_id},
                }
            }
            try:
                self.core.patch_namespaced_pod(
                    name, self.options.namespace, body, _request_timeout=self._timeout
                )
            except ApiException as exc:
                if exc.status == 409:
                    continue  # it changed meanwhile: look again
                if exc.status == 404:
                    return Claim.GONE
                raise api_error(exc, f"claiming pool pod {name}") from None
            record.pod = name
            self._push_egress(key, record.pod_ip)
            return Claim.CLAIMED
        return Claim.GONE

    def _pool_remove(self, slot: str) -> None:
        """Remove an unclaimed pool pod. Its storage is retired first, by the same atomic
        rename a claim makes: a replica claiming it meanwhile (its labels not written yet)
        keeps it, and the pod is left alone as that key's."""
        if not retire_storage(self.settings, self.owner, slot):
            return
        self._delete_pod(pool_pod_name(self.options, slot))
        shutil.rmtree(self._pool_root() / slot, ignore_errors=True)

    # -- pods ---------------------------------------------------------------------------

    def _read_pod(self, key: SandboxKey) -> Any | None:
        """The key's pod: by its name, or (with a warm pool) a claimed pool pod by label."""
        pod = self._read_pod_named(pod_name(self.options, key))
        if pod is not None or not self.options.warm_pool.size:
            return pod
        selector = f"{owner_selector(self.options)},{LABEL_SANDBOX_ID}={key.sandbox_id}"
        found = [p for p in self._pods(selector) if LABEL_POOL in (p.metadata.labels or {})]
        return found[0] if found else None

    def _pods(self, selector: str) -> list[Any]:
        try:
            pods = self.core.list_namespaced_pod(
                self.options.namespace, label_selector=selector, _request_timeout=self._timeout
            )
        except Exception as exc:
            raise api_error(exc, "listing pods") from None
        return list(pods.items)

    def _read_pod_named(self, name: str) -> Any | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.core.read_namespaced_pod(
                name, self.options.namespace, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(exc, f"reading pod {name}") from None
        except Exception as exc:
            raise api_error(exc, f"reading pod {name}") from None

    def _delete_pod(self, name: str, uid: str | None = None) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        body = client.V1DeleteOptions(
            grace_period_seconds=self.options.termination_grace_s,
            preconditions=client.V1Preconditions(uid=uid) if uid else None,
        )
        try:
            self.core.delete_namespaced_pod(
                name, self.options.namespace, body=body, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status in (404, 409):  # gone already, or another pod by now
                return
            raise api_error(exc, f"deleting pod {name}") from None
        except Exception as exc:
            raise api_error(exc, f"deleting pod {name}") from None

    def _adoptable(self, pod: Any, key: SandboxKey) -> bool:
        meta = pod.metadata
        labels = meta.labels or {}
        annotations = meta.annotations or {}
        slot = labels.get(LABEL_POOL)
        expected = spec_digest(self._manifest(key)) if slot is None else self._pool_spec(slot)
        return bool(
            labels.get(LABEL_OWNER) == self.options.owner
            and labels.get(LABEL_SANDBOX_ID) == key.sandbox_id
            and annotations.get(ANNOTATION_SPEC) == expected
        )

    def _manifest(self, key: SandboxKey) -> dict[str, Any]:
        layout = self._layout(key)
        return pod_manifest(self.options, layout)

    def _adopt(self, box: _Box, pod: Any) -> None:
        if box.pod_uid != pod.metadata.uid:
            # Another pod than the one our channels knew: start them afresh.
            box.http.replace(None)
        box.pod_uid = pod.metadata.uid
        box.pod_ip = pod.status.pod_ip
        box.pod = pod.metadata.name
        box.dead = False
        labels = pod.metadata.labels or {}
        if LABEL_SANDBOX_ID in labels or LABEL_POOL not in labels:  # not an unclaimed pool pod
            self._push_egress(box.key, box.pod_ip)

    def _ensure_running(self, box: _Box) -> None:
        """Make the key's pod exist and run: adopt it, or (re)create it."""
        key = box.key
        layout = self._layout(key)
        mask = layout.host_mapping().mask
        options = self.options
        host_dirs = options.storage == "hostPath" and options.prepare_host_dirs
        if host_dirs:
            # Made before we look for a pod (a pool claim racing this start then fails its
            # rename); handed over (a chown of the tree) only once no pod of the key runs:
            # a running box changes what the walk enters.
            layout.create_dirs()
        manifest = pod_manifest(self.options, layout)
        name = manifest["metadata"]["name"]
        created = False
        for _attempt in range(3):
            pod = self._read_pod(key)
            if pod is not None and not self._usable(pod, key):
                found = pod.metadata.name
                if pod.metadata.deletion_timestamp is None:
                    log.info("recreating %s: created with other settings or ended", found)
                    self._delete_pod(found, pod.metadata.uid)
                self._wait_gone({found})
                pod = None
            if pod is None:
                if host_dirs:
                    prepare_host_dirs(layout, (options.uid, options.gid))
                with self._starting():
                    pod, created = self._create(manifest, mask)
                if pod is None:
                    continue  # lost a race to a pod that is going away; look again
            break
        else:
            raise SandboxError(
                ErrorCode.UNAVAILABLE, f"pod {name} keeps being replaced; try again later"
            )
        try:
            pod = self._wait_running(pod, mask)
        except BaseException:
            if created:
                with contextlib.suppress(Exception):
                    self._delete_pod(name, pod.metadata.uid)
            raise
        self._adopt(box, pod)

    def _usable(self, pod: Any, key: SandboxKey) -> bool:
        """A pod worth adopting: ours, current settings, not ending or ended."""
        return bool(
            pod.metadata.deletion_timestamp is None
            and pod.status.phase not in ("Succeeded", "Failed")
            and self._adoptable(pod, key)
        )

    def _create(self, manifest: dict[str, Any], mask: Any) -> tuple[Any | None, bool]:
        """Create the pod; if another process won the race (409), adopt theirs."""
        from kubernetes.client.exceptions import ApiException

        name = manifest["metadata"]["name"]
        try:
            pod = self.core.create_namespaced_pod(
                self.options.namespace, manifest, _request_timeout=self._timeout
            )
            return pod, True
        except ApiException as exc:
            if exc.status != 409:
                raise api_error(exc, f"creating pod {name}", mask) from None
        except Exception as exc:
            raise api_error(exc, f"creating pod {name}", mask) from None
        pod = self._read_pod_named(name)
        if pod is None or pod.metadata.deletion_timestamp is not None:
            return None, False
        return pod, False

    def _wait_running(self, pod: Any, mask: Any) -> Any:
        """Watch the pod until its sandbox container runs; clear errors when it will not."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        name = pod.metadata.name
        started = time.monotonic()
        deadline = started + self.options.start_timeout_s
        failures_seen: dict[str, float] = {}
        while True:
            verdict = self._verdict(pod, started, mask)
            if verdict is True:
                return pod
            if isinstance(verdict, SandboxError):
                raise verdict
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxError(
                    ErrorCode.UNAVAILABLE,
                    mask(
                        f"pod {name} did not start within {self.options.start_timeout_s:.0f} s"
                        f"{self._last_warning(pod)}"
                    ),
                )
            if time.monotonic() - started > WATCH_SLICE_S:
                failure = self._event_failure(pod, failures_seen)
                if failure:
                    raise SandboxError(
                        ErrorCode.UNAVAILABLE, mask(f"pod {name} cannot start: {failure}")
                    )
            watcher = watch.Watch()
            try:
                for event in watcher.stream(
                    self.core.list_namespaced_pod,
                    self.options.namespace,
                    field_selector=f"metadata.name={name}",
                    resource_version=pod.metadata.resource_version,
                    timeout_seconds=max(1, int(min(remaining, WATCH_SLICE_S) + 0.999)),
                    _request_timeout=self._timeout + WATCH_SLICE_S,
                ):
                    kind = event.get("type")
                    if kind == "DELETED":
                        raise SandboxError(
                            ErrorCode.UNAVAILABLE, f"pod {name} was deleted while starting"
                        )
                    obj = event.get("object")
                    if kind in ("ADDED", "MODIFIED") and obj is not None:
                        if obj.metadata.uid != pod.metadata.uid:
                            continue
                        pod = obj
                        if self._verdict(pod, started, mask) is not None:
                            break
            except ApiException as exc:
                if exc.status != 410:  # 410: our resourceVersion is too old; read afresh
                    raise api_error(exc, f"watching pod {name}") from None
                fresh = self._read_pod_named(name)
                if fresh is None:
                    raise SandboxError(
                        ErrorCode.UNAVAILABLE, f"pod {name} was deleted while starting"
                    ) from None
                pod = fresh
            except Exception as exc:
                raise api_error(exc, f"watching pod {name}") from None
            finally:
                watcher.stop()

    def _verdict(self, pod: Any, started: float, mask: Any) -> bool | SandboxError | None:
        """True: running; a SandboxError: will not run; None: keep waiting."""
        name = pod.metadata.name
        status = pod.status
        if pod.metadata.deletion_timestamp is not None:
            return SandboxError(ErrorCode.UNAVAILABLE, f"pod {name} is being deleted")
        if status.phase in ("Succeeded", "Failed"):
            why = status.message or status.reason or _terminated_reason(status)
            return SandboxError(ErrorCode.UNAVAILABLE, mask(f"pod {name} ended: {why}"))
        statuses = list(status.init_container_statuses or []) + list(
            status.container_statuses or []
        )
        for container in statuses:
            waiting = container.state.waiting if container.state else None
            if waiting is None:
                continue
            if waiting.reason in IMAGE_FAILURES:
                return SandboxError(
                    ErrorCode.UNAVAILABLE,
                    mask(
                        f"pod {name}: image {container.image} is not available "
                        f"({waiting.reason}: {waiting.message or ''}); load or push it, or set "
                        "providers.kubernetes.image / image_pull_policy"
                    )[:2000],
                )
            if waiting.reason in START_FAILURES:
                return SandboxError(
                    ErrorCode.UNAVAILABLE,
                    mask(f"pod {name} cannot start ({waiting.reason}: {waiting.message or ''})")[
                        :2000
                    ],
                )
        if status.phase == "Running":
            for container in status.container_statuses or []:
                if container.name == CONTAINER and container.state and container.state.running:
                    return True
        for condition in status.conditions or []:
            if (
                condition.type == "PodScheduled"
                and condition.status == "False"
                and condition.reason == "Unschedulable"
                and time.monotonic() - started >= self.options.schedule_timeout_s
            ):
                return SandboxError(
                    ErrorCode.CAPACITY,
                    f"pod {name} cannot be scheduled: {condition.message or 'no node fits'}",
                )
        return None

    def _events(self, pod: Any) -> list[Any]:
        try:
            events = self.core.list_namespaced_event(
                self.options.namespace,
                field_selector=f"involvedObject.uid={pod.metadata.uid}",
                _request_timeout=self._timeout,
            )
        except Exception:  # events are a diagnostic: no RBAC for them is fine
            return []
        return sorted(events.items, key=lambda e: str(e.last_timestamp or e.event_time or ""))

    def _event_failure(self, pod: Any, seen: dict[str, float]) -> str:
        """Why the pod will not start, when its latest event says so for good: a failure
        (EVENT_FAILURES) repeated by the kubelet's retry, or failures standing for
        EVENT_FAILURE_GRACE_S (`seen` keeps since when). A failure followed by progress is
        no verdict."""
        events = self._events(pod)
        if not events or events[-1].type != "Warning" or events[-1].reason not in EVENT_FAILURES:
            seen.pop("since", None)
            return ""
        event = events[-1]
        first = seen.setdefault("since", time.monotonic())
        series = getattr(event, "series", None)
        repeated = max(event.count or 1, getattr(series, "count", None) or 1) >= 2
        if repeated or time.monotonic() - first >= EVENT_FAILURE_GRACE_S:
            return f"{event.reason}: {event.message}"
        return ""

    def _last_warning(self, pod: Any) -> str:
        warnings = [e for e in self._events(pod) if e.type == "Warning"]
        if not warnings:
            return ""
        return f" (last warning: {warnings[-1].reason}: {warnings[-1].message})"

    def _wait_gone(self, names: set[str]) -> None:
        """Watch until no pod of `names` exists (bounded by delete_wait_s)."""
        from kubernetes import watch

        left = set(names)
        deadline = time.monotonic() + self.options.delete_wait_s
        if len(left) == 1:
            selector = {"field_selector": f"metadata.name={next(iter(left))}"}
        else:
            selector = {"label_selector": owner_selector(self.options)}
        while left:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning("pods still terminating: %s", ", ".join(sorted(left)))
                return
            try:
                pods = self.core.list_namespaced_pod(
                    self.options.namespace, **selector, _request_timeout=self._timeout
                )
            except Exception as exc:
                raise api_error(exc, "listing pods") from None
            left &= {pod.metadata.name for pod in pods.items}
            if not left:
                return
            watcher = watch.Watch()
            try:
                for event in watcher.stream(
                    self.core.list_namespaced_pod,
                    self.options.namespace,
                    **selector,
                    resource_version=pods.metadata.resource_version,
                    timeout_seconds=max(1, int(min(remaining, WATCH_SLICE_S) + 0.999)),
                    _request_timeout=self._timeout + WATCH_SLICE_S,
                ):
                    if event.get("type") == "DELETED":
                        left.discard(event["object"].metadata.name)
                        if not left:
                            break
            except Exception as exc:  # a broken watch: list again
                log.debug("watch for deletions ended: %s", exc)
            finally:
                watcher.stop()

    # -- carrier http -----------------------------------------------------------------

    def _agent_url(self, box: _Box) -> str:
        return f"http://{box.pod_ip}:{self.options.http_port}"

    def _box_uid(self, box: _Box) -> str:
        return str(box.pod_uid)

    def _launch_http_agent(self, box: _Box, config: dict[str, Any], token: str) -> None:
        """The bootstrap starts the agent with config and token sent over its exec stream
        (never a file or argv) and says READY once it listens."""
        stream = self._exec_boot(box, "http")
        bootstrap.start_http_agent(stream, stream.readline, config, token)

    # -- carrier stdio ----------------------------------------------------------------

    def _exec_boot(self, box: _Box, mode: str) -> KubeExecStream:
        """Start BOOT in the pod and install the payload if the pod lacks it."""
        name = self._pod_name(box)
        if box.pod_uid is None or box.dead:
            raise SandboxError(
                ErrorCode.UNAVAILABLE, f"sandbox {box.key.sandbox_id} is not running; acquire it"
            )
        payload = self._payload()
        argv = bootstrap.boot_argv(
            self.options.python,
            mode,
            payload.digest,
            AGENT_DIR,
            self.options.http_port,
            payload.agent_sha256,
        )
        # An exec that never greets (seen about once in 30 CI runs under load: no byte
        # until the handshake timeout) is closed, which ends its BOOT at stdin EOF, and
        # started once more; the second one gets the whole handshake timeout.
        for last in (False, True):
            stream = self._open_boot(box, name, argv)
            try:
                stream.settimeout(HANDSHAKE_TIMEOUT_S if last else GREETING_TIMEOUT_S)
                greeting = stream.readline()
                if greeting or stream.exit_detail() or last:
                    stream.settimeout(HANDSHAKE_TIMEOUT_S)
                    stream.unread(greeting)
                    bootstrap.install(stream, stream.readline, payload, f"pod {name}")
                    break
            except BaseException:
                stream.close()
                raise
            log.warning("no greeting from the agent bootstrap in pod %s: starting it again", name)
            stream.close()
        return stream

    def _open_boot(self, box: _Box, name: str, argv: list[str]) -> KubeExecStream:
        try:
            return open_exec(
                self._exec_api(), self.options.namespace, name, CONTAINER, argv, self._timeout
            )
        except ExecOpenError as exc:
            if exc.status in (404, 400):  # the pod says so; anything else may pass (load)
                box.dead = True
                raise SandboxError(
                    ErrorCode.UNAVAILABLE,
                    f"the pod of sandbox {box.key.sandbox_id} is gone or not running; "
                    "acquire it again",
                ) from None
            hint = ""
            if exc.status in (401, 403):
                hint = " (check the credentials and the RBAC Role: pods/exec needs create and get)"
            raise SandboxError(
                ErrorCode.UNAVAILABLE, f"starting the agent in pod {name}: {exc}{hint}"[:2000]
            ) from None
        except Exception as exc:  # the API server in trouble: the box is not known dead
            raise api_error(exc, f"starting the agent in pod {name}") from None

    # -- egress (egress.py) ------------------------------------------------------------------

    def _command_env(self) -> dict[str, str]:
        if self._egress is None or not self._egress.enabled:
            return {}
        return self.options.egress.command_env(self._egress.proxy_ip())

    def _push_egress(self, key: SandboxKey, pod_ip: str | None) -> None:
        """The proxy enforces the key's policy for its pod (at every start or adoption)."""
        if self._egress is not None and self._egress.enabled:
            self._egress.set_box(key.sandbox_id, pod_ip, self._enforced_egress(key))

    def _apply_egress(self, box: _Box, policy: EgressPolicy) -> None:
        if self._egress is not None and box.pod_ip is not None:
            self._egress.set_box(
                box.key.sandbox_id, box.pod_ip, self.options.egress.enforced(policy)
            )

    # -- exposed ports (forward.py) ---------------------------------------------------------

    def _port_forward(self, pod: str, port: int) -> Any:
        """One connection to `port` in the pod: a `pods/portforward` stream, or, for pods
        of a RuntimeClass (gVisor, Kata: port-forward cannot reach their network stack), an
        exec of `agent.pyz --net connect` in the box (forward.py)."""
        from kubernetes.stream import portforward

        api = self._exec_api()
        if self.options.runtime_class_name is not None:
            argv = [self.options.python, "-I", "-S", f"{AGENT_DIR}/agent.pyz", "--net"]
            argv += ["connect", "--port", str(port)]
            stream = open_exec(api, self.options.namespace, pod, CONTAINER, argv, self._timeout)
            stream.settimeout(None)
            return ExecForward(stream)
        return portforward(
            api.connect_get_namespaced_pod_portforward,
            pod,
            self.options.namespace,
            ports=str(port),
            _request_timeout=self._timeout,
        )

    def _endpoint(self, key: SandboxKey, port: int, path: Path) -> Endpoint:
        return Endpoint.over_socket(key.user_id, key.thread_id, port, str(path))

    def _expose_port(self, box: _Box, port: int) -> Endpoint:
        assert self._forwards is not None
        path = self._forwards.open(box.key.sandbox_id, self._pod_name(box), port)
        return self._endpoint(box.key, port, path)

    def _unexpose_port(self, box: _Box, port: int) -> None:
        if self._forwards is not None:
            self._forwards.close(box.key.sandbox_id, port)

    def _exposed_ports(self, box: _Box) -> list[Endpoint]:
        if self._forwards is None:
            return []
        found = self._forwards.of_box(box.key.sandbox_id).items()
        return [self._endpoint(box.key, port, path) for port, path in found]

    def _find_endpoint(self, key: SandboxKey, port: int) -> Endpoint | None:
        path = self._forwards.path(key.sandbox_id, port) if self._forwards is not None else None
        return self._endpoint(key, port, path) if path is not None else None

    def _open_stream(self, box: _Box) -> ByteStream:
        stream = self._exec_boot(box, "stdio")
        stream.agent_pid = _agent_pid(stream)
        stream.settimeout(None)
        stream.watch = lambda: self._agent_alive(box, stream)
        return stream

    def _agent_alive(self, box: _Box, stream: KubeExecStream) -> bool | None:
        """Is the stdio agent on `stream` still running? Asked by a separate exec (None:
        cannot tell), when the stream has gone quiet after a big write (see stream.py)."""
        pid = stream.agent_pid
        if box.stream is not stream or pid is None:
            return None
        argv = [self.options.python, "-I", "-c", _AGENT_RUNS, str(pid)]
        name = self._pod_name(box)
        try:
            probe = open_exec(
                self._exec_api(), self.options.namespace, name, CONTAINER, argv, self._timeout
            )
        except Exception:  # the pod itself is gone: its stream ends by itself
            return None
        try:
            probe.settimeout(self._timeout)
            verdict = probe.readline()
        except Exception:
            return None
        finally:
            probe.close()
        return verdict == _AGENT_RUNS_LINE if verdict.endswith(b"\n") else None


def _running(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None or pod.status.phase != "Running":
        return False
    return any(
        c.name == CONTAINER and c.state is not None and c.state.running is not None
        for c in pod.status.container_statuses or []
    )


def _terminated_reason(status: Any) -> str:
    for container in list(status.init_container_statuses or []) + list(
        status.container_statuses or []
    ):
        terminated = container.state.terminated if container.state else None
        if terminated is not None:
            return (
                f"container {container.name} exited {terminated.exit_code} "
                f"({terminated.reason or ''}: {terminated.message or ''})"
            )
    return "unknown reason"


__all__ = ["KubernetesProvider", "KubernetesSandbox", "api_message"]
