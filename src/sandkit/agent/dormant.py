"""A sleeping agent: the smallest process that keeps a stdio channel and its pid.

An idle box's agent costs the host ~12 MiB of private memory (the runtime's modules,
caches, thread stacks). When its client sends `sleep` and nothing is running, the agent
execs `agent.pyz --dormant <its own arguments>` on the protocol pipes: a bare
interpreter (`-I -S`, ~3 MiB: `ctypes` to turn non-dumpable first, agent/private.py,
then `select`) that waits until the pipe has a frame and then execs a fresh agent with
the original arguments. The pid stays (a provider's liveness probe still sees its
agent), nothing of the old agent's state survives (secrets included), and the client
sends `initialize` before its next frame. A hang-up while dormant ends the process, as
EOF ends an agent.
"""

from __future__ import annotations

import os
import sys

DORMANT = "--dormant"


def agent_argv() -> list[str]:
    """The argv that runs this agent program again."""
    return [sys.executable, "-I", "-S", os.path.abspath(sys.argv[0])]


def become_dormant(proto_in: int, proto_out: int) -> None:
    """Exec the dormant program with the protocol pipes back on fds 0/1 (no return,
    unless the exec fails: then the agent carries on, and the client's `initialize`
    after `sleeping: true` fails, which closes the channel and starts a new agent)."""
    os.dup2(proto_in, 0)
    os.dup2(proto_out, 1)
    argv = [*agent_argv(), DORMANT, *sys.argv[1:]]
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        sys.stderr.write("sandkit-agent: cannot sleep: %s\n" % exc)


def wait_then_wake(args: list[str]) -> int:
    """`agent.pyz --dormant ARGS`: wait for stdin, then become `agent.pyz ARGS`."""
    import select

    poller = select.poll()
    poller.register(0, select.POLLIN)
    while True:
        try:
            events = poller.poll()
        except InterruptedError:
            continue
        if events:
            break
    if not events[0][1] & select.POLLIN:
        return 0  # hung up with nothing to read: the client is gone
    argv = agent_argv() + args
    os.execv(argv[0], argv)
    return 1  # not reached
