"""Faults: the box killed mid-operation, the Docker engine restarted, the provider process
killed, a write interrupted, the disk full.

After each fault a user sees one clear `SandboxError` (UNAVAILABLE for a lost box or
engine, TOO_LARGE for a full disk), the next call or the next `acquire` works, and every
file written before the fault is byte-for-byte intact: each test writes a known set of
files first (`provider_process.seed_files`) and checks all of them at the end. Figures:
one `faults_survived` per fault injected, `files_lost` (0 recorded too).

What "written before" means on E2B: a sandbox's files live in the sandbox, and the
host copy is refreshed only when the provider kills it (docs/providers/e2b.md). A
sandbox the *service* kills loses what was written since the last sync back, by
design; so the E2B box-kill test syncs (release with `release: kill`) before it
starts killing, and checks everything written up to then.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit import ErrorCode, SandboxError, SandboxKey, Settings
from sandkit.provider import SandboxProvider
from sandkit.sandbox import Sandbox
from tests.docker_support import default_base_image, require_docker, require_image, unavailable

from .figures import Figures
from .provider_process import (
    OUTPUTS,
    SLOW_GREP,
    SLOW_LINE,
    WORKSPACE,
    agents_in_box,
    blob,
    expected_seed,
    lost_files,
    provider_process,
    seed_files,
    stray_temp_files,
    version,
)
from .targets import LIMITS, OWNER, SECRET, SESSION, Target, forbidden_for

OPS = ("execute", "write", "grep")
BIG = f"{WORKSPACE}/big.bin"
WRITE_BYTES = 32 * 1024 * 1024  # the "big write" killed mid-way
ERROR_BOUND_S = 30.0  # a lost box must be an error within this, never a hang
ROUNDS = 10  # interrupted writes per provider
GONE_WAIT_S = 60.0  # a Terminating pod may take this long to disappear after shutdown


def fresh_key(name: str) -> SandboxKey:
    return SandboxKey("faults", f"{name}-{uuid.uuid4().hex[:8]}")


def note(kind: str, fault: str, **values: Any) -> None:
    """Timings and outcomes for the report (visible with -s)."""
    shown = " ".join(
        f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()
    )
    print(f"\n[faults] {kind} {fault}: {shown}")


def survived(figures: Figures, kind: str, lost: int, faults: int = 1) -> None:
    figures.add(kind, "files_lost", lost)
    if not lost:
        figures.add(kind, "faults_survived", faults)


def in_background(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run `call` in a thread; the dict gets `result` or `error` and `ended` (monotonic)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as exc:  # handed to the test
            outcome["error"] = exc
        outcome["ended"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def error_code(outcome: dict[str, Any]) -> ErrorCode | None:
    error = outcome.get("error")
    if error is None:
        return None
    assert isinstance(error, SandboxError), f"not a SandboxError: {error!r}"
    return error.code


def wait_no_boxes(target: Target, provider: SandboxProvider) -> list[str]:
    """Our boxes still there after shutdown, waiting out Terminating pods (bounded)."""
    deadline = time.monotonic() + GONE_WAIT_S
    while (left := target.boxes(provider)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def settle(target: Target, provider: SandboxProvider, want: int) -> int:
    """How many boxes there are once killed ones are gone (Terminating pods), bounded."""
    deadline = time.monotonic() + GONE_WAIT_S
    while (count := len(target.boxes(provider))) != want and time.monotonic() < deadline:
        time.sleep(0.5)
    return count


def start_op(box: Sandbox, op: str) -> tuple[threading.Thread, dict[str, Any]]:
    if op == "execute":
        return in_background(lambda: box.execute("sleep 60", timeout=90))
    if op == "write":
        return in_background(lambda: box.write_bytes(BIG, blob("new", WRITE_BYTES)))
    return in_background(lambda: box.grep(SLOW_GREP, f"{WORKSPACE}/slow/line.txt"))


def check_after(box: Sandbox, expected: dict[str, bytes], big: tuple[bytes, ...]) -> int:
    """Files lost or torn (the big file may hold any of `big`); stray temp files fail."""
    lost = lost_files(box, expected)
    if box.read_bytes(BIG) not in big:
        lost.append(BIG)
    assert stray_temp_files(box) == []
    return len(lost)


# -- 1. the box killed mid-operation ------------------------------------------------------


def test_box_killed_mid_operation(
    target: Target, make_provider: Callable[..., SandboxProvider], data_root: Path, figures: Figures
) -> None:
    """A long command, a big write and a slow grep, each cut by the box dying under it.

    The call in flight fails with UNAVAILABLE within seconds; the next `acquire` brings
    the box back (restarted or recreated) with every file. Local has no box: there the
    process running the provider dies instead (the same user-visible fault).
    """
    if not target.can_kill_box:
        _local_provider_killed_mid_operation(target, make_provider, data_root, figures)
        return
    # E2B: release syncs the sandbox's files to the host copy (see the module doc).
    provider = make_provider(options={"release": "kill"} if target.kind == "e2b" else None)
    key = fresh_key("killed")
    box = provider.acquire(key)
    expected = seed_files(box, "before")
    box.write_file(f"{WORKSPACE}/slow/line.txt", SLOW_LINE)
    old = blob("old", WRITE_BYTES)
    started = time.monotonic()
    box.write_bytes(BIG, old)
    write_s = time.monotonic() - started
    if target.kind == "e2b":
        provider.release(key)
        box = provider.acquire(key)
    lost_total = 0
    for op in OPS:
        thread, outcome = start_op(box, op)
        time.sleep(write_s / 2 if op == "write" else 0.5)
        assert thread.is_alive() or op == "write", f"{op} ended before the kill: {outcome}"
        killed = time.monotonic()
        target.kill_box(key)
        thread.join(ERROR_BOUND_S)
        assert not thread.is_alive(), f"{op}: still hanging {ERROR_BOUND_S}s after the kill"
        code = error_code(outcome)
        if op == "write" and outcome["ended"] < killed:
            assert code is None  # finished before the kill: then it must have worked
        else:
            assert code is ErrorCode.UNAVAILABLE, outcome
        error_s = outcome["ended"] - killed
        # The held handle until acquire: UNAVAILABLE or working, never another answer.
        try:
            box.read_bytes(f"{WORKSPACE}/before/notes.txt")
        except SandboxError as exc:
            assert exc.code is ErrorCode.UNAVAILABLE, exc
        started = time.monotonic()
        box = provider.acquire(key)
        acquire_s = time.monotonic() - started
        assert box.execute("echo back").stdout == "back\n"
        lost = check_after(box, expected, (old, blob("new", WRITE_BYTES)))
        assert agents_in_box(box) == 1
        lost_total += lost
        survived(figures, target.kind, lost)
        note(
            target.kind,
            f"box killed during {op}",
            code=code,
            error_s=error_s,
            reacquire_s=acquire_s,
            files_lost=lost,
        )
    assert lost_total == 0
    assert settle(target, provider, 1) == 1, "one box for the key after three kills"


def _local_provider_killed_mid_operation(
    target: Target, make_provider: Callable[..., SandboxProvider], data_root: Path, figures: Figures
) -> None:
    provider = make_provider()
    key = fresh_key("killed")
    box = provider.acquire(key)
    expected = seed_files(box, "before")
    box.write_file(f"{WORKSPACE}/slow/line.txt", SLOW_LINE)
    old = blob("old", WRITE_BYTES)
    box.write_bytes(BIG, old)
    pid_file = f"{WORKSPACE}/command.pid"
    paths = {"execute": pid_file, "write": BIG, "grep": f"{WORKSPACE}/slow/line.txt"}
    lost_total = 0
    for op in OPS:
        spec = {
            "kind": target.kind,
            "data_root": str(data_root),
            "mode": "busy",
            "op": op,
            "path": paths[op],
            "key": [key.user_id, key.thread_id],
        }
        with provider_process(spec) as child:
            child.wait_for("STARTED")
            time.sleep(0.5 if op != "write" else random.uniform(0.0, 0.3))
            child.kill()
        if op != "write":
            assert child.last("DONE") is None, f"{op} ended before the kill"
        orphan = _stop_orphan(box, pid_file) if op == "execute" else None
        started = time.monotonic()
        box = provider.acquire(key)
        assert box.execute("echo back").stdout == "back\n"
        lost = check_after(box, expected, (old, blob("busy-new", 48 * 1024 * 1024)))
        lost_total += lost
        survived(figures, target.kind, lost)
        note(
            target.kind,
            f"provider process killed during {op}",
            reacquire_s=time.monotonic() - started,
            files_lost=lost,
            **({"command_outlived_provider": orphan} if orphan is not None else {}),
        )
    assert lost_total == 0


def _stop_orphan(box: Sandbox, pid_file: str) -> bool:
    """The command a killed local provider started keeps running: report and end it."""
    pid = int(box.read_file(pid_file).content.strip())
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    if b"sleep" not in cmdline:  # pid reused: not ours
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True


# -- 2. the Docker engine restarted -------------------------------------------------------


class PrivateEngine:
    """A dockerd of the test's own (own data/exec roots, socket, PID file; its own containerd).

    The engine the rest of the machine uses is never touched: this one runs in a
    network namespace of its own, without bridge or iptables rules, and everything it
    keeps lives under `base`. Boxes have network_mode none anyway.
    """

    def __init__(self, base: Path, config: dict[str, Any]) -> None:
        self.base = base
        self.socket = base / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.pidfile = base / "docker.pid"
        self.log = base / "dockerd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        (base / "daemon.json").write_text(json.dumps(config) + "\n")

    def start(self, timeout: float = 60.0) -> float:
        import docker

        started = time.monotonic()
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    # Its own network namespace: a dockerd started with --bridge=none
                    # deletes any `docker0` it can see, i.e. the main engine's.
                    "unshare",
                    "--net",
                    "--",
                    "dockerd",
                    f"--data-root={self.base / 'data'}",
                    f"--exec-root={self.base / 'exec'}",
                    f"--host={self.url}",
                    f"--pidfile={self.pidfile}",
                    f"--config-file={self.base / 'daemon.json'}",
                    "--bridge=none",
                    "--iptables=false",
                    "--ip-masq=false",
                    "--log-level=warn",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = started + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"private dockerd exited:\n{self.log_tail()}"
            with contextlib.suppress(Exception):  # the client asks for the version at once
                client = docker.DockerClient(base_url=self.url, timeout=5)
                client.close()
                return time.monotonic() - started
            time.sleep(0.1)
        raise AssertionError(f"private dockerd did not answer in {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 60.0) -> float:
        """SIGTERM by PID and wait (it stops its containers and its containerd first)."""
        started = time.monotonic()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return time.monotonic() - started

    def containerd_pid(self) -> int | None:
        pidfile = self.base / "exec" / "containerd" / "containerd.pid"
        with contextlib.suppress(OSError, ValueError):
            return int(pidfile.read_text().strip())
        return None

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-3000:]
        return ""

    def remove(self) -> None:
        """Unmount whatever the engine left mounted under base, then delete base."""
        prefix = str(self.base) + "/"
        mounts = []
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4].replace("\\040", " ")
                if point.startswith(prefix):
                    mounts.append(point)
        for point in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)
        shutil.rmtree(self.base, ignore_errors=True)


def _host_bridges() -> set[str]:
    """Bridges of the host's network namespace (container veths come and go)."""
    return {
        name
        for name in os.listdir("/sys/class/net")
        if Path(f"/sys/class/net/{name}/bridge").is_dir()
    }


