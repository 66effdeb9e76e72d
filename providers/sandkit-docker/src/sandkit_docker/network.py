"""Egress and exposed ports of Docker boxes: no interface in the box, ever.

A box keeps `network_mode: none` (only `lo`). What it may reach and what may
reach it goes through two directories the provider bind-mounts into it, and
through nothing else:

    /opt/sandkit-net/egress   read-only: egress.sock, made by the owner's egress proxy
    /opt/sandkit-net/ingress  the box's: one socket per exposed port (its relays make them)

In the box, a relay (`agent.pyz --net relay-out`, started by the provider as the
box's user) listens on 127.0.0.1:<proxy_port> and passes each connection to
egress.sock; commands get HTTP(S)_PROXY pointing there. On the other side the
proxy (container `<owner>-egress`, the same stdlib code, on `egress.network`)
knows the box by the socket the connection came through and enforces the box's
policy. Exposing a port starts a relay the other way (`relay-in`): its socket
in the ingress directory reaches 127.0.0.1:<port> in the box, and the preview
gateway on the host connects to that socket — never by its path, which the box can
point anywhere: through `net.boxsocket`, which refuses anything but the socket itself.

State on the host, `{data_root}/.sandkit/net/docker/{owner}/`:

    proxy.json                 the operator's hosts table and the host's addresses
    control.sock               the proxy's control socket (sync after every change)
    keys/<sandbox_id>.json     a key's policy (set_egress; survives release, not destroy)
    bound/<sandbox_id>         -> boxes/<name>: the box serving the key now
    boxes/<name>/policy.json   what the proxy enforces for that box
    boxes/<name>/exposed.json  its exposed ports
    boxes/<name>/{egress,ingress}/

`<name>` is the sandbox id for a key's own box and `pool-<slot>` for a warm pool
box (which keeps its directory when a key claims it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import stat
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import docker.errors
from docker.types import LogConfig
from docker.types import Mount as DockerMount

from sandkit.boxkit import AGENT_DIR, AGENT_PATH, end_tagged_argv
from sandkit.errors import ErrorCode, SandboxError
from sandkit.net import state
from sandkit.net.boxsocket import connect_box_socket, is_socket
from sandkit.net.cli import control as net_control
from sandkit.net.policy import load_networks
from sandkit.net.proxy import own_addresses
from sandkit.network import Endpoint
from sandkit.provider import SandboxKey

from .errors import box_state_error, engine_error
from .spec import LABEL_OWNER, LABEL_SPEC

if TYPE_CHECKING:
    from .options import DockerOptions

log = logging.getLogger("sandkit.docker")

NET_DIR = "/opt/sandkit-net"
EGRESS_DIR = f"{NET_DIR}/egress"
INGRESS_DIR = f"{NET_DIR}/ingress"
PROXY_ROOT = "/run/sandkit-net"
LABEL_ROLE = "sandkit.role"
ROLE_EGRESS = "egress"
PROXY_START_S = 60.0
RELAY_WAIT_S = 15.0


def proxy_name(options: DockerOptions) -> str:
    return f"{options.owner}-egress"


class DockerNet:
    """The network side of one Docker provider (see the module doc)."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.options: DockerOptions = provider.options
        self.root: Path = provider._net_root()
        self._lock = threading.Lock()
        self._proxy_ok_until = 0.0
        self._runtime_ok = False

    # -- directories ----------------------------------------------------------------

    @property
    def egress(self) -> bool:
        return self.options.egress.enabled

    @property
    def expose(self) -> bool:
        return self.options.expose.enabled

    @property
    def enabled(self) -> bool:
        return self.egress or self.expose

    def check_runtime(self) -> None:
        """Refuse, once and clearly, a runtime that cannot pass the box's sockets.

        gVisor (runsc) serves a box's AF_UNIX calls itself: without `--host-uds` a box's
        connect() to the proxy's socket fails with ECONNREFUSED, and a socket a box binds
        for an exposed port never appears on the host. The engine says how runsc was
        registered (`docker info`: runtimeArgs)."""
        if self._runtime_ok or not self.enabled or not self.options.runtime:
            return
        runtimes = self.provider.client.info().get("Runtimes") or {}
        entry = runtimes.get(self.options.runtime) or {}
        if "runsc" in os.path.basename(str(entry.get("path") or self.options.runtime)):
            value = _host_uds(entry.get("runtimeArgs") or [])
            # egress: the box connects to a host socket; expose: the box binds one.
            flag = "all" if self.egress and self.expose else "open" if self.egress else "create"
            if value not in (flag, "all"):
                raise SandboxError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"runtime {self.options.runtime!r} (gVisor) is registered without "
                    f"--host-uds={flag}: its boxes cannot reach the egress proxy's socket "
                    "(connect: ECONNREFUSED) or offer an exposed port's; register it with "
                    "that flag (deploy/docker/dockerd.sh gvisor registers --host-uds=all) "
                    "or leave egress and expose off",
                )
        self._runtime_ok = True

    def box_dir(self, name: str) -> Path:
        return Path(state.box_dir(self.root, name))

    def mounts(self, name: str) -> list[DockerMount]:
        """The box's view of its network directories (nothing when both features are off)."""
        mounts = []
        if self.egress:
            source = str(self.box_dir(name) / state.EGRESS)
            mounts.append(
                DockerMount(target=EGRESS_DIR, source=source, type="bind", read_only=True)
            )
        if self.expose:
            source = str(self.box_dir(name) / "ingress")
            mounts.append(DockerMount(target=INGRESS_DIR, source=source, type="bind"))
        return mounts

    def prepare(self, name: str, policy: dict[str, Any] | None) -> None:
        """Create the box's directories and its policy file before the box starts."""
        if not self.enabled:
            return
        uid, gid = self.options.uid, self.options.gid
        base = self.box_dir(name)
        base.mkdir(parents=True, exist_ok=True)
        for sub, mode in ((state.EGRESS, 0o755), ("ingress", 0o700)):
            if (sub == state.EGRESS and not self.egress) or (sub == "ingress" and not self.expose):
                continue
            path = base / sub
            path.mkdir(exist_ok=True)
            with contextlib.suppress(PermissionError):
                os.chown(path, uid, gid)
            path.chmod(mode)
        if self.egress and policy is not None:
            state.write_policy(self.root, name, policy)

    def bind(self, key: SandboxKey, name: str) -> None:
        """Record that `name` serves `key` now (set_egress and the gateway look here)."""
        if not self.enabled:
            return
        link = self.root / "bound" / key.sandbox_id
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".{key.sandbox_id}.{os.getpid()}.{threading.get_ident()}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(f"../boxes/{name}")
        os.replace(tmp, link)

    def bound(self, key: SandboxKey) -> str | None:
        try:
            target = os.readlink(self.root / "bound" / key.sandbox_id)
        except OSError:
            return None
        return os.path.basename(target)

    def unbind(self, key: SandboxKey) -> None:
        state.remove(self.root / "bound" / key.sandbox_id)

    def set_policy(self, name: str, policy: dict[str, Any]) -> None:
        """A running box's new policy, in force when this returns."""
        if not self.egress or not self.box_dir(name).is_dir():
            return
        state.write_policy(self.root, name, policy)
        self.sync()

    def forget_box(self, name: str, removed: bool) -> None:
        """The box stopped (exposed ports end with its processes) or was removed."""
        base = self.box_dir(name)
        if removed:
            shutil.rmtree(base, ignore_errors=True)
            if self.egress:
                with contextlib.suppress(SandboxError):
                    self.sync()
            return
        state.remove(base / "exposed.json")
        _clear_ingress(base / "ingress")

    def clear_all(self) -> None:
        """After shutdown removed every container: every box's state (keys/ stays)."""
        for sub in (state.BOXES, "bound"):
            shutil.rmtree(self.root / sub, ignore_errors=True)
        state.remove(self.root / state.CONTROL)

    # -- the proxy ------------------------------------------------------------------

    def _proxy_kwargs(self, payload_dir: str) -> dict[str, Any]:
        options = self.options
        egress = options.egress
        image = egress.image or options.image
        command = [options.python, "-I", "-S", AGENT_PATH, "--net", "proxy", "--root", PROXY_ROOT]
        mounts = [
            DockerMount(target=AGENT_DIR, source=payload_dir, type="bind", read_only=True),
            DockerMount(target=PROXY_ROOT, source=str(self.root), type="bind"),
        ]
        host_config: dict[str, Any] = {
            "user": options.user,
            "mounts": mounts,
            "init": True,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "network_mode": egress.network,
            "read_only": True,
            "tmpfs": {"/tmp": "rw,nosuid,nodev,size=16m,mode=1777"},
            "mem_limit": egress.mem_limit,
            "memswap_limit": egress.mem_limit,
            "pids_limit": 256,
            "dns": list(egress.dns) or None,
        }
        spec = {
            "image": image,
            "command": command,
            **{k: _jsonable(v) for k, v in host_config.items()},
        }
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
        labels = {
            **options.labels,
            LABEL_OWNER: options.owner,
            LABEL_ROLE: ROLE_EGRESS,
            LABEL_SPEC: digest,
        }
        return {
            "image": image,
            "command": command,
            "name": proxy_name(options),
            "labels": labels,
            "detach": True,
            "restart_policy": {"Name": "unless-stopped"},
            "log_config": LogConfig(type="json-file", config={"max-size": "10m", "max-file": "2"}),
            **{k: v for k, v in host_config.items() if v is not None},
        }

    def write_proxy_config(self) -> None:
        egress = self.options.egress
        denied = [str(n) for n in load_networks(own_addresses())]
        config = {"hosts": egress.hosts, "denied": sorted(set(denied))}
        path = self.root / state.CONFIG
        if state.read_json(path) != config:
            state.write_json(path, config)

    def ensure_proxy(self, payload_dir: str) -> None:
        """The owner's egress proxy runs with the current settings and answers."""
        if not self.egress:
            return
        if time.monotonic() < self._proxy_ok_until:
            return
        with self._lock:
            if time.monotonic() < self._proxy_ok_until:
                return
            self.root.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(PermissionError):
                os.chown(self.root, self.options.uid, self.options.gid)
            self.write_proxy_config()
            kwargs = self._proxy_kwargs(payload_dir)
            client = self.provider.client
            try:
                self._run_proxy(client, kwargs)
            except Exception as exc:
                raise engine_error(exc, "starting the egress proxy") from None
            self._wait_proxy()
            self._proxy_ok_until = time.monotonic() + 5.0

    def _run_proxy(self, client: docker.DockerClient, kwargs: dict[str, Any]) -> None:
        name = kwargs["name"]
        try:
            attrs = client.api.inspect_container(name)
        except docker.errors.NotFound:
            attrs = None
        if attrs is not None:
            labels = (attrs.get("Config") or {}).get("Labels") or {}
            if labels.get(LABEL_SPEC) != kwargs["labels"][LABEL_SPEC]:
                log.info("recreating %s: created with other settings", name)
                self.provider._remove(name)
                attrs = None
        if attrs is None:
            try:
                self.provider._ensure_image(pull_missing=False)
                client.containers.create(**kwargs)
            except docker.errors.ImageNotFound:
                self.provider._ensure_image(pull_missing=True)
                client.containers.create(**kwargs)
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # another instance created it: fine
                    raise
            attrs = client.api.inspect_container(name)
        state = attrs.get("State") or {}
        if not state.get("Running") or state.get("Restarting"):
            with contextlib.suppress(docker.errors.APIError):
                client.api.start(name)

    def _wait_proxy(self) -> None:
        deadline = time.monotonic() + PROXY_START_S
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                reply = self.control({"op": "ping"}, timeout=2.0)
                if reply.get("ok"):
                    return
            except (OSError, ValueError) as exc:
                last = exc
            time.sleep(0.05)
        logs = ""
        with contextlib.suppress(Exception):
            container = self.provider.client.containers.get(proxy_name(self.options))
            logs = container.logs(tail=5).decode("utf-8", "replace").strip()
        raise SandboxError(
            ErrorCode.UNAVAILABLE,
            f"the egress proxy did not answer within {PROXY_START_S:.0f} s ({last}); {logs}"[:800],
        )

    def control(self, request: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        return net_control(str(self.root), request, timeout)

    def sync(self) -> None:
        """Make the proxy read the state now (a box's new listener exists on return)."""
        if not self.egress:
            return
        try:
            reply = self.control({"op": "sync"})
        except (OSError, ValueError):
            self._proxy_ok_until = 0.0
            self.ensure_proxy(self.provider._payload_dir())
            reply = self.control({"op": "sync"})
        if not reply.get("ok"):
            raise SandboxError(ErrorCode.UNAVAILABLE, f"the egress proxy refused: {reply}")

    # -- relays in the box --------------------------------------------------------------

    def start_egress_relay(self, container_id: str) -> None:
        if not self.egress:
            return
        port = self.options.egress.proxy_port
        argv = [
            self.options.python,
            "-I",
            "-S",
            AGENT_PATH,
            "--net",
            "relay-out",
            "--listen",
            f"127.0.0.1:{port}",
            "--socket",
            f"{EGRESS_DIR}/{state.SOCKET}",
            "--tag",
            "sknet-out",
        ]
        self._exec_detached(container_id, argv, "starting the egress relay", wait=True)

    def start_ingress_relay(self, container_id: str, name: str, port: int) -> Path:
        sock = self.box_dir(name) / "ingress" / f"{port}.sock"
        argv = [
            self.options.python,
            "-I",
            "-S",
            AGENT_PATH,
            "--net",
            "relay-in",
            "--socket",
            f"{INGRESS_DIR}/{port}.sock",
            "--port",
            str(port),
            "--tag",
            f"sknet-in-{port}",
        ]
        self._exec_detached(container_id, argv, f"exposing port {port}", wait=True)
        deadline = time.monotonic() + RELAY_WAIT_S
        while not _answers(sock):
            if time.monotonic() > deadline:
                raise SandboxError(
                    ErrorCode.UNAVAILABLE, f"the relay of port {port} did not start in the box"
                )
            time.sleep(0.02)
        return sock

    def stop_ingress_relay(self, container_id: str | None, name: str, port: int) -> None:
        _clear_ingress(self.box_dir(name) / "ingress", f"{port}.sock")
        if container_id is None:
            return
        argv = end_tagged_argv(self.options.python, f"sknet-in-{port}")
        with contextlib.suppress(SandboxError):
            self._exec_detached(container_id, argv, "closing the port", wait=True)

    def _exec_detached(
        self, container_id: str, argv: list[str], doing: str, wait: bool = False
    ) -> None:
        """Run `argv` in the box; with `wait`, until it exits (a relay's exec ends once it
        listens), and a failure is UNAVAILABLE with what it printed. Only an exec with its
        output attached is waited for: without, the engine answers at once."""
        api = self.provider.client.api
        try:
            exec_id = api.exec_create(
                container_id, argv, user=self.options.user, workdir="/", stdout=wait, stderr=wait
            )["Id"]
            output = api.exec_start(exec_id, detach=not wait)
            code = api.exec_inspect(exec_id).get("ExitCode") if wait else 0
        except Exception as exc:
            raise box_state_error(exc, f"{doing}: the box") or engine_error(exc, doing) from None
        if code:
            said = output.decode("utf-8", "replace").strip()[-300:] if output else ""
            raise SandboxError(ErrorCode.UNAVAILABLE, f"{doing}: exit code {code}; {said}")

    # -- exposed ports --------------------------------------------------------------

    def exposed(self, name: str) -> list[int]:
        data = state.read_json(self.box_dir(name) / "exposed.json")
        ports = data.get("ports") if isinstance(data, dict) else None
        return sorted({int(p) for p in ports or [] if isinstance(p, int)})

    def set_exposed(self, name: str, ports: list[int]) -> None:
        state.write_json(self.box_dir(name) / "exposed.json", {"ports": sorted(set(ports))})

    def endpoint(self, key: SandboxKey, name: str, port: int) -> Endpoint:
        sock = self.box_dir(name) / "ingress" / f"{port}.sock"
        return Endpoint.over_socket(key.user_id, key.thread_id, port, str(sock))

    def find_endpoint(self, key: SandboxKey, port: int) -> Endpoint | None:
        name = self.bound(key)
        if name is None or port not in self.exposed(name):
            return None
        endpoint = self.endpoint(key, name, port)
        if endpoint.unix_socket is None or not is_socket(endpoint.unix_socket):
            return None  # gone, or the box put something else there
        return endpoint


def _host_uds(args: list[str]) -> str:
    """The --host-uds value among runsc flags ("none" when absent)."""
    value = "none"
    for arg in args:
        name, _, given = str(arg).lstrip("-").partition("=")
        if name == "host-uds":
            value = given
        elif name == "fsgofer-host-uds" and given in ("", "true"):
            value = "all"
    return value


def _answers(path: Path) -> bool:
    try:
        connect_box_socket(str(path), timeout=1.0).close()
    except OSError:
        return False
    return True


def _clear_ingress(directory: Path, only: str | None = None) -> None:
    """Remove what is in a box's ingress directory (or only the entry `only`), whatever
    the box made of it: sockets, links (never followed), files, directories (removed
    through descriptors, `shutil.rmtree`'s safe walk). Nothing here is worth failing a
    release over: what cannot go is logged."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return  # never made, or gone with the box
    try:
        names = [only] if only is not None else os.listdir(dir_fd)
        for name in names:
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    shutil.rmtree(name, dir_fd=dir_fd)
                else:
                    os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("could not remove %r from a box's ingress dir: %s", name, exc)
    finally:
        os.close(dir_fd)


def _jsonable(value: Any) -> Any:
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
