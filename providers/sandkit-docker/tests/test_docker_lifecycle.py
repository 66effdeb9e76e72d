"""Lifecycle against a real engine: one box per key, adoption, reaping, dying, cleanup."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sandkit_docker.provider import DockerProvider
from sandkit_docker.stream import DockerExecStream
from tests.docker_support import in_ci

from sandkit import ErrorCode, SandboxError, SandboxKey, Settings, create_provider

pytestmark = pytest.mark.docker

Owned = Callable[[], list[Any]]


def key(name: str) -> SandboxKey:
    return SandboxKey("lifecycle", name)


def containers_of(docker_client: Any, k: SandboxKey) -> list[Any]:
    return list(
        docker_client.containers.list(
            all=True, filters={"label": f"sandkit.sandbox-id={k.sandbox_id}"}
        )
    )


def host_file(data_root: Path, k: SandboxKey, rel: str) -> Path:
    return data_root / "users" / k.user_id / "threads" / k.thread_id / "user-data" / rel


def test_parallel_acquires_of_one_key_make_one_container(
    provider: DockerProvider, owned: Owned
) -> None:
    with ThreadPoolExecutor(20) as pool:
        boxes = list(pool.map(lambda _: provider.acquire(key("parallel")), range(20)))
    assert len({id(b) for b in boxes}) == 1
    assert len(owned()) == 1
    assert boxes[0].execute("echo ok").stdout == "ok\n"


def test_parallel_acquires_from_two_providers_adopt_one_container(
    make_provider: Callable[..., DockerProvider], owned: Owned, docker_client: Any
) -> None:
    # Two instances with one owner stand in for two processes of one deployment:
    # the loser of the name race (409) adopts the winner's container.
    first, second = make_provider(), make_provider()
    k = key("two-processes")
    with ThreadPoolExecutor(20) as pool:
        boxes = list(pool.map(lambda i: (first if i % 2 else second).acquire(k), range(20)))
    assert len(owned()) == 1
    for box in boxes:
        assert box.execute("echo ok").stdout == "ok\n"
    assert len(containers_of(docker_client, k)) == 1


def test_acquire_is_idempotent_and_get_does_not_create(
    provider: DockerProvider, owned: Owned
) -> None:
    assert provider.get(key("idem")) is None
    assert owned() == []
    box = provider.acquire(key("idem"))
    assert provider.acquire(key("idem")) is box
    assert provider.get(key("idem")) is box
    assert len(owned()) == 1


def test_a_new_provider_adopts_the_running_container(
    make_provider: Callable[..., DockerProvider], docker_client: Any, data_root: Path
) -> None:
    k = key("adopt")
    first = make_provider()
    first.acquire(k).write_file("kept.txt", "from the first provider\n")
    (before,) = containers_of(docker_client, k)
    started = before.attrs["State"]["StartedAt"]

    second = make_provider()  # a restarted process: empty memory, same owner
    assert second.get(k) is not None, "get() should find the running container"
    box = second.acquire(k)
    assert box.read_file("kept.txt").content == "from the first provider\n"
    (after,) = containers_of(docker_client, k)
    after.reload()
    assert after.id == before.id
    assert after.attrs["State"]["StartedAt"] == started, "adoption must not restart it"


def test_owners_do_not_adopt_each_others_boxes(
    make_provider: Callable[..., DockerProvider], docker_client: Any, owner: str
) -> None:
    k = key("owners")
    ours = make_provider()
    theirs = make_provider(owner=owner + "-other")
    ours.acquire(k)
    theirs.acquire(k)
    assert len(containers_of(docker_client, k)) == 2
    theirs.shutdown()
    (left,) = containers_of(docker_client, k)
    assert left.labels["sandkit.owner"] == owner
    assert left.status == "running"


def test_release_stops_and_the_next_acquire_resumes_with_the_files(
    provider: DockerProvider, docker_client: Any
) -> None:
    k = key("release")
    held = provider.acquire(k)
    held.write_file("state.txt", "before release\n")
    provider.release(k)
    (container,) = containers_of(docker_client, k)
    assert container.status == "exited"
    assert provider.get(k) is None
    with pytest.raises(SandboxError) as info:
        held.read_file("state.txt")
    assert info.value.code is ErrorCode.UNAVAILABLE
    again = provider.acquire(k)
    assert again.read_file("state.txt").content == "before release\n"
    (container,) = containers_of(docker_client, k)
    assert container.status == "running"


def test_destroy_removes_the_container_but_not_the_data(
    provider: DockerProvider, docker_client: Any, data_root: Path
) -> None:
    k = key("destroy")
    provider.acquire(k).write_file("survivor.txt", "still here\n")
    provider.destroy(k)
    assert containers_of(docker_client, k) == []
    assert host_file(data_root, k, "workspace/survivor.txt").read_text() == "still here\n"
    assert provider.acquire(k).read_file("survivor.txt").content == "still here\n"


def test_shutdown_leaves_no_container_of_the_owner(
    provider: DockerProvider, owned: Owned, docker_client: Any, owner: str
) -> None:
    for name in ("a", "b", "c"):
        provider.acquire(key(f"shutdown-{name}"))
    provider.release(key("shutdown-b"))
    assert len(owned()) == 3
    provider.shutdown()
    assert owned() == []
    volumes = docker_client.volumes.list(filters={"label": f"sandkit.owner={owner}"})
    assert volumes == []


def test_shutdown_cleans_up_after_a_crashed_instance(
    make_provider: Callable[..., DockerProvider], owned: Owned
) -> None:
    crashed = make_provider()
    crashed.acquire(key("orphan"))  # never shut down: its process "died"
    fresh = make_provider()
    fresh.shutdown()
    assert owned() == []


def test_reap_idle_releases_only_idle_boxes(provider: DockerProvider, docker_client: Any) -> None:
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
    assert containers_of(docker_client, idle)[0].status == "exited"
    assert containers_of(docker_client, busy)[0].status == "running"
    assert provider.reap_idle(60) == []


def test_background_reaper_uses_idle_timeout(
    make_provider: Callable[..., DockerProvider], docker_client: Any
) -> None:
    provider = make_provider({"idle_timeout_s": 0.5}, reap_interval_s=0.2)
    k = key("reaper")
    provider.acquire(k)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if containers_of(docker_client, k)[0].status == "exited":
            break
        time.sleep(0.2)
    assert containers_of(docker_client, k)[0].status == "exited"
    assert provider.get(k) is None


def test_container_killed_mid_operation(provider: DockerProvider, docker_client: Any) -> None:
    k = key("killed")
    box = provider.acquire(k)
    box.write_file("precious.txt", "intact\n")
    errors: list[BaseException] = []

    def long_command() -> None:
        try:
            box.execute("sleep 30", timeout=60)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=long_command)
    worker.start()
    time.sleep(0.5)
    containers_of(docker_client, k)[0].kill()
    worker.join(20)
    assert not worker.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], SandboxError)
    assert errors[0].code is ErrorCode.UNAVAILABLE
    # Until acquired again the box stays unavailable; it is never silently revived.
    with pytest.raises(SandboxError) as info:
        box.read_file("precious.txt")
    assert info.value.code is ErrorCode.UNAVAILABLE
    again = provider.acquire(k)
    assert again.read_file("precious.txt").content == "intact\n"
    assert again.execute("echo back").stdout == "back\n"
    # The handle held from before works again too: it follows the key's container.
    assert box.read_file("precious.txt").content == "intact\n"


def test_the_engine_s_die_event_ends_the_channel_into_the_box(
    provider: DockerProvider, docker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider does not wait for the exec stream to notice a death (under gVisor it
    sometimes never does): the engine's die event ends the channel into that box only."""
    died: list[SandboxKey] = []
    real = provider._box_died
    monkeypatch.setattr(provider, "_box_died", lambda box: (died.append(box.key), real(box)))
    alive, killed = key("die-alive"), key("die-killed")
    for k in (alive, killed):
        assert provider.acquire(k).execute("echo up").stdout == "up\n"
    containers_of(docker_client, killed)[0].kill()
    deadline = time.monotonic() + 30.0
    while killed not in died and time.monotonic() < deadline:
        time.sleep(0.05)
    assert died == [killed]
    assert provider._boxes.box(killed).suspect
    assert provider.acquire(alive).execute("echo still").stdout == "still\n"
    assert provider.acquire(killed).execute("echo back").stdout == "back\n"