@pytest.fixture(params=[False, True], ids=["engine-stops-boxes", "live-restore"])
def private_engine(request: pytest.FixtureRequest) -> Iterator[PrivateEngine]:
    """Without live-restore the engine stops its containers on the way down; with it
    (a common production setting) they keep running through the restart."""
    require_docker()
    if os.geteuid() != 0:
        unavailable("a private dockerd needs root")
    if shutil.which("dockerd") is None:
        unavailable("dockerd is not installed")
    # Short: the engine's and containerd's unix sockets live under it (108-byte limit).
    base = Path(tempfile.mkdtemp(prefix="skd-", dir="/tmp"))
    engine = PrivateEngine(base, {"live-restore": bool(request.param)})
    bridges = _host_bridges()
    try:
        yield engine
        assert bridges <= _host_bridges(), "a bridge of the host (docker0?) went away"
    finally:
        engine.stop()
        pid = engine.containerd_pid()
        comm = Path(f"/proc/{pid}/comm")
        if pid is not None and comm.exists() and comm.read_text().strip() == "containerd":
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        engine.remove()


def test_docker_engine_restarted(
    private_engine: PrivateEngine, tmp_path: Path, figures: Figures
) -> None:
    """dockerd stops under a working sandbox and comes back.

    While it is down, calls and acquires fail with UNAVAILABLE within seconds; once
    it is back, `acquire` restarts (or, live-restore, re-adopts) the same container
    with every file: exactly one box, running exactly one agent.
    """
    import docker

    from .targets import BUILDERS

    image = default_base_image()
    require_image(image)
    engine = private_engine
    started_s = engine.start()
    # Its containerd is its own: state, sockets and data under the engine's dirs.
    config = tomllib.loads((engine.base / "exec/containerd/containerd.toml").read_text())
    for value in (config["root"], config["state"], config["grpc"]["address"]):
        assert value.startswith(f"{engine.base}/"), config
    load = subprocess.run(
        f"docker save {image} | docker --host {engine.url} load",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert load.returncode == 0, load.stderr
    private = docker.DockerClient(base_url=engine.url, timeout=30)

    def ours() -> list[Any]:
        return private.containers.list(all=True, filters={"label": f"sandkit.owner={OWNER}"})

    data_root = tmp_path / "data"
    data_root.mkdir()
    provider = BUILDERS["docker"]().make(data_root, options={"docker_host": engine.url})
    try:
        key = fresh_key("engine")
        box = provider.acquire(key)
        expected = seed_files(box, "before")
        (container,) = ours()

        stop_s = engine.stop()
        started = time.monotonic()
        with pytest.raises(SandboxError) as info:
            box.read_bytes(f"{WORKSPACE}/before/notes.txt")
        call_s = time.monotonic() - started
        assert info.value.code is ErrorCode.UNAVAILABLE, info.value
        message = info.value.message
        started = time.monotonic()
        with pytest.raises(SandboxError) as info:
            provider.acquire(key)
        acquire_down_s = time.monotonic() - started
        assert info.value.code is ErrorCode.UNAVAILABLE, info.value
        assert max(call_s, acquire_down_s) < ERROR_BOUND_S
        for text in (message, info.value.message):
            assert not any(f in text for f in forbidden_for(data_root)), text

        restart_s = engine.start()
        started = time.monotonic()
        box = provider.acquire(key)
        acquire_s = time.monotonic() - started
        assert box.execute("echo back").stdout == "back\n"
        lost = lost_files(box, expected)
        assert [c.id for c in ours()] == [container.id], "the same container, not a second one"
        agents = agents_in_box(box)
        survived(figures, "docker", len(lost))
        note(
            "docker",
            "engine restarted",
            engine_stop_s=stop_s,
            call_error_s=call_s,
            acquire_while_down_s=acquire_down_s,
            engine_start_s=restart_s,
            reacquire_s=acquire_s,
            first_start_s=started_s,
            files_lost=len(lost),
            agents=agents,
            message=json.dumps(message),
        )
        assert lost == []
        assert agents == 1, "an agent from before the restart is still running in the box"
        provider.shutdown()
        assert ours() == []
    finally:
        with contextlib.suppress(Exception):
            provider.shutdown()
        private.close()


# -- 3. the provider process killed and restarted -----------------------------------------


def test_provider_process_killed_and_restarted(
    target: Target, make_provider: Callable[..., SandboxProvider], data_root: Path, figures: Figures
) -> None:
    """SIGKILL a provider process holding three boxes while it rewrites a big file.

    A new provider with the same settings re-adopts every box (none created, none
    duplicated), the files are intact, the big file holds the last version written or
    the next, and its shutdown leaves no box.
    """
    probe = make_provider()
    assert wait_no_boxes(target, probe) == [], "boxes of an earlier test are still there"
    keys = [fresh_key(f"proc{i}") for i in range(3)]
    tags = [f"proc{i}" for i in range(3)]
    big = f"{WORKSPACE}/rewritten.txt"
    spec = {
        "kind": target.kind,
        "data_root": str(data_root),
        "mode": "rewrite",
        "seed": [[k.user_id, k.thread_id, t] for k, t in zip(keys, tags, strict=True)],
        "path": big,
        "tag": "proc",
    }
    with provider_process(spec) as child:
        child.wait_for("WROTE 1")
        time.sleep(random.uniform(0.0, 0.5))
        child.kill()
    last = child.last("WROTE")
    assert last is not None
    n = int(last.split()[1])
    left = len(target.boxes(probe))
    assert left == (0 if target.kind == "local" else len(keys)), "the killed process's boxes"

    provider = make_provider()
    started = time.monotonic()
    boxes = [provider.acquire(k) for k in keys]
    acquire_s = time.monotonic() - started
    after = len(target.boxes(provider))
    assert after == len(keys), f"{after} boxes for {len(keys)} keys after re-adoption"
    lost: list[str] = []
    agents: list[int] = []  # per box: the killed provider's agent must be gone
    for box, tag in zip(boxes, tags, strict=True):
        lost += lost_files(box, expected_seed(tag))
        assert box.execute("echo back").stdout == "back\n"
        assert stray_temp_files(box) == []
        if target.kind != "local":
            agents.append(agents_in_box(box))
    whole = boxes[0].read_bytes(big).decode()
    if whole not in (version("proc", n), version("proc", n + 1)):
        lost.append(big)
    survived(figures, target.kind, len(lost))
    note(
        target.kind,
        "provider process killed",
        versions_written=n,
        boxes_after_kill=left,
        reacquire_3_keys_s=acquire_s,
        files_lost=len(lost),
    )
    assert lost == []
    assert set(agents) <= {1}, f"agents per box after the restart: {agents}"
    provider.shutdown()
    assert wait_no_boxes(target, provider) == []


# -- 4. an interrupted write_file ---------------------------------------------------------


def test_interrupted_write_leaves_old_or_new(
    target: Target, make_provider: Callable[..., SandboxProvider], data_root: Path, figures: Figures
) -> None:
    """Kill the writer mid-write, ten times: the file is the old version or the new one.

    Local: the provider process, rewriting an 8 MiB file in a loop, is SIGKILLed at a
    random moment. Remote kinds: the agent in the box is SIGKILLed (from a second
    provider's agent in the same box) at a random moment of a 16 MiB write_bytes.
    Never a torn file, never a temp file left where list_dir or glob show it.
    """
    if target.kind == "local":
        torn, outcomes = _interrupt_local_writer(target, data_root, make_provider)
    else:
        torn, outcomes = _interrupt_agent_writes(target, make_provider)
    survived(figures, target.kind, torn, faults=ROUNDS)
    note(target.kind, "interrupted writes", rounds=ROUNDS, torn=torn, **outcomes)
    assert torn == 0


def _interrupt_local_writer(
    target: Target, data_root: Path, make_provider: Callable[..., SandboxProvider]
) -> tuple[int, dict[str, Any]]:
    key = fresh_key("torn")
    path = f"{WORKSPACE}/big.txt"
    provider = make_provider()
    box = provider.acquire(key)
    expected = seed_files(box, "before")
    torn = 0
    strays = 0
    for i in range(ROUNDS):
        tag = f"round{i}"
        spec = {
            "kind": target.kind,
            "data_root": str(data_root),
            "mode": "rewrite",
            "key": [key.user_id, key.thread_id],
            "path": path,
            "tag": tag,
        }
        with provider_process(spec) as child:
            child.wait_for("WROTE 1")
            time.sleep(random.uniform(0.0, 0.4))
            child.kill()
        last = child.last("WROTE")
        assert last is not None
        n = int(last.split()[1])
        if box.read_bytes(path).decode() not in (version(tag, n), version(tag, n + 1)):
            torn += 1
        strays += len(stray_temp_files(box))
    torn += len(lost_files(box, expected))
    assert strays == 0, f"{strays} temp files visible after {ROUNDS} killed writers"
    return torn, {"strays": strays}


def _interrupt_agent_writes(
    target: Target, make_provider: Callable[..., SandboxProvider]
) -> tuple[int, dict[str, Any]]:
    key = fresh_key("torn")
    path = f"{WORKSPACE}/big.bin"
    size = 16 * 1024 * 1024
    box = make_provider().acquire(key)
    killer = make_provider().acquire(key)  # the same box, its own agent
    expected = seed_files(box, "before")
    current = blob("v0", size)
    started = time.monotonic()
    box.write_bytes(path, current)
    write_s = time.monotonic() - started
    torn = strays = failed = kept_old = 0
    slowest_s = 0.0
    for i in range(1, ROUNDS + 1):
        pid = box.info()["pid"]
        new = blob(f"v{i}", size)
        if i == 1:
            # Deterministic worst case first: the agent is frozen, so the write piles up
            # unread on its way in, then killed with it there (Kubernetes' exec stream
            # never ended in that state; the write waited out its 120 s deadline).
            assert killer.execute(f"kill -STOP {pid}").exit_code == 0
            writer, outcome = in_background(lambda new=new: box.write_bytes(path, new))
            time.sleep(1.0)
            shot = killer.execute(f"kill -9 {pid}")
        else:
            delay = random.uniform(0.0, write_s)
            writer, outcome = in_background(lambda new=new: box.write_bytes(path, new))
            shot = killer.execute(f"sleep {delay:.3f}; kill -9 {pid}", timeout=60)
        killed = time.monotonic()
        assert shot.exit_code in (0, 1), shot  # 1: the write and its agent ended first
        writer.join(ERROR_BOUND_S)
        assert not writer.is_alive(), f"round {i}: the write still hangs after the kill"
        slowest_s = max(slowest_s, outcome["ended"] - killed)
        code = error_code(outcome)
        assert code in (None, ErrorCode.UNAVAILABLE), outcome
        failed += code is not None
        content = box.read_bytes(path)  # a fresh agent answers
        if content not in (current, new):
            torn += 1
        kept_old += content == current
        current = content
        strays += len(stray_temp_files(box))
    torn += len(lost_files(box, expected))
    assert strays == 0, f"{strays} temp files visible after {ROUNDS} killed agents"
    assert agents_in_box(box) == 2, "the killed agents are gone; the two live ones remain"
    return torn, {
        "writes_failed": failed,
        "old_kept": kept_old,
        "strays": strays,
        "slowest_answer_after_kill_s": round(slowest_s, 2),
    }


# -- 5. the disk full ---------------------------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "32m") -> Iterator[Path]:
    if os.geteuid() != 0:
        unavailable("mounting a small tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=755", "tmpfs", str(where)],
        check=True,
        capture_output=True,
    )
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


