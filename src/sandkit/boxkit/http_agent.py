"""Carrier http: an `agent.pyz --http` in the box, reached over the network with a token.

`AgentSlot` holds a box's current agent and `SlotTransport` is a sandbox's
view of it, so the provider can replace the agent (new token, new address)
behind a sandbox a caller already holds. Tokens are random per agent start,
or derived from the operator's `token_secret` and the box's identity so
provider replicas sharing the secret reuse a running agent.

For a provider that can copy a tar archive into the box (Docker's
`put_archive`): the bearer token and the agent config (which holds the
secrets to redact) reach the box as files, never through argv, the
environment or labels — `agent_files` puts them into `/opt/sandkit-run/run/`, a
root-owned directory with mode 1733, so the sandbox user can open and delete
a file whose (random) name it knows but can neither list the directory nor
chmod it, as 0400 files owned by the sandbox uid. The agent deletes them
after reading. `LAUNCH` (run by a detached exec) stops any earlier HTTP
agent of the box (its token is lost with the provider that started it) and
then becomes the new agent (`execv`), so the agent outlives the exec and,
unlike a main process, a crashed agent does not take the box with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import io
import json
import secrets
import tarfile
import time
from collections.abc import Callable
from typing import Any

from ..agent.__main__ import CONFIG_FILE_ENV, TOKEN_FILE_ENV
from ..errors import ErrorCode, SandboxError
from ..transports.base import SwitchingTransport, Transport
from ..transports.http import HttpTransport
from .payload import AGENT_DIR, AGENT_PATH

# Beside the agent, not under it: AGENT_DIR may be a read-only mount (Docker binds it).
# RUN_DIR itself comes from the archive (its mode matters); its parent is what a
# provider writes the archive into (a writable volume).
RUN_PARENT = f"{AGENT_DIR}-run"
RUN_DIR = f"{RUN_PARENT}/run"
READY_TIMEOUT_S = 30.0

# python3 -I -S -c LAUNCH AGENT_PATH PORT   (python3 >= 3.9, stdlib only), with the
# config's and the token's file names in its environment (`launch_env`), never in argv:
# /proc/PID/cmdline is readable by every process in the box. It turns non-dumpable first
# (its environ is then the box user's no more), the agent does the same at its start.
LAUNCH = """\
try:
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
except Exception:
    pass
import os, signal, sys, time
agent, port = sys.argv[1:3]
me = os.getpid()
def agents():
    found = []
    for name in os.listdir('/proc'):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open('/proc/%s/cmdline' % name, 'rb') as f:
                argv = f.read().split(b'\\0')
        except OSError:
            continue
        if agent.encode() in argv and b'--http' in argv:
            found.append(int(name))
    return found
def alive(pid):
    try:
        with open('/proc/%d/stat' % pid, 'rb') as f:
            return f.read().rpartition(b')')[2].split()[0] != b'Z'
    except (OSError, IndexError):
        return False
old = agents()
for sig in (signal.SIGTERM, signal.SIGKILL):
    for pid in old:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    deadline = time.monotonic() + 2.0
    while old and time.monotonic() < deadline:
        time.sleep(0.01)
        old = [pid for pid in old if alive(pid)]
    if not old:
        break
os.execv(sys.executable, [sys.executable, '-I', '-S', agent, '--http', '0.0.0.0:' + port])
"""

_EXIT_REASONS = {
    3: "the image's python3 is older than 3.9 or lacks a standard-library module",
    4: "it refused its config or token",
    126: "python3 cannot be executed",
    127: "python3 was not found",
}


@dataclasses.dataclass(eq=False)
class AgentSlot:
    """The box's current HTTP agent; replaced when the agent is (re)started."""

    transport: HttpTransport | None = None
    # A call could not reach the agent: later calls fail fast, acquire looks again.
    down: bool = False

    def replace(self, transport: HttpTransport | None) -> None:
        old, self.transport = self.transport, transport
        self.down = False
        if old is not None and old is not transport:
            old.close()


class SlotTransport(SwitchingTransport):
    """A sandbox's view of its box's agent, which changes when the agent restarts.

    An agent that cannot be reached makes this call and every later one
    `UNAVAILABLE` until the next `acquire` restarts it: a box is never revived
    behind the caller's back.
    """

    def __init__(self, slot: AgentSlot, sandbox_id: str) -> None:
        super().__init__()
        self._slot = slot
        self._sandbox_id = sandbox_id

    def _live(self) -> HttpTransport:
        transport = self._slot.transport
        if transport is None or self._slot.down:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"the agent of sandbox {self._sandbox_id} is not reachable; acquire it again",
            )
        return transport

    def _mark_down(self, transport: Transport) -> None:
        if self._slot.transport is transport:
            self._slot.down = True


def make_token(box_uid: str, secret: str | None) -> str:
    """Random per agent start, or derived from `secret` and the box's identity (shared)."""
    if secret is None:
        return secrets.token_urlsafe(32)
    message = f"sandkit-agent-token\0{box_uid}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


@dataclasses.dataclass(frozen=True)
class AgentFiles:
    """The archive for `put_archive(RUN_PARENT, ...)` and the paths it creates."""

    archive: bytes
    config_path: str
    token_path: str


def agent_files(config: dict[str, Any], token: str, uid: int, gid: int) -> AgentFiles:
    """Config and token as 0400 files of `uid` under random names in the unlistable RUN_DIR
    (the archive holds RUN_DIR itself, mode 1733, and the two files)."""
    nonce = secrets.token_hex(16)
    members = [
        (f"run/{nonce}.json", json.dumps(config).encode()),
        (f"run/{nonce}.token", token.encode()),
    ]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        run = tarfile.TarInfo("run")
        run.type = tarfile.DIRTYPE
        run.mode = 0o1733  # root's: write + search for all, no listing, sticky
        tar.addfile(run)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o400
            info.uid, info.gid = uid, gid
            tar.addfile(info, io.BytesIO(data))
    return AgentFiles(
        buf.getvalue(), f"{RUN_PARENT}/{members[0][0]}", f"{RUN_PARENT}/{members[1][0]}"
    )


def launch_argv(python: str, port: int) -> list[str]:
    return [python, "-I", "-S", "-c", LAUNCH, AGENT_PATH, str(port)]


def launch_env(files: AgentFiles) -> dict[str, str]:
    """Where LAUNCH's agent finds its config and token (see LAUNCH: not in argv)."""
    return {CONFIG_FILE_ENV: files.config_path, TOKEN_FILE_ENV: files.token_path}


def wait_ready(
    transport: HttpTransport,
    exit_code: Callable[[], int | None],
    timeout: float = READY_TIMEOUT_S,
) -> None:
    """Until the new agent answers a ping with its token.

    Not /healthz: an earlier agent the launcher is still stopping would answer
    that too. `exit_code()` says whether the launch exec has ended (and how).
    """
    deadline = time.monotonic() + timeout
    next_check = 0.0
    while True:
        try:
            transport.call("ping", {}, 2.0)
            return
        except SandboxError as exc:
            if exc.code not in (ErrorCode.UNAVAILABLE, ErrorCode.ACCESS_DENIED):
                raise
        now = time.monotonic()
        if now >= next_check:
            code = exit_code()
            if code is not None:
                reason = _EXIT_REASONS.get(code, "")
                raise SandboxError(
                    ErrorCode.UNAVAILABLE,
                    f"the HTTP agent exited with code {code}" + (f": {reason}" if reason else ""),
                )
            next_check = now + 0.1
        if now > deadline:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"the HTTP agent at {transport.base_url} did not answer within {timeout:.0f} s",
            )
        time.sleep(0.01)
