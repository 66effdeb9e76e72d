"""Warm pools against a real cluster: claims, isolation, replicas, restart, cleanup."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sandkit_kubernetes.options import KubernetesOptions
from sandkit_kubernetes.provider import KubernetesProvider

from sandkit import ErrorCode, SandboxError, SandboxKey

pytestmark = pytest.mark.kubernetes

Factory = Callable[..., KubernetesProvider]
Owned = Callable[[], list[Any]]
# Far above what starting a few pods takes on a loaded machine; only a failure waits it out.
READY_S = 240.0


def key(name: str) -> SandboxKey:
    return SandboxKey("pool", f"{name}-{uuid.uuid4().hex[:6]}")


def pooled(make_provider: Factory, size: int) -> KubernetesProvider:
    provider = make_provider(warm_pool={"size": size, "refill_interval_s": 0.2})
    assert provider._pool is not None and provider._pool.wait_ready(size, READY_S)
    return provider


def pool_pods(owned: Owned) -> dict[str, str | None]:
    """Pool pods by name, with the sandbox id a claim gave them (None: still in the pool)."""
    return {
        p.metadata.name: (p.metadata.labels or {}).get("sandkit.sandbox-id")
        for p in owned()
        if "sandkit.pool" in (p.metadata.labels or {})
    }


def unclaimed(owned: Owned) -> set[str]:
    return {name for name, claimed in pool_pods(owned).items() if claimed is None}


def test_a_new_thread_claims_a_pool_pod_with_fresh_storage(
    make_provider: Factory, owned: Owned, data_root: Path
) -> None:
    provider = pooled(make_provider, 2)
    before = unclaimed(owned)
    k = key("new")
    box = provider.acquire(k)
    assert box.execute("ls -A /mnt/user-data/workspace /mnt/user-data/outputs").stdout.split() == [
        "/mnt/user-data/outputs:",
        "/mnt/user-data/workspace:",
    ]
    box.write_file("mine.txt", "thread data")
    host = data_root / "users" / k.user_id / "threads" / k.thread_id / "user-data"
    assert (host / "workspace" / "mine.txt").read_text() == "thread data"  # no copy: its dir
    taken = before - unclaimed(owned)
    assert len(taken) == 1, "one pool pod became the key's"
    assert pool_pods(owned)[taken.pop()] == k.sandbox_id
    assert provider.get(k) is box and provider.acquire(k) is box


def test_a_thread_with_data_takes_the_cold_path(
    make_provider: Factory, owned: Owned, data_root: Path
) -> None:
    k = key("old")
    cold = make_provider()
    cold.acquire(k).write_file("old.txt", "kept")
    cold.release(k)  # the pod is gone, the data is not
    provider = pooled(make_provider, 1)
    before = unclaimed(owned)
    assert provider.acquire(k).read_file("old.txt").content == "kept"
    assert unclaimed(owned) == before, "no pool pod is spent on a thread with data"


def test_parallel_acquires_by_two_replicas_claim_distinct_pods(
    make_provider: Factory, owned: Owned
) -> None:
    first = pooled(make_provider, 3)
    second = make_provider(warm_pool={"size": 3, "refill_interval_s": 0.2})
    assert second._pool is not None and second._pool.wait_ready(3, READY_S)  # adopts
    keys = [key(f"replica{i}") for i in range(6)]
    with ThreadPoolExecutor(6) as workers:
        boxes = list(workers.map(lambda i: (first, second)[i % 2].acquire(keys[i]), range(6)))
    for k, box in zip(keys, boxes, strict=True):
        box.write_file(f"{k.thread_id}.txt", "x")
    for k, box in zip(keys, boxes, strict=True):
        assert [e.name for e in box.list_dir().entries] == [f"{k.thread_id}.txt"]
    claims = [sid for sid in pool_pods(owned).values() if sid is not None]
    assert len(claims) == len(set(claims)), "a pool pod served two keys"


def test_one_new_key_acquired_twenty_times_claims_one_pod(
    make_provider: Factory, owned: Owned
) -> None:
    provider = pooled(make_provider, 2)
    k = key("same")
    with ThreadPoolExecutor(20) as workers:
        boxes = list(workers.map(lambda _: provider.acquire(k), range(20)))
    assert len({id(b) for b in boxes}) == 1
    claims = [(p.metadata.labels or {}).get("sandkit.sandbox-id") for p in owned()]
    assert claims.count(k.sandbox_id) == 1


def test_a_restarted_provider_adopts_the_pool_and_its_claims(
    make_provider: Factory, owned: Owned
) -> None:
    first = pooled(make_provider, 2)
    k = key("claimed")
    first.acquire(k).write_file("a.txt", "a")
    assert first._pool is not None and first._pool.wait_ready(2, READY_S)  # refilled
    first._pool.stop()  # and never shut down: a crashed instance
    before = pool_pods(owned)
    again = pooled(make_provider, 2)
    assert pool_pods(owned) == before, "the pool was adopted, not started again"
    box = again.acquire(k)  # the claimed pool pod, found by its labels
    assert box.read_file("a.txt").content == "a"
    assert pool_pods(owned) == before


def test_pool_pods_count_against_max_running_and_make_room(
    make_provider: Factory, owned: Owned
) -> None:
    k_old = key("has-data")
    cold = make_provider()
    cold.acquire(k_old).write_file("a.txt", "a")
    cold.release(k_old)
    provider = make_provider(max_running=2, warm_pool={"size": 4, "refill_interval_s": 0.2})
    assert provider._pool is not None and provider._pool.wait_ready(2, READY_S)
    assert not provider._pool.wait_ready(3, 2.0)  # the cap holds the pool at 2
    assert provider.acquire(k_old).read_file("a.txt").content == "a"  # a pool pod made room
    assert provider.acquire(key("new")).execute("true").exit_code == 0  # claims the other
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("third"))
    assert info.value.code is ErrorCode.CAPACITY
    assert len(owned()) == 2


def test_a_released_claimed_pod_restarts_cold_with_its_data(
    make_provider: Factory, owned: Owned
) -> None:
    provider = pooled(make_provider, 1)
    k = key("release")
    provider.acquire(k).write_file("kept.txt", "kept")
    provider.release(k)
    assert k.sandbox_id not in pool_pods(owned).values()
    again = provider.acquire(k)
    assert again.read_file("kept.txt").content == "kept"


def test_shutdown_leaves_no_pool_pod_and_no_pool_storage(
    make_provider: Factory, owned: Owned, data_root: Path
) -> None:
    provider = pooled(make_provider, 2)
    provider.acquire(key("one"))
    provider.shutdown()
    assert owned() == []
    pool_dirs = data_root / ".sandkit" / "pool"
    assert not pool_dirs.exists() or all(not any(d.iterdir()) for d in pool_dirs.iterdir())


def test_a_pool_needs_storage_the_provider_can_rename() -> None:
    with pytest.raises(ValidationError, match="warm_pool needs storage hostPath"):
        KubernetesOptions(storage="pvc", warm_pool={"size": 2})
    with pytest.raises(ValidationError, match="warm_pool needs storage hostPath"):
        KubernetesOptions(prepare_host_dirs=False, warm_pool={"size": 2})


def test_a_replica_with_other_settings_leaves_a_pod_being_claimed_alone(
    make_provider: Factory, owned: Owned, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rolling update: the new replica removes pool pods made with the old settings,
    while an old replica may be claiming one. A claim moves the pod's storage first and
    labels the pod after; a removal in between used to delete the key's new pod. Now a
    removal retires the storage first, by the same atomic rename, and one of the two wins:
    here the claim, and the pod stays the key's."""
    from sandkit_kubernetes import provider as module

    old = pooled(make_provider, 1)
    new = make_provider(env={"SANDKIT_ROLLOUT": "2"})  # another pod spec: the pool is stale
    claim_storage = module.claim_storage

    def new_replica_runs_between(settings: Any, owner: str, slot: str, target: Any) -> Any:
        moved = claim_storage(settings, owner, slot, target)
        assert new._pool_slots() == [], "a pod whose storage moved is in no one's pool"
        new._pool_remove(slot)  # as if its round had listed the pod a moment before
        return moved

    monkeypatch.setattr(module, "claim_storage", new_replica_runs_between)
    before = unclaimed(owned)
    k = key("rollout")
    box = old.acquire(k)
    monkeypatch.undo()
    assert len(before) == 1 and pool_pods(owned).get(before.pop()) == k.sandbox_id
    assert box.execute("echo ok").stdout == "ok\n"