def test_the_engine_s_exec_die_event_reaches_the_agent_s_channel(
    provider: DockerProvider, docker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed agent's exec ends with an event naming its exec; the provider matches it to
    the box's channel (and ends it, should the engine keep the connection open)."""
    box = provider.acquire(key("exec-die"))
    pid = box.info()["pid"]
    stream = provider._boxes.box(key("exec-die")).stream
    assert isinstance(stream, DockerExecStream)
    asked: list[float] = []
    real = stream.end_unless_ended
    monkeypatch.setattr(
        stream, "end_unless_ended", lambda grace: (asked.append(grace), real(grace))
    )
    (container,) = containers_of(docker_client, key("exec-die"))
    assert container.exec_run(["sh", "-c", f"kill -9 {pid}"], user="1000:1000").exit_code == 0
    deadline = time.monotonic() + 30.0
    while not asked and time.monotonic() < deadline:
        time.sleep(0.05)
    assert asked, "the exec_die event did not reach the agent's channel"
    # The channel ends (by the engine's EOF or the event's grace); a call sent before that
    # would meet the dead agent, and an execute is never resent (UNAVAILABLE, by contract).
    while not stream.at_eof and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stream.at_eof, "the dead agent's channel did not end"
    assert box.info()["pid"] != pid  # read-only, so resent on a fresh channel: a new agent
    assert box.execute("echo back").stdout == "back\n"


def test_a_dead_agent_is_replaced_transparently(
    provider: DockerProvider, docker_client: Any
) -> None:
    box = provider.acquire(key("agent-crash"))
    box.write_file("f.txt", "kept\n")
    old_pid = box.info()["pid"]
    (container,) = containers_of(docker_client, key("agent-crash"))
    assert container.exec_run(["sh", "-c", f"kill -9 {old_pid}"], user="1000:1000").exit_code == 0
    # The container lives on, so the next call starts a fresh agent by itself.
    assert box.read_file("f.txt").content == "kept\n"
    assert box.info()["pid"] != old_pid
    assert provider.acquire(key("agent-crash")) is box


def test_parallel_acquires_of_many_keys(provider: DockerProvider, owned: Owned) -> None:
    keys = [key(f"many-{i}") for i in range(6)]
    with ThreadPoolExecutor(12) as pool:
        boxes = list(pool.map(provider.acquire, keys * 2))
    assert len(owned()) == 6
    for k, box in zip(keys * 2, boxes, strict=True):
        assert box.sandbox_id == k.sandbox_id
        box.write_file("me.txt", k.thread_id)
    assert [provider.acquire(k).read_file("me.txt").content for k in keys] == [
        k.thread_id for k in keys
    ]


def test_container_removed_behind_our_back_is_recreated_with_the_files(
    provider: DockerProvider, docker_client: Any, data_root: Path
) -> None:
    k = key("removed")
    box = provider.acquire(k)
    box.write_file("precious.txt", "intact\n")
    old_id = containers_of(docker_client, k)[0].id
    containers_of(docker_client, k)[0].remove(force=True, v=True)
    with pytest.raises(SandboxError) as info:
        box.read_file("precious.txt")
    assert info.value.code is ErrorCode.UNAVAILABLE
    again = provider.acquire(k)
    assert again.read_file("precious.txt").content == "intact\n"
    (new,) = containers_of(docker_client, k)
    assert new.id != old_id


def test_changed_settings_recreate_the_container(
    make_provider: Callable[..., DockerProvider], docker_client: Any
) -> None:
    k = key("respec")
    make_provider(pids_limit=200).acquire(k).write_file("x.txt", "x\n")
    (old,) = containers_of(docker_client, k)
    box = make_provider(pids_limit=300).acquire(k)
    (new,) = containers_of(docker_client, k)
    assert new.id != old.id
    assert new.attrs["HostConfig"]["PidsLimit"] == 300
    assert box.read_file("x.txt").content == "x\n"


def test_async_operations(provider: DockerProvider) -> None:
    box = provider.acquire(key("async"))

    async def run() -> list[str]:
        await box.awrite_file("a.txt", "async\n")
        results = await asyncio.gather(*(box.aread_file("a.txt") for _ in range(20)))
        return [r.content for r in results]

    assert asyncio.run(run()) == ["async\n"] * 20


def test_max_running_is_capacity(make_provider: Callable[..., DockerProvider]) -> None:
    provider = make_provider(max_running=1)
    provider.acquire(key("cap-1"))
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("cap-2"))
    assert info.value.code is ErrorCode.CAPACITY
    provider.release(key("cap-1"))
    provider.acquire(key("cap-2"))


