"""The Docker engine restarted under a working sandbox, with and without live-restore.

A private dockerd of the test's own is stopped and started: while it is down, calls and
acquires fail with UNAVAILABLE within seconds; once it is back, `acquire` restarts (or,
live-restore, re-adopts) the same container with every file, running one agent. The
engine the rest of the machine uses is never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit import ErrorCode, SandboxError
from tests.docker_support import default_base_image, require_docker, require_image, unavailable

from .faults_support import ERROR_BOUND_S, fresh_key, note, survived
from .figures import Figures
from .provider_process import WORKSPACE, agents_in_box, lost_files, seed_files
from .targets import OWNER, forbidden_for


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
    """The host's own bridges (`docker0`, the dev cluster's): what a private dockerd
    must not touch. Container veths come and go, and so do the main engine's
    user-defined networks (`br-<id>`), which tests in other xdist workers create and
    remove while this one runs."""
    return {
        name
        for name in os.listdir("/sys/class/net")
        if Path(f"/sys/class/net/{name}/bridge").is_dir() and not name.startswith("br-")
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
