"""A stand-in for the E2B SDK's `Sandbox` class, for tests only.

The E2B cloud is not reachable from CI, so the provider is tested against
this class instead of `e2b.Sandbox`. It implements the SDK surface the
provider uses — `create`, `connect`, `list` (a paginator, metadata and
state filters), `kill`, `pause`, `set_timeout`, `get_info`, `files.write /
read / exists`, `commands.run` (foreground, or background with stdin),
`commands.send_stdin / close_stdin / kill`, `get_host`, `update_network`,
`traffic_access_token` — with the SDK's
signatures, return types and exception classes, on top of a real local
Docker container per sandbox. Only the control plane is substituted: the
agent, its carrier and the runtime run for real, inside the container.

How it mirrors the service:
- a sandbox is a container (the local base image) whose uid 1000 is renamed
  `user` with home /home/user, as in E2B templates; commands run through
  `/bin/bash -l -c` as `user` unless `user="root"`; stdout reaches callbacks
  decoded as UTF-8 text, like the SDK's;
- metadata, template and id live in container labels, so separate provider
  instances (separate "processes") see the same sandboxes, like the cloud; a
  sandbox another process's stand-in created (one that was then killed, say)
  is taken over from its container, since the service outlives its clients;
- timeouts are enforced by a timer: an expired sandbox is paused or killed
  per `lifecycle={"on_timeout": ...}`; `connect` resumes a paused sandbox and
  only lengthens a running one's timeout; `set_timeout` sets it outright;
- pause ends every command stream of the sandbox (as a snapshot drops
  connections) and freezes the container (`docker pause`); kill removes it;
- data-plane calls on a paused or missing sandbox raise
  `SandboxNotRunningException`; control-plane calls without an API key raise
  `AuthenticationException`; faults can be injected per operation
  (`cloud.inject("create", RateLimitException(...))`);
- `cloud.calls` counts calls per operation (the round trips a real client
  would make).

Network options are recorded, not enforced: `allow_internet_access` and
`network` at create and every `update_network` payload per sandbox
(`cloud.network(sandbox_id)`), each first built by the installed SDK's own
request builders (so a payload the SDK would refuse is refused here too).
`allow_public_traffic: False` gives the sandbox a `traffic_access_token`,
returned by `create` and `connect` as the SDK does; nothing checks it.
The containers keep Docker's default bridge network whatever the options
say: the HTTP carrier's tests reach the agent through it, and Docker has no
cheap way to drop a container's outbound traffic but keep inbound, so a
deny-all config is not turned into a network mode either. `get_host`
returns the container's address and port (reachable, like the SDK's debug
mode's `localhost:<port>`), or with `cloud.host_style = "e2b"` E2B's form
`<port>-<sandbox id>.<domain>`.

Not mirrored: templates other than a name -> image table, the SDK's
retries, HTTP/2 and TLS. Latencies are a local Docker engine's, not the
cloud's.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import datetime
import functools
import inspect
import io
import itertools
import os
import secrets
import socket
import struct
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from e2b import (
    AuthenticationException,
    CommandExitException,
    CommandHandle,
    CommandResult,
    FileNotFoundException,
    NotFoundException,
    SandboxException,
    SandboxInfo,
    SandboxNotFoundException,
    SandboxNotRunningException,
    SandboxQuery,
    SandboxState,
    WriteInfo,
)
from e2b import Sandbox as RealSandbox
from e2b.sandbox.sandbox_api import build_network_config, build_network_update_body
from e2b.sandbox_sync.commands.command import Commands as RealCommands
from e2b.sandbox_sync.filesystem.filesystem import Filesystem as RealFilesystem

VM_MEMORY_BYTES = 512 * 1024 * 1024
VM_TASKS = 256
LABEL_SESSION = "sandkit.e2b-standin"
LABEL_ID = "e2b.sandbox-id"
LABEL_TEMPLATE = "e2b.template"
LABEL_ON_TIMEOUT = "e2b.on-timeout"
META_PREFIX = "e2b.meta."
PAUSE_WAITS_FOR_EXECS_S = 5.0  # see Cloud._let_starting_execs_start
DEFAULT_TIMEOUT_S = 300
USERS = {"user": ("user", "/home/user"), "root": ("root", "/root")}
_HEADER = struct.Struct(">BxxxL")

# uid 1000 becomes `user` (home /home/user), whatever the image called it.
_MAKE_USER = (
    "id -u user >/dev/null 2>&1 && exit 0; "
    "n=$(getent passwd 1000 | cut -d: -f1); g=$(getent group 1000 | cut -d: -f1); "
    'if [ -n "$n" ]; then usermod -l user -d /home/user -m "$n" && '
    '{ [ -z "$g" ] || groupmod -n user "$g"; }; '
    "else useradd -m -u 1000 -s /bin/bash user; fi"
)


F = TypeVar("F", bound=Callable[..., Any])


def mirrors(real: Callable[..., Any], skip_first: bool = False) -> Callable[[F], F]:
    """Refuse (TypeError) any call the real SDK method would not accept.

    Every call the provider makes through the stand-in is bound against the
    installed SDK's signature first, so the two cannot drift apart unnoticed.
    `skip_first`: the stand-in's classmethod gets `cls`, the real signature not.
    """
    signature = inspect.signature(real)

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            signature.bind(*(args[1:] if skip_first else args), **kwargs)
            return function(*args, **kwargs)

        return checked  # type: ignore[return-value]

    return decorate


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _not_running(sandbox_id: str) -> SandboxNotRunningException:
    return SandboxNotRunningException(
        f"The sandbox {sandbox_id} was not found: The sandbox was killed or reached its timeout."
    )


class _Process:
    """One command started in the background: its exec socket and bookkeeping."""

    def __init__(self, pid: int, exec_id: str, raw: Any) -> None:
        self.pid = pid
        self.exec_id = exec_id
        self.raw = raw
        self.sock: socket.socket = raw._sock if hasattr(raw, "_sock") else raw
        response = getattr(raw, "_response", None)
        try:
            self.reader: Any = response.raw._fp.fp  # bytes that came with the 101 headers
        except AttributeError:
            self.reader = None
        self.write_lock = threading.Lock()
        self.ended_by_sandbox = False
        self.disconnected = False

    def recv(self) -> bytes:
        try:
            if self.reader is not None and hasattr(self.reader, "read1"):
                return bytes(self.reader.read1(65536))
            return self.sock.recv(65536)
        except (OSError, ValueError):
            return b""

    def close(self) -> None:
        for how in (socket.SHUT_WR, socket.SHUT_RDWR):
            with contextlib.suppress(OSError):
                self.sock.shutdown(how)
        with contextlib.suppress(OSError):
            self.sock.close()


class _Record:
    """The service's state of one sandbox beyond its container."""

    def __init__(self, container_id: str, end_at: float, on_timeout: str) -> None:
        self.container_id = container_id
        self.end_at = end_at
        self.on_timeout = on_timeout
        self.state = "running"
        self.processes: dict[int, _Process] = {}
        self.pids = itertools.count(1000)
        self.allow_internet_access: bool | None = None
        self.network: dict[str, Any] | None = None  # as given at create
        self.network_updates: list[dict[str, Any]] = []  # every update_network, in order
        self.traffic_access_token: str | None = None


