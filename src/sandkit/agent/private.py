"""PR_SET_DUMPABLE 0 for every process of the agent program that holds its channel.

Commands run as the agent's user. While a process is dumpable, such a command may
read its memory and environ through /proc, and open its pipes (`/proc/PID/fd/0`):
an fd opened that way stays open after the process turns non-dumpable, and reads
whatever the client sends later, the `initialize` with the secrets included. An
execve makes a process dumpable again, so every program the agent execs into (the
agent, the dormant waiter, the supervisor) calls this first, before anything else
loads: the moment a command could catch is the interpreter's start alone
(docs/security.md, "Secrets").
"""

from __future__ import annotations

PR_SET_DUMPABLE = 4  # linux/prctl.h


def keep_memory_private() -> None:
    """Best effort: without ctypes, libc or prctl the process carries on as it is."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        pass
