"""Lifecycle over the stand-in: re-attachment, pause/resume, sync back, timeouts, failures.

The stand-in plays the E2B service (its `cloud` fixture); the provider only
sees the SDK's surface. Where a test asserts on the number of calls, the
number is what a real client would pay in round trips.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from e2b import RateLimitException, ServiceBusyException
from e2b_standin import Cloud
from sandkit_e2b.provider import E2BProvider
from tests.docker_support import in_ci

from sandkit import ErrorCode, SandboxError, SandboxKey, Settings, create_provider

pytestmark = pytest.mark.docker

Owned = Callable[..., list[Any]]
Factory = Callable[..., E2BProvider]


def key(name: str) -> SandboxKey:
    return SandboxKey("lifecycle", name)


def host_file(data_root: Path, k: SandboxKey, rel: str) -> Path:
    return data_root / "users" / k.user_id / "threads" / k.thread_id / "user-data" / rel


def of_key(owned: Owned, k: SandboxKey) -> list[Any]:
    return owned(**{"sandkit.sandbox-id": k.sandbox_id})


def test_parallel_acquires_from_two_providers_end_on_one_sandbox(
    make_provider: Factory, owned: Owned
) -> None:
    # Two instances with one owner stand in for two processes of one deployment:
    # both may create; the older sandbox wins and the other is killed.
    first, second = make_provider(), make_provider()
    k = key("two-processes")
    with ThreadPoolExecutor(8) as pool:
        boxes = list(pool.map(lambda i: (first if i % 2 else second).acquire(k), range(8)))
    (only,) = of_key(owned, k)
    for i, box in enumerate(boxes):
        box.write_file(f"from-{i}.txt", str(i))
    names = {e.name for e in first.acquire(k).list_dir().entries}
    assert names == {f"from-{i}.txt" for i in range(8)}
    assert of_key(owned, k)[0].sandbox_id == only.sandbox_id


def test_a_restarted_provider_reattaches_without_creating(
    make_provider: Factory, owned: Owned, cloud: Cloud
) -> None:
    k = key("adopt")
    make_provider().acquire(k).write_file("kept.txt", "from the first process\n")
    (before,) = of_key(owned, k)
    creates = cloud.calls["create"]

    again = make_provider()  # a restarted process: empty memory, same owner
    assert again.get(k) is not None
    box = again.acquire(k)
    assert box.read_file("kept.txt").content == "from the first process\n"
    assert cloud.calls["create"] == creates
    (after,) = of_key(owned, k)
    assert after.sandbox_id == before.sandbox_id


def test_warm_acquire_costs_no_service_call(provider: E2BProvider, cloud: Cloud) -> None:
    box = provider.acquire(key("warm"))
    before = sum(cloud.calls.values())
    for _ in range(5):
        assert provider.acquire(key("warm")) is box
    assert sum(cloud.calls.values()) == before


def test_owners_do_not_adopt_each_others_sandboxes(
    make_provider: Factory, owned: Owned, cloud: Cloud
) -> None:
    k = key("owners")
    ours, theirs = make_provider(), make_provider(owner="someone-else")
    ours.acquire(k).write_file("mine.txt", "ours")
    theirs_box = theirs.acquire(k)
    assert theirs_box.list_dir().entries == []
    theirs.shutdown()  # shutdown=kill in the tests: theirs is gone, ours untouched
    (left,) = of_key(owned, k)
    assert cloud.state(left.sandbox_id) == "running"


def test_release_pauses_and_acquire_resumes_with_the_files(
    provider: E2BProvider, owned: Owned, cloud: Cloud
) -> None:
    k = key("release")
    held = provider.acquire(k)
    held.write_file("state.txt", "before release\n")
    (sandbox,) = of_key(owned, k)
    provider.release(k)
    assert cloud.state(sandbox.sandbox_id) == "paused"
    assert provider.get(k) is None
    with pytest.raises(SandboxError) as info:
        held.read_file("state.txt")
    assert info.value.code is ErrorCode.UNAVAILABLE
    again = provider.acquire(k)
    assert again.read_file("state.txt").content == "before release\n"
    assert cloud.state(sandbox.sandbox_id) == "running"
    # The released agent was stopped before the pause: one agent runs now.
    agents = again.execute("grep -las -- '--stdi[o]' /proc/[0-9]*/cmdline | wc -l")
    assert agents.stdout.strip() == "1"


def test_destroy_copies_the_files_back_then_kills(
    provider: E2BProvider, owned: Owned, data_root: Path
) -> None:
    k = key("destroy")
    box = provider.acquire(k)
    box.write_file("dir/kept.txt", "still here\n")
    box.write_bytes("/mnt/user-data/outputs/blob.bin", bytes(range(256)))
    box.execute("ln -s /mnt/user-data/workspace/dir/kept.txt abs-link && mkfifo fifo")
    provider.destroy(k)
    assert of_key(owned, k) == []
    assert host_file(data_root, k, "workspace/dir/kept.txt").read_text() == "still here\n"
    assert host_file(data_root, k, "outputs/blob.bin").read_bytes() == bytes(range(256))
    link = host_file(data_root, k, "workspace/abs-link")
    assert link.is_symlink() and str(link.readlink()) == "/mnt/user-data/workspace/dir/kept.txt"
    assert not host_file(data_root, k, "workspace/fifo").exists()  # special files stay behind
    # A new sandbox is seeded from the host copy, symlink included.
    again = provider.acquire(k)
    assert again.read_file("abs-link").content == "still here\n"
    assert again.read_file("dir/kept.txt").content == "still here\n"
    assert again.execute("stat -c %U dir/kept.txt").stdout.strip() == "user"


def test_a_sync_too_large_keeps_the_sandbox(make_provider: Factory, owned: Owned) -> None:
    provider = make_provider(sync_max_bytes=1024)
    k = key("too-large")
    provider.acquire(k).write_file("big.txt", "x" * 10_000)
    with pytest.raises(SandboxError) as info:
        provider.destroy(k)
    assert info.value.code is ErrorCode.TOO_LARGE
    assert len(of_key(owned, k)) == 1
    assert provider.acquire(k).read_file("big.txt").total_lines == 1


def test_release_kill_mode_syncs_back(
    make_provider: Factory, owned: Owned, data_root: Path
) -> None:
    provider = make_provider(release="kill")
    k = key("release-kill")
    provider.acquire(k).write_file("/mnt/user-data/outputs/r.txt", "result")
    provider.release(k)
    assert of_key(owned, k) == []
    assert host_file(data_root, k, "outputs/r.txt").read_text() == "result"


def test_the_service_timeout_pauses_an_idle_sandbox(
    make_provider: Factory, owned: Owned, cloud: Cloud
) -> None:
    provider = make_provider(timeout_s=5)
    k = key("idle-timeout")
    box = provider.acquire(k)
    box.write_file("f.txt", "kept\n")
    (sandbox,) = of_key(owned, k)
    deadline = time.monotonic() + 20
    while cloud.state(sandbox.sandbox_id) != "paused" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cloud.state(sandbox.sandbox_id) == "paused"
    with pytest.raises(SandboxError) as info:
        box.read_file("f.txt")
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert provider.acquire(k).read_file("f.txt").content == "kept\n"
    assert box.read_file("f.txt").content == "kept\n"  # the held handle works again


def test_a_sandbox_in_use_is_kept_alive(make_provider: Factory, cloud: Cloud, owned: Owned) -> None:
    # Event-bound, not clock-bound: the background maintenance must push the service's
    # timeout out again and again while the box is used (a timeout far above any stall).
    provider = make_provider(timeout_s=30, maintenance_interval_s=1)
    k = key("keep-alive")
    box = provider.acquire(k)
    (sandbox,) = of_key(owned, k)
    last_end = cloud.end_at(sandbox.sandbox_id)
    extensions = 0
    deadline = time.monotonic() + 120  # only a failure waits this out
    while extensions < 2:
        assert time.monotonic() < deadline, "the timeout was never extended while in use"
        box.list_dir()
        time.sleep(0.3)
        end = cloud.end_at(sandbox.sandbox_id)
        if end > last_end:
            extensions, last_end = extensions + 1, end
    assert cloud.state(sandbox.sandbox_id) == "running"
    assert box.execute("echo alive").stdout == "alive\n"


def test_a_reconnect_never_shortens_the_timeout(
    make_provider: Factory, cloud: Cloud, owned: Owned, api_key: str
) -> None:
    k = key("longer")
    make_provider(timeout_s=60).acquire(k)
    (sandbox,) = of_key(owned, k)
    cloud.sandbox_class().set_timeout(sandbox.sandbox_id, 3600, api_key=api_key)
    long_end = cloud.end_at(sandbox.sandbox_id)
    second = make_provider(timeout_s=60)  # a restart, with a shorter configured timeout
    second.acquire(k).list_dir()  # used since the last extension: keep_alive extends it
    assert second.keep_alive() == 1
    assert cloud.end_at(sandbox.sandbox_id) >= long_end


def test_a_sandbox_killed_by_the_service_mid_operation(
    provider: E2BProvider, owned: Owned, cloud: Cloud
) -> None:
    k = key("killed")
    box = provider.acquire(k)
    (sandbox,) = of_key(owned, k)
    errors: list[BaseException] = []

    def long_command() -> None:
        try:
            box.execute("sleep 30", timeout=60)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=long_command)
    worker.start()
    time.sleep(0.5)
    cloud.do_kill(sandbox.sandbox_id)
    worker.join(20)
    assert not worker.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], SandboxError)
    assert errors[0].code is ErrorCode.UNAVAILABLE
    with pytest.raises(SandboxError) as info:
        box.list_dir()
    assert info.value.code is ErrorCode.UNAVAILABLE
    again = provider.acquire(k)  # a new sandbox, seeded from the host copy
    assert again.execute("echo back").stdout == "back\n"
    assert of_key(owned, k)[0].sandbox_id != sandbox.sandbox_id


def kill_agent(cloud: Cloud, owned: Owned, k: SandboxKey, pid: int, api_key: str) -> None:
    (sandbox,) = of_key(owned, k)
    connected = cloud.sandbox_class().connect(sandbox.sandbox_id, api_key=api_key)
    connected.commands.run(f"kill -9 {pid}", user="root")


def test_a_dead_agent_is_replaced_transparently(
    provider: E2BProvider, cloud: Cloud, owned: Owned, api_key: str
) -> None:
    box = provider.acquire(key("agent-crash"))
    box.write_file("f.txt", "kept\n")
    old_pid = box.info()["pid"]
    kill_agent(cloud, owned, key("agent-crash"), old_pid, api_key)
    assert box.read_file("f.txt").content == "kept\n"
    assert box.info()["pid"] != old_pid


def test_changed_settings_replace_the_sandbox_keeping_files(
    make_provider: Factory, owned: Owned, tmp_path: Path
) -> None:
    k = key("respec")
    make_provider().acquire(k).write_file("x.txt", "x\n")
    (old,) = of_key(owned, k)
    skills = tmp_path / "skills"
    (skills / "s1").mkdir(parents=True)
    (skills / "s1" / "SKILL.md").write_text("# skill\n")
    box = make_provider({"skills_dir": skills}).acquire(k)
    (new,) = of_key(owned, k)
    assert new.sandbox_id != old.sandbox_id
    assert box.read_file("x.txt").content == "x\n"
    assert box.read_file("/mnt/skills/s1/SKILL.md").content == "# skill\n"
    with pytest.raises(SandboxError) as info:
        box.write_file("/mnt/skills/s1/SKILL.md", "changed")
    assert info.value.code is ErrorCode.READ_ONLY
    assert box.execute("echo x >> /mnt/skills/s1/SKILL.md").exit_code != 0


def test_http_carrier(make_provider: Factory, cloud: Cloud, owned: Owned, api_key: str) -> None:
    provider = make_provider(carrier="http", http_scheme="http")
    k = key("http")
    box = provider.acquire(k)
    box.write_file("a.txt", "over http\n")
    assert box.read_file("a.txt").content == "over http\n"
    assert box.grep("over", "/mnt/user-data/workspace").matches[0].line_number == 1
    assert box.execute("echo $((6*7))").stdout == "42\n"
    kill_agent(cloud, owned, k, box.info()["pid"], api_key)
    with pytest.raises(SandboxError) as info:
        box.read_file("a.txt")
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert provider.acquire(k) is box  # acquire starts a new agent behind the same handle
    assert box.read_file("a.txt").content == "over http\n"


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        (RateLimitException("429: Rate limit exceeded, please try again later."), "CAPACITY"),
        (ServiceBusyException("503: Service temporarily unavailable, please retry."), "CAPACITY"),
    ],
)
def test_service_refusals_are_capacity(
    provider: E2BProvider, cloud: Cloud, owned: Owned, fault: Exception, code: str
) -> None:
    cloud.inject("create", fault)
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("refused"))
    assert info.value.code is ErrorCode(code)
    assert of_key(owned, key("refused")) == []
    provider.acquire(key("refused"))  # the next try gets through


def test_missing_or_wrong_api_key_is_unavailable(
    make_provider: Factory, cloud: Cloud, monkeypatch: pytest.MonkeyPatch, api_key: str
) -> None:
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(SandboxError) as info:
        make_provider(api_key=None).acquire(key("no-key"))
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "E2B_API_KEY" in info.value.message
    cloud.valid_keys = {api_key}
    try:
        with pytest.raises(SandboxError) as info:
            make_provider(api_key="e2b_wrong").acquire(key("wrong-key"))
    finally:
        cloud.valid_keys = None
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "e2b_wrong" not in info.value.message


def test_unknown_template_is_unavailable_and_named(make_provider: Factory) -> None:
    with pytest.raises(SandboxError) as info:
        make_provider(template="no-such-template").acquire(key("template"))
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "no-such-template" in info.value.message


def test_max_running_is_capacity(make_provider: Factory) -> None:
    provider = make_provider(max_running=1)
    provider.acquire(key("cap-1"))
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("cap-2"))
    assert info.value.code is ErrorCode.CAPACITY
    provider.release(key("cap-1"))
    provider.acquire(key("cap-2"))


def test_reap_idle_releases_only_idle_boxes(
    provider: E2BProvider, cloud: Cloud, owned: Owned
) -> None:
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
    assert cloud.state(of_key(owned, idle)[0].sandbox_id) == "paused"
    assert cloud.state(of_key(owned, busy)[0].sandbox_id) == "running"


def test_shutdown_pauses_every_sandbox_of_the_owner(
    make_provider: Factory, owned: Owned, cloud: Cloud
) -> None:
    crashed = make_provider()
    crashed.acquire(key("orphan"))  # never shut down: its process "died"
    fresh = make_provider(shutdown="pause")
    fresh.acquire(key("fresh"))
    fresh.shutdown()
    states = {cloud.state(s.sandbox_id) for s in owned()}
    assert states == {"paused"}


def test_shutdown_passes_over_a_sandbox_gone_since_it_was_listed(
    make_provider: Factory, owned: Owned, cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed or timed out between the listing and its turn: nothing to copy back or stop,
    so not a failure of the shutdown (it was, and every later one failed with it)."""
    provider = make_provider(shutdown="kill", sync_back=True)
    provider.acquire(key("vanishing"))
    provider.acquire(key("staying"))
    listed = provider._list_boxes()
    (vanishing,) = of_key(owned, key("vanishing"))
    cloud.do_kill(vanishing.sandbox_id)
    monkeypatch.setattr(provider, "_list_boxes", lambda: listed)
    provider.shutdown()
    assert owned() == []


