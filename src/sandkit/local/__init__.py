"""The embedded default: thread directories on this host, operations in-process.

No isolation beyond the path jail, which is why `execute` (a host shell) is
off until the operator turns it on. When it is on, each sandbox's commands
run in a cgroup of their own (or under rlimits), see `hostlimits`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from ..config import Settings
from ..errors import ErrorCode, SandboxError
from ..network import Endpoint
from ..paths import ThreadLayout
from ..provider import SandboxKey, SandboxProvider
from ..runtime.context import Context
from ..runtime.limits import Limits
from ..runtime.processes import ProcessTable
from ..runtime.search import find_rg
from ..runtime.service import Runtime
from ..sandbox import Sandbox
from ..transports.base import StreamCall
from .hostlimits import ProcessBounds
from .hostlimits import create as create_bounds
from .ports import LocalOptions, LocalPorts
from .streams import ThreadStream


class LocalSandbox(Sandbox):
    """Runs the shared runtime in this process against the thread's host dirs."""

    def __init__(self, key: SandboxKey, runtime: Runtime) -> None:
        self.key = key
        self.sandbox_id = key.sandbox_id
        self.runtime = runtime
        self.last_used = time.monotonic()
        self._closed = False

    @property
    def limits(self) -> Limits:
        return self.runtime.context.limits

    @property
    def execute_enabled(self) -> bool:
        return self.runtime.context.execute_enabled

    def call(self, method: str, params: dict[str, Any]) -> Any:
        self._check_open()
        return self.runtime.call(method, params)

    def open_stream(self, method: str, params: dict[str, Any]) -> StreamCall:
        self._check_open()
        runtime = self.runtime
        return ThreadStream(
            lambda emit, cancel: runtime.stream(method, params, emit, cancel),
            name=f"sandkit-local-{method}",
        )

    def close(self) -> None:
        """Later calls fail with UNAVAILABLE (the provider's release ends its processes)."""
        self._closed = True
        self.runtime.context.calls.ready.close()  # no shell waits on the host for a call

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError(
                ErrorCode.UNAVAILABLE, f"sandbox {self.sandbox_id} was released; acquire it again"
            )
        self.last_used = time.monotonic()


def build_context(
    settings: Settings,
    layout: ThreadLayout,
    rg_path: str | None,
    bounds: ProcessBounds | None = None,
) -> Context:
    context = Context(
        mapping=layout.host_mapping(),
        limits=settings.limits.to_limits(),
        rg_path=rg_path,
        execute_enabled=settings.execute_enabled,
        secrets=settings.secret_values(),
        scrubbed_env=tuple(settings.scrubbed_env),
        bounds=bounds,
    )
    if not settings.execute_enabled:
        return context
    # Background processes live in this process: no box outlives it (docs/providers/local.md).
    return context.replace(processes=ProcessTable(context))


def _share_regex_tables() -> None:
    """The search's Unicode tables in this machine's cache (an agent ships them in its
    zipapp; here a first case-insensitive grep would compute them in every process)."""
    from ..agent.build import cache_dir
    from ..runtime import rxinfo

    name = f"unicode-tables-{rxinfo.tables_key().replace('/', '-')}.json"
    rxinfo.use_tables_cache(str(cache_dir() / name))


class LocalProvider(SandboxProvider):
    name = "local"

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.options = LocalOptions.from_settings(self.settings)
        _share_regex_tables()
        net_root = self.settings.data_root.expanduser().absolute() / ".sandkit" / "net" / "local"
        self._ports = LocalPorts(self.options.expose, net_root / "ingress")
        self._rg_path = find_rg()
        self._lock = threading.Lock()
        self._active: dict[SandboxKey, LocalSandbox] = {}
        self._bounds: dict[SandboxKey, ProcessBounds] = {}

    @property
    def execute_enabled(self) -> bool:
        return self.settings.execute_enabled

    def acquire(self, key: SandboxKey) -> LocalSandbox:
        with self._lock:
            sandbox = self._active.get(key)
            if sandbox is None:
                layout = ThreadLayout.for_key(self.settings, key)
                layout.create_dirs()
                bounds = self._make_bounds(key)
                context = build_context(self.settings, layout, self._rg_path, bounds)
                try:
                    sandbox = self._open(key, context)
                except BaseException:
                    if bounds is not None:
                        del self._bounds[key]
                        bounds.remove()
                    raise
                self._active[key] = sandbox
            sandbox.last_used = time.monotonic()
            return sandbox

    def _open(self, key: SandboxKey, context: Context) -> LocalSandbox:
        """The sandbox over a thread's context; a subclass may run it elsewhere."""
        return LocalSandbox(key, Runtime(context))

    def _make_bounds(self, key: SandboxKey) -> ProcessBounds | None:
        """A cgroup (or rlimits) for the sandbox's commands; none when execute is off."""
        if not self.settings.execute_enabled:
            return None
        limits = self.settings.limits
        bounds = create_bounds(limits.exec_max_processes, limits.exec_memory_bytes)
        self._bounds[key] = bounds
        return bounds

    def get(self, key: SandboxKey) -> LocalSandbox | None:
        with self._lock:
            return self._active.get(key)

    def release(self, key: SandboxKey) -> None:
        with self._lock:
            sandbox = self._active.pop(key, None)
            bounds = self._bounds.pop(key, None)
            self._ports.close_box(key)
        if sandbox is not None:
            self._end(sandbox)
        if bounds is not None:  # kill what its commands left running, delete the cgroup
            bounds.remove()

    def destroy(self, key: SandboxKey) -> None:
        self.release(key)

    def shutdown(self) -> None:
        with self._lock:
            sandboxes = list(self._active.values())
            self._active.clear()
            bounds = list(self._bounds.values())
            self._bounds.clear()
            self._ports.close_all()
        for sandbox in sandboxes:
            self._end(sandbox)
        for each in bounds:
            each.remove()

    # -- exposed ports (local/ports.py): the host's own loopback, through a socket per port

    def expose(self, key: SandboxKey, port: int) -> Endpoint:
        with self._lock:
            return self._ports.expose(key, port, running=key in self._active)

    def unexpose(self, key: SandboxKey, port: int) -> None:
        with self._lock:
            self._ports.unexpose(key, port)

    def exposed(self, key: SandboxKey) -> list[Endpoint]:
        return self._ports.exposed(key)

    def endpoint(self, key: SandboxKey, port: int) -> Endpoint | None:
        return self._ports.endpoint(key, port)

    def _end(self, sandbox: Sandbox) -> None:
        """End the sandbox's background processes, then close it."""
        if self.settings.execute_enabled:
            with contextlib.suppress(SandboxError):  # an agent that is gone took them along
                sandbox.end_processes()
        sandbox.close()

    def _runs_processes(self, sandbox: Sandbox) -> bool:
        if not self.settings.execute_enabled:
            return False
        used = getattr(sandbox, "last_used", None)  # asking is not using
        try:
            return any(p.running for p in sandbox.list_processes().processes)
        except SandboxError:
            return False
        finally:
            if used is not None:
                sandbox.last_used = used  # type: ignore[attr-defined]

    def reap_idle(self, max_idle_s: float) -> list[SandboxKey]:
        cutoff = time.monotonic() - max_idle_s
        spare_running = not self.settings.reap_running_processes
        with self._lock:
            idle = [
                k
                for k, s in self._active.items()
                if s.last_used < cutoff and not (spare_running and self._runs_processes(s))
            ]
        for key in idle:
            self.release(key)
        return idle
