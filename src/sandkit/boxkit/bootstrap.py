"""Getting the agent into a box through nothing but an exec stream (stdlib programs).

For platforms that can start a process in a box with stdin/stdout attached
but cannot copy files in (a Kubernetes pod's `pods/exec`, a namespace entered
with nsenter): two small programs run with the image's own python3.

`INIT` is a box's main process: it reaps orphans and exits at once on
SIGTERM (python3 as PID 1 would otherwise ignore it and every pod deletion
would wait out the grace period).

`BOOT` is what every agent exec starts. In one exec it installs the payload
(agent zipapp + ripgrep) when the pod does not have this version yet, then
becomes the agent: `os.execv` for stdio, so the exec stream that carried the
payload carries JSON-RPC next; a detached `--http` agent for HTTP.

The installed files belong to the sandbox uid, so a command can replace
them. The agent is therefore never run from the file: BOOT reads it, checks
its sha256 against the one the provider passes (a mismatch counts as not
installed, and the provider sends the payload again), and runs exactly the
checked bytes from a sealed memory file (`/proc/self/fd/N`). A replaced
agent would otherwise be handed the `initialize` config, secrets included,
at the next channel start. The handshake on the stream:

    boot  -> "sandkit-boot 1 <installed digest or ->\\n"
    client -> 8-byte big-endian length + tar (length 0: nothing to install)
    client -> (http only) 8-byte length + JSON {"config": ..., "token": ...}
    boot  -> (http only) "sandkit-boot ready <pid>\\n" or "sandkit-boot failed <why>\\n"

Both run on python3 >= 3.9 with the standard library only.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from ..errors import ErrorCode, SandboxError
from ..transports.streams import ByteStream
from .payload import Payload

BOOT_MAGIC = b"sandkit-boot 1 "
READY = b"sandkit-boot ready "
FAILED = b"sandkit-boot failed "
LENGTH = struct.Struct(">Q")

# A pod's PID 1: reaps every orphan. It looks at least once a second, as tini does, not
# only on SIGCHLD: an unreaped zombie holds one of the box's process slots (RLIMIT_NPROC
# under gVisor), and reaping must not depend on a signal arriving (CI once saw a gVisor
# box's slots stay taken after a killed fork bomb; the cause is not confirmed).
INIT = """\
import os, signal as S
sigs = [S.SIGCHLD, S.SIGTERM, S.SIGINT, S.SIGHUP]
S.pthread_sigmask(S.SIG_BLOCK, sigs)
while True:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    info = S.sigtimedwait(sigs, 1)
    if info is not None and info.si_signo != S.SIGCHLD:
        break
"""

BOOT = """\
import fcntl, hashlib, json, os, socket, sys, tarfile, time
mode, digest, home, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
expect = sys.argv[5]
os.chdir('/')
def out(text):
    os.write(1, text.encode() + b'\\n')
