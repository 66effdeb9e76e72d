"""The container is a real boundary: non-root, no privileges, limits that hold.

Each test acquires a box with the default hardening (only the limits a test
needs are lowered) and checks the effect from inside, through the agent.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from sandkit_docker.provider import DockerProvider

from sandkit import ErrorCode, SandboxError, SandboxKey

pytestmark = pytest.mark.docker

UPLOADS = "/mnt/user-data/uploads"
WORKSPACE = "/mnt/user-data/workspace"


def key(name: str) -> SandboxKey:
    return SandboxKey("hardening", name)


def test_commands_and_agent_run_as_the_configured_non_root_user(
    provider: DockerProvider,
) -> None:
    sb = provider.acquire(key("uid"))
    result = sb.execute("id -u; id -g; ps -o user= -p $PPID 2>/dev/null || true")
    uid, gid = result.stdout.split()[:2]
    assert (uid, gid) == ("1000", "1000")
    # The agent itself (the command's grandparent process) is not root either.
    agent_pid = sb.info()["pid"]
    status = sb.execute(f"grep -E '^Uid:' /proc/{agent_pid}/status").stdout.split()
    assert status[1:] == ["1000"] * 4


def test_no_capabilities_and_no_new_privileges(provider: DockerProvider) -> None:
    sb = provider.acquire(key("caps"))
    status = sb.execute("grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs):' /proc/self/status")
    fields = dict(line.split(":", 1) for line in status.stdout.strip().splitlines())
    assert int(fields["CapEff"], 16) == 0
    assert int(fields["CapPrm"], 16) == 0
    assert int(fields["CapBnd"], 16) == 0
    assert fields["NoNewPrivs"].strip() == "1"


def test_host_config_carries_the_hardening(provider: DockerProvider, docker_client: Any) -> None:
    sb = provider.acquire(key("inspect"))
    assert sb.sandbox_id
    (container,) = docker_client.containers.list(
        filters={"label": f"sandkit.sandbox-id={key('inspect').sandbox_id}"}
    )
    host = container.attrs["HostConfig"]
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["ReadonlyRootfs"] is True
    assert host["Init"] is True
    assert host["NetworkMode"] == "none"
    assert host["PidsLimit"] == 256
    assert host["Memory"] == 1024**3
    assert host["MemorySwap"] == host["Memory"]
    assert host["NanoCpus"] == 10**9
    assert container.attrs["Config"]["User"] == "1000:1000"
    labels = container.attrs["Config"]["Labels"]
    assert labels["sandkit.user"] == "hardening"
    assert labels["sandkit.thread"] == "inspect"
    assert labels["sandkit.sandbox-id"] == key("inspect").sandbox_id
    assert container.name.endswith(key("inspect").sandbox_id)


def test_root_filesystem_is_read_only_but_tmp_is_writable(provider: DockerProvider) -> None:
    sb = provider.acquire(key("rootfs"))
    denied = sb.execute("touch /etc/probe")
    assert denied.exit_code != 0
    assert "Read-only file system" in denied.stderr
    assert sb.execute("echo x > /tmp/probe && cat /tmp/probe").stdout == "x\n"
    # The agent's own files cannot be replaced by the sandbox user.
    assert sb.execute("echo x > /opt/sandkit/agent.pyz").exit_code != 0


def test_no_network_by_default(provider: DockerProvider) -> None:
    sb = provider.acquire(key("net"))
    interfaces = sb.execute("tail -n +3 /proc/net/dev | cut -d: -f1").stdout.split()
    assert interfaces == ["lo"]


def test_read_only_mounts_are_read_only_in_the_kernel(make_provider: Any, tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    (skills / "demo").mkdir(parents=True)
    (skills / "demo" / "SKILL.md").write_text("# demo\n")
    extra = tmp_path / "refdata"
    extra.mkdir()
    (extra / "table.csv").write_text("a,b\n")
    # World-writable on the host: only the read-only mount can refuse a write.
    for path in (skills, skills / "demo", skills / "demo" / "SKILL.md", extra):
        path.chmod(0o777)
    provider = make_provider(
        {"skills_dir": skills, "mounts": [{"virtual": "/data/ref", "host": extra}]}
    )
    sb = provider.acquire(key("ro"))
    # The shell bypasses PathMapping entirely: only the kernel can refuse these.
    for target in (f"{UPLOADS}/x", "/mnt/skills/x", "/mnt/skills/demo/SKILL.md", "/data/ref/x"):
        result = sb.execute(f"touch {target}")
        assert result.exit_code != 0, target
        assert "Read-only file system" in result.stderr, (target, result.stderr)
    assert sb.execute("cat /mnt/skills/demo/SKILL.md /data/ref/table.csv").stdout == (
        "# demo\na,b\n"
    )
    # The API refuses the same writes with READ_ONLY before touching the kernel.
    with pytest.raises(SandboxError) as info:
        sb.write_file(f"{UPLOADS}/x", "no")
    assert info.value.code is ErrorCode.READ_ONLY
    # The writable mounts are writable by the container's user, and land on the host.
    assert sb.execute(f"touch {WORKSPACE}/ok /mnt/user-data/outputs/ok").exit_code == 0


def test_writable_uploads_when_configured(make_provider: Any, data_root: Path) -> None:
    provider = make_provider({"uploads_read_only": False})
    sb = provider.acquire(key("rw-uploads"))
    assert sb.execute(f"echo hi > {UPLOADS}/note.txt").exit_code == 0
    host = data_root / "users/hardening/threads/rw-uploads/user-data/uploads/note.txt"
    assert host.read_text() == "hi\n"


def test_files_written_in_the_box_are_owned_by_the_container_user_on_the_host(
    provider: DockerProvider, data_root: Path
) -> None:
    sb = provider.acquire(key("owner"))
    sb.write_file("made-by-agent.txt", "x")
    sb.execute("echo y > made-by-command.txt")
    workspace = data_root / "users/hardening/threads/owner/user-data/workspace"
    for name in ("made-by-agent.txt", "made-by-command.txt"):
        info = os.stat(workspace / name)
        assert (info.st_uid, info.st_gid) == (1000, 1000)


def test_a_fork_bomb_hits_the_pids_limit_and_the_box_survives(make_provider: Any) -> None:
    provider = make_provider(pids_limit=128)
    sb = provider.acquire(key("forkbomb"))
    agent_pid = sb.info()["pid"]
    # The bomb runs until the command's timeout kills its process group.
    result = sb.execute("bomb() { bomb | bomb & }; bomb; sleep 60", timeout=5)
    assert result.timed_out
    assert "fork" in result.stderr.lower() or "resource" in result.stderr.lower()
    # The agent survived (same process) and can still start commands.
    after = sb.execute("echo alive", timeout=30)
    assert after.stdout == "alive\n"
    assert sb.info()["pid"] == agent_pid
    count = int(sb.execute("ls /proc | grep -c '^[0-9]'").stdout)
    assert count < 20, "the bomb's processes were not all killed"


def test_a_memory_hog_is_killed_without_killing_the_agent(make_provider: Any) -> None:
    provider = make_provider(mem_limit="256m")
    sb = provider.acquire(key("memhog"))
    agent_pid = sb.info()["pid"]
    hog = sb.execute(
        "python3 -c 'x = []\nwhile True: x.append(bytearray(16 * 1024 * 1024))'", timeout=60
    )
    assert hog.exit_code == 137 or (hog.exit_code or 0) < 0, hog
    assert not hog.timed_out
    assert sb.info()["pid"] == agent_pid
    assert sb.execute("echo fine").stdout == "fine\n"
