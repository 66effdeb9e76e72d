"""The two small programs the provider runs in a pod with the image's own python3.

`INIT` is the container's main process: it reaps orphans and exits at once on
SIGTERM (python3 as PID 1 would otherwise ignore it and every pod deletion
would wait out the grace period).

`BOOT` is what every agent exec starts. In one exec it installs the payload
(agent zipapp + ripgrep) when the pod does not have this version yet, then
becomes the agent: `os.execv` for stdio, so the exec stream that carried the
payload carries JSON-RPC next; a detached `--http` agent for HTTP. The
handshake on the stream:

    boot  -> "sandkit-boot 1 <installed digest or ->\\n"
    client -> 8-byte big-endian length + tar (length 0: nothing to install)
    client -> (http only) 8-byte length + JSON {"config": ..., "token": ...}
    boot  -> (http only) "sandkit-boot ready <pid>\\n" or "sandkit-boot failed <why>\\n"

Both run on python3 >= 3.9 with the standard library only.
"""

from __future__ import annotations

import struct

BOOT_MAGIC = b"sandkit-boot 1 "
READY = b"sandkit-boot ready "
FAILED = b"sandkit-boot failed "
LENGTH = struct.Struct(">Q")

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
    info = S.sigtimedwait(sigs, 3600)
    if info is not None and info.si_signo != S.SIGCHLD:
        break
"""

BOOT = """\
import json, os, socket, sys, tarfile, time
mode, digest, home, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
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
try:
    with open(home + '/.digest') as f:
        have = f.read().strip()
except OSError:
    have = '-'
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
            tmp = path + '.tmp'
            with open(tmp, 'wb') as f:
                f.write(tar.extractfile(member).read())
            os.chmod(tmp, member.mode & 0o755)
            os.replace(tmp, path)
    with open(home + '/.digest.tmp', 'w') as f:
        f.write(digest)
    os.replace(home + '/.digest.tmp', home + '/.digest')
agent = home + '/agent.pyz'
if mode == 'stdio':
    os.execv(sys.executable, [sys.executable, '-I', agent, '--stdio'])
spec = json.loads(frame())
run = home + '/http'
os.makedirs(run, mode=0o700, exist_ok=True)
def agent_pid():
    try:
        with open(run + '/pid') as f:
            pid = int(f.read())
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            return pid if b'agent.pyz' in f.read() else 0
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
    [sys.executable, '-I', agent, '--http', '0.0.0.0:%d' % port, '--config', config,
     '--token-file', token],
    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
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


def boot_argv(python: str, mode: str, digest: str, home: str, port: int) -> list[str]:
    return [python, "-I", "-c", BOOT, mode, digest, home, str(port)]


def frame(data: bytes) -> bytes:
    return LENGTH.pack(len(data)) + data
