"""Lifecycle on real boxes: adoption, what a pid file may name, release, shutdown, bounds."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from bwrap_support import alive, live_processes
from sandkit_bwrap import BwrapProvider

from sandkit import ErrorCode, Sandbox, SandboxError, SandboxKey, Settings, create_provider

ProviderFactory = Callable[..., BwrapProvider]


def key(name: str) -> SandboxKey:
    return SandboxKey("lifecycle", name)


def state_of(provider: BwrapProvider, k: SandboxKey) -> dict[str, object]:
    data: dict[str, object] = json.loads(
        (provider.state_root / provider.box_name(k) / "box.json").read_text()
    )
    return data


def pid_of(provider: BwrapProvider, k: SandboxKey) -> int:
    return int(str(state_of(provider, k)["pid"]))


def host_file(data_root: Path, k: SandboxKey, rel: str) -> Path:
    return data_root / "users" / k.user_id / "threads" / k.thread_id / "user-data" / rel


def pid_ns(box: Sandbox) -> str:
    return box.execute("readlink /proc/self/ns/pid").stdout.strip()


def test_registered_as_an_entry_point(bwrap_ready: None, data_root: Path, owner: str) -> None:
    settings = Settings(data_root=data_root, providers={"bwrap": {"owner": owner}})
    with create_provider("bwrap", settings) as provider:
        assert isinstance(provider, BwrapProvider)


def test_a_second_provider_adopts_the_running_box(make_provider: ProviderFactory) -> None:
    first, second = make_provider(), make_provider()
    k = key("adopt")
    box = first.acquire(k)
    box.execute("echo from-the-first > /tmp/marker")  # /tmp lives and dies with the box
    pid = pid_of(first, k)
    adopted = second.get(k)
    assert adopted is not None
    assert adopted.execute("cat /tmp/marker").stdout == "from-the-first\n"
    assert second.acquire(k).execute("cat /tmp/marker").stdout == "from-the-first\n"
    assert pid_of(second, k) == pid and alive(pid)
    assert pid_ns(box) == pid_ns(adopted)


def test_parallel_acquires_from_two_providers_make_one_box(
    make_provider: ProviderFactory,
) -> None:
    first, second = make_provider(), make_provider()
    k = key("two-processes")
    with ThreadPoolExecutor(16) as pool:
        boxes = list(pool.map(lambda i: (first if i % 2 else second).acquire(k), range(16)))
    assert len({pid_ns(box) for box in boxes}) == 1


def test_a_recycled_pid_is_never_adopted_nor_killed(make_provider: ProviderFactory) -> None:
    provider = make_provider()
    k = key("recycled")
    provider.acquire(k).execute("echo old > /tmp/marker")
    provider.release(k)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        # box.json of a dead box, whose pid now belongs to someone else.
        directory = provider.state_root / provider.box_name(k)
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        fake = {"pid": stranger.pid, "start": "1", "boot": boot, "spec": "x", "cgroups": []}
        (directory / "box.json").write_text(json.dumps(fake))
        other = make_provider()
        assert other.get(k) is None
        box = other.acquire(k)
        assert box.execute("cat /tmp/marker || echo fresh").stdout.endswith("fresh\n")
        other.destroy(k)
        assert stranger.poll() is None, "a process that is not the box was killed"
    finally:
        stranger.kill()
        stranger.wait()


def test_release_stops_the_box_and_keeps_the_data(
    make_provider: ProviderFactory, data_root: Path, owner: str
) -> None:
    provider = make_provider()
    k = key("release")
    box = provider.acquire(k)
    box.write_file("kept.txt", "kept")
    box.execute("echo 42 > /mnt/user-data/outputs/result.txt; echo gone > /tmp/marker")
    pid = pid_of(provider, k)
    provider.release(k)
    assert not alive(pid)
    assert provider.get(k) is None
    assert host_file(data_root, k, "workspace/kept.txt").read_text() == "kept"
    assert host_file(data_root, k, "outputs/result.txt").read_text() == "42\n"
    again = provider.acquire(k)
    assert again.read_file("kept.txt").content == "kept"
    assert again.execute("cat /tmp/marker 2>/dev/null || echo new box").stdout == "new box\n"
    provider.destroy(k)
    assert not (provider.state_root / provider.box_name(k)).exists()
    assert host_file(data_root, k, "workspace/kept.txt").is_file()
    assert live_processes(owner) == []


def test_shutdown_leaves_nothing_running(
    make_provider: ProviderFactory, data_root: Path, owner: str
) -> None:
    crashed = make_provider()  # an earlier instance that never shut down
    crashed.acquire(key("crashed"))
    provider = make_provider()
    pids = [pid_of(crashed, key("crashed"))]
    for name in ("one", "two"):
        provider.acquire(key(name)).execute("sleep 300 > /dev/null 2>&1 &")
        pids.append(pid_of(provider, key(name)))
    assert live_processes(owner)
    provider.shutdown()
    assert [pid for pid in pids if alive(pid)] == []
    assert live_processes(owner) == []
    assert [p.name for p in provider.state_root.iterdir()] == []
    assert host_file(data_root, key("one"), "workspace").is_dir()


def test_a_box_killed_from_outside_is_restarted_by_the_next_acquire(
    make_provider: ProviderFactory,
) -> None:
    provider = make_provider()
    k = key("killed")
    box = provider.acquire(k)
    box.write_file("kept.txt", "kept")
    pid = pid_of(provider, k)
    subprocess.run(["kill", "-KILL", str(pid)], check=True)
    # Dead once its PID 1 is (the kernel ends the namespace with it): a call before
    # that may legitimately still be answered.
    deadline = time.monotonic() + 30
    while alive(pid):
        assert time.monotonic() < deadline, "the box's PID 1 outlived SIGKILL"
        time.sleep(0.01)
    with pytest.raises(SandboxError) as info:
        box.execute("true")
    assert info.value.code is ErrorCode.UNAVAILABLE
    again = provider.acquire(k)
    assert again.read_file("kept.txt").content == "kept"
    assert again.execute("echo ok").stdout == "ok\n"


def test_changed_settings_restart_the_box(make_provider: ProviderFactory) -> None:
    k = key("respec")
    first = make_provider()
    first.acquire(k).execute("echo old > /tmp/marker")
    pid = pid_of(first, k)
    second = make_provider(pids_limit=128)
    assert second.get(k) is None  # started with other settings: not adopted as it is
    box = second.acquire(k)
    assert box.execute("cat /tmp/marker 2>/dev/null || echo new").stdout == "new\n"
    assert not alive(pid)


def test_the_box_is_isolated_and_unprivileged(provider: BwrapProvider) -> None:
    box = provider.acquire(key("isolated"))
    status = box.execute("grep -E '^(Uid|CapEff|CapBnd|NoNewPrivs)' /proc/self/status").stdout
    assert "NoNewPrivs:\t1" in status and "CapEff:\t0000000000000000" in status
    assert "CapBnd:\t0000000000000000" in status
    assert box.execute("id -u").stdout == "1000\n"
    # Its own pid namespace: PID 1 is bwrap's reaper, the host's processes are not there.
    assert box.execute("ps -e -o pid= | wc -l").stdout.strip() in {str(n) for n in range(3, 9)}
    # No network: a loopback interface only.
    assert box.execute("cat /proc/net/dev | tail -n +3 | cut -d: -f1").stdout.split() == ["lo"]
    probe = box.execute(
        "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 2)'"
    )
    assert probe.exit_code != 0 and "unreachable" in probe.stderr
    # Only what was bound: no host home, no shadow file, a read-only root and /usr.
    assert box.execute("ls /root /home /etc/shadow").exit_code != 0
    assert box.execute("touch /usr/x || touch /x").exit_code != 0
    assert box.execute("touch /tmp/x && echo ok").stdout == "ok\n"
    assert "nosuid" in box.execute("grep ' /usr ' /proc/self/mountinfo").stdout


def test_the_box_is_bounded(make_provider: ProviderFactory) -> None:
    provider = make_provider(
        pids_limit=64, memory_limit_bytes=128 * 1024 * 1024, tmp_size_bytes=32 * 1024 * 1024
    )
    box = provider.acquire(key("bounded"))
    forks = box.execute("for i in $(seq 200); do sleep 5 & done 2>&1; wait", timeout=60)
    assert "retry" in forks.stdout + forks.stderr or "Resource" in forks.stdout + forks.stderr
    hog = box.execute("python3 -c 'x = bytearray(512 * 1024 * 1024); print(len(x))'")
    assert hog.exit_code == 137 and "536870912" not in hog.stdout  # the OOM killer's SIGKILL
    full = box.execute("head -c 64M /dev/zero > /tmp/big; echo $?; du -m /tmp/big")
    assert full.stdout.split()[:2] == ["1", "32"]  # /tmp is full at its size, not the memory
    assert box.execute("echo still here").stdout == "still here\n"


def test_idle_boxes_are_reaped(make_provider: ProviderFactory, data_root: Path) -> None:
    provider = make_provider()
    k = key("idle")
    provider.acquire(k).write_file("kept.txt", "kept")
    pid = pid_of(provider, k)
    assert provider.reap_idle(3600) == []
    assert provider.reap_idle(0) == [k]
    assert not alive(pid) and provider.get(k) is None
    assert host_file(data_root, k, "workspace/kept.txt").read_text() == "kept"


def test_max_running(make_provider: ProviderFactory) -> None:
    provider = make_provider(max_running=1)
    provider.acquire(key("first"))
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("second"))
    assert info.value.code is ErrorCode.CAPACITY
    provider.release(key("first"))
    assert provider.acquire(key("second")).execute("echo ok").stdout == "ok\n"


def test_bad_options_are_refused(data_root: Path) -> None:
    refused: list[dict[str, object]] = [
        {"carrier": "http"},
        {"uid": 0},
        {"memory_limit_bytes": 64 * 1024 * 1024},  # the default /tmp would not fit
        {"host_dirs": ["usr"]},
        {"etc": ["../root"]},
    ]
    for options in refused:
        with pytest.raises(SandboxError) as info:
            BwrapProvider(Settings(data_root=data_root, providers={"bwrap": options}))
        assert info.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(SandboxError) as info:
        BwrapProvider(Settings(data_root=data_root, providers={"bwrap": {"carrier": "http"}}))
    assert "stdio" in info.value.message


def test_a_start_failure_names_virtual_paths_only(
    make_provider: ProviderFactory, data_root: Path, tmp_path: Path
) -> None:
    skills = tmp_path / "skills-that-vanish"
    skills.mkdir()
    provider = make_provider({"skills_dir": skills})
    skills.rmdir()
    with pytest.raises(SandboxError) as info:
        provider.acquire(key("broken"))
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert str(tmp_path) not in info.value.message and "/mnt/skills" in info.value.message
