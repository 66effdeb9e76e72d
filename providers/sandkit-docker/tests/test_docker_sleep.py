"""Sleeping agents in real containers: an idle box's agent gives its memory back and the
next call wakes a fresh one in the same process, with the same data and processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sandkit_docker.provider import DockerProvider

from sandkit import SandboxKey

pytestmark = pytest.mark.docker

Factory = Callable[..., DockerProvider]
# Only a failure waits this out: the background thread sleeps the agent within a round.
DEADLINE_S = 120.0


def agent_process(client: Any, provider: DockerProvider, key: SandboxKey) -> tuple[int, str]:
    """(host pid, command line) of the box's agent process."""
    attrs = provider._inspect(key)
    assert attrs is not None
    top = client.api.top(attrs["Id"], ps_args="-o pid,args")
    found = [row for row in top["Processes"] if "agent.pyz" in row[1] and "--procd" not in row[1]]
    assert len(found) == 1, found
    return int(found[0][0]), found[0][1]


def private_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Anonymous:"):
                return int(line.split()[1])
    raise AssertionError("no Anonymous line")


def test_an_idle_agent_sleeps_and_the_next_call_wakes_it(
    make_provider: Factory, docker_client: Any
) -> None:
    provider = make_provider(execute_enabled=True, agent_sleep="dormant")
    key = SandboxKey("sleep", "wake")
    box = provider.acquire(key)
    box.write_file("kept.txt", "kept")
    assert box.grep("kept", output_mode="files_with_matches").files == [
        "/mnt/user-data/workspace/kept.txt"
    ]
    job = box.spawn("sleep 300")
    pid, command = agent_process(docker_client, provider, key)
    awake = private_kib(pid)
    assert "--dormant" not in command

    assert provider.sleep_idle_agents(1e-6) == 1
    # The agent answers `sleep`, then execs the dormant program: seen a moment later.
    deadline = time.monotonic() + 30.0
    while "--dormant" not in (seen := agent_process(docker_client, provider, key))[1]:
        assert time.monotonic() < deadline, f"the agent did not go dormant: {seen}"
        time.sleep(0.05)
    same_pid, command = seen
    assert same_pid == pid and "--dormant" in command
    asleep = private_kib(pid)
    assert asleep < awake / 2, (asleep, awake)

    assert box.read_file("kept.txt").content == "kept"  # wakes it
    assert agent_process(docker_client, provider, key) == (pid, command.replace(" --dormant", ""))
    assert box.grep("kept", output_mode="files_with_matches").files == [
        "/mnt/user-data/workspace/kept.txt"
    ]
    assert [p.handle for p in box.list_processes().processes if p.running] == [job.handle]
    assert provider.sleep_idle_agents(1e-6) == 1, "it can sleep again"
    assert box.execute("echo again").stdout == "again\n"


def agents_in(client: Any, provider: DockerProvider, key: SandboxKey) -> list[str]:
    """The box's agents: not its supervisor, and not an agent's child caught between its
    fork and its exec (it shows the agent's argv for a moment: the agent starts rg, ready
    shells and the supervisor that way)."""
    attrs = provider._inspect(key)
    assert attrs is not None
    top = client.api.top(attrs["Id"], ps_args="-o pid,ppid,args")
    rows = [r for r in top["Processes"] if "agent.pyz" in r[2] and "--procd" not in r[2]]
    pids = {r[0] for r in rows}
    return [r[2] for r in rows if r[1] not in pids]


def test_agent_sleep_exit_ends_the_agent_and_the_next_call_starts_one(
    make_provider: Factory, docker_client: Any
) -> None:
    """`agent_sleep: exit`: nothing of the agent stays in the box (its channel is closed),
    its background processes do, and the next call opens a fresh channel."""
    provider = make_provider(execute_enabled=True, agent_sleep="exit")
    key = SandboxKey("sleep", "exit")
    box = provider.acquire(key)
    box.write_file("kept.txt", "kept")
    job = box.spawn("sleep 300")
    assert len(agents_in(docker_client, provider, key)) == 1
    assert provider.sleep_idle_agents(1e-6) == 1
    deadline = time.monotonic() + DEADLINE_S
    while agents_in(docker_client, provider, key) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert agents_in(docker_client, provider, key) == []
    assert box.read_file("kept.txt").content == "kept"  # a new channel, a new agent
    assert len(agents_in(docker_client, provider, key)) == 1
    assert [p.handle for p in box.list_processes().processes if p.running] == [job.handle]
    assert provider.acquire(key) is box
    assert provider.sleep_idle_agents(1e-6) == 1, "it can go again"
    assert box.execute("echo again").stdout == "again\n"


def test_a_busy_box_keeps_its_agent_awake(make_provider: Factory, docker_client: Any) -> None:
    provider = make_provider(execute_enabled=True)
    key = SandboxKey("sleep", "busy")
    box = provider.acquire(key)
    started = threading.Event()

    def long_call() -> None:
        started.set()
        box.execute("sleep 3")

    worker = threading.Thread(target=long_call)
    worker.start()
    started.wait()
    while not box.busy:
        time.sleep(0.01)
    assert provider.sleep_idle_agents(1e-6) == 0
    worker.join()
    assert "--dormant" not in agent_process(docker_client, provider, key)[1]


def test_the_background_thread_puts_idle_agents_to_sleep(
    make_provider: Factory, docker_client: Any
) -> None:
    provider = make_provider(reap_interval_s=0.2, agent_sleep_s=0.5)  # the default: exit
    key = SandboxKey("sleep", "background")
    box = provider.acquire(key)
    box.write_file("a.txt", "a")
    deadline = time.monotonic() + DEADLINE_S
    while agents_in(docker_client, provider, key):
        assert time.monotonic() < deadline, "the agent never went to sleep"
        time.sleep(0.1)
    assert box.read_file("a.txt").content == "a"
