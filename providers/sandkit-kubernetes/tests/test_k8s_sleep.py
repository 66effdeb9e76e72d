"""Sleeping agents in real pods: the exec stream stays, the agent process gives its memory
back, and the next call wakes a fresh agent with the same data and background processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from k8s_support import exec_in
from sandkit_kubernetes.provider import KubernetesProvider

from sandkit import SandboxKey
from sandkit.boxkit.sandbox import BoxSandbox

pytestmark = pytest.mark.kubernetes


def agent_command(core: Any, pod: str, pid: int) -> str:
    """The agent process's command line, seen from outside the agent (its memory is not
    readable there: the agent is not dumpable; test_docker_sleep.py measures it)."""
    return exec_in(core, pod, ["sh", "-c", f"tr '\\0' ' ' </proc/{pid}/cmdline"]).strip()


def test_an_idle_agent_sleeps_and_the_next_call_wakes_it(
    make_provider: Callable[..., KubernetesProvider], owned: Callable[[], list[Any]], core: Any
) -> None:
    provider = make_provider(execute_enabled=True)
    box = provider.acquire(SandboxKey("sleep", "wake"))
    assert isinstance(box, BoxSandbox)
    box.write_file("kept.txt", "kept")
    job = box.spawn("sleep 300")
    pid = int(box.call("info", {})["pid"])
    (pod,) = [p.metadata.name for p in owned()]
    awake_command = agent_command(core, pod, pid)
    assert "--stdio" in awake_command and "--dormant" not in awake_command

    assert provider.sleep_idle_agents(1e-6) == 1
    # The agent answers `sleep`, then execs the dormant program: seen a moment later.
    deadline = time.monotonic() + 30.0
    while "--dormant" not in (seen := agent_command(core, pod, pid)):
        assert time.monotonic() < deadline, f"the agent did not go dormant: {seen}"
        time.sleep(0.1)

    assert box.read_file("kept.txt").content == "kept"  # wakes it, in the same process
    assert int(box.call("info", {})["pid"]) == pid
    assert agent_command(core, pod, pid) == awake_command
    assert box.grep("kept", output_mode="files_with_matches").files == [
        "/mnt/user-data/workspace/kept.txt"
    ]
    assert [p.handle for p in box.list_processes().processes if p.running] == [job.handle]
    assert provider.sleep_idle_agents(1e-6) == 1, "it can sleep again"
    assert box.execute("echo again").stdout == "again\n"
