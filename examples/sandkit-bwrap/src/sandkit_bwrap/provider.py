"""`BwrapProvider`: one bubblewrap sandbox per `SandboxKey` on this host, the agent inside.

Built outside the core on `sandkit.boxkit` only: the kit owns the lifecycle
(per-key locks, idle reaping, capacity, the agent's config, the stdio
carrier, shutdown); this module says how a box is started, found, stopped,
removed and reached. A box is a long-lived bwrap process (box.py); every
agent channel is a fresh `agent.pyz --stdio` started inside the box's
namespaces with nsenter, as the unprivileged uid, without privileges.
Boxes are found again from their state dir, so a restarted provider adopts
them instead of starting duplicates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

from sandkit import SandboxKey, Settings
from sandkit.boxkit import (
    AGENT_DIR,
    AGENT_PATH,
    BoxProvider,
    BoxRecord,
    ByteStream,
    prepare_host_dirs,
)
from sandkit.errors import SandboxError
from sandkit.paths import WORKSPACE, PathMapping, ThreadLayout
from sandkit.transports import SubprocessStream

from . import box as host
from .options import BwrapOptions

log = logging.getLogger("sandkit.bwrap")


@dataclasses.dataclass(eq=False)
class _Box(BoxRecord):
    """The kit's record plus the box's PID 1 as box.json names it."""

    pid: int | None = None
    start: str | None = None
    cgroups: tuple[str, ...] = ()


class BwrapProvider(BoxProvider[_Box, BwrapOptions]):
    name = "bwrap"

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__(settings, BwrapOptions, _Box)
        root = self.options.state_dir or self.settings.data_root / ".bwrap"
        self.state_root = Path(root).expanduser().absolute()
        self._names = re.compile(re.escape(self.options.owner) + r"-sk-[0-9a-f]{20}")
        # Outer bwrap processes this instance started, by box name (reaped when stopped).
        self._monitors: dict[str, subprocess.Popen[bytes]] = {}
        self._monitors_lock = threading.Lock()

    def box_name(self, key: SandboxKey) -> str:
        return f"{self.options.owner}-{key.sandbox_id}"

    # -- the kit's hooks ------------------------------------------------------------------

    def _hidden_paths(self) -> tuple[str, ...]:
        return (str(self.state_root),)  # bind sources of /opt/sandkit and /etc in mountinfo

    def _adopt_running(self, box: _Box) -> bool:
        directory = self.state_root / self.box_name(box.key)
        with host.locked(directory, create=False) as exists:
            state = host.BoxState.load(directory) if exists else None
            if state is None or not state.alive() or state.spec != self._spec(box.key)[1]:
                return False
            self._attach(box, state)
            return True

    def _ensure_running(self, box: _Box) -> None:
        options = self.options
        reason = host.host_reason(options.bwrap)
        if reason is not None:
            raise host.unavailable(reason)
        layout = self._layout(box.key)
        name = self.box_name(box.key)
        directory = self.state_root / name
        self.state_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            with host.locked(directory, create=True):
                args, spec = self._spec(box.key)
                state = host.BoxState.load(directory)
                if state is not None and state.alive() and state.spec == spec:
                    self._attach(box, state)
                    return
                if state is not None:  # dead, or started with other settings
                    log.info("(re)starting bwrap box %s", name)
                    host.kill_box(state, state.cgroups)
                    self._reap(name)
                # Only now, with no box of the key running: a running box changes what
                # the hand-over's chown walks.
                owner = (options.uid, options.gid) if options.chown_thread_dirs else None
                prepare_host_dirs(layout, owner)
                self._check_capacity()
                payload = self._payload()
                host.install_payload(directory, payload.archive, payload.digest)
                host.write_etc(directory, options.uid, options.gid, WORKSPACE)
                cgroups: tuple[str, ...] = ()
                if options.cgroup:
                    cgroups = host.make_cgroups(
                        name, options.pids_limit, options.memory_limit_bytes
                    )
                try:
                    pid, monitor = host.start_box(
                        options.bwrap, args, directory, cgroups, options.start_timeout_s
                    )
                except BaseException:
                    for path in cgroups:
                        with contextlib.suppress(SandboxError):
                            host.remove_cgroup(path)
                    raise
                with self._monitors_lock:
                    self._monitors[name] = monitor
                state = host.BoxState(
                    pid, host.start_time(pid) or "", host.boot_id(), spec, cgroups
                )
                state.save(directory)
                self._attach(box, state)
        except SandboxError as exc:
            raise SandboxError(exc.code, self._mask(layout, exc.message)) from None
        except OSError as exc:
            raise host.unavailable(self._mask(layout, f"starting bwrap box: {exc}")) from None

    def _stop_box(self, box: _Box, remove: bool) -> None:
        self._take_down(self.box_name(box.key), remove)
        box.pid = box.start = None

    def _open_stream(self, box: _Box) -> ByteStream:
        pid = box.pid
        if pid is None or box.start is None or host.start_time(pid) != box.start:
            box.dead = True
            raise host.unavailable(f"sandbox {box.key.sandbox_id} is not running; acquire it again")
        options = self.options
        argv = [
            *host.join_cgroups(box.cgroups),
            "nsenter",
            f"--target={pid}",
            *("--mount", "--pid", "--ipc", "--uts", "--net", "--cgroup"),
            "--root",  # the box's root and cwd ("/": never a mount of the jail)
            "--wd",
            "--",
            "setpriv",
            f"--reuid={options.uid}",
            f"--regid={options.gid}",
            *("--clear-groups", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all"),
            "--",
            options.python,
            *("-I", "-S", AGENT_PATH, "--stdio"),
        ]
        try:
            return SubprocessStream(argv, env=host.ENV, cwd="/")
        except OSError as exc:
            raise host.unavailable(f"cannot start the agent: {exc}") from None

    def _list_boxes(self) -> Sequence[str]:
        """Every box of this owner: its state dir, or (state lost) its cgroup."""
        names: set[str] = set()
        with contextlib.suppress(FileNotFoundError):
            names |= {p.name for p in self.state_root.iterdir() if self._names.fullmatch(p.name)}
        names |= {name for name in host.cgroup_boxes() if self._names.fullmatch(name)}
        return sorted(names)

    def _shut_box(self, handle: str) -> None:
        self._take_down(handle, remove=True)

    def _after_shutdown(self, handles: Sequence[str]) -> None:
        with self._monitors_lock:
            names = list(self._monitors)
        for name in names:
            self._reap(name)

    def _count_running(self) -> int:
        try:
            dirs = [p for p in self.state_root.iterdir() if self._names.fullmatch(p.name)]
        except FileNotFoundError:
            return 0
        return sum(1 for d in dirs if (s := host.BoxState.load(d)) is not None and s.alive())

    # -- the box ------------------------------------------------------------------------

    def _spec(self, key: SandboxKey) -> tuple[list[str], str]:
        """bwrap's arguments for the key's box, and a digest of everything a running box
        must have been started with to be adopted (mounts, options, agent payload)."""
        options = self.options
        directory = self.state_root / self.box_name(key)
        mounts = sorted(self._layout(key).mounts, key=lambda m: m.virtual)
        args = [
            *("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"),
            *("--unshare-cgroup-try", "--hostname", "sandbox", "--new-session"),
            *("--cap-drop", "ALL", "--chdir", "/"),
        ]
        for path in options.host_dirs:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--size", str(options.tmp_size_bytes), "--perms", "1777", "--tmpfs", "/tmp"]
        parents = {"/etc", "/opt", AGENT_DIR}
        for mount in mounts:
            parts = mount.virtual.strip("/").split("/")[:-1]
            parents |= {"/" + "/".join(parts[: i + 1]) for i in range(len(parts))}
        for parent in sorted(parents - {AGENT_DIR}):
            args += ["--perms", "0755", "--dir", parent]
        for entry in options.etc:
            if os.path.lexists(f"/etc/{entry}"):
                args += ["--ro-bind", f"/etc/{entry}", f"/etc/{entry}"]
        for entry in ("passwd", "group", "hosts"):
            args += ["--ro-bind", str(directory / "etc" / entry), f"/etc/{entry}"]
        args += ["--ro-bind", str(directory / "opt"), AGENT_DIR]
        for mount in mounts:
            args += ["--ro-bind" if mount.read_only else "--bind", mount.real, mount.virtual]
        args += ["--remount-ro", "/"]
        facts = [
            *args,
            self._payload().digest,
            f"{options.uid}:{options.gid}",
            f"cgroup={options.cgroup}:{options.pids_limit}:{options.memory_limit_bytes}",
        ]
        return args, hashlib.sha256("\0".join(facts).encode()).hexdigest()[:24]

    def _attach(self, box: _Box, state: host.BoxState) -> None:
        box.pid, box.start, box.cgroups = state.pid, state.start, state.cgroups

    def _take_down(self, name: str, remove: bool) -> None:
        """Stop the box `name` (release) or also delete its state (destroy, shutdown)."""
        directory = self.state_root / name
        with host.locked(directory, create=False) as exists:
            state = host.BoxState.load(directory) if exists else None
            cgroups = {*(state.cgroups if state else ()), *host.cgroup_paths(name)}
            host.kill_box(state, sorted(cgroups))
            if exists and remove:
                shutil.rmtree(directory, ignore_errors=True)
            elif exists:
                (directory / host.STATE_FILE).unlink(missing_ok=True)
        self._reap(name)

    def _reap(self, name: str) -> None:
        """Collect the outer bwrap of a box this instance started (it ends with its box)."""
        with self._monitors_lock:
            monitor = self._monitors.pop(name, None)
        if monitor is None:
            return
        try:
            monitor.wait(host.KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            monitor.kill()
            monitor.wait()

    def _mask(self, layout: ThreadLayout, text: str) -> str:
        """Virtual paths only in what an error says (bwrap names its bind sources)."""
        hidden = (str(layout.data_root), str(self.state_root))
        return PathMapping(layout.mounts, WORKSPACE, hidden_roots=hidden).mask(text)
