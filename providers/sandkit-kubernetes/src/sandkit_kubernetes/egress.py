"""Egress of pods: the owner's proxy pod, and box pods that may reach only it.

A pod always has its CNI interface, so "no other route out" is NetworkPolicy's job: the
provider writes two for its owner (spec.egress_policies): box pods may connect only to
the proxy pod's port, and the proxy pod accepts only box pods. The proxy pod
(`<owner>-egress`, the boxes' image, no thread data) runs sandkit.net.proxy in TCP mode
and knows a box by its pod IP, which a pod without NET_RAW cannot forge. Commands get
HTTP(S)_PROXY pointing at the proxy pod's IP.

The provider keeps the proxy's state through `pods/exec` (no file or network path from
the provider to the pod is assumed): the payload is installed as in a box, each box's
policy (with its pod IP) is written by `agent.pyz --net policy`, which also makes the proxy
sync. The proxy pod's config (hosts table, denied addresses) is in its manifest; another
config recreates it. A proxy pod that was recreated has lost its state: every policy this
provider wrote is sent again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from sandkit.agent import protocol as p
from sandkit.boxkit import AGENT_DIR, bootstrap
from sandkit.errors import ErrorCode, SandboxError

from .errors import api_error
from .spec import (
    ANNOTATION_SPEC,
    PROXY_CONTAINER,
    PROXY_ROOT,
    egress_policies,
    proxy_manifest,
    proxy_pod_name,
)
from .stream import open_exec

if TYPE_CHECKING:
    from .provider import KubernetesProvider

log = logging.getLogger("sandkit.kubernetes")

AGENT = f"{AGENT_DIR}/agent.pyz"
# A running proxy is not asked again within this (every policy write also proves it).
PROXY_CHECK_S = 5.0


class PodEgress:
    """The owner's egress proxy pod and the policies it enforces (see the module doc)."""

    def __init__(self, provider: KubernetesProvider) -> None:
        self.provider = provider
        self.options = provider.options
        self._lock = threading.RLock()
        self._proxy_uid: str | None = None
        self._proxy_ip: str | None = None
        self._checked_until = 0.0
        self._written: dict[str, tuple[str, dict[str, Any]]] = {}  # sandbox id -> (ip, policy)

    @property
    def enabled(self) -> bool:
        return self.options.egress.enabled

    # -- the proxy pod ----------------------------------------------------------------------

    def proxy_ip(self) -> str:
        """The proxy pod's address (started and answering first)."""
        self.ensure_proxy()
        assert self._proxy_ip is not None
        return self._proxy_ip

    def ensure_proxy(self) -> None:
        if time.monotonic() < self._checked_until:
            return
        with self._lock:
            if time.monotonic() < self._checked_until:
                return
            if self.options.egress.network_policies:
                self._ensure_policies()
            pod = self._running_proxy()
            if pod.metadata.uid != self._proxy_uid:
                self._install(pod.metadata.name)
                self._wait_answering(pod.metadata.name)
                resend = self._proxy_uid is not None
                self._proxy_uid, self._proxy_ip = pod.metadata.uid, pod.status.pod_ip
                if resend:  # a new proxy pod knows no box yet
                    for sandbox_id, (ip, policy) in list(self._written.items()):
                        self._write(sandbox_id, ip, policy)
            self._checked_until = time.monotonic() + PROXY_CHECK_S

    def _config(self) -> dict[str, Any]:
        """proxy.json: the hosts table. Only settings: the proxy pod is recreated when this
        changes, and a new pod has a new address (the proxy denies its own addresses
        itself; the node's are private, denied unless a CIDR rule allows them)."""
        return {"hosts": self.options.egress.hosts}

    def _running_proxy(self) -> Any:
        """The proxy pod with the current manifest, Running and with an IP."""
        from kubernetes.client.exceptions import ApiException

        core, ns = self.provider.core, self.options.namespace
        manifest = proxy_manifest(self.options, self._config())
        name = manifest["metadata"]["name"]
        digest = manifest["metadata"]["annotations"][ANNOTATION_SPEC]
        deadline = time.monotonic() + self.options.egress.start_timeout_s
        while True:
            pod = self.provider._read_pod_named(name)
            if pod is not None and pod.metadata.deletion_timestamp is None:
                annotations = pod.metadata.annotations or {}
                if annotations.get(ANNOTATION_SPEC) != digest or pod.status.phase in (
                    "Succeeded",
                    "Failed",
                ):
                    log.info("recreating %s: created with other settings or ended", name)
                    self.provider._delete_pod(name, pod.metadata.uid)
                    self.provider._wait_gone({name})
                    pod = None
            elif pod is not None:  # going away: wait for it
                self.provider._wait_gone({name})
                pod = None
            if pod is None:
                try:
                    core.create_namespaced_pod(ns, manifest, _request_timeout=self._timeout)
                except ApiException as exc:
                    if exc.status != 409:  # 409: another replica made it
                        raise api_error(exc, f"creating the egress proxy pod {name}") from None
                except Exception as exc:
                    raise api_error(exc, f"creating the egress proxy pod {name}") from None
                continue
            ready = (
                pod.status.phase == "Running"
                and pod.status.pod_ip
                and any(
                    c.ready or (c.state is not None and c.state.running is not None)
                    for c in pod.status.container_statuses or []
                )
            )
            if ready:
                return pod
            if time.monotonic() >= deadline:
                raise SandboxError(
                    ErrorCode.UNAVAILABLE,
                    f"the egress proxy pod {name} is not running after "
                    f"{self.options.egress.start_timeout_s:.0f} s (phase {pod.status.phase})",
                )
            time.sleep(0.2)

    def _install(self, pod: str) -> None:
        """The payload into the proxy pod (its main process waits for it), as into a box."""
        payload = self.provider._payload()
        argv = bootstrap.boot_argv(
            self.options.python,
            "stdio",
            payload.digest,
            AGENT_DIR,
            self.options.http_port,
            payload.agent_sha256,
        )
        stream = self._exec(pod, argv)
        try:
            stream.settimeout(self._timeout)
            bootstrap.install(stream, stream.readline, payload, f"pod {pod}")
            # BOOT now runs a stdio agent on this stream: its first answer says it started,
            # so the files are in place; closing the stream ends it.
            stream.write(p.frame(p.request(0, "info", {})))
            stream.readline(1 << 16)
        finally:
            stream.close()

    def _wait_answering(self, pod: str) -> None:
        deadline = time.monotonic() + self.options.egress.start_timeout_s
        last = ""
        while time.monotonic() < deadline:
            reply, last = self._run_net(
                pod, ["ctl", "--root", PROXY_ROOT, "ping", "--timeout", "2"]
            )
            if reply.get("ok"):
                return
            time.sleep(0.2)
        raise SandboxError(
            ErrorCode.UNAVAILABLE, f"the egress proxy in pod {pod} does not answer: {last}"[:800]
        )

    # -- box policies -----------------------------------------------------------------------

    def set_box(self, sandbox_id: str, ip: str | None, policy: dict[str, Any]) -> None:
        """Make the proxy enforce `policy` for the box pod at `ip` (None: not running)."""
        if ip is None:
            return
        with self._lock:
            self.ensure_proxy()
            self._write(sandbox_id, ip, policy)
            self._written[sandbox_id] = (ip, policy)

    def remove_box(self, sandbox_id: str) -> None:
        with self._lock:
            if self._written.pop(sandbox_id, None) is None or self._proxy_uid is None:
                return
            with contextlib.suppress(SandboxError):  # a gone proxy forgot it anyway
                self._run_checked(["policy", "--root", PROXY_ROOT, "--box", sandbox_id, "--remove"])

    def _write(self, sandbox_id: str, ip: str, policy: dict[str, Any]) -> None:
        argv = ["policy", "--root", PROXY_ROOT, "--box", sandbox_id, "--address", ip]
        self._run_checked([*argv, "--json", json.dumps(policy, sort_keys=True)])

    def _run_checked(self, args: list[str]) -> None:
        pod = proxy_pod_name(self.options)
        reply, text = self._run_net(pod, args)
        if not reply.get("ok"):
            self._checked_until = 0.0  # look at the proxy pod again next time
            raise SandboxError(ErrorCode.UNAVAILABLE, f"the egress proxy refused: {text}"[:800])

    def _run_net(self, pod: str, args: list[str]) -> tuple[dict[str, Any], str]:
        """`agent.pyz --net <args>` in the proxy pod: its JSON reply line (and the text)."""
        argv = [self.options.python, "-I", "-S", AGENT, "--net", *args]
        try:
            stream = self._exec(pod, argv)
        except SandboxError as exc:
            return {}, exc.message
        try:
            stream.settimeout(self._timeout)
            line = stream.readline(1 << 16)  # the answer, not the stream's end (see stream.py)
        except Exception as exc:
            return {}, str(exc)
        finally:
            stream.close()
        text = line.decode("utf-8", "replace").strip() or stream.exit_detail()
        with contextlib.suppress(ValueError):
            reply = json.loads(line)
            if isinstance(reply, dict):
                return reply, text
        return {}, text

    # -- cluster objects --------------------------------------------------------------------

    def _ensure_policies(self) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api: Any = client.NetworkingV1Api(self.provider.core.api_client)
        ns = self.options.namespace
        for body in egress_policies(self.options):
            name = body["metadata"]["name"]
            try:
                try:
                    api.create_namespaced_network_policy(ns, body, _request_timeout=self._timeout)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    api.replace_namespaced_network_policy(
                        name, ns, body, _request_timeout=self._timeout
                    )
            except Exception as exc:
                raise api_error(exc, f"writing the NetworkPolicy {name}") from None

    def teardown(self) -> None:
        """Shutdown: the proxy pod and the owner's policies go (nothing of the owner stays)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        with self._lock:
            self._written.clear()
            self._proxy_uid = self._proxy_ip = None
            self._checked_until = 0.0
        name = proxy_pod_name(self.options)
        with contextlib.suppress(SandboxError):
            self.provider._delete_pod(name)
        if self.options.egress.network_policies:
            api: Any = client.NetworkingV1Api(self.provider.core.api_client)
            for body in egress_policies(self.options):
                with contextlib.suppress(ApiException):
                    api.delete_namespaced_network_policy(
                        body["metadata"]["name"],
                        self.options.namespace,
                        _request_timeout=self._timeout,
                    )
        with contextlib.suppress(SandboxError):
            self.provider._wait_gone({name})

    # -- helpers ----------------------------------------------------------------------------

    @property
    def _timeout(self) -> float:
        return self.options.request_timeout_s

    def _exec(self, pod: str, argv: list[str]) -> Any:
        try:
            return open_exec(
                self.provider._exec_api(),
                self.options.namespace,
                pod,
                PROXY_CONTAINER,
                argv,
                self._timeout,
            )
        except Exception as exc:
            raise SandboxError(
                ErrorCode.UNAVAILABLE, f"exec in the egress proxy pod {pod}: {exc}"[:800]
            ) from None
