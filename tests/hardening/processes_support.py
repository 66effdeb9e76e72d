"""What the process module sees of a box from outside it, without sandkit in the way.

A box's processes are looked at through the platform's own door (`docker exec` into the
container, the Kubernetes exec API into the pod, the E2B stand-in's container) or through
this host's /proc: the local provider's commands run here, and so does every process of a
runc box (Docker, the dev cluster's node, the E2B stand-in), which this kernel runs. A
gVisor box's processes run in its own kernel and are invisible here; what this host
sees of such a box is its sandbox (the Sentry, the gofer), in the box's cgroup.

Processes are found by a marker: a unique word the test puts in their argv (`exec -a`,
or the shell's `-c` text, which every subshell of it carries too). The scanner gets the
marker hex-encoded, so its own argv never holds it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandkit import SandboxKey

from .targets import GVISOR_KINDS, NAMESPACE, Target, pod_processes

# How long something that was ended may take to disappear (a pod's containers after the
# delete, a zombie's reaper). Polled: a quiet machine waits milliseconds.
GONE_S = 60.0

# Lists the box's live processes whose argv holds the marker (argv[1], hex): "pid argv",
# then SCAN_END: an output without it was cut short on its way out (the engine's exec
# stream), which must not read as "no such process".
SCAN_END = "#scan-complete"
SCAN = f"""\
import os, sys
want = bytes.fromhex(sys.argv[1])
me = os.getpid()
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == me:
        continue
    try:
        with open("/proc/%s/cmdline" % name, "rb") as f:
            argv = f.read()
        with open("/proc/%s/stat" % name, "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        continue
    if want in argv and state != b"Z":
        print(name, argv.replace(b"\\0", b" ").decode("utf-8", "replace")[:160])
print("{SCAN_END}")
"""
SCAN_TRIES = 5


def host_marked(marker: str, proc: str = "/proc") -> list[str]:
    """This host's live processes whose argv holds `marker` ("pid argv")."""
    want = marker.encode()
    found = []
    for name in os.listdir(proc):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            argv = Path(f"{proc}/{name}/cmdline").read_bytes()
            state = Path(f"{proc}/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if want in argv and state != b"Z":
            shown = argv.replace(b"\0", b" ").decode("utf-8", "replace")[:160]
            found.append(f"{name} {shown}")
    return found


def host_sees_boxes(target: Target) -> bool:
    """Does this host's /proc show the processes in the target's boxes?"""
    return target.kind not in GVISOR_KINDS


def _docker() -> Any:
    import docker

    return docker.from_env()


def _containers(target: Target, key: SandboxKey, all_states: bool = False) -> list[Any]:
    if target.kind == "e2b":
        from e2b_standin import META_PREFIX

        label = f"{META_PREFIX}sandkit.sandbox-id={key.sandbox_id}"
    else:
        label = f"sandkit.sandbox-id={key.sandbox_id}"
    return list(_docker().containers.list(all=all_states, filters={"label": label}))


def _pods(key: SandboxKey) -> list[Any]:
    from k8s_support import require_cluster

    _, core = require_cluster()
    selector = f"sandkit.sandbox-id={key.sandbox_id}"
    return list(core.list_namespaced_pod(NAMESPACE, label_selector=selector).items)


def box_marked(target: Target, key: SandboxKey, marker: str) -> list[str]:
    """The key's box's live processes whose argv holds `marker`, seen through the
    platform (local: this host). A box that does not run has none."""
    if target.kind == "local":
        return host_marked(marker)
    argv = ["python3", "-I", "-S", "-c", SCAN, marker.encode().hex()]
    found: list[str] = []
    for where, run in in_box(target, key):
        found.extend(_complete_scan(where, lambda run=run: run(argv)))
    return found


def in_box(target: Target, key: SandboxKey) -> list[tuple[str, Callable[[list[str]], str]]]:
    """For each running box of the key (pod, container): its name and a function that runs
    argv in it as the box's user, through the platform's own door, and returns stdout."""
    if target.kind.startswith("kubernetes"):
        from k8s_support import require_cluster
        from kubernetes.stream import stream

        _, core = require_cluster()

        def pod_exec(name: str, argv: list[str]) -> str:
            return str(
                stream(
                    core.connect_get_namespaced_pod_exec,
                    name,
                    NAMESPACE,
                    container="sandbox",
                    command=argv,
                    stderr=False,
                    stdin=False,
                    stdout=True,
                    tty=False,
                    _request_timeout=60,
                )
            )

        return [
            (pod.metadata.name, lambda argv, n=pod.metadata.name: pod_exec(n, argv))
            for pod in _pods(key)
            if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp
        ]

    def docker_exec(container: Any, argv: list[str]) -> str:
        result = container.exec_run(argv, stdout=True, stderr=False)
        assert result.exit_code == 0, f"{argv[:3]} in {container.name}: {result}"
        return str(result.output.decode("utf-8", "replace"))

    return [(c.name, lambda argv, c=c: docker_exec(c, argv)) for c in _containers(target, key)]


def _complete_scan(where: str, scan: Callable[[], str]) -> list[str]:
    """SCAN's lines from one box; again when its output came back cut short."""
    for _ in range(SCAN_TRIES):
        lines = scan().splitlines()
        if lines and lines[-1] == SCAN_END:
            return [line for line in lines[:-1] if line.strip()]
    raise AssertionError(f"the scan's output in {where} was cut short {SCAN_TRIES} times")


def box_state(target: Target, key: SandboxKey) -> str:
    """What the platform says of the key's box (for a failure's message)."""
    if target.kind == "local":
        return "local: no box"
    if target.kind.startswith("kubernetes"):
        return "; ".join(
            f"{p.metadata.name}: {p.status.phase} {p.status.reason}" for p in _pods(key)
        )
    shown = [
        "{Status} exit {ExitCode} oom {OOMKilled} error {Error!r}".format_map(c.attrs["State"])
        for c in _containers(target, key, all_states=True)
    ]
    return "; ".join(shown) or "no container"


def box_ids(target: Target, key: SandboxKey) -> list[str]:
    """What names the key's box in this host's cgroups: container ids, pod uids."""
    if target.kind == "local":
        return []
    if target.kind.startswith("kubernetes"):
        return [pod.metadata.uid for pod in _pods(key)]
    return [container.id for container in _containers(target, key, all_states=True)]


def host_tasks_of(target: Target, ids: list[str]) -> int:
    """Tasks on this host in the cgroups of the boxes `ids` (a box's own processes, or
    a gVisor box's sandbox): 0 once those boxes are really gone."""
    if target.kind.startswith("kubernetes"):
        return sum(pod_processes(uid) for uid in ids)
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cgroups = Path(f"/proc/{name}/cgroup").read_text()
        except OSError:
            continue
        count += any(cid in cgroups for cid in ids)
    return count


def poll(check: Callable[[], bool], wait_s: float = GONE_S, pause: float = 0.1) -> bool:
    """True as soon as `check()` is; False if it still is not after `wait_s`."""
    end = time.monotonic() + wait_s
    while not check():
        if time.monotonic() > end:
            return False
        time.sleep(pause)
    return True


def rss_bytes(status: str) -> int:
    """VmRSS of a /proc/<pid>/status text, in bytes."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in {status[:200]!r}")
