"""Options, the pod spec, and the in-pod programs (BOOT, INIT) run locally: no cluster needed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sandkit_kubernetes.options import KubernetesOptions
from sandkit_kubernetes.spec import deep_merge, label_value, pod_manifest

from sandkit import ErrorCode, SandboxError, SandboxKey, Settings
from sandkit.agent import protocol as p
from sandkit.boxkit import Payload, build_payload
from sandkit.boxkit import bootstrap as boot
from sandkit.paths import WORKSPACE, Mount, PathMapping, ThreadLayout
from sandkit.transports.http import HttpTransport

KEY = SandboxKey("alice", "thread-1")


def manifest(settings: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    s = Settings(data_root="/srv/data", providers={"kubernetes": options}, **(settings or {}))
    return pod_manifest(KubernetesOptions.from_settings(s), ThreadLayout.for_key(s, KEY))


def container(m: dict[str, Any]) -> dict[str, Any]:
    (c,) = m["spec"]["containers"]
    return c


# -- options ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"owner": "Upper"},
        {"owner": "x" * 40},
        {"uid": 0},
        {"namespace": "not_a_label"},
        {"carrier": "grpc"},
        {"schedule_timeout_s": 100, "start_timeout_s": 10},
        {"hide_paths": ["relative"]},
        {"pvc_mount_path": "relative"},
        {"unknown": 1},
    ],
)
def test_invalid_options_are_invalid_argument(bad: dict[str, Any]) -> None:
    with pytest.raises(SandboxError) as info:
        KubernetesOptions.from_settings(Settings(providers={"kubernetes": bad}))
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_root_only_when_allowed() -> None:
    options = KubernetesOptions.from_settings(
        Settings(providers={"kubernetes": {"uid": 0, "allow_root": True}})
    )
    m = pod_manifest(options, ThreadLayout.for_key(Settings(data_root="/d"), KEY))
    assert m["spec"]["securityContext"]["runAsNonRoot"] is False


# -- pod spec -------------------------------------------------------------------------------


def test_default_pod_is_hardened_and_labelled() -> None:
    m = manifest()
    spec = m["spec"]
    assert m["metadata"]["name"] == f"sandkit-{KEY.sandbox_id}"
    assert m["metadata"]["labels"]["sandkit.sandbox-id"] == KEY.sandbox_id
    assert m["metadata"]["labels"]["sandkit.user"] == "alice"
    assert m["metadata"]["labels"]["sandkit.thread"] == "thread-1"
    assert m["metadata"]["labels"]["sandkit.owner"] == "sandkit"
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    security = container(m)["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert container(m)["resources"]["limits"]["memory"] == "1Gi"


def test_host_path_storage_mounts_the_thread_dirs_at_the_virtual_paths() -> None:
    m = manifest({"skills_dir": "/srv/skills"})
    mounts = {v["mountPath"]: v for v in container(m)["volumeMounts"]}
    volumes = {v["name"]: v for v in m["spec"]["volumes"]}
    base = "/srv/data/users/alice/threads/thread-1/user-data"
    for virtual, sub, read_only in (
        ("/mnt/user-data/workspace", "workspace", False),
        ("/mnt/user-data/uploads", "uploads", True),
        ("/mnt/user-data/outputs", "outputs", False),
    ):
        assert mounts[virtual]["readOnly"] is read_only
        assert volumes[mounts[virtual]["name"]]["hostPath"]["path"] == f"{base}/{sub}"
    assert mounts["/mnt/skills"]["readOnly"] is True
    assert mounts["/tmp"]["name"] == "tmp" and "emptyDir" in volumes["tmp"]
    assert "emptyDir" in volumes[mounts["/opt/sandkit"]["name"]]


def test_host_path_root_is_the_nodes_view_of_the_data_root() -> None:
    m = manifest(host_path_root="/mnt/node-data")
    paths = [v["hostPath"]["path"] for v in m["spec"]["volumes"] if "hostPath" in v]
    assert all(p.startswith("/mnt/node-data/users/alice/") for p in paths)


def test_pvc_storage_uses_sub_paths_and_an_init_container() -> None:
    m = manifest(storage="pvc", pvc_claim_name="thread-data-claim")
    mounts = {v["mountPath"]: v for v in container(m)["volumeMounts"]}
    sub = "users/alice/threads/thread-1/user-data"
    assert mounts["/mnt/user-data/workspace"]["subPath"] == f"{sub}/workspace"
    assert mounts["/mnt/user-data/uploads"] == {
        "mountPath": "/mnt/user-data/uploads",
        "readOnly": True,
        "name": "thread-data",
        "subPath": f"{sub}/uploads",
    }
    claims = [v for v in m["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [
        {"name": "thread-data", "persistentVolumeClaim": {"claimName": "thread-data-claim"}}
    ]
    (init,) = m["spec"]["initContainers"]
    assert init["securityContext"]["runAsUser"] == 1000
    assert init["command"][-1].endswith(sub)


def test_pvc_uploads_go_below_the_claim_as_mounted_here_or_are_refused(tmp_path: Path) -> None:
    from sandkit_kubernetes.provider import KubernetesProvider  # no cluster: nothing is called

    def provider(**options: Any) -> KubernetesProvider:
        kubernetes = {"storage": "pvc", "reap_interval_s": 0, **options}
        return KubernetesProvider(
            Settings(data_root=tmp_path / "data", providers={"kubernetes": kubernetes})
        )

    with pytest.raises(SandboxError) as refused:
        provider().upload(KEY, "a.txt", b"x")
    assert refused.value.code is ErrorCode.UNAVAILABLE and "pvc_mount_path" in refused.value.message
    claim = tmp_path / "claim"
    claim.mkdir()
    provider(pvc_mount_path=str(claim)).upload(KEY, "a.txt", b"x")
    sub = claim / "users/alice/threads/thread-1/user-data/uploads/a.txt"
    assert sub.read_bytes() == b"x" and not (tmp_path / "data").exists()


def test_http_carrier_declares_the_agent_port() -> None:
    assert container(manifest(carrier="http", http_port=9000))["ports"] == [
        {"name": "agent", "containerPort": 9000}
    ]
    assert "ports" not in container(manifest())


def test_spec_digest_follows_the_settings() -> None:
    one = manifest()["metadata"]["annotations"]["sandkit.spec"]
    assert manifest()["metadata"]["annotations"]["sandkit.spec"] == one
    assert manifest(image="other:1")["metadata"]["annotations"]["sandkit.spec"] != one


def test_pod_template_cannot_change_identity() -> None:
    m = manifest(pod_template={"metadata": {"name": "evil", "labels": {"sandkit.owner": "x"}}})
    assert m["metadata"]["name"] == f"sandkit-{KEY.sandbox_id}"
    assert m["metadata"]["labels"]["sandkit.owner"] == "sandkit"


def test_deep_merge_semantics() -> None:
    base = {
        "a": {"b": 1, "c": 2},
        "named": [{"name": "x", "v": 1, "w": 1}, {"name": "y", "v": 2}],
        "plain": [1, 2],
    }
    override = {
        "a": {"c": None, "d": 4},
        "named": [{"name": "x", "v": 10}, {"name": "z", "v": 3}],
        "plain": [3],
    }
    assert deep_merge(base, override) == {
        "a": {"b": 1, "d": 4},
        "named": [{"name": "x", "v": 10, "w": 1}, {"name": "y", "v": 2}, {"name": "z", "v": 3}],
        "plain": [3],
    }
    assert base["a"] == {"b": 1, "c": 2}, "the base is not modified"


def test_label_values() -> None:
    assert label_value("thread-1") == "thread-1"
    for odd in ("ends-with-dash-", "a" * 64, "user.", "_x"):
        value = label_value(odd)
        assert value.startswith("h-") and len(value) <= 63
        assert label_value(odd) == value


# -- BOOT and INIT, run with this machine's python ----------------------------------------------


def workspace_mapping(root: Path) -> PathMapping:
    return PathMapping([Mount(WORKSPACE, str(root), False)], WORKSPACE)


def start_boot(home: Path, mode: str, payload: Payload, port: int = 0) -> subprocess.Popen[bytes]:
    argv = boot.boot_argv(
        sys.executable, mode, payload.digest, str(home), port, payload.agent_sha256
    )
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def line_of(proc: subprocess.Popen[bytes]) -> bytes:
    assert proc.stdout is not None
    return proc.stdout.readline()


def test_boot_installs_the_payload_once_then_becomes_the_agent(tmp_path: Path) -> None:
    payload = build_payload(True)
    for expected_have, send in ((b"-", payload.archive), (payload.digest.encode(), b"")):
        proc = start_boot(tmp_path, "stdio", payload)
        assert proc.stdin is not None
        assert line_of(proc) == boot.BOOT_MAGIC + expected_have + b"\n"
        proc.stdin.write(boot.frame(send))
        config = p.agent_config(workspace_mapping(tmp_path))
        proc.stdin.write(p.frame(p.request(1, "initialize", config)))
        proc.stdin.flush()
        answer = json.loads(line_of(proc))
        assert answer["id"] == 1 and "protocol_version" in answer["result"]
        proc.stdin.close()
        assert proc.wait(10) == 0
    assert (tmp_path / "agent.pyz").is_file()
    assert os.access(tmp_path / "bin" / "rg", os.X_OK) == payload.has_rg


def test_boot_never_runs_an_agent_a_command_replaced(tmp_path: Path) -> None:
    """The installed files belong to the sandbox user: a swapped agent.pyz is not run.

    Commands can write the agent directory, so a replaced agent would be handed
    the initialize config (the secrets to redact) at the next channel start.
    BOOT finds the mismatch, asks for the payload again and runs the checked
    bytes from a sealed memory file, not from the path.
    """
    payload = build_payload(False)
    proc = start_boot(tmp_path, "stdio", payload)
    assert proc.stdin is not None
    line_of(proc)
    proc.stdin.write(boot.frame(payload.archive))
    proc.stdin.close()
    proc.wait(10)  # installed; the agent ends on EOF
    stolen = tmp_path / "stolen"
    evil = tmp_path / "evil.pyz"
    with zipfile.ZipFile(evil, "w") as archive:
        archive.writestr("__main__.py", f"open({str(stolen)!r}, 'w').write('ran')\n")
    os.replace(evil, tmp_path / "agent.pyz")  # .digest still names the right version

    proc = start_boot(tmp_path, "stdio", payload)
    assert proc.stdin is not None
    assert line_of(proc) == boot.BOOT_MAGIC + b"-\n"  # not taken for installed
    proc.stdin.write(boot.frame(payload.archive))
    config = p.agent_config(workspace_mapping(tmp_path))
    proc.stdin.write(p.frame(p.request(1, "initialize", config)))
    proc.stdin.flush()
    answer = json.loads(line_of(proc))
    assert answer["id"] == 1 and "protocol_version" in answer["result"]
    # The agent runs from a sealed copy: replacing the file again changes nothing.
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
    assert any(arg.startswith(b"/proc/self/fd/") for arg in cmdline), cmdline
    proc.stdin.close()
    assert proc.wait(10) == 0
    assert not stolen.exists()


def test_boots_installing_at_once_all_become_agents(tmp_path: Path) -> None:
    """Acquires from two provider replicas open channels into one pod at the same time."""
    payload = build_payload(True)  # with rg: a long write, so the installs overlap
    procs = [start_boot(tmp_path, "stdio", payload) for _ in range(4)]
    for proc in procs:
        assert line_of(proc) == boot.BOOT_MAGIC + b"-\n"
    config = p.agent_config(workspace_mapping(tmp_path))
    message = boot.frame(payload.archive) + p.frame(p.request(1, "initialize", config))

    def send(proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(message)
        proc.stdin.flush()

    with ThreadPoolExecutor(len(procs)) as pool:
        list(pool.map(send, procs))
    for proc in procs:
        answer = json.loads(line_of(proc))
        assert answer["id"] == 1 and "protocol_version" in answer["result"], answer
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(10) == 0
    assert sorted(os.listdir(tmp_path / "bin")) == ["rg"]  # no temporary file left


def test_boot_refuses_a_payload_that_does_not_match(tmp_path: Path) -> None:
    """Nothing unchecked runs, even when the archive itself is not what was promised."""
    payload = build_payload(False)
    wrong = Payload(payload.archive, payload.digest, payload.has_rg, "0" * 64)
    proc = start_boot(tmp_path, "stdio", wrong)
    assert proc.stdin is not None
    line_of(proc)
    proc.stdin.write(boot.frame(payload.archive))
    proc.stdin.flush()
    assert line_of(proc).startswith(boot.FAILED)
    assert proc.wait(10) == 7


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_boot_starts_a_detached_http_agent_and_replaces_it(tmp_path: Path) -> None:
    payload = build_payload(False)
    port = free_port()
    config = p.agent_config(workspace_mapping(tmp_path))
    pids = []
    try:
        for token in ("first-token-0123456789", "second-token-0123456789"):
            proc = start_boot(tmp_path, "http", payload, port)
            assert proc.stdin is not None
            line_of(proc)
            proc.stdin.write(boot.frame(payload.archive))
            proc.stdin.write(boot.frame(json.dumps({"config": config, "token": token}).encode()))
            proc.stdin.flush()
            ready = line_of(proc)
            assert ready.startswith(boot.READY), ready
            pids.append(int(ready.split()[-1]))
            assert proc.wait(10) == 0
            transport = HttpTransport(f"http://127.0.0.1:{port}", token)
            transport.call("ping", {}, 5)
            transport.close()
        # The second start replaced the first agent; its token files are gone.
        assert not Path(f"/proc/{pids[0]}").exists() or _zombie(pids[0])
        assert not (tmp_path / "http" / "token").exists()
        stale = HttpTransport(f"http://127.0.0.1:{port}", "first-token-0123456789")
        with pytest.raises(SandboxError) as info:
            stale.call("ping", {}, 5)
        assert info.value.code is ErrorCode.ACCESS_DENIED
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_init_exits_at_once_on_sigterm() -> None:
    proc = subprocess.Popen([sys.executable, "-I", "-c", boot.INIT])
    time.sleep(0.3)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(5) == 0
    assert time.monotonic() - start < 1


def test_agent_probe_prints_its_verdict_for_a_live_and_a_gone_agent() -> None:
    """The watch's probe (run in the pod) answers on stdout, so a verdict never waits for
    the probe's exec stream to end."""
    from sandkit_kubernetes.provider import _AGENT_RUNS, _AGENT_RUNS_LINE

    def verdict(pid: int) -> bytes:
        argv = [sys.executable, "-I", "-c", _AGENT_RUNS, str(pid)]
        return subprocess.run(argv, capture_output=True, check=True, timeout=60).stdout

    agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--stdio"])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert verdict(agent.pid) == _AGENT_RUNS_LINE
        assert verdict(other.pid) not in (_AGENT_RUNS_LINE, b"")
    finally:
        for proc in (agent, other):
            proc.kill()
            proc.wait()
    assert verdict(agent.pid) not in (_AGENT_RUNS_LINE, b"")  # gone (reaped)