def test_registered_as_the_e2b_entry_point(tmp_path: Path) -> None:
    from sandkit.provider import available_providers

    if "e2b" not in available_providers():
        reason = "sandkit-e2b is not installed (pip install -e providers/sandkit-e2b)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    provider = create_provider("e2b", Settings(data_root=tmp_path))
    assert isinstance(provider, E2BProvider)


def test_uploads_reach_a_paused_sandbox_and_seed_one_not_yet_created(
    make_provider: Factory, owned: Owned, cloud: Cloud, data_root: Path
) -> None:
    provider = make_provider()
    fresh = key("upload-first")
    creates = cloud.calls["create"]
    provider.upload(fresh, "early.txt", b"before any sandbox\n")
    assert cloud.calls["create"] == creates and of_key(owned, fresh) == []  # none made for it
    assert host_file(data_root, fresh, "uploads/early.txt").read_bytes() == b"before any sandbox\n"
    box = provider.acquire(fresh)
    assert box.read_file("/mnt/user-data/uploads/early.txt").content == "before any sandbox\n"
    provider.release(fresh)  # paused: resumed sandboxes are not seeded again
    provider.upload(fresh, "late.txt", b"while paused\n")
    assert provider.acquire(fresh).read_file("/mnt/user-data/uploads/late.txt").content == (
        "while paused\n"
    )
    provider.remove_upload(fresh, "early.txt")
    assert [e.name for e in provider.acquire(fresh).list_dir("/mnt/user-data/uploads").entries] == [
        "late.txt"
    ]


def test_two_installs_of_the_agent_into_one_sandbox_at_once_both_succeed(
    provider: E2BProvider, cloud: Cloud, owned: Owned, api_key: str
) -> None:
    # Two processes adopting one half-set-up sandbox both install the agent: each
    # uploads and stages its own copy, the first rename wins, nothing is left behind.
    k = key("two-installs")
    provider.acquire(k)
    (sandbox,) = of_key(owned, k)
    sdk = cloud.sandbox_class().connect(sandbox.sandbox_id, api_key=api_key)
    payload = provider._archive()
    sdk.commands.run(f"rm -rf {payload.directory}", user="root")
    scripts = [provider._upload_payload(sdk, payload) for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda s: sdk.commands.run(s, user="root").exit_code, scripts))
    assert outcomes == [0, 0]
    left = sdk.commands.run(
        f"ls -d {payload.directory}* /tmp/sandkit-payload-* 2>/dev/null; true", user="root"
    ).stdout.split()
    assert left == [payload.directory]
    assert sdk.files.exists(payload.agent_path, user="root")