@contextlib.contextmanager
def full_disk_provider(
    target: Target, make_provider: Callable[..., SandboxProvider], tmp_path: Path
) -> Iterator[tuple[SandboxProvider, Path]]:
    """A provider whose thread data sits on a 32 MiB file system.

    Host-dir kinds: the data root is a small tmpfs. E2B: the files live in the sandbox,
    so the stand-in gives each sandbox a small tmpfs at /mnt/user-data.
    """
    if target.kind == "e2b":
        from e2b_standin import Cloud
        from sandkit_e2b.provider import E2BProvider

        from .targets import API_KEY

        cloud = Cloud(
            require_docker(),
            {"base": default_base_image()},
            SESSION,
            tmpfs={"/mnt/user-data": "size=32m,mode=755"},
        )
        root = tmp_path / "data-e2b"
        root.mkdir()
        settings = Settings(data_root=root, execute_enabled=True, secrets=[SECRET], limits=LIMITS)
        options = {
            "api_key": API_KEY,
            "owner": OWNER,
            "maintenance_interval_s": 0,
            "shutdown": "kill",
            "sync_back": False,
        }
        provider = E2BProvider(
            settings.model_copy(update={"providers": {"e2b": options}}),
            sandbox_class=cloud.sandbox_class(),
        )
        try:
            yield provider, root
        finally:
            provider.shutdown()
            cloud.remove_all()
        return
    with small_tmpfs(tmp_path / "small") as root:
        provider = make_provider(root)
        try:
            yield provider, root
        finally:
            provider.shutdown()  # before the unmount: no box may hold the file system


