"""Lifecycle against a real cluster: one pod per key, adoption, deletion, capacity, cleanup."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from k8s_support import NAMESPACE, SESSION, exec_in, in_ci, session_pods
from sandkit_kubernetes.provider import KubernetesProvider

from sandkit import ErrorCode, SandboxError, SandboxKey, Settings, create_provider

pytestmark = pytest.mark.kubernetes

Owned = Callable[[], list[Any]]
Factory = Callable[..., KubernetesProvider]


def key(name: str) -> SandboxKey:
    return SandboxKey("lifecycle", name)


def pods_of(core: Any, k: SandboxKey) -> list[Any]:
    found = core.list_namespaced_pod(NAMESPACE, label_selector=f"sandkit.sandbox-id={k.sandbox_id}")
    return [p for p in found.items if p.metadata.deletion_timestamp is None]


def wait_gone(core: Any, name: str, timeout: float = 30) -> None:
    """Until the pod object is gone (its containers are dead by then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = core.list_namespaced_pod(NAMESPACE, field_selector=f"metadata.name={name}")
        if not found.items:
            return
        time.sleep(0.2)
    raise AssertionError(f"pod {name} still exists after {timeout} s")


def host_file(data_root: Path, k: SandboxKey, rel: str) -> Path:
    return data_root / "users" / k.user_id / "threads" / k.thread_id / "user-data" / rel


def test_twenty_parallel_acquires_of_one_key_make_one_pod(
    make_provider: Factory, owned: Owned, core: Any
) -> None:
    # Two instances with one owner stand in for two replicas: the loser of the
    # create race (409) adopts the winner's pod.
    first, second = make_provider(), make_provider()
    k = key("parallel")
    with ThreadPoolExecutor(20) as pool:
        boxes = list(pool.map(lambda i: (first if i % 2 else second).acquire(k), range(20)))
    assert len({id(b) for b in boxes}) == 2  # one sandbox object per provider
    assert len(owned()) == 1
    assert len(pods_of(core, k)) == 1
    for box in boxes:
        assert box.execute("echo ok").stdout == "ok\n"


def test_release_deletes_the_pod_and_keeps_the_data(
    provider: KubernetesProvider, core: Any, data_root: Path
) -> None:
    k = key("release")
    held = provider.acquire(k)
    held.write_file("state.txt", "before release\n")
    provider.release(k)
    assert pods_of(core, k) == []
    assert provider.get(k) is None
    with pytest.raises(SandboxError) as info:
        held.read_file("state.txt")
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert host_file(data_root, k, "workspace/state.txt").read_text() == "before release\n"
    again = provider.acquire(k)
    assert again.read_file("state.txt").content == "before release\n"


@pytest.mark.parametrize("carrier", ["stdio", "http"])
def test_a_pod_deleted_behind_our_back_is_unavailable_then_recreated_with_the_data(
    make_provider: Factory, core: Any, carrier: str
) -> None:
    provider = make_provider(carrier=carrier)
    k = key(f"deleted-{carrier}")
    box = provider.acquire(k)
    box.write_file("precious.txt", "intact\n")
    (old,) = pods_of(core, k)
    core.delete_namespaced_pod(old.metadata.name, NAMESPACE)
    wait_gone(core, old.metadata.name)
    with pytest.raises(SandboxError) as info:
        box.read_file("precious.txt")
    assert info.value.code is ErrorCode.UNAVAILABLE
    again = provider.acquire(k)
    assert again.read_file("precious.txt").content == "intact\n"
    (new,) = pods_of(core, k)
    assert new.metadata.uid != old.metadata.uid
    # The handle held from before follows the key's new pod.
    assert box.read_file("precious.txt").content == "intact\n"


def test_a_new_provider_adopts_the_running_pod(make_provider: Factory, core: Any) -> None:
    k = key("adopt")
    make_provider().acquire(k).write_file("kept.txt", "from the first provider\n")
    (before,) = pods_of(core, k)
    second = make_provider()  # a restarted process: empty memory, same owner
    assert second.get(k) is not None, "get() should find the running pod"
    assert second.acquire(k).read_file("kept.txt").content == "from the first provider\n"
    (after,) = pods_of(core, k)
    assert after.metadata.uid == before.metadata.uid, "adoption must not recreate the pod"


def test_http_replicas_with_a_token_secret_share_the_agent(make_provider: Factory) -> None:
    options = {"carrier": "http", "token_secret": "a-shared-secret-of-the-deployment"}
    k = key("http-adopt")
    first = make_provider(**options).acquire(k)
    pid = first.info()["pid"]
    second = make_provider(**options).acquire(k)
    assert second.info()["pid"] == pid, "the second replica must reuse the running agent"
    assert first.info()["pid"] == pid, "and must not lock the first one out"


def test_owners_do_not_adopt_each_others_pods(make_provider: Factory, core: Any) -> None:
    k = key("owners")
    ours = make_provider()
    theirs = make_provider(owner=ours.options.owner + "-other")
    ours.acquire(k)
    theirs.acquire(k)
    assert len(pods_of(core, k)) == 2
    theirs.shutdown()
    (left,) = pods_of(core, k)
    assert left.metadata.labels["sandkit.owner"] == ours.options.owner


def test_shutdown_leaves_no_pod_even_after_a_crashed_instance(
    make_provider: Factory, owned: Owned
) -> None:
    crashed = make_provider()
    for name in ("a", "b"):
        crashed.acquire(key(f"shutdown-{name}"))  # never shut down: its process "died"
    fresh = make_provider()
    fresh.shutdown()
    assert owned() == []


def test_reap_idle_releases_only_idle_boxes(provider: KubernetesProvider, core: Any) -> None:
    idle, busy = key("idle"), key("busy")
    provider.acquire(idle)
    busy_box = provider.acquire(busy)
    time.sleep(0.3)
    running = threading.Thread(target=busy_box.execute, args=("sleep 2",))
    running.start()
    time.sleep(0.3)
    try:
        assert provider.reap_idle(0.2) == [idle]
    finally:
        running.join()
    assert pods_of(core, idle) == []
    assert len(pods_of(core, busy)) == 1


def test_a_dead_agent_is_replaced_transparently(provider: KubernetesProvider, core: Any) -> None:
    box = provider.acquire(key("agent-crash"))
    box.write_file("f.txt", "kept\n")
    old_pid = box.info()["pid"]
    exec_in(core, box.pod_name, ["sh", "-c", f"kill -9 {old_pid}"])
    assert box.read_file("f.txt").content == "kept\n"
    assert box.info()["pid"] != old_pid
    assert provider.acquire(key("agent-crash")) is box


def box_without_agent(provider: KubernetesProvider, core: Any, name: str) -> tuple[Any, int]:
    """A box whose agent was killed behind the provider's back, and the dead agent's pid:
    its next call starts a new agent through a fresh exec."""
    box = provider.acquire(key(name))
    old_pid = box.info()["pid"]
    exec_in(core, box.pod_name, ["sh", "-c", f"kill -9 {old_pid}"])
    return box, old_pid


def test_an_exec_that_fails_without_a_status_is_retried_once(
    provider: KubernetesProvider, core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A loaded API server sometimes breaks an exec's connection before any HTTP status
    # (a TLS error, seen in CI): nothing started in the pod, so the exec is tried again.
    # The fault is injected into the kubernetes client; the retry and the agent are real.
    import kubernetes.stream
    from kubernetes.client.exceptions import ApiException

    box, old_pid = box_without_agent(provider, core, "exec-retry")
    real, calls = kubernetes.stream.stream, []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["command"])
        if len(calls) == 1:
            raise ApiException(status=0, reason="[SSL: WRONG_VERSION_NUMBER] wrong version number")
        return real(*args, **kwargs)

    monkeypatch.setattr(kubernetes.stream, "stream", flaky)
    assert box.info()["pid"] != old_pid  # a new agent, started on the second try
    assert len(calls) == 2 and calls[0] == calls[1]

    def refused(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["command"])
        raise ApiException(status=403, reason="pods/exec is forbidden")

    monkeypatch.setattr(kubernetes.stream, "stream", real)
    exec_in(core, box.pod_name, ["sh", "-c", f"kill -9 {box.info()['pid']}"])
    calls.clear()
    monkeypatch.setattr(kubernetes.stream, "stream", refused)
    with pytest.raises(SandboxError) as info:
        box.info()
    assert info.value.code is ErrorCode.UNAVAILABLE and "RBAC" in info.value.message
    assert len(calls) == 1  # a refusal with a status is not retried


# Waits for its stdin to end, saying nothing: an exec whose bootstrap never greets.
SILENT = "import sys; sys.stdin.buffer.read()  # silent-boot"


def test_an_exec_that_never_greets_is_started_again(
    provider: KubernetesProvider, core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seen under load: an exec opened and then no byte came until the handshake timeout.
    # It is closed (its process ends at stdin EOF) and the bootstrap started once more.
    # The silence is injected (the first exec runs a silent program); the rest is real.
    import sandkit_kubernetes.provider as module

    box, old_pid = box_without_agent(provider, core, "no-greeting")
    real, calls = module.open_exec, []

    def silent_first(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[4])
        if len(calls) == 1:
            args = (*args[:4], ["python3", "-c", SILENT], *args[5:])
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "GREETING_TIMEOUT_S", 2.0)
    monkeypatch.setattr(module, "open_exec", silent_first)
    assert box.info()["pid"] != old_pid  # a new agent, from the second exec
    assert len(calls) == 2 and calls[0] == calls[1]
    find = ["sh", "-c", "grep -l silent-boo[t] /proc/[0-9]*/cmdline 2>/dev/null | wc -l"]
    deadline = time.monotonic() + 60
    while exec_in(core, box.pod_name, find).strip() != "0":
        assert time.monotonic() < deadline, "the silent exec's process outlived its stream"
        time.sleep(0.5)


def test_changed_settings_recreate_the_pod(make_provider: Factory, core: Any) -> None:
    k = key("respec")
    make_provider(termination_grace_s=1).acquire(k).write_file("x.txt", "x\n")
    (old,) = pods_of(core, k)
    box = make_provider(termination_grace_s=0).acquire(k)
    (new,) = pods_of(core, k)
    assert new.metadata.uid != old.metadata.uid
    assert new.spec.termination_grace_period_seconds == 0
    assert box.read_file("x.txt").content == "x\n"


def test_missing_image_is_unavailable_and_leaves_no_pod(
    make_provider: Factory, owned: Owned
) -> None:
    provider = make_provider(image="docker.io/sandkit/does-not-exist:never")
    start = time.monotonic()
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("no-image"))
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "does-not-exist:never" in info.value.message
    assert "ErrImageNeverPull" in info.value.message
    assert time.monotonic() - start < 30
    assert owned() == []