class NetworkRecord:
    """What a sandbox was told about its network (see `Cloud.network`)."""

    def __init__(self, record: _Record) -> None:
        self.allow_internet_access = record.allow_internet_access
        self.created = dict(record.network) if record.network is not None else None
        self.updates = [dict(u) for u in record.network_updates]
        self.traffic_access_token = record.traffic_access_token

    @property
    def current(self) -> dict[str, Any]:
        """The config in force: the last update whole (E2B replaces), else create's."""
        if self.updates:
            return self.updates[-1]
        return {**(self.created or {}), "allow_internet_access": self.allow_internet_access}


class Cloud:
    """The stand-in's service side: one per test session."""

    def __init__(
        self,
        client: Any,
        templates: dict[str, str],
        session: str,
        tmpfs: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        self.templates = dict(templates)
        self.session = session
        # Mounted in every sandbox (path -> options), e.g. a small /mnt/user-data
        # to fill the sandbox's disk.
        self.tmpfs = dict(tmpfs or {})
        self.calls: collections.Counter[str] = collections.Counter()
        # get_host: "address" (the container's IP:port, reachable) or "e2b" (E2B's form).
        self.host_style = "address"
        self.domain = "e2b.app"
        self.valid_keys: set[str] | None = None  # None: any non-empty key is accepted
        self._faults: dict[str, list[BaseException]] = collections.defaultdict(list)
        self._records: dict[str, _Record] = {}
        self._killed: set[str] = set()
        self._lock = threading.RLock()
        self._timer: threading.Thread | None = None
        self._stop = threading.Event()

    # -- test hooks -------------------------------------------------------------

    def inject(self, operation: str, exc: BaseException, times: int = 1) -> None:
        """Make the next `times` calls of `operation` raise `exc`."""
        self._faults[operation].extend([exc] * times)

    def sandbox_class(self) -> type[StandinSandbox]:
        """A `Sandbox` class bound to this cloud (what the provider gets injected)."""
        return type("Sandbox", (StandinSandbox,), {"cloud": self})

    def containers(self, all_states: bool = True) -> list[Any]:
        return list(
            self.client.containers.list(
                all=all_states,
                filters={"label": f"{LABEL_SESSION}={self.session}"},
                ignore_removed=True,  # one removed meanwhile (a concurrent kill) is not an error
            )
        )

    def container_of(self, sandbox_id: str) -> Any | None:
        found = self.client.containers.list(
            all=True,
            filters={"label": [f"{LABEL_SESSION}={self.session}", f"{LABEL_ID}={sandbox_id}"]},
            ignore_removed=True,
        )
        return found[0] if found else None

    def end_at(self, sandbox_id: str) -> float:
        return self._records[sandbox_id].end_at

    def remove_all(self) -> None:
        self._stop.set()
        for container in self.containers():
            with contextlib.suppress(Exception):
                container.remove(force=True, v=True)

    # -- plumbing -----------------------------------------------------------------

    def enter(self, operation: str, opts: dict[str, Any] | None = None) -> None:
        """Count the call, check the API key (control plane), raise an injected fault."""
        self.calls[operation] += 1
        if opts is not None:
            key = opts.get("api_key") or os.environ.get("E2B_API_KEY")
            if not key:
                raise AuthenticationException(
                    "API key is required, please visit the API Keys tab at "
                    "https://e2b.dev/dashboard?tab=keys to get your API key."
                )
            if self.valid_keys is not None and key not in self.valid_keys:
                raise AuthenticationException("401: Unauthorized, please check your credentials.")
        faults = self._faults.get(operation)
        if faults:
            raise faults.pop(0)

    def _start_timer(self) -> None:
        with self._lock:
            if self._timer is None:
                self._timer = threading.Thread(target=self._expire_loop, daemon=True)
                self._timer.start()

    def _expire_loop(self) -> None:
        while not self._stop.wait(0.1):
            now = time.monotonic()
            with self._lock:
                due = [(i, r) for i, r in self._records.items() if r.end_at <= now]
            for sandbox_id, record in due:
                with contextlib.suppress(Exception):
                    state = self.state(sandbox_id)
                    if state != "running":
                        continue
                    if record.on_timeout == "pause":
                        self.do_pause(sandbox_id)
                    else:
                        self.do_kill(sandbox_id)

    def record(self, sandbox_id: str) -> _Record:
        with self._lock:
            record = self._records.get(sandbox_id)
        if record is None:
            record = self._take_over(sandbox_id)
        if record is None:
            raise SandboxNotFoundException(f"Sandbox {sandbox_id} not found")
        return record

    def state(self, sandbox_id: str) -> str | None:
        """running, paused, or None when there is no such sandbox.

        Kept by the service itself (every pause, resume and kill goes through
        it), so a data-plane call costs no engine round trip.
        """
        record = self._records.get(sandbox_id) or self._take_over(sandbox_id)
        return None if record is None else record.state

    def _take_over(self, sandbox_id: str) -> _Record | None:
        """The record of a sandbox whose creator (another process) is gone, from its container."""
        if not sandbox_id or sandbox_id in self._killed:
            return None
        container = self.container_of(sandbox_id)
        if container is None or container.status not in ("running", "paused"):
            return None
        record = _Record(
            container.id,
            time.monotonic() + DEFAULT_TIMEOUT_S,
            container.labels.get(LABEL_ON_TIMEOUT, "kill"),
        )
        record.state = str(container.status)
        with self._lock:
            record = self._records.setdefault(sandbox_id, record)
        self._start_timer()
        return record

    def network(self, sandbox_id: str) -> NetworkRecord:
        """The network options a sandbox got (at create and by update_network)."""
        with self._lock:
            return NetworkRecord(self._records[sandbox_id])

    def running_record(self, sandbox_id: str) -> _Record:
        """For data-plane calls: the record of a running sandbox, else NotRunning."""
        if self.state(sandbox_id) != "running":
            raise _not_running(sandbox_id)
        return self.record(sandbox_id)

    def end_processes(self, record: _Record) -> None:
        for process in list(record.processes.values()):
            process.ended_by_sandbox = True
            process.close()
        record.processes.clear()

    def do_pause(self, sandbox_id: str) -> bool:
        with self._lock:
            if self.state(sandbox_id) != "running":
                return False
            record = self._records[sandbox_id]
            self.end_processes(record)
            self._let_starting_execs_start(record.container_id)
            self.client.api.pause(record.container_id)
            record.state = "paused"
            return True

    def _let_starting_execs_start(self, container_id: str) -> None:
        """Before a freeze: an exec whose process is being set up when the container is
        frozen never finishes starting (runc's init joins the frozen cgroup, cgroup v1)
        and the engine then hangs on the container for good. Execs of the stand-in's own
        calls run outside the lock, so a pause lets those created and not started yet
        start first (bounded: one that is never started is frozen as it is)."""
        api = self.client.api
        deadline = time.monotonic() + PAUSE_WAITS_FOR_EXECS_S
        while time.monotonic() < deadline:
            starting = False
            for exec_id in api.inspect_container(container_id).get("ExecIDs") or []:
                try:
                    info = api.exec_inspect(exec_id)
                except Exception:  # ended and gone meanwhile
                    continue
                if not info.get("Running") and not info.get("Pid") and info.get("ExitCode") is None:
                    starting = True
                    break
            if not starting:
                return
            time.sleep(0.01)

    def do_kill(self, sandbox_id: str) -> bool:
        with self._lock:
            record = self._records.pop(sandbox_id, None)
            self._killed.add(sandbox_id)
            container = self.container_of(sandbox_id)
            if record is not None:
                self.end_processes(record)
            if container is None:
                return False
            container.remove(force=True, v=True)
            return record is not None

    def info(self, container: Any) -> SandboxInfo:
        labels = container.labels
        sandbox_id = labels[LABEL_ID]
        record = self._records[sandbox_id]
        started = datetime.datetime.fromisoformat(
            container.attrs["Created"][:26].rstrip("Z") + "+00:00"
        )
        return SandboxInfo(
            sandbox_id=sandbox_id,
            sandbox_domain=None,
            template_id=labels[LABEL_TEMPLATE],
            name=labels[LABEL_TEMPLATE],
            metadata={
                k[len(META_PREFIX) :]: v for k, v in labels.items() if k.startswith(META_PREFIX)
            },
            started_at=started,
            end_at=_now() + datetime.timedelta(seconds=record.end_at - time.monotonic()),
            state=SandboxState(record.state),
            cpu_count=2,
            memory_mb=VM_MEMORY_BYTES >> 20,
            envd_version="0.5.0",
            allow_internet_access=record.allow_internet_access,
        )


class _Paginator:
    """`SandboxPaginator`: pages of `SandboxInfo` through `has_next` / `next_items()`."""

    def __init__(self, items: list[SandboxInfo], limit: int | None) -> None:
        self._items = items
        self._limit = limit or 100
        self._offset = 0
        self.has_next = True
        self.next_token: str | None = None

    def next_items(self, **opts: Any) -> list[SandboxInfo]:
        if not self.has_next:
            raise Exception("No more items to fetch")
        page = self._items[self._offset : self._offset + self._limit]
        self._offset += len(page)
        self.has_next = self._offset < len(self._items)
        self.next_token = str(self._offset) if self.has_next else None
        return page


class StandinCommandHandle:
    """`CommandHandle`: a background command's output, exit status, stdin and kill."""

    def __init__(self, sandbox: StandinSandbox, process: _Process) -> None:
        self._sandbox = sandbox
        self._process = process
        self.pid = process.pid
        self._stdout: list[str] = []
        self._stderr: list[str] = []

    def __iter__(self) -> Iterator[tuple[str | None, str | None, None]]:
        out = codecs.getincrementaldecoder("utf-8")(errors="replace")
        err = codecs.getincrementaldecoder("utf-8")(errors="replace")
        kind, left, header = 0, 0, b""
        while not self._process.disconnected:
            chunk = self._process.recv()
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                if left == 0:
                    need = _HEADER.size - len(header)
                    header += bytes(view[:need])
                    view = view[need:]
                    if len(header) == _HEADER.size:
                        kind, left = _HEADER.unpack(header)
                        header = b""
                    continue
                part, view = bytes(view[:left]), view[left:]
                left -= len(part)
                if kind == 1 and (text := out.decode(part)):
                    self._stdout.append(text)
                    yield text, None, None
                elif kind == 2 and (text := err.decode(part)):
                    self._stderr.append(text)
                    yield None, text, None
        for decoder, sink, stdout in ((out, self._stdout, True), (err, self._stderr, False)):
            if text := decoder.decode(b"", final=True):
                sink.append(text)
                yield (text, None, None) if stdout else (None, text, None)

    @mirrors(CommandHandle.wait)
    def wait(
        self,
        on_pty: Callable[[bytes], None] | None = None,
        on_stdout: Callable[[str], None] | None = None,
        on_stderr: Callable[[str], None] | None = None,
    ) -> CommandResult[str]:
        for stdout, stderr, _ in self:
            if stdout is not None and on_stdout:
                on_stdout(stdout)
            elif stderr is not None and on_stderr:
                on_stderr(stderr)
        self._sandbox.commands.forget(self.pid)
        if self._process.ended_by_sandbox:
            raise _not_running(self._sandbox.sandbox_id)
        code = self._exit_code()
        stdout, stderr = "".join(self._stdout), "".join(self._stderr)
        if code != 0:
            raise CommandExitException(stderr=stderr, stdout=stdout, exit_code=code, error=None)
        return CommandResult(stderr=stderr, stdout=stdout, exit_code=0, error=None)

    def _exit_code(self) -> int:
        api = self._sandbox.cloud.client.api
        for _ in range(100):
            try:
                info = api.exec_inspect(self._process.exec_id)
            except Exception:
                raise _not_running(self._sandbox.sandbox_id) from None
            if not info.get("Running"):
                code = info.get("ExitCode")
                return code if isinstance(code, int) else -1
            time.sleep(0.02)
        return -1

    def send_stdin(self, data: str | bytes, request_timeout: float | None = None) -> None:
        self._sandbox.commands.send_stdin(self.pid, data, request_timeout)

    def close_stdin(self, request_timeout: float | None = None) -> None:
        self._sandbox.commands.close_stdin(self.pid, request_timeout)

    def kill(self) -> bool:
        return self._sandbox.commands.kill(self.pid)

    @mirrors(CommandHandle.disconnect)
    def disconnect(self) -> None:
        # The SDK closes its event stream; here that is the exec socket's read side.
        self._process.disconnected = True
        with contextlib.suppress(OSError):
            self._process.sock.shutdown(socket.SHUT_RD)


class StandinCommands:
    """`sandbox.commands`."""

    def __init__(self, sandbox: StandinSandbox) -> None:
        self._sandbox = sandbox

    @property
    def _cloud(self) -> Cloud:
        return self._sandbox.cloud

    def _exec_kwargs(
        self, user: str | None, cwd: str | None, envs: dict[str, str] | None
    ) -> dict[str, Any]:
        name, home = USERS[user or "user"]
        return {"user": name, "workdir": cwd or home, "environment": dict(envs or {})}

    @mirrors(RealCommands.run)
    def run(
        self,
        cmd: str,
        background: bool | None = None,
        envs: dict[str, str] | None = None,
        user: str | None = None,
        cwd: str | None = None,
        on_stdout: Callable[[str], None] | None = None,
        on_stderr: Callable[[str], None] | None = None,
        stdin: bool | None = None,
        timeout: float | None = 60,
        request_timeout: float | None = None,
        **_: Any,
    ) -> Any:
        cloud = self._cloud
        cloud.enter("commands.run")
        record = cloud.running_record(self._sandbox.sandbox_id)
        argv = ["/bin/bash", "-l", "-c", cmd]
        kwargs = self._exec_kwargs(user, cwd, envs)
        api = cloud.client.api
        if not background:
            code, (out, err) = cloud.client.containers.get(record.container_id).exec_run(
                argv, demux=True, **kwargs
            )
            stdout = (out or b"").decode("utf-8", "replace")
            stderr = (err or b"").decode("utf-8", "replace")
            if on_stdout and stdout:
                on_stdout(stdout)
            if on_stderr and stderr:
                on_stderr(stderr)
            if code != 0:
                raise CommandExitException(stderr=stderr, stdout=stdout, exit_code=code, error=None)
            return CommandResult(stderr=stderr, stdout=stdout, exit_code=0, error=None)
        created = api.exec_create(
            record.container_id,
            argv,
            stdin=bool(stdin),
            stdout=True,
            stderr=True,
            tty=False,
            **kwargs,
        )
        raw = api.exec_start(created["Id"], socket=True)
        with cloud._lock:
            process = _Process(next(record.pids), created["Id"], raw)
            record.processes[process.pid] = process
        return StandinCommandHandle(self._sandbox, process)

    def _process(self, pid: int) -> _Process:
        record = self._cloud.running_record(self._sandbox.sandbox_id)
        process = record.processes.get(pid)
        if process is None:
            raise NotFoundException(f"process with pid {pid} not found")
        return process

    def forget(self, pid: int) -> None:
        with contextlib.suppress(SandboxException):
            record = self._cloud.record(self._sandbox.sandbox_id)
            record.processes.pop(pid, None)

    @mirrors(RealCommands.send_stdin)
    def send_stdin(self, pid: int, data: str | bytes, request_timeout: float | None = None) -> None:
        self._cloud.enter("commands.send_stdin")
        process = self._process(pid)
        payload = data.encode() if isinstance(data, str) else bytes(data)
        with process.write_lock:
            try:
                process.sock.sendall(payload)
            except OSError:
                raise SandboxException(f"process with pid {pid} is not running") from None

    @mirrors(RealCommands.close_stdin)
    def close_stdin(self, pid: int, request_timeout: float | None = None) -> None:
        self._cloud.enter("commands.close_stdin")
        with contextlib.suppress(OSError):
            self._process(pid).sock.shutdown(socket.SHUT_WR)

    @mirrors(RealCommands.kill)
    def kill(self, pid: int, request_timeout: float | None = None) -> bool:
        self._cloud.enter("commands.kill")
        try:
            process = self._process(pid)
        except NotFoundException:
            return False
        host_pid = self._cloud.client.api.exec_inspect(process.exec_id).get("Pid")
        inner = _inner_pid(host_pid)
        if inner is None:
            process.close()  # no /proc view of the engine's processes: end its stdin
            return True
        record = self._cloud.running_record(self._sandbox.sandbox_id)
        self._cloud.client.containers.get(record.container_id).exec_run(
            ["sh", "-c", f"kill -9 {inner}"], user="root"
        )
        return True


def _inner_pid(host_pid: Any) -> int | None:
    """The pid inside the container of a process the engine reports by its host pid."""
    if not isinstance(host_pid, int) or host_pid <= 0:
        return None
    try:
        with open(f"/proc/{host_pid}/status") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


class StandinFiles:
    """`sandbox.files`."""

    def __init__(self, sandbox: StandinSandbox) -> None:
        self._sandbox = sandbox

    def _container(self) -> Any:
        cloud = self._sandbox.cloud
        record = cloud.running_record(self._sandbox.sandbox_id)
        return cloud.client.containers.get(record.container_id)

    @mirrors(RealFilesystem.write)
    def write(
        self,
        path: str,
        data: str | bytes | Any,
        user: str | None = None,
        request_timeout: float | None = None,
        **_: Any,
    ) -> WriteInfo:
        self._sandbox.cloud.enter("files.write")
        container = self._container()
        if isinstance(data, str):
            content = data.encode()
        elif isinstance(data, bytes | bytearray):
            content = bytes(data)
        else:
            content = data.read()
        name, _home = USERS[user or "user"]
        staged = f"/tmp/.standin-upload-{secrets.token_hex(8)}"
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(staged.lstrip("/"))
            info.size = len(content)
            info.mode = 0o600
            info.uid = info.gid = 0 if name == "root" else 1000
            tar.addfile(info, io.BytesIO(content))
        if not container.put_archive("/", buf.getvalue()):
            raise SandboxException(f"failed to write {path}")
        # As the user: files and directories a user writes are theirs, and a
        # path the user may not write is refused.
        script = 'mkdir -p "$(dirname "$2")" && cat "$1" > "$2"; rc=$?; rm -f "$1"; exit $rc'
        code, output = container.exec_run(["sh", "-c", script, "sh", staged, path], user=name)
        if code != 0:
            raise SandboxException(f"failed to write {path}: {output.decode(errors='replace')}")
        return WriteInfo(name=path.rsplit("/", 1)[-1], type=None, path=path)

    @mirrors(RealFilesystem.read)
    def read(
        self,
        path: str,
        format: str = "text",
        user: str | None = None,
        request_timeout: float | None = None,
        **_: Any,
    ) -> Any:
        self._sandbox.cloud.enter("files.read")
        name, _home = USERS[user or "user"]
        container = self._container()
        # Permission as the user, content through the engine's archive API (a
        # stream: the exec API's buffered demultiplexing is quadratic).
        code, _ = container.exec_run(["test", "-f", path, "-a", "-r", path], user=name)
        if code != 0:
            found, _ = container.exec_run(["test", "-e", path], user="root")
            if found != 0:
                raise FileNotFoundException(f"file {path} not found")
            raise SandboxException(f"failed to read {path}: permission denied")
        chunks = _archive_member(container, path)
        if format == "stream":
            return chunks
        data = b"".join(chunks)
        if format == "bytes":
            return bytearray(data)
        return data.decode("utf-8", "replace")

    @mirrors(RealFilesystem.exists)
    def exists(
        self, path: str, user: str | None = None, request_timeout: float | None = None
    ) -> bool:
        self._sandbox.cloud.enter("files.exists")
        name, _home = USERS[user or "user"]
        code, _ = self._container().exec_run(["test", "-e", path], user=name)
        return bool(code == 0)


def _archive_member(container: Any, path: str) -> Iterator[bytes]:
    """The content of one file, streamed out of the engine's tar of it."""
    stream, _stat = container.get_archive(path, chunk_size=1 << 20)
    reader = _ChunkReader(iter(stream))
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        for member in tar:
            handle = tar.extractfile(member)
            if handle is None:
                continue
            while chunk := handle.read(1 << 20):
                yield chunk
            return


class _ChunkReader(io.RawIOBase):
    """A file object over an iterator of byte chunks (for tarfile's stream mode)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(target), len(self._buffer))
        target[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        return size


class StandinSandbox:
    """`e2b.Sandbox` (sync) on a local Docker container; bind to a `Cloud` via `sandbox_class()`."""

    cloud: Cloud
    default_template = "base"

    def __init__(self, sandbox_id: str) -> None:
        self.sandbox_id = sandbox_id
        self.files = StandinFiles(self)
        self.commands = StandinCommands(self)
        # Returned by create and connect, as the SDK's (None: public sandbox URLs).
        record = self.cloud._records.get(sandbox_id)
        self.traffic_access_token = None if record is None else record.traffic_access_token

    # -- control plane (class-level, as the SDK's static variants) --------------------

    @classmethod
    @mirrors(RealSandbox.create, skip_first=True)
    def create(
        cls,
        template: str | None = None,
        timeout: int | None = None,
        metadata: dict[str, str] | None = None,
        envs: dict[str, str] | None = None,
        allow_internet_access: bool | None = None,
        network: dict[str, Any] | None = None,
        lifecycle: dict[str, Any] | None = None,
        **opts: Any,
    ) -> StandinSandbox:
        cloud = cls.cloud
        cloud.enter("create", opts)
        build_network_config(network)  # what the SDK would refuse, refused
        template = template or cls.default_template
        image = cloud.templates.get(template)
        if image is None:
            exc = SandboxException(f"404: template '{template}' not found")
            exc.status_code = 404
            raise exc
        on_timeout = (lifecycle or {}).get("on_timeout", "kill")
        if isinstance(on_timeout, dict):
            on_timeout = on_timeout.get("action", "kill")
        sandbox_id = "i" + secrets.token_hex(10)
        labels = {
            LABEL_SESSION: cloud.session,
            LABEL_ID: sandbox_id,
            LABEL_TEMPLATE: template,
            LABEL_ON_TIMEOUT: str(on_timeout),
            **{META_PREFIX + k: v for k, v in (metadata or {}).items()},
        }
        container = cloud.client.containers.run(
            image,
            ["sleep", "infinity"],
            name=f"e2b-standin-{sandbox_id}",
            labels=labels,
            environment=dict(envs or {}),
            detach=True,
            init=True,
            network_mode="bridge",
            tmpfs=cloud.tmpfs or None,
            # What the base template's VM gives: 512 MiB (get_info's memory_mb), no swap,
            # and a bounded number of tasks, as a small VM's kernel would have.
            mem_limit=VM_MEMORY_BYTES,
            memswap_limit=VM_MEMORY_BYTES,
            pids_limit=VM_TASKS,
        )
        code, output = container.exec_run(["sh", "-c", _MAKE_USER], user="root")
        if code != 0:
            container.remove(force=True)
            raise SandboxException(f"stand-in set-up failed: {output!r}")
        record = _Record(
            container.id, time.monotonic() + (timeout or DEFAULT_TIMEOUT_S), str(on_timeout)
        )
        record.allow_internet_access = allow_internet_access
        record.network = dict(network) if network is not None else None
        if network is not None and network.get("allow_public_traffic") is False:
            record.traffic_access_token = secrets.token_urlsafe(24)
        with cloud._lock:
            cloud._records[sandbox_id] = record
        cloud._start_timer()
        return cls(sandbox_id)

    @classmethod
    @mirrors(RealSandbox._cls_connect_sandbox, skip_first=True)
    def connect(cls, sandbox_id: str, timeout: int | None = None, **opts: Any) -> StandinSandbox:
        cloud = cls.cloud
        cloud.enter("connect", opts)
        with cloud._lock:
            state = cloud.state(sandbox_id)
            if state is None:
                raise SandboxNotFoundException(f"Sandbox {sandbox_id} not found")
            record = cloud._records[sandbox_id]
            wanted = time.monotonic() + (timeout or DEFAULT_TIMEOUT_S)
            if state == "paused":
                cloud.client.api.unpause(record.container_id)
                record.state = "running"
                record.end_at = wanted
            else:
                record.end_at = max(record.end_at, wanted)
        return cls(sandbox_id)

    @classmethod
    @mirrors(RealSandbox.list, skip_first=True)
    def list(
        cls,
        query: SandboxQuery | None = None,
        limit: int | None = None,
        next_token: str | None = None,
        **opts: Any,
    ) -> _Paginator:
        cloud = cls.cloud
        cloud.enter("list", opts)
        states = (query.state or []) if query else []
        wanted_states = {str(getattr(s, "value", s)) for s in states}
        infos = []
        for container in cloud.containers():
            labels = container.labels
            if cloud.state(labels.get(LABEL_ID, "")) is None:
                continue
            if (
                query
                and query.metadata
                and any(labels.get(META_PREFIX + k) != v for k, v in query.metadata.items())
            ):
                continue
            info = cloud.info(container)
            if wanted_states and str(info.state.value) not in wanted_states:
                continue
            infos.append(info)
        return _Paginator(infos, limit)

    @classmethod
    @mirrors(RealSandbox._cls_kill, skip_first=True)
    def kill(cls, sandbox_id: str, **opts: Any) -> bool:
        cls.cloud.enter("kill", opts)
        return cls.cloud.do_kill(sandbox_id)

    @classmethod
    @mirrors(RealSandbox._cls_pause, skip_first=True)
    def pause(cls, sandbox_id: str, **opts: Any) -> bool:
        cloud = cls.cloud
        cloud.enter("pause", opts)
        if cloud.state(sandbox_id) is None:
            raise SandboxNotFoundException(f"Sandbox {sandbox_id} not found")
        return cloud.do_pause(sandbox_id)

    @classmethod
    @mirrors(RealSandbox._cls_set_timeout, skip_first=True)
    def set_timeout(cls, sandbox_id: str, timeout: int, **opts: Any) -> None:
        cloud = cls.cloud
        cloud.enter("set_timeout", opts)
        if cloud.state(sandbox_id) is None:
            raise SandboxNotFoundException(f"Sandbox {sandbox_id} not found")
        cloud._records[sandbox_id].end_at = time.monotonic() + timeout

    @classmethod
    @mirrors(RealSandbox._cls_update_network, skip_first=True)
    def update_network(cls, sandbox_id: str, network: dict[str, Any], **opts: Any) -> None:
        """Replace the sandbox's network config (recorded whole; see the module doc)."""
        cloud = cls.cloud
        cloud.enter("update_network", opts)
        build_network_update_body(network)  # what the SDK would refuse, refused
        with cloud._lock:
            if cloud.state(sandbox_id) is None:
                raise SandboxNotFoundException(f"Sandbox {sandbox_id} not found")
            cloud._records[sandbox_id].network_updates.append(dict(network))

    @classmethod
    @mirrors(RealSandbox._cls_get_info, skip_first=True)
    def get_info(cls, sandbox_id: str, **opts: Any) -> SandboxInfo:
        cloud = cls.cloud
        cloud.enter("get_info", opts)
        container = cloud.container_of(sandbox_id)
        if container is None or cloud.state(sandbox_id) is None:
            raise SandboxNotFoundException(f"Sandbox {sandbox_id} not found")
        return cloud.info(container)

    # -- data plane ----------------------------------------------------------------------

    @mirrors(RealSandbox.get_host)
    def get_host(self, port: int) -> str:
        cloud = self.cloud
        if cloud.host_style == "e2b":  # what the SDK computes, outside debug mode
            return f"{port}-{self.sandbox_id}.{cloud.domain}"
        record = cloud.running_record(self.sandbox_id)
        attrs = cloud.client.api.inspect_container(record.container_id)
        networks = attrs["NetworkSettings"].get("Networks") or {}
        address = attrs["NetworkSettings"].get("IPAddress") or next(
            (n.get("IPAddress") for n in networks.values() if n.get("IPAddress")), ""
        )
        return f"{address}:{port}"