def test_disk_full_is_too_large_and_loses_nothing(
    target: Target, make_provider: Callable[..., SandboxProvider], tmp_path: Path, figures: Figures
) -> None:
    """Fill the thread's file system through every write path and through a command.

    Each write that does not fit is TOO_LARGE ("No space left on device"), leaves the
    old content and no temp file; files written before are intact; a command that
    fills the disk just fails (exit code, stderr); after space is freed, writes work.
    """
    with full_disk_provider(target, make_provider, tmp_path) as (provider, root):
        forbidden = forbidden_for(root)
        box = provider.acquire(fresh_key("full"))
        expected = seed_files(box, "before")
        victim = f"{WORKSPACE}/victim.txt"
        old = "old content\n" * 8000
        box.write_file(victim, old)
        codes: list[str] = []

        def refused(call: Callable[[], Any]) -> SandboxError:
            with pytest.raises(SandboxError) as info:
                call()
            assert info.value.code is ErrorCode.TOO_LARGE, info.value
            assert not any(f in info.value.message for f in forbidden), info.value.message
            codes.append(f"{info.value.code.value}: {info.value.message}")
            return info.value

        # write_bytes until the file system refuses (32 MiB, 4 MiB each: bounded).
        chunk = blob("fill", 4 * 1024 * 1024)
        for i in range(16):
            try:
                box.write_bytes(f"{WORKSPACE}/fill/chunk{i}.bin", chunk)
            except SandboxError as exc:
                assert exc.code is ErrorCode.TOO_LARGE, exc
                assert "space" in exc.message.lower(), exc.message
                codes.append(f"{exc.code.value}: {exc.message}")
                break
        else:
            pytest.fail("64 MiB fitted on a 32 MiB file system")
        big_text = "new content\n" * (6 * 1024 * 1024 // 12)
        refused(lambda: box.write_file(victim, big_text))
        refused(lambda: box.write_file(victim, big_text, append=True))
        refused(lambda: box.write_bytes(victim, big_text.encode()))
        # A command fills the rest: it fails on its own, it is not a sandkit error.
        filler = box.execute(f"head -c 64M /dev/zero > {WORKSPACE}/fill/dd.bin")
        assert filler.exit_code != 0 and "space" in filler.stderr.lower(), filler
        refused(lambda: box.write_file(f"{WORKSPACE}/small.txt", "x" * 65536))
        refused(lambda: box.edit_file(victim, "old content\n" * 8000, "edited\n" * 20000))
        refused(lambda: box.write_file(victim, "y" * 65536, append=True))

        assert box.read_bytes(victim) == old.encode()
        lost = lost_files(box, expected)
        assert stray_temp_files(box) == []
        # Freeing space makes the next write work.
        assert box.execute(f"rm -rf {WORKSPACE}/fill").exit_code == 0
        box.write_file(victim, big_text)
        assert box.read_bytes(victim) == big_text.encode()
        box.write_file(victim, "appended\n", append=True)
        assert box.read_bytes(victim).endswith(b"new content\nappended\n")
        assert lost_files(box, expected) == lost
        survived(figures, target.kind, len(lost))
        note(
            target.kind,
            "disk full",
            refusals=len(codes),
            files_lost=len(lost),
            first=json.dumps(codes[0]),
        )
        assert lost == []
        assert (
            box.read_bytes(f"{OUTPUTS}/before-report.md") == expected[f"{OUTPUTS}/before-report.md"]
        )


# -- the atomic write itself ----------------------------------------------------------------


@pytest.mark.parametrize("unnamed", [True, False], ids=["o_tmpfile", "named_temp"])
def test_atomic_replace_names_nothing_until_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unnamed: bool
) -> None:
    """What a killed writer can leave: with O_TMPFILE the data is written under no name at
    all (nothing to leave behind); without it (macOS, some file systems) under the temp
    name, which a failure that Python sees still removes."""
    from sandkit.runtime import safefs

    if not unnamed:
        monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    (tmp_path / "f.txt").write_bytes(b"old")
    seen: list[list[str]] = []
    real_write_all = safefs.write_all

    def watching(fd: int, data: bytes) -> None:
        seen.append(sorted(os.listdir(tmp_path)))
        real_write_all(fd, data)

    monkeypatch.setattr(safefs, "write_all", watching)
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        safefs.atomic_replace(dir_fd, "f.txt", b"new", None)
        assert (tmp_path / "f.txt").read_bytes() == b"new"
        monkeypatch.setattr(safefs, "write_all", _no_space)
        with pytest.raises(OSError):
            safefs.atomic_replace(dir_fd, "f.txt", b"newer", None)
    finally:
        os.close(dir_fd)
    assert os.listdir(tmp_path) == ["f.txt"]
    assert (tmp_path / "f.txt").read_bytes() == b"new"
    if unnamed and hasattr(os, "O_TMPFILE"):
        assert seen == [["f.txt"]], "the data was written under a visible name"
    else:
        assert len(seen) == 1 and len(seen[0]) == 2  # f.txt and the temp name


def _no_space(fd: int, data: bytes) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")