def test_unschedulable_pod_is_capacity_after_a_bounded_wait(
    make_provider: Factory, owned: Owned
) -> None:
    provider = make_provider(
        resources={"requests": {"memory": "100Ti"}, "limits": {"memory": "100Ti"}},
        schedule_timeout_s=2,
    )
    start = time.monotonic()
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("huge"))
    assert info.value.code is ErrorCode.CAPACITY
    assert "Insufficient memory" in info.value.message
    assert time.monotonic() - start < 20
    assert owned() == []


def test_quota_refusal_is_capacity(make_provider: Factory, core: Any) -> None:
    from kubernetes import client

    quota_ns = f"sandkit-test-{SESSION}-quota"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=quota_ns)))
    try:
        core.create_namespaced_resource_quota(
            quota_ns,
            client.V1ResourceQuota(
                metadata=client.V1ObjectMeta(name="no-pods"),
                spec=client.V1ResourceQuotaSpec(hard={"pods": "0"}),
            ),
        )
        provider = make_provider(namespace=quota_ns)
        with pytest.raises(SandboxError) as info:
            provider.acquire(key("quota"))
        assert info.value.code is ErrorCode.CAPACITY
        assert "quota" in info.value.message
    finally:
        core.delete_namespace(quota_ns)


def test_max_running_is_capacity(make_provider: Factory) -> None:
    provider = make_provider(max_running=1)
    provider.acquire(key("cap-1"))
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("cap-2"))
    assert info.value.code is ErrorCode.CAPACITY
    provider.release(key("cap-1"))
    provider.acquire(key("cap-2"))


def test_unreachable_api_is_unavailable(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\n"
        "users: [{name: x, user: {token: t}}]\n"
    )
    settings = Settings(
        data_root=tmp_path,
        providers={"kubernetes": {"kubeconfig": str(config), "request_timeout_s": 3}},
    )
    with pytest.raises(SandboxError) as info:
        KubernetesProvider(settings).acquire(key("no-api"))
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "unreachable" in info.value.message


def test_registered_as_the_kubernetes_entry_point(tmp_path: Path) -> None:
    from sandkit.provider import available_providers

    if "kubernetes" not in available_providers():
        reason = "sandkit-kubernetes is not installed (pip install -e providers/sandkit-kubernetes)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    assert isinstance(
        create_provider("kubernetes", Settings(data_root=tmp_path)), KubernetesProvider
    )


def test_zz_no_pod_of_this_session_is_left(core: Any) -> None:
    """Every test above shut its providers down; nothing of ours keeps running."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [p.metadata.name for p in session_pods(core)]
        if not left:
            break
        time.sleep(0.5)
    assert left == []
