"""The process supervisor of a box: background processes that outlive agents and channels.

An agent exits when its channel closes (a dropped stdio stream, a restarted
provider, an agent replaced by another replica's). Background processes must
not go with it, so they belong to `procd`: one small process per box (per
sandbox config), started by the first agent that needs it, detached from
every agent, holding a `ProcessTable`. Agents reach it over a unix socket in
the box's temp directory; any agent of the box — a new channel, another
provider replica — finds the same processes and their output.

Both ends prove they hold the sandbox's config (an HMAC challenge each way,
keyed by a hash of the config, which a command in the box never sees): a
command cannot drive the supervisor or pose as it to an agent, only make it
unreachable (it runs as the same user and could kill it anyway). procd is
non-dumpable like the agent, and exits once it has had no live process and
no request for `IDLE_EXIT_S`.

Wire: one JSON object per line. Handshake: server `{"nonce"}`, client
`{"proof", "nonce"}`, server `{"proof"}`; then requests `{"op", "params"}`,
answered `{"result"}` or `{"error": {"code", "message"}}`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time

from .errors import ErrorCode, SandboxError

# An agent builds its ProcdClient while it answers `initialize`; the modules only the
# supervisor or a first call needs (sockets, hashes, subprocess) load then.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any, Dict, List, Optional, Tuple

    from .context import Context
    from .processes import ProcessTable

IDLE_EXIT_S = 300.0
START_TIMEOUT_S = 10.0
# Frames are small (requests, and output capped by exec_output_bytes per read).
_MAX_LINE = 64 << 20
POOL_SIZE = 8
_OPS = ("spawn", "output", "write_stdin", "signal", "wait", "list", "end_all")


def config_key(config: Dict[str, Any]) -> bytes:
    """The shared secret of a sandbox's agents and its supervisor."""
    import hashlib

    canonical = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(b"sandkit-procd\0" + canonical).digest()


def socket_dir(config: Dict[str, Any], base: str) -> str:
    import hashlib

    name = hashlib.sha256(b"dir\0" + config_key(config)).hexdigest()[:16]
    return os.path.join(base, ".sandkit-procd-" + name)


def _proof(key: bytes, side: bytes, nonce: str) -> str:
    import hashlib
    import hmac

    return hmac.new(key, side + nonce.encode(), hashlib.sha256).hexdigest()


def _send(sock: socket.socket, message: Dict[str, Any]) -> None:
    sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")


class _Lines:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()

    def next(self) -> Optional[Dict[str, Any]]:
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[:end])
                del self._buf[: end + 1]
                value = json.loads(line)
                if not isinstance(value, dict):
                    raise ValueError("not an object")
                return value
            if len(self._buf) > _MAX_LINE:
                raise ValueError("line too long")
            data = self._sock.recv(1 << 16)
            if not data:
                return None
            self._buf += data


# -- the server ---------------------------------------------------------------------------


