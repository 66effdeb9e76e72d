"""The host side of a bwrap box: its state dir, its command line, its cgroup, its processes.

A box is a long-lived `bwrap ... -- sleep infinity` whose PID 1 (bwrap's own
reaper) only waits; killing that PID 1 makes the kernel kill everything in
the box's pid namespace. `<state_root>/<owner>-<sandbox_id>/` holds:

    box.json      the host pid of the box's PID 1, its start time, the boot id, a spec digest
    bwrap.args    bwrap's arguments (read through --args: no host path in the box's cmdline)
    bwrap.log     bwrap's stderr
    opt/          the agent payload, bound read-only at /opt/sandkit
    etc/          the box's own passwd, group and hosts

Nothing here knows the kit; provider.py puts it behind the kit's hooks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import io
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from sandkit.errors import ErrorCode, SandboxError
from sandkit.local import cgroups

# The environment of bwrap, nsenter and the agent: nothing of the provider's own.
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
STATE_FILE = "box.json"
KILL_WAIT_S = 3.0
CGROUP_PREFIX = "bwrap-"


def unavailable(message: str) -> SandboxError:
    return SandboxError(ErrorCode.UNAVAILABLE, message)


# -- processes ---------------------------------------------------------------------------


def start_time(pid: int) -> str | None:
    """When the process started (clock ticks after boot); None when gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat.rpartition(b")")[2].split()
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return fields[19].decode()


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


@dataclasses.dataclass(frozen=True)
class BoxState:
    """box.json: a pid is the box's only while its start time and the boot id match."""

    pid: int
    start: str
    boot: str
    spec: str
    cgroups: tuple[str, ...] = ()

    def alive(self) -> bool:
        return self.boot == boot_id() and start_time(self.pid) == self.start

    @classmethod
    def load(cls, state_dir: Path) -> BoxState | None:
        try:
            data = json.loads((state_dir / STATE_FILE).read_text())
            return cls(
                int(data["pid"]),
                str(data["start"]),
                str(data["boot"]),
                str(data["spec"]),
                tuple(str(c) for c in data.get("cgroups", ())),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, state_dir: Path) -> None:
        temp = state_dir / f"{STATE_FILE}.tmp"
        temp.write_text(json.dumps(dataclasses.asdict(self)))
        os.replace(temp, state_dir / STATE_FILE)


@contextlib.contextmanager
def locked(state_dir: Path, create: bool) -> Iterator[bool]:
    """The box's state dir, locked against other threads and processes (flock).

    Yields False, unlocked, when the dir does not exist and `create` is False. A
    dir removed (destroy) while we waited is not the box's any more: look again.
    """
    while True:
        if create:
            state_dir.mkdir(mode=0o700, exist_ok=True)
        try:
            fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            if create:
                continue
            yield False
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(state_dir).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                yield True
                return
        finally:
            os.close(fd)


# -- what the box is made of -------------------------------------------------------------


def install_payload(state_dir: Path, archive: bytes, digest: str) -> Path:
    """The agent payload under <state>/opt (again only when its digest changed)."""
    opt, marker = state_dir / "opt", state_dir / "payload"
    if opt.is_dir() and marker.is_file() and marker.read_text() == digest:
        return opt
    shutil.rmtree(opt, ignore_errors=True)
    opt.mkdir(mode=0o755)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(opt, filter="data")
    marker.write_text(digest)
    return opt


def write_etc(state_dir: Path, uid: int, gid: int, home: str) -> None:
    """The box's own passwd, group and hosts (the host's name none of the box's users)."""
    etc = state_dir / "etc"
    etc.mkdir(mode=0o755, exist_ok=True)
    texts = {
        "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"sandbox:x:{uid}:{gid}:sandbox:{home}:/bin/sh\n",
        "group": f"root:x:0:\nsandbox:x:{gid}:\n",
        "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
    }
    for name, text in texts.items():
        (etc / name).write_text(text)
        (etc / name).chmod(0o644)


def start_box(
    bwrap: str, args: Sequence[str], state_dir: Path, cgroups: Sequence[str], timeout: float
) -> tuple[int, subprocess.Popen[bytes]]:
    """Start `bwrap <args> -- sleep infinity` (inside `cgroups`); the host pid of its
    PID 1 once the box is set up, and the outer bwrap process."""
    args_path = state_dir / "bwrap.args"
    args_path.write_bytes(b"".join(a.encode() + b"\0" for a in args))
    args_fd = os.open(args_path, os.O_RDONLY)
    info_r, info_w = os.pipe()
    try:
        with open(state_dir / "bwrap.log", "wb") as log:
            argv = [bwrap, "--args", str(args_fd), "--info-fd", str(info_w), "--"]
            process = subprocess.Popen(
                [*join_cgroups(cgroups), *argv, "sleep", "infinity"],
                pass_fds=(args_fd, info_w),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=ENV,
                cwd="/",
                start_new_session=True,  # a Ctrl-C of the provider's terminal is not the box's
            )
    except OSError as exc:
        raise unavailable(f"cannot run {bwrap}: {exc}") from None
    finally:
        os.close(args_fd)
        os.close(info_w)
    deadline = time.monotonic() + timeout
    try:
        pid = _child_pid(info_r, deadline)
    finally:
        os.close(info_r)
    # bwrap forks the command once the mounts are set up: then the box is ready.
    while pid is not None and not _has_children(pid):
        if process.poll() is not None or time.monotonic() > deadline:
            pid = None
        else:
            time.sleep(0.005)
    if pid is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        code = process.wait()
        tail = (state_dir / "bwrap.log").read_text(errors="replace").strip()[-500:]
        raise unavailable(f"bwrap did not start the box (exit code {code}): {tail or 'timeout'}")
    return pid, process