def test_missing_image_is_unavailable_and_says_so(
    make_provider: Callable[..., DockerProvider], owned: Owned
) -> None:
    provider = make_provider(image="sandkit/does-not-exist:never", pull="never")
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("no-image"))
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "sandkit/does-not-exist:never" in info.value.message
    assert owned() == []


@pytest.fixture
def image_without_python(docker_client: Any, image: str, owner: str) -> Iterator[str]:
    tag = f"sandkit-test/no-python:{owner}"
    dockerfile = f'FROM {image}\nUSER root\nRUN rm -f "$(command -v python3)"\n'
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    yield tag
    # Runs before the provider's shutdown: remove its containers first, or the
    # image would only be untagged and stay behind.
    for container in docker_client.containers.list(all=True, filters={"ancestor": tag}):
        container.remove(force=True, v=True)
    docker_client.images.remove(tag, force=True)


@pytest.mark.parametrize("carrier", ["stdio", "http"])
def test_an_image_without_python3_says_why(
    make_provider: Callable[..., DockerProvider], image_without_python: str, carrier: str
) -> None:
    provider = make_provider(image=image_without_python, carrier=carrier)
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("no-python"))
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "python3" in info.value.message


def test_unreachable_engine_is_unavailable(tmp_path: Path) -> None:
    settings = Settings(
        data_root=tmp_path,
        providers={"docker": {"docker_host": "unix:///nonexistent/sandkit-test.sock"}},
    )
    provider = DockerProvider(settings)
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("no-engine"))
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "unreachable" in info.value.message


def test_missing_custom_mount_source_names_only_the_virtual_path(
    make_provider: Callable[..., DockerProvider], tmp_path: Path
) -> None:
    gone = tmp_path / "not-there"
    provider = make_provider({"mounts": [{"virtual": "/data/gone", "host": gone}]})
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("bad-mount"))
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "/data/gone" in info.value.message
    assert str(gone) not in info.value.message


def test_registered_as_the_docker_entry_point(image: str, tmp_path: Path) -> None:
    from sandkit.provider import available_providers

    if "docker" not in available_providers():
        reason = "sandkit-docker is not installed (pip install -e providers/sandkit-docker)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    provider = create_provider("docker", Settings(data_root=tmp_path))
    assert isinstance(provider, DockerProvider)
