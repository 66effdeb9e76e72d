"""The pod is a real boundary: non-root, no privileges, hardened spec actually applied.

Checked from inside the pod (through the agent) and on the pod object the API stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sandkit_kubernetes.provider import KubernetesProvider

from sandkit import ErrorCode, SandboxError, SandboxKey

pytestmark = pytest.mark.kubernetes

UPLOADS = "/mnt/user-data/uploads"
WORKSPACE = "/mnt/user-data/workspace"


def key(name: str) -> SandboxKey:
    return SandboxKey("security", name)


@pytest.fixture(scope="module")
def hardened(tmp_path_factory: pytest.TempPathFactory, options_for: Any) -> Any:
    """One pod with the default hardening, shared by the checks below."""
    from sandkit import Settings

    root = tmp_path_factory.mktemp("k8s-security") / "data"
    skills = tmp_path_factory.mktemp("k8s-skills")
    (skills / "demo").mkdir()
    (skills / "demo" / "SKILL.md").write_text("# demo\n")
    for path in (skills, skills / "demo", skills / "demo" / "SKILL.md"):
        path.chmod(0o777)  # world-writable on the host: only the read-only mount can refuse
    provider = KubernetesProvider(
        Settings(data_root=root, skills_dir=skills, providers={"kubernetes": options_for()})
    )
    sandbox = provider.acquire(key("hardened"))
    yield provider, sandbox, root
    provider.shutdown()


def test_commands_and_agent_run_as_the_configured_non_root_user(hardened: Any) -> None:
    _, sb, _ = hardened
    assert sb.execute("id -u; id -g").stdout.split() == ["1000", "1000"]
    agent_pid = sb.info()["pid"]
    status = sb.execute(f"grep -E '^Uid:' /proc/{agent_pid}/status").stdout.split()
    assert status[1:] == ["1000"] * 4
    # PID 1 (the pod's keep-alive) is not root either.
    assert sb.execute("grep -E '^Uid:' /proc/1/status").stdout.split()[1:] == ["1000"] * 4


def test_no_capabilities_and_escalation_impossible(hardened: Any) -> None:
    _, sb, _ = hardened
    status = sb.execute("grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status")
    fields = {k: v.strip() for k, v in (line.split(":", 1) for line in status.stdout.splitlines())}
    assert int(fields["CapEff"], 16) == 0
    assert int(fields["CapPrm"], 16) == 0
    assert int(fields["CapBnd"], 16) == 0
    assert fields["NoNewPrivs"] == "1"
    assert fields["Seccomp"] == "2", "RuntimeDefault seccomp means a filter (mode 2)"


def test_root_filesystem_is_read_only_but_tmp_is_writable(hardened: Any) -> None:
    _, sb, _ = hardened
    denied = sb.execute("touch /etc/probe")
    assert denied.exit_code != 0 and "Read-only file system" in denied.stderr
    assert sb.execute("echo x > /tmp/probe && cat /tmp/probe").stdout == "x\n"


def test_read_only_mounts_are_read_only_in_the_kernel(hardened: Any) -> None:
    _, sb, _ = hardened
    for target in (f"{UPLOADS}/x", "/mnt/skills/x", "/mnt/skills/demo/SKILL.md"):
        result = sb.execute(f"touch {target}")
        assert result.exit_code != 0, target
        assert "Read-only file system" in result.stderr, (target, result.stderr)
    assert sb.execute("cat /mnt/skills/demo/SKILL.md").stdout == "# demo\n"
    with pytest.raises(SandboxError) as info:
        sb.write_file(f"{UPLOADS}/x", "no")
    assert info.value.code is ErrorCode.READ_ONLY


def test_files_written_in_the_pod_land_on_the_node_as_the_pod_user(hardened: Any) -> None:
    _, sb, root = hardened
    sb.write_file("made-by-agent.txt", "x")
    sb.execute("echo y > made-by-command.txt")
    k = key("hardened")
    workspace = root / "users" / k.user_id / "threads" / k.thread_id / "user-data" / "workspace"
    for name in ("made-by-agent.txt", "made-by-command.txt"):
        info = (workspace / name).stat()
        assert (info.st_uid, info.st_gid) == (1000, 1000)


def test_pod_spec_carries_the_hardening_and_labels(hardened: Any, core: Any) -> None:
    provider, sb, _ = hardened
    pod = core.read_namespaced_pod(sb.pod_name, provider.options.namespace)
    spec = pod.spec
    assert spec.automount_service_account_token is False
    assert spec.security_context.run_as_non_root is True
    assert (spec.security_context.run_as_user, spec.security_context.run_as_group) == (1000, 1000)
    assert spec.security_context.seccomp_profile.type == "RuntimeDefault"
    (container,) = spec.containers
    security = container.security_context
    assert security.allow_privilege_escalation is False
    assert security.privileged is False
    assert security.read_only_root_filesystem is True
    assert security.capabilities.drop == ["ALL"]
    assert container.resources.limits["memory"] == "1Gi"
    assert container.resources.requests["cpu"] == "100m"
    labels = pod.metadata.labels
    k = key("hardened")
    assert labels["sandkit.sandbox-id"] == k.sandbox_id
    assert labels["sandkit.user"] == k.user_id
    assert labels["sandkit.thread"] == k.thread_id
    assert labels["sandkit.owner"] == provider.options.owner
    assert pod.metadata.name == f"{provider.options.owner}-{k.sandbox_id}"
    # No service-account token inside the pod.
    assert sb.execute("ls /var/run/secrets/kubernetes.io 2>&1").exit_code != 0


def test_pod_template_overrides_are_merged(make_provider: Any, core: Any) -> None:
    provider = make_provider(
        pod_template={
            "metadata": {"labels": {"team": "blue"}},
            "spec": {"containers": [{"name": "sandbox", "env": [{"name": "X", "value": "1"}]}]},
        },
        resources={"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
    )
    sb = provider.acquire(key("template"))
    pod = core.read_namespaced_pod(sb.pod_name, provider.options.namespace)
    assert pod.metadata.labels["team"] == "blue"
    (container,) = pod.spec.containers
    assert [(e.name, e.value) for e in container.env] == [("X", "1")]
    assert container.resources.limits == {"memory": "512Mi"}
    assert container.security_context.capabilities.drop == ["ALL"]  # merged, not replaced


def test_unusual_ids_are_labelled_by_hash_and_annotated_exactly(
    make_provider: Any, core: Any, data_root: Path
) -> None:
    provider = make_provider()
    odd = SandboxKey("user.", "thread_")  # valid ids, invalid label values
    sb = provider.acquire(odd)
    pod = core.read_namespaced_pod(sb.pod_name, provider.options.namespace)
    assert pod.metadata.annotations["sandkit.user"] == "user."
    assert pod.metadata.annotations["sandkit.thread"] == "thread_"
    assert pod.metadata.labels["sandkit.user"].startswith("h-")
