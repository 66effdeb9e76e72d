"""Warm pools against a real engine: claims, isolation, replicas, restart, capacity, cleanup."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sandkit_docker.provider import DockerProvider

from sandkit import ErrorCode, SandboxError, SandboxKey
from sandkit.boxkit import storage_identity
from sandkit.boxkit.pool import CLAIM_QUIET_S

pytestmark = pytest.mark.docker

Factory = Callable[..., DockerProvider]
# Far above what starting a few boxes takes on a loaded machine; only a failure waits it out.
READY_S = 180.0


def key(name: str) -> SandboxKey:
    return SandboxKey("pool", f"{name}-{uuid.uuid4().hex[:6]}")


def pooled(make_provider: Factory, size: int, **options: Any) -> DockerProvider:
    provider = make_provider(warm_pool={"size": size, "refill_interval_s": 0.2}, **options)
    assert provider._pool is not None and provider._pool.wait_ready(size, READY_S)
    return provider


def pool_names(owned: Callable[[], list[Any]]) -> set[str]:
    """The pool boxes still in the pool: running, their storage not claimed by a key (a
    claimed box keeps its pool name and labels; its storage is the key's thread dir)."""
    return {
        c.name
        for c in owned()
        if "-pool-" in c.name and c.status == "running" and pool_storage(c).exists()
    }


def pool_storage(container: Any) -> Path:
    for mount in container.attrs["Mounts"]:
        if mount["Destination"] == "/mnt/user-data/workspace":
            return Path(mount["Source"]).parent
    raise AssertionError(f"{container.name} has no workspace mount")


def boxes_of(owned: Callable[[], list[Any]], k: SandboxKey, data_root: Path) -> list[Any]:
    """The containers that hold the key's thread dir: named for it, or the pool box whose
    storage it is (found the way a provider finds it, by the storage label)."""
    thread_dir = data_root / "users" / k.user_id / "threads" / k.thread_id / "user-data"
    storage = storage_identity(thread_dir)
    assert storage is not None
    return [
        c
        for c in owned()
        if c.name.endswith(k.sandbox_id) or c.labels.get("sandkit.pool.storage") == storage
    ]


def container_id(provider: DockerProvider, k: SandboxKey) -> str:
    attrs = provider._inspect(k)
    assert attrs is not None
    return str(attrs["Id"])


def test_a_new_thread_claims_a_fresh_pool_box(
    make_provider: Factory, owned: Callable[[], list[Any]], data_root: Path
) -> None:
    provider = pooled(make_provider, 2)
    before = pool_names(owned)
    ready = {c.id for c in owned() if c.name in before}
    k = key("new")
    box = provider.acquire(k)
    assert box.sandbox_id == k.sandbox_id
    assert box.execute("ls -A /mnt/user-data/workspace /mnt/user-data/outputs").stdout.split() == [
        "/mnt/user-data/outputs:",
        "/mnt/user-data/workspace:",
    ]
    box.write_file("mine.txt", "thread data")
    host = data_root / "users" / k.user_id / "threads" / k.thread_id / "user-data"
    assert (host / "workspace" / "mine.txt").read_text() == "thread data"  # no copy: its dir
    assert len(before - pool_names(owned)) == 1, "one pool box became the key's"
    assert [c.id for c in boxes_of(owned, k, data_root)] == [container_id(provider, k)]
    assert container_id(provider, k) in ready
    assert provider.get(k) is box and provider.acquire(k) is box


def test_a_thread_with_data_takes_the_cold_path(
    make_provider: Factory, owned: Callable[[], list[Any]], data_root: Path
) -> None:
    k = key("old")
    cold = make_provider()
    cold.acquire(k).write_file("old.txt", "kept")
    cold.destroy(k)  # the box is gone, the data is not
    provider = pooled(make_provider, 2)
    before = pool_names(owned)
    box = provider.acquire(k)
    assert box.read_file("old.txt").content == "kept"
    assert pool_names(owned) == before, "no pool box is spent on a thread with data"


def test_pool_boxes_never_serve_two_keys_and_keys_see_nothing_of_each_other(
    make_provider: Factory,
) -> None:
    provider = pooled(make_provider, 4)
    keys = [key(f"iso{i}") for i in range(8)]
    with ThreadPoolExecutor(8) as workers:
        boxes = list(workers.map(provider.acquire, keys))
    ids = {container_id(provider, k) for k in keys}
    assert len(ids) == 8, "a container served two keys"
    for k, box in zip(keys, boxes, strict=True):
        box.write_file("who.txt", k.thread_id)
    for k, box in zip(keys, boxes, strict=True):
        assert box.execute("cat /mnt/user-data/workspace/*.txt").stdout == k.thread_id
        assert box.grep("iso", output_mode="files_with_matches").files == [
            "/mnt/user-data/workspace/who.txt"
        ]


def test_parallel_acquires_of_one_new_key_claim_one_box(
    make_provider: Factory, owned: Callable[[], list[Any]], data_root: Path
) -> None:
    provider = pooled(make_provider, 3)
    k = key("same")
    with ThreadPoolExecutor(20) as workers:
        boxes = list(workers.map(lambda _: provider.acquire(k), range(20)))
    assert len({id(b) for b in boxes}) == 1
    assert len(boxes_of(owned, k, data_root)) == 1


def test_two_replicas_never_claim_the_same_box(make_provider: Factory) -> None:
    first = pooled(make_provider, 3)
    second = make_provider(warm_pool={"size": 3, "refill_interval_s": 0.2})
    assert second._pool is not None and second._pool.wait_ready(3, READY_S)  # adopts
    keys = [key(f"replica{i}") for i in range(10)]
    with ThreadPoolExecutor(10) as workers:
        boxes = list(workers.map(lambda i: (first, second)[i % 2].acquire(keys[i]), range(10)))
    owners = {container_id(first, k) for k in keys}
    assert len(owners) == 10
    for k, box in zip(keys, boxes, strict=True):
        box.write_file(f"{k.thread_id}.txt", "x")
        assert [e.name for e in box.list_dir().entries] == [f"{k.thread_id}.txt"]


def test_a_claimed_box_is_the_keys_for_any_provider_of_its_owner(
    make_provider: Factory, owned: Callable[[], list[Any]], data_root: Path
) -> None:
    """A claim changes nothing on the engine (no rename: they queue there), so another
    replica, or this one restarted, finds the claimed box from the key's thread dir: it
    adopts it instead of starting a second box on the same storage, and can destroy it."""
    first = pooled(make_provider, 2)  # never shut down: a crashed instance
    k = key("claimed")
    first.acquire(k).write_file("kept.txt", "kept")
    (claimed,) = boxes_of(owned, k, data_root)
    other = make_provider()  # no pool of its own
    box = other.acquire(k)
    assert box.read_file("kept.txt").content == "kept"
    assert [c.id for c in boxes_of(owned, k, data_root)] == [claimed.id], "adopted, not a new box"
    assert box.execute("cat /mnt/user-data/workspace/kept.txt").stdout == "kept"
    fresh = make_provider()
    fresh.destroy(k)
    assert claimed.id not in {c.id for c in owned()}
    assert fresh.acquire(k).read_file("kept.txt").content == "kept"  # cold, with its data
    assert boxes_of(owned, k, data_root)[0].id != claimed.id


def test_the_refill_waits_for_claims_to_pause(make_provider: Factory) -> None:
    """A box start takes the host's CPU for a few hundred ms: the pool starts the
    replacement of a claimed box only once claims have paused (a burst of new threads
    keeps the host to itself). Later is always allowed, sooner never."""
    provider = pooled(make_provider, 2)
    starts: list[float] = []
    start = provider._pool_start

    def recorded(slot: str, record: Any) -> None:
        starts.append(time.monotonic())
        start(slot, record)

    provider._pool_start = recorded  # type: ignore[method-assign]
    before = time.monotonic()
    provider.acquire(key("burst")).execute("true")
    assert provider._pool is not None and provider._pool.wait_ready(2, READY_S)
    assert starts and min(starts) >= before + CLAIM_QUIET_S


def test_a_refill_during_a_claim_leaves_the_box_to_the_claim(
    make_provider: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    """A claim takes a box out of the pool, then moves its storage. A refill round that
    lists the boxes in between must not adopt that box back (the pool would hold the
    key's box, with a second agent in it, as a ready box), and one that finds it claimed
    since says nothing: that is a claim, not trouble with the pool."""
    provider = make_provider(warm_pool={"size": 1, "refill_interval_s": 60})
    pool = provider._pool
    assert pool is not None and pool.wait_ready(1, READY_S)
    claim = provider._pool_claim
    taken: list[str] = []

    def refill_first(slot: str, record: Any, k: SandboxKey) -> Any:
        taken.append(slot)
        pool.refill()  # the refill thread's round, between the take and the move
        return claim(slot, record, k)

    provider._pool_claim = refill_first  # type: ignore[method-assign]
    box = provider.acquire(key("window"))
    assert box.execute("echo ok").stdout == "ok\n"
    assert taken and taken[0] not in pool._ready, "the claimed box went back into the pool"
    with caplog.at_level(logging.WARNING, logger="sandkit.boxkit"):
        assert not pool._open(taken[0], start=False)
    assert not caplog.records


def test_a_restarted_provider_adopts_the_pool(
    make_provider: Factory, owned: Callable[[], list[Any]]
) -> None:
    pooled(make_provider, 3)  # never shut down: a crashed instance
    before = pool_names(owned)
    again = pooled(make_provider, 3)
    assert pool_names(owned) == before, "the pool was adopted, not started again"
    assert again.acquire(key("after-restart")).execute("echo ok").stdout == "ok\n"


def test_pool_boxes_count_against_max_running_and_make_room(
    make_provider: Factory, owned: Callable[[], list[Any]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "sandkit.boxkit")
    k_old = key("has-data")
    cold = make_provider()
    cold.acquire(k_old).write_file("a.txt", "a")
    cold.destroy(k_old)
    provider = make_provider(max_running=2, warm_pool={"size": 5, "refill_interval_s": 0.2})
    assert provider._pool is not None and provider._pool.wait_ready(2, READY_S)
    assert not provider._pool.wait_ready(3, 2.0)  # the cap holds the pool at 2
    assert any("max_running" in r.getMessage() for r in caplog.records)
    assert provider.acquire(k_old).read_file("a.txt").content == "a"  # a pool box made room
    assert provider.acquire(key("new")).execute("true").exit_code == 0  # claims the other
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("third"))
    assert info.value.code is ErrorCode.CAPACITY


def test_a_released_claimed_box_restarts_cold_with_its_data(make_provider: Factory) -> None:
    provider = pooled(make_provider, 1)
    k = key("release")
    box = provider.acquire(k)
    box.write_file("kept.txt", "kept")
    provider.release(k)
    again = provider.acquire(k)
    assert again.read_file("kept.txt").content == "kept"
    assert again.execute("echo ok").stdout == "ok\n"


def test_shutdown_leaves_no_pool_box_and_no_pool_storage(
    make_provider: Factory, owned: Callable[[], list[Any]], data_root: Path
) -> None:
    provider = pooled(make_provider, 3)
    provider.acquire(key("one"))
    provider.shutdown()
    assert owned() == []
    pool_dirs = data_root / ".sandkit" / "pool"
    assert not pool_dirs.exists() or list(pool_dirs.iterdir()) == []


def test_a_pool_is_refused_where_the_platform_cannot_hand_a_box_over() -> None:
    from sandkit_e2b.provider import E2BProvider

    from sandkit import Settings

    with pytest.raises(SandboxError) as info:
        E2BProvider(Settings(providers={"e2b": {"warm_pool": {"size": 2}}}))
    assert info.value.code is ErrorCode.INVALID_ARGUMENT and "warm_pool" in info.value.message