def test_the_egress_proxy_pod_is_hardened_and_not_a_box() -> None:
    from sandkit_kubernetes.spec import (
        LABEL_EGRESS_PROXY,
        LABEL_OWNER,
        egress_policies,
        proxy_manifest,
        spec_digest,
    )

    s = Settings(
        data_root="/srv/data",
        providers={"kubernetes": {"owner": "acme", "egress": {"ceiling": {"mode": "open"}}}},
    )
    options = KubernetesOptions.from_settings(s)
    m = proxy_manifest(options, {"hosts": {}})
    assert m["metadata"]["name"] == "acme-egress"
    assert m["metadata"]["labels"][LABEL_EGRESS_PROXY] == "acme"
    assert LABEL_OWNER not in m["metadata"]["labels"]  # the kit's sweeps never see it
    (c,) = m["spec"]["containers"]
    security = c["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]} and security["readOnlyRootFilesystem"]
    assert m["spec"]["automountServiceAccountToken"] is False
    assert spec_digest(m) == spec_digest(proxy_manifest(options, {"hosts": {}}))
    assert spec_digest(m) != spec_digest(
        proxy_manifest(options, {"hosts": {"a.test": ["10.0.0.1"]}})
    )
    boxes, proxy = egress_policies(options)
    port = [{"protocol": "TCP", "port": options.egress.proxy_port}]
    assert boxes["spec"] == {
        "podSelector": {"matchLabels": {LABEL_OWNER: "acme"}},
        "policyTypes": ["Egress"],
        "egress": [
            {"to": [{"podSelector": {"matchLabels": {LABEL_EGRESS_PROXY: "acme"}}}], "ports": port}
        ],
    }
    assert proxy["spec"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {LABEL_OWNER: "acme"}}}], "ports": port}
    ]
    assert proxy["spec"]["policyTypes"] == ["Ingress"]  # its own way out is the namespace's