def _child_pid(fd: int, deadline: float) -> int | None:
    """The `child-pid` bwrap writes to --info-fd (the host pid of the box's PID 1)."""
    data = b""
    while (remaining := deadline - time.monotonic()) > 0:
        if not select.select([fd], [], [], remaining)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
        with contextlib.suppress(ValueError, KeyError, TypeError):
            return int(json.loads(data)["child-pid"])
    return None


def _has_children(pid: int) -> bool:
    try:
        return bool(Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    except FileNotFoundError:
        return start_time(pid) is not None  # no CONFIG_PROC_CHILDREN: trust the pid
    except OSError:
        return False


def kill_box(state: BoxState | None, cgroups: Sequence[str]) -> None:
    """Kill the box's PID 1 (the kernel kills the rest of its pid namespace), then
    whatever is left in its cgroups, and remove them. A box that is gone is fine."""
    if state is not None and state.alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.pid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while start_time(state.pid) == state.start:
            if time.monotonic() > deadline:
                raise unavailable(f"the box's PID 1 ({state.pid}) did not die")
            time.sleep(0.005)
    for path in cgroups:
        remove_cgroup(path)


# -- cgroups (sandkit.local.cgroups: the core's, which the local provider uses too) -------


def cgroup_paths(name: str) -> list[str]:
    """Where the box `name`'s cgroups are (whether they exist or not)."""
    return cgroups.paths(CGROUP_PREFIX + name)


def cgroup_boxes() -> set[str]:
    """Names of the boxes that have a cgroup (found even when their state dir is lost)."""
    names: set[str] = set()
    with contextlib.suppress(OSError, ValueError):
        for parent in set(cgroups.parents().values()):
            with contextlib.suppress(OSError):
                entries = os.listdir(parent)
                names |= {e[len(CGROUP_PREFIX) :] for e in entries if e.startswith(CGROUP_PREFIX)}
    return names


def make_cgroups(name: str, pids: int, memory: int) -> tuple[str, ...]:
    """A cgroup per hierarchy for the box, with pids.max and the memory limit (no swap):
    both must take, or the box would run unbounded."""
    try:
        made = cgroups.make(CGROUP_PREFIX + name, pids, memory)
        missing = [c for c, took in (("pids", made.pids), ("memory", made.memory)) if not took]
        if not missing:
            return made.paths
        for path in made.paths:
            cgroups.remove(path)
        reason = f"no {' and '.join(missing)} controller here"
    except (OSError, ValueError) as exc:
        reason = str(exc)
    raise unavailable(
        f"cannot give the box a cgroup of its own ({reason}); run the provider where it may "
        "create cgroups below its own (root with cgroup v1, or a v2 cgroup that delegates "
        "pids and memory), or set providers.bwrap.cgroup: false to run boxes unbounded"
    )


def remove_cgroup(path: str) -> None:
    """Kill every process in the cgroup and delete it (idempotent)."""
    if not cgroups.remove(path, KILL_WAIT_S):
        raise unavailable("cannot remove the box's cgroup: processes keep it busy")


def join_cgroups(paths: Sequence[str]) -> list[str]:
    """The launcher that moves itself into the box's cgroups, then execs the command."""
    return cgroups.launcher(list(paths), "sandkit-bwrap: cannot join the box cgroup")


# -- can this host run boxes? ------------------------------------------------------------


def probe(bwrap: str = "bwrap", cgroup: bool = True) -> str | None:
    """Why this host cannot run bwrap boxes, or None when it can (tries one)."""
    reason = host_reason(bwrap)
    if reason is not None:
        return reason
    try:
        trial = subprocess.run(
            [bwrap, "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "--", "true"],
            capture_output=True,
            env=ENV,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap does not run here: {exc}"
    if trial.returncode != 0:
        return f"bwrap cannot make namespaces here: {trial.stderr.decode(errors='replace')[:300]}"
    if cgroup:
        try:
            for path in make_cgroups(f"probe-{os.getpid()}", 8, 16 << 20):
                remove_cgroup(path)
        except SandboxError as exc:
            return exc.message
    return None


def host_reason(bwrap: str) -> str | None:
    """The cheap part of `probe`: Linux, root, the three tools."""
    if not sys.platform.startswith("linux"):
        return "bwrap boxes need Linux"
    if os.geteuid() != 0:
        return (
            "the bwrap provider runs as root: it joins each box's namespaces with nsenter "
            "and runs the agent there as an unprivileged uid"
        )
    for tool, package in ((bwrap, "bubblewrap"), ("nsenter", "util-linux"), ("setpriv", "")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install {package or 'util-linux'})"
    return None