def take(n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(0, min(n - len(buf), 1 << 20))
        if not chunk:
            sys.exit(5)
        buf += chunk
    return bytes(buf)
def frame():
    return take(int.from_bytes(take(8), 'big'))
def checked(data):
    return data if data is not None and hashlib.sha256(data).hexdigest() == expect else None
try:
    with open(home + '/agent.pyz', 'rb') as f:
        code = checked(f.read())
    with open(home + '/.digest') as f:
        have = f.read().strip() if code is not None else '-'
except OSError:
    code, have = None, '-'
out('sandkit-boot 1 ' + have)
archive = frame()
if archive:
    import io
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if member.name.startswith(('/', '..')) or '/../' in member.name:
                sys.exit(6)
            path = os.path.join(home, member.name)
            if member.isdir():
                os.makedirs(path, exist_ok=True)
                continue
            data = tar.extractfile(member).read()
            if member.name == 'agent.pyz':
                code = checked(data)
            tmp = '%s.%d.tmp' % (path, os.getpid())  # two agents may install at once
            with open(tmp, 'wb') as f:
                f.write(data)
            os.chmod(tmp, member.mode & 0o755)
            os.replace(tmp, path)
    tmp = '%s/.digest.%d.tmp' % (home, os.getpid())
    with open(tmp, 'w') as f:
        f.write(digest)
    os.replace(tmp, home + '/.digest')
if code is None:
    out('sandkit-boot failed the agent does not match its checksum')
    sys.exit(7)
def sealed(data):
    try:
        fd = os.memfd_create('sandkit-agent', os.MFD_ALLOW_SEALING)
    except (AttributeError, OSError):
        return None
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    try:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK
                    | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    except (AttributeError, OSError):
        os.close(fd)
        return None
    os.set_inheritable(fd, True)
    return fd
memfd = sealed(code)
# Without memfd_create (old kernel, some sandboxes) the checked file is run.
agent = '/proc/self/fd/%d' % memfd if memfd is not None else home + '/agent.pyz'
keep = (memfd,) if memfd is not None else ()
if mode == 'stdio':
    os.execv(sys.executable, [sys.executable, '-I', '-S', agent, '--stdio'])
spec = json.loads(frame())
run = home + '/http'
os.makedirs(run, mode=0o700, exist_ok=True)
def agent_pid():
    try:
        with open(run + '/pid') as f:
            pid = int(f.read())
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            argv = f.read().split(b'\\0')
        return pid if b'--http' in argv and b'--token-file' in argv else 0
    except (OSError, ValueError):
        return 0
old = agent_pid()
if old:
    os.kill(old, 15)
    for _ in range(500):
        if not os.path.exists('/proc/%d' % old):
            break
        time.sleep(0.01)
def private(name, text):
    path = run + '/' + name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
        f.write(text)
    return path
config = private('config.json', json.dumps(spec['config']))
token = private('token', spec['token'])
import subprocess
log = open(run + '/agent.log', 'ab')
proc = subprocess.Popen(
    [sys.executable, '-I', '-S', agent, '--http', '0.0.0.0:%d' % port, '--config', config,
     '--token-file', token],
    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, pass_fds=keep)
with open(run + '/pid', 'w') as f:
    f.write(str(proc.pid))
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    if proc.poll() is not None:
        with open(run + '/agent.log', 'rb') as f:
            tail = f.read()[-500:].decode('utf-8', 'replace').strip().splitlines()
        out('sandkit-boot failed exit %s: %s' % (proc.returncode, tail[-1] if tail else ''))
        sys.exit(0)
    try:
        socket.create_connection(('127.0.0.1', port), 0.5).close()
        out('sandkit-boot ready %d' % proc.pid)
        sys.exit(0)
    except OSError:
        time.sleep(0.01)
out('sandkit-boot failed the agent did not listen within 30 s')
"""


def boot_argv(
    python: str, mode: str, digest: str, home: str, port: int, agent_sha256: str
) -> list[str]:
    return [python, "-I", "-c", BOOT, mode, digest, home, str(port), agent_sha256]


def frame(data: bytes) -> bytes:
    return LENGTH.pack(len(data)) + data


def install(
    stream: ByteStream, readline: Callable[[], bytes], payload: Payload, where: str
) -> None:
    """Answer BOOT's greeting on a fresh exec: send the payload when the box lacks this
    version (or holds a copy whose agent fails the check), else an empty frame."""
    line = readline()
    if not line.startswith(BOOT_MAGIC):
        detail = stream.exit_detail() or line.decode("utf-8", "replace").strip()
        raise SandboxError(
            ErrorCode.UNAVAILABLE,
            f"the agent bootstrap did not start in {where}: {detail or 'no answer'}",
        )
    have = line[len(BOOT_MAGIC) :].strip().decode("ascii", "replace")
    stream.write(frame(payload.archive if have != payload.digest else b""))


def start_http_agent(
    stream: ByteStream, readline: Callable[[], bytes], config: dict[str, Any], token: str
) -> None:
    """After `install` in mode http: hand BOOT the agent's config and token (over the
    stream, never a file or argv); returns once it says the agent listens."""
    try:
        stream.write(frame(json.dumps({"config": config, "token": token}).encode()))
        line = readline()
    finally:
        stream.close()
    if not line.startswith(READY):
        why = line[len(FAILED) :] if line.startswith(FAILED) else line
        detail = why.decode("utf-8", "replace").strip() or stream.exit_detail()
        raise SandboxError(
            ErrorCode.UNAVAILABLE, f"the HTTP agent did not start: {detail or 'no answer'}"
        )
