"""Host-side code over what a box can write (issues 32 and 33), on Docker and Kubernetes.

A box owns its thread's directories (and, on Docker, its ingress directory): it can put a
symlink, a FIFO or a directory where host code expects a file or a socket, and swap a
directory for a symlink at any moment. Each case here is such a box against one place
where the provider or the gateway touches those paths:

- the preview gateway connects to an exposed port's socket (the box links it to a host
  socket, to another box's socket, or makes it a FIFO or a directory);
- release and unexpose clear the ingress directory (the box made a directory there);
- a provider with another box user hands the thread's tree over (a recursive chown): the
  box swaps a directory for a symlink to a host directory just as the walk enters it,
  and deletes files under it. The swap is driven deterministically, at the walk's first
  chown inside that directory (a Python audit hook in the provider's process does what
  the box's watcher would, at the worst moment), never by luck;
- the HTTP carrier's config and token files are not named where a box can read it.

Every attempt is counted in the figures ("host_tried" / "host_through").
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit import SandboxKey
from sandkit.provider import SandboxProvider

from .figures import Figures
from .targets import Target

BOX_KINDS = ("docker", "docker-gvisor", "kubernetes", "kubernetes-gvisor")
DOCKER_KINDS = ("docker", "docker-gvisor")
INGRESS = "/opt/sandkit-net/ingress"
SECRET = "a-hardening-gateway-secret-of-32-chars"
HOST_REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nengine"
ROOT_ONLY = "chowning to another uid needs root (CI runs as root)"


def _count(figures: Figures, kind: str, through: bool) -> None:
    figures.add(kind, "host_tried")
    figures.add(kind, "host_through", 1 if through else 0)


@contextlib.contextmanager
def _host_socket(path: str) -> Iterator[list[int]]:
    """A server on a host unix socket standing in for the engine's: counts connections."""
    accepted: list[int] = []
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                accepted.append(1)
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                    conn.sendall(HOST_REPLY)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield accepted
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()


def _preview_status(provider: SandboxProvider, key: SandboxKey, port: int) -> tuple[int, str]:
    import asyncio

    import httpx

    from sandkit.gateway.app import PreviewGateway

    app = PreviewGateway(provider, [SECRET], public_url="http://gw.test")

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, timeout=60.0) as client:
            return await client.get(
                f"http://gw.test/{key.sandbox_id}/{port}/version",
                headers={"X-Sandkit-Preview-Token": app.sign(key, port)},
            )

    answer = asyncio.run(call())
    return answer.status_code, answer.text


@pytest.fixture(scope="module")
def expose_provider(
    target: Target, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SandboxProvider]:
    if target.kind not in BOX_KINDS:
        pytest.skip(f"{target.kind} has no box-side ingress")
    root = tmp_path_factory.mktemp(f"host-side-{target.kind}")
    provider = target.make(root, options={"expose": {"enabled": True}})
    yield provider
    with contextlib.suppress(Exception):
        provider.shutdown()


@pytest.mark.parametrize("target", BOX_KINDS, indirect=True)
def test_a_preview_never_reaches_what_a_box_linked_into_its_ingress(
    target: Target, expose_provider: SandboxProvider, figures: Figures, tmp_path: Path
) -> None:
    """The critical hole of issue 32: `ln -sfn /var/run/docker.sock <ingress>/3000.sock`
    made one preview view the host's engine. Here the host socket is one this test serves;
    the box links its exposed port's socket to it (absolute and relative), to a second
    box's socket, and replaces it by a FIFO and a directory: the gateway refuses each,
    and nothing connects to the host socket or the other box."""
    owner = SandboxKey("hostside", f"a-{uuid.uuid4().hex[:8]}")
    other = SandboxKey("hostside", f"b-{uuid.uuid4().hex[:8]}")
    box = expose_provider.acquire(owner)
    expose_provider.acquire(other)
    try:
        endpoint = expose_provider.expose(owner, 3000)
        other_endpoint = expose_provider.expose(other, 4000)
        assert endpoint.unix_socket and other_endpoint.unix_socket
        if target.kind not in DOCKER_KINDS:
            # The sockets are the provider's own, made on this host outside every pod:
            # nothing of them is in the box to replace.
            seen = box.execute(f"ls -la {INGRESS} {os.path.dirname(endpoint.unix_socket)}")
            through = seen.exit_code == 0
            _count(figures, target.kind, through)
            assert not through, seen
            return
        with _host_socket(str(tmp_path / "engine.sock")) as accepted:
            here = os.path.dirname(endpoint.unix_socket)
            engine = tmp_path / "engine.sock"
            link = f"{INGRESS}/3000.sock"
            attacks = {
                "absolute link to a host socket": f"ln -sfn {engine} {link}",
                "relative link to a host socket": f"ln -sfn {os.path.relpath(engine, here)} {link}",
                "link to another box's socket": "ln -sfn "
                f"{os.path.relpath(other_endpoint.unix_socket, here)} {link}",
                "a FIFO": f"mkfifo {link}",
                "a directory": f"mkdir {link}",
            }
            through = []
            for label, command in attacks.items():
                done = box.execute(f"rm -rf {INGRESS}/3000.sock; {command}")
                assert done.exit_code == 0, (label, done)
                status, text = _preview_status(expose_provider, owner, 3000)
                got_in = status == 200 or "engine" in text or bool(accepted)
                _count(figures, target.kind, got_in)
                if got_in:
                    through.append(f"{label}: {status} {text[:80]!r}")
            assert not through and not accepted, through
    finally:
        expose_provider.destroy(owner)
        expose_provider.destroy(other)