def _event(reason: str, kind: str = "Warning", count: int = 1, uid: str = "e1") -> Any:
    from types import SimpleNamespace

    meta = SimpleNamespace(uid=uid, name=uid)
    return SimpleNamespace(type=kind, reason=reason, message="m", count=count, metadata=meta)


def test_a_start_failure_event_is_a_verdict_only_once_it_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kubelet retries a mount: one FailedMount a retry clears (seen in CI: the node
    authorizer did not know the pod yet) must not fail the start; a failure repeated by
    the retry, or one that stands EVENT_FAILURE_GRACE_S, does; progress after it does not."""
    from types import SimpleNamespace

    from sandkit_kubernetes import provider as kube

    events: list[Any] = []
    stub = SimpleNamespace(_events=lambda pod: events)

    def failure(seen: dict[str, float]) -> str:
        return kube.KubernetesProvider._event_failure(stub, None, seen)  # type: ignore[arg-type]

    events[:] = [_event("Scheduled", "Normal"), _event("FailedMount")]
    seen: dict[str, float] = {}
    assert failure(seen) == ""  # first sight: the retry may clear it
    events[:] = [_event("FailedMount", count=2)]
    assert failure(seen) == "FailedMount: m"  # the retry failed again
    events[:] = [_event("FailedMount"), _event("Pulled", "Normal", uid="e2")]
    assert failure({}) == ""  # the kubelet moved on after it
    clock = [1000.0]
    monkeypatch.setattr(kube.time, "monotonic", lambda: clock[0])
    events[:] = [_event("FailedCreatePodSandBox", uid="e3")]
    seen = {}
    assert failure(seen) == ""
    clock[0] += kube.EVENT_FAILURE_GRACE_S / 2
    events[:] = [_event("FailedMount", uid="e4")]  # another failure, not a repeat: no progress
    assert failure(seen) == ""
    clock[0] += kube.EVENT_FAILURE_GRACE_S / 2
    assert failure(seen) == "FailedMount: m"  # failures stood the grace: no retry cleared them
