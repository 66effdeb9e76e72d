"""Bounds that only hold where the box has a kernel of its own (gVisor).

Under runc a box's tasks are bounded by its pids cgroup (Docker's `pids_limit`, the
kubelet's `podPidsLimit`) and a fork bomb meets EAGAIN. Under gVisor the same cgroup
counts the sandbox's *host* tasks (the Sentry and a stub thread or more per process),
and when it is full the Sentry cannot make one and the whole box dies: the caller would
see UNAVAILABLE where runc gives a failed fork. So in gVisor the agent bounds the box's
tasks inside its kernel, with RLIMIT_NPROC: gVisor counts it per user in *its* kernel,
i.e. per box (on a shared kernel it would count the user's tasks of every box, which is
why it is not used under runc). Fork then fails with EAGAIN at `exec_max_processes`
tasks of the box user (the agent's threads and the supervisor included, as a pids cgroup
counts them), before the host limit is reached, provided the host limit leaves room
(docs/security.md: gVisor).
"""

from __future__ import annotations

import os

from .limits import Limits

try:
    import resource
except ImportError:  # not Unix
    resource = None  # type: ignore[assignment]

# The version string gVisor's kernel reports (uname -v), whatever release it claims.
GVISOR_VERSION = "#1 SMP Sun Jan 10 15:06:54 PST 2016"


def in_gvisor() -> bool:
    """Whether this process runs on gVisor's application kernel."""
    uname = os.uname()
    return uname.release.endswith("-gvisor") or uname.version == GVISOR_VERSION


def bound_processes(limits: Limits) -> bool:
    """In gVisor, cap this process and its descendants at `limits.exec_max_processes`
    tasks of this user (RLIMIT_NPROC, never raised); elsewhere do nothing. Returns
    whether a bound was set."""
    if resource is None or not in_gvisor():
        return False
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    value = limits.exec_max_processes
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    if soft != resource.RLIM_INFINITY and soft <= value:
        return True  # already as tight (set by the platform or an earlier agent)
    resource.setrlimit(resource.RLIMIT_NPROC, (value, value))
    return True