@pytest.mark.parametrize("target", DOCKER_KINDS, indirect=True)
def test_a_directory_in_the_ingress_does_not_break_release_or_unexpose(
    target: Target, expose_provider: SandboxProvider, figures: Figures
) -> None:
    """A box that makes `<port>.sock` (or anything else) a directory: unexpose and release
    still succeed and clear it (they raised IsADirectoryError with a host path)."""
    key = SandboxKey("hostside", f"d-{uuid.uuid4().hex[:8]}")
    box = expose_provider.acquire(key)
    try:
        expose_provider.expose(key, 3000)
        expose_provider.expose(key, 3001)
        made = box.execute(
            f"rm -f {INGRESS}/3000.sock && mkdir -p {INGRESS}/3000.sock/deep {INGRESS}/junk/x"
            f" && ln -s / {INGRESS}/3000.sock/deep/root"
        )
        assert made.exit_code == 0, made
        expose_provider.unexpose(key, 3000)
        listed = box.execute(f"ls {INGRESS}")
        assert "3000.sock" not in listed.stdout, listed
        box.execute(f"mkdir -p {INGRESS}/3001.sock.d {INGRESS}/again")
        expose_provider.release(key)  # raised IsADirectoryError
        _count(figures, target.kind, False)
        again = expose_provider.acquire(key)
        assert again.execute(f"ls -A {INGRESS}").stdout.strip() == ""
    finally:
        expose_provider.destroy(key)


# -- the recursive chown ------------------------------------------------------------------


class _Swapper:
    """What a box's watcher does at the worst moment, from an audit hook (deterministic).

    At the walk's first chown of an entry inside `inner` (the hook sees every os.chown
    the provider's process makes, by path or by name in a directory descriptor), it
    swaps `inner` for a symlink to `outside` and deletes a file the walk listed. It also
    records whether a box of the key was still running then (`alive`)."""

    def __init__(self, inner: Path, outside: Path, alive: Any, root: Path) -> None:
        self.inner, self.outside, self.alive, self.root = inner, outside, alive, str(root)
        self.armed = False
        self.fired = False
        self.box_running_at_chown: bool | None = None
        self._busy = False

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event != "os.chown" or not self.armed or self._busy:
            return
        target = args[0]
        if not isinstance(target, (str, bytes)):
            return
        name = os.fsdecode(target)
        if os.path.isabs(name) and not name.startswith(self.root + os.sep):
            return  # not the thread's tree (an absolute path elsewhere)
        self._busy = True
        try:
            if self.box_running_at_chown is None:
                self.box_running_at_chown = bool(self.alive())
            if not self.fired and os.path.basename(name).startswith("inner-"):
                self.fired = True
                os.rename(self.inner, self.inner.with_name("moved-away"))
                os.symlink(self.outside, self.inner)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.inner.with_name("moved-away") / "inner-0099")
        finally:
            self._busy = False


_SWAPPERS: list[_Swapper] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    for swapper in _SWAPPERS:
        swapper.hook(event, args)