class Supervisor:
    def __init__(self, table: ProcessTable, key: bytes, path: str) -> None:
        self.table = table
        self.key = key
        self.path = path
        import socket

        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._stop = threading.Event()

    def bind(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._sock.bind(self.path)
        os.chmod(self.path, 0o600)
        self._sock.listen(64)

    def serve(self) -> None:
        import socket

        threading.Thread(target=self._idle_watch, daemon=True).start()
        self._sock.settimeout(1.0)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            try:
                threading.Thread(target=self._connection, args=(conn,), daemon=True).start()
            except RuntimeError:  # no room for a thread (a full box): this client sees EOF
                conn.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def _idle_watch(self) -> None:
        while not self._stop.wait(5.0):
            idle = time.monotonic() - self.table.last_activity
            if self.table.live_count == 0 and idle > IDLE_EXIT_S:
                self._stop.set()
                with contextlib.suppress(OSError):
                    self._sock.close()

    def _connection(self, conn: socket.socket) -> None:
        import hmac
        import secrets

        with conn:
            try:
                lines = _Lines(conn)
                nonce = secrets.token_hex(16)
                _send(conn, {"nonce": nonce})
                hello = lines.next()
                if not hello or not hmac.compare_digest(
                    str(hello.get("proof", "")), _proof(self.key, b"client", nonce)
                ):
                    return  # not one of the box's agents
                _send(conn, {"proof": _proof(self.key, b"server", str(hello.get("nonce", "")))})
                while True:
                    request = lines.next()
                    if request is None:
                        return
                    _send(conn, self._answer(request))
            except (OSError, ValueError):
                return

    def _answer(self, request: Dict[str, Any]) -> Dict[str, Any]:
        op = request.get("op")
        params = request.get("params") or {}
        if op not in _OPS or not isinstance(params, dict):
            return {"error": {"code": "INVALID_ARGUMENT", "message": "bad supervisor request"}}
        try:
            return {"result": getattr(self.table, str(op))(**params)}
        except SandboxError as exc:
            return {"error": exc.to_dict()}
        except TypeError as exc:
            return {"error": {"code": "INVALID_ARGUMENT", "message": str(exc)[:500]}}
        except Exception as exc:  # a bug: say what kind, never a traceback
            return {"error": {"code": "INTERNAL", "message": type(exc).__name__}}


def serve(directory: str) -> int:
    """`agent.pyz --procd DIR`: read the config from stdin, detach, serve until idle."""
    from ..agent.protocol import context_from_config
    from .processes import ProcessTable

    config = json.loads(sys.stdin.buffer.read())
    context = context_from_config(config)
    key = config_key(config)
    path = os.path.join(directory, "sock")
    supervisor = Supervisor(ProcessTable(context), key, path)
    supervisor.bind()  # before detaching: the starter waits for the socket
    if os.fork() > 0:
        os._exit(0)  # the starting agent reaps this; the supervisor is init's child
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    supervisor.serve()
    return 0


# -- the client (in the agent) --------------------------------------------------------------


class ProcdClient:
    """An agent's view of its box's supervisor; starts it when none answers."""

    def __init__(
        self, ctx: Context, config: Dict[str, Any], agent: List[str], base: Optional[str] = None
    ) -> None:
        """`agent` is the argv that runs the agent zipapp (`--procd DIR` is appended);
        `base` the directory of the supervisor's socket directory (default: the temp
        directory). Key and directory are worked out at the first call, not while the
        agent answers `initialize`."""
        self._ctx = ctx
        self._config = config
        self._base = base
        self._place: Optional[Tuple[bytes, str]] = None
        self._agent = agent
        self._start_lock = threading.Lock()
        # Authenticated connections kept for the next calls (one handshake, not one per call).
        self._pool_lock = threading.Lock()
        self._idle: List[socket.socket] = []

    def _where(self) -> Tuple[bytes, str]:
        """The key shared with the supervisor, and the directory of its socket."""
        place = self._place
        if place is None:
            base = self._base
            if base is None:
                import tempfile

                base = tempfile.gettempdir()
            place = self._place = (config_key(self._config), socket_dir(self._config, base))
        return place

    @property
    def _key(self) -> bytes:
        return self._where()[0]

    @property
    def _dir(self) -> str:
        return self._where()[1]

    @property
    def _path(self) -> str:
        return os.path.join(self._where()[1], "sock")

    # ProcessHost -------------------------------------------------------------------------

    def spawn(self, command: Any, env: Any, cwd: Any) -> Dict[str, Any]:
        return self._call("spawn", {"command": command, "env": env, "cwd": cwd}, start=True)

    def output(self, handle: Any, since: Any, wait_s: Any) -> Dict[str, Any]:
        return self._call("output", {"handle": handle, "since": since, "wait_s": wait_s})

    def write_stdin(self, handle: Any, data: Any, eof: Any) -> Dict[str, Any]:
        return self._call("write_stdin", {"handle": handle, "data": data, "eof": eof})

    def signal(self, handle: Any, sig: Any) -> Dict[str, Any]:
        return self._call("signal", {"handle": handle, "sig": sig})

    def wait(self, handle: Any, timeout: Any) -> Dict[str, Any]:
        return self._call("wait", {"handle": handle, "timeout": timeout})

    def list(self) -> Dict[str, Any]:
        return self._call("list", {}, absent={"processes": []})

    def end_all(self) -> Dict[str, Any]:
        return self._call("end_all", {}, absent={"processes": []})

    # plumbing -------------------------------------------------------------------------------

    def _call(
        self,
        op: str,
        params: Dict[str, Any],
        start: bool = False,
        absent: Optional[Dict[str, Any]] = None,
    ) -> Dict[str, Any]:
        reply = self._pooled(op, params)  # an idle connection may be stale: then None
        if reply is None:
            sock = self._connect()
            if sock is None:
                if absent is not None:
                    return absent  # no supervisor, so no processes
                if not start:
                    raise SandboxError(
                        ErrorCode.NOT_FOUND,
                        "no background process %r" % str(params.get("handle", ""))[:80],
                    )
                sock = self._start()
            reply = self._exchange(sock, op, params)
            if reply is None:
                raise SandboxError(ErrorCode.UNAVAILABLE, "the box's process supervisor went away")
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            raise SandboxError.from_dict(
                {"code": error.get("code", "INTERNAL"), "message": error.get("message", "")}
            )
        result = reply.get("result")
        if not isinstance(result, dict):
            raise SandboxError(ErrorCode.INTERNAL, "the process supervisor sent a bad answer")
        return result

    def _pooled(self, op: str, params: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """The reply over an idle connection, or None when there is none or it is stale."""
        with self._pool_lock:
            sock = self._idle.pop() if self._idle else None
        return None if sock is None else self._exchange(sock, op, params)

    def _exchange(
        self, sock: socket.socket, op: str, params: Dict[str, Any]
    ) -> Optional[Dict[str, Any]]:
        try:
            _send(sock, {"op": op, "params": params})
            reply = _Lines(sock).next()
        except (OSError, ValueError):
            reply = None
        if reply is None:
            sock.close()
        else:
            self._give_back(sock)
        return reply

    def _give_back(self, sock: socket.socket) -> None:
        with self._pool_lock:
            if len(self._idle) < POOL_SIZE:
                self._idle.append(sock)
                return
        sock.close()

    def _connect(self) -> Optional[socket.socket]:
        """A connection that passed the handshake, or None when no supervisor listens."""
        import hmac
        import secrets
        import socket

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self._path)
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            return None
        except OSError as exc:
            sock.close()
            raise SandboxError(
                ErrorCode.UNAVAILABLE, "cannot reach the box's process supervisor: %s" % exc
            ) from None
        try:
            lines = _Lines(sock)
            hello = lines.next() or {}
            mine = secrets.token_hex(16)
            _send(
                sock,
                {"proof": _proof(self._key, b"client", str(hello.get("nonce"))), "nonce": mine},
            )
            answer = lines.next() or {}
            if not hmac.compare_digest(
                str(answer.get("proof", "")), _proof(self._key, b"server", mine)
            ):
                raise ValueError("unverified")
        except (OSError, ValueError):
            sock.close()
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                "the process supervisor socket of this box did not prove it is the box's own "
                "(another process holds it); background processes are unavailable",
            ) from None
        return sock

    def _start(self) -> socket.socket:
        """Start the supervisor (one per box, even when agents race to), then connect."""
        import fcntl
        import subprocess

        with self._start_lock:
            os.makedirs(self._dir, mode=0o700, exist_ok=True)
            with open(os.path.join(self._dir, "lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                sock = self._connect()
                if sock is not None:
                    return sock
                try:
                    starter = subprocess.Popen(
                        [*self._agent, "--procd", self._dir],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        cwd="/",
                        close_fds=True,
                        pass_fds=_agent_fds(self._agent),
                        start_new_session=True,
                    )
                    starter.communicate(json.dumps(self._config).encode(), timeout=START_TIMEOUT_S)
                except (OSError, subprocess.SubprocessError) as exc:
                    raise SandboxError(
                        ErrorCode.UNAVAILABLE, "cannot start the process supervisor: %s" % exc
                    ) from None
                deadline = time.monotonic() + START_TIMEOUT_S
                pause = 0.001
                while time.monotonic() < deadline:
                    sock = self._connect()
                    if sock is not None:
                        return sock
                    time.sleep(pause)
                    pause = min(pause * 2, 0.05)
        raise SandboxError(ErrorCode.UNAVAILABLE, "the process supervisor did not start")


def _agent_fds(argv: List[str]) -> Tuple[int, ...]:
    """An agent run from a sealed memory file (/proc/self/fd/N) passes that fd on."""
    fds = []
    for arg in argv:
        if arg.startswith("/proc/self/fd/") and arg[len("/proc/self/fd/") :].isdigit():
            fds.append(int(arg[len("/proc/self/fd/") :]))
    return tuple(fds)