_hooked = False


def _install_audit_hook() -> None:
    global _hooked
    if not _hooked:
        sys.addaudithook(_audit)  # cannot be removed: inert unless a swapper is armed
        _hooked = True


def _other_user(target: Target) -> dict[str, Any]:
    if target.kind.startswith("docker"):
        return {"user": "1001:1001"}
    return {"uid": 1001, "gid": 1001}


@pytest.mark.parametrize("target", BOX_KINDS, indirect=True)
def test_handing_a_tree_over_never_leaves_it(
    target: Target, figures: Figures, tmp_path: Path
) -> None:
    """Issue 33: a box of user 1000 holds `A/` with files and a host directory of the
    same names; a provider with user 1001 takes the key over. The walk that hands the
    tree to 1001 must (1) start only once the old box no longer runs, (2) never chown
    outside the tree when `A` becomes a symlink mid-walk, (3) not fail when files vanish
    under it. On the old code the walk ran beside the old box and followed the swap."""
    if os.geteuid() != 0:
        pytest.skip(ROOT_ONLY)
    if target.kind not in BOX_KINDS:
        pytest.skip(f"{target.kind} does not hand thread dirs to a box user")
    _install_audit_hook()
    root = tmp_path / "data"
    outside = tmp_path / "outside"
    outside.mkdir()
    names = [f"inner-{i:04d}" for i in range(200)]
    for name in names:
        (outside / name).write_text("host file\n")
    key = SandboxKey("hostside", f"chown-{uuid.uuid4().hex[:8]}")
    first = target.make(root)
    try:
        box = first.acquire(key)
        for name in names:
            box.write_file(f"A/{name}", "box file\n")
        thread = root / "users" / key.user_id / "threads" / key.thread_id
        inner = thread / "user-data" / "workspace" / "A"
        assert inner.is_dir()

        def alive() -> bool:
            return any(key.sandbox_id in name for name in target.boxes(first))

        swapper = _Swapper(inner, outside, alive, root)
        _SWAPPERS.append(swapper)
        second = target.make(root, options=_other_user(target))
        try:
            swapper.armed = True
            try:
                again = second.acquire(key)
            finally:
                swapper.armed = False
                _SWAPPERS.remove(swapper)
            assert swapper.fired, "the walk never entered A"
            escaped = [name for name in names if (outside / name).stat().st_uid != 0] + (
                ["outside/"] if outside.stat().st_uid != 0 else []
            )
            _count(figures, target.kind, bool(escaped) or bool(swapper.box_running_at_chown))
            assert not escaped, f"{len(escaped)} host files chowned outside data_root"
            assert swapper.box_running_at_chown is False, "the walk ran beside the old box"
            assert again.execute("id -u").stdout.strip() == "1001"
        finally:
            with contextlib.suppress(Exception):
                second.destroy(key)
            with contextlib.suppress(Exception):
                second.shutdown()
    finally:
        with contextlib.suppress(Exception):
            first.shutdown()


# -- the HTTP carrier's config and token --------------------------------------------------


@pytest.mark.parametrize("target", ("docker",), indirect=True)
def test_the_http_agents_files_are_named_nowhere_a_box_can_read(
    target: Target, figures: Figures, tmp_path: Path
) -> None:
    """Issue 33: the HTTP agent's config and token file names were in the launcher's and
    the agent's argv (/proc/PID/cmdline is readable by every process in the box), and a
    watcher copied both at the next agent start. No process of the box names them now,
    and the agent's environment is not readable by the box user."""
    provider = target.make(tmp_path / "data", options={"carrier": "http"})
    key = SandboxKey("hostside", f"http-{uuid.uuid4().hex[:8]}")
    try:
        box = provider.acquire(key)
        probe = box.execute(
            "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done;"
            " for p in /proc/[0-9]*; do cat $p/environ 2>/dev/null | tr '\\0' '\\n'"
            " | grep SANDKIT_AGENT; done; true"
        )
        assert probe.exit_code == 0, probe
        named = [line for line in probe.stdout.splitlines() if "sandkit-run" in line]
        _count(figures, target.kind, bool(named))
        assert not named, named
        assert "--http" in probe.stdout  # the agent was seen: the probe looked in the right place
    finally:
        with contextlib.suppress(Exception):
            provider.shutdown()
