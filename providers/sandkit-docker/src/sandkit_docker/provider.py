"""`DockerProvider`: one hardened container per `SandboxKey`, the agent inside.

The container's main process only keeps it alive; every operation goes to
one long-lived agent per sandbox: `agent.pyz --stdio` over a Docker exec
socket (carrier stdio, the default) or `agent.pyz --http` reached at the
container's IP with a bearer token (carrier http, see `http_agent`).
Containers are found again by name (`<owner>-<sandbox_id>`) and labels, so
a restarted provider adopts its boxes instead of creating duplicates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker
import docker.errors

from sandkit.agent.protocol import max_frame_bytes
from sandkit.boxes import (
    AGENT_DIR,
    AGENT_PATH,
    RG_PATH,
    IdleReaper,
    Payload,
    TrackedSandbox,
    box_mapping,
    build_payload,
)
from sandkit.boxtable import BoxTable
from sandkit.config import Settings
from sandkit.errors import ErrorCode, SandboxError
from sandkit.paths import ThreadLayout
from sandkit.provider import SandboxKey, SandboxProvider
from sandkit.remote import agent_config as make_agent_config
from sandkit.streams import ByteStream
from sandkit.transports.base import Transport
from sandkit.transports.http import HttpTransport
from sandkit.transports.stdio import StdioTransport

from . import http_agent
from .client import connect
from .errors import engine_error
from .http_agent import AgentSlot, SlotTransport
from .options import DockerOptions
from .spec import (
    LABEL_AGENT,
    LABEL_OWNER,
    LABEL_SANDBOX_ID,
    LABEL_SPEC,
    container_name,
    create_kwargs,
    owner_filter,
)
from .stream import DockerExecStream

log = logging.getLogger("sandkit.docker")

# How long to wait for a container another process created to be started by it.
FOREIGN_START_WAIT_S = 10.0
# carrier http: how long a ping may take before the agent counts as gone.
HTTP_PROBE_TIMEOUT_S = 3.0
# Marks each stdio agent (`--tag` in its argv: the agent is non-dumpable, so its
# environ is unreadable in the box) so the provider can end the one a new channel replaces.
# Kills this uid's processes whose argv ends in `--tag <argv[1]>`.
_END_AGENT = (
    "import os,signal,sys\n"
    "tail=[b'--tag',sys.argv[1].encode()]\n"
    "for p in os.listdir('/proc'):\n"
    " try:\n"
    "  with open('/proc/%s/cmdline'%p,'rb') as f:\n"
    "   if f.read().split(b'\\0')[-3:-1]==tail: os.kill(int(p),signal.SIGKILL)\n"
    " except (OSError,ValueError): pass\n"
)


class DockerSandbox(TrackedSandbox):
    """A sandbox in a container (busy tracking for reaping comes with `TrackedSandbox`)."""


@dataclasses.dataclass(eq=False)
class _Box:
    """What this provider knows about one key's container."""

    key: SandboxKey
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    container_id: str | None = None
    sandbox: DockerSandbox | None = None
    stream: DockerExecStream | None = None
    # The stdio agent of `stream`: its tag, and the container it runs in.
    agent_tag: str | None = None
    agent_container: str | None = None
    # carrier http: the agent the sandbox's calls go to.
    agent: AgentSlot = dataclasses.field(default_factory=AgentSlot)
    # Set when the engine said the container is gone or stopped: acquire re-checks.
    dead: bool = False

    def looks_alive(self, carrier: str) -> bool:
        """Cheap check: a live agent channel implies a running container."""
        if self.dead:
            return False
        if carrier == "http":
            return self.agent.transport is not None and not self.agent.down
        stream = self.stream
        return stream is not None and not stream.at_eof


class DockerProvider(SandboxProvider):
    name = "docker"

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.options = DockerOptions.from_settings(self.settings)
        self._client: docker.DockerClient | None = None
        self._client_lock = threading.Lock()
        self._boxes = BoxTable(_Box)
        self._image_lock = threading.Lock()
        self._network_lock = threading.Lock()
        self._pulled = False
        self._reaper = IdleReaper("sandkit-docker-reaper", self.reap_idle)

    # -- engine ---------------------------------------------------------------------

    @property
    def client(self) -> docker.DockerClient:
        """The engine client, connected on first use (UNAVAILABLE when unreachable)."""
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    try:
                        client = connect(self.options.docker_host)
                        client.ping()
                    except Exception as exc:
                        raise engine_error(exc, "connecting to Docker") from None
                    self._client = client
        return self._client

    def _payload(self) -> Payload:
        return build_payload(True)

    # -- SandboxProvider --------------------------------------------------------------

    def acquire(self, key: SandboxKey) -> DockerSandbox:
        self._reaper.start(self.options.reap_interval_s, self.settings.idle_timeout_s)
        with self._boxes.locked(key) as box:
            sandbox = box.sandbox
            if (
                sandbox is not None
                and not sandbox.closed
                and box.looks_alive(self.options.carrier)
                and self._answers(sandbox)
            ):
                sandbox.last_used = time.monotonic()
                return sandbox
            try:
                self._ensure_running(box)
                if self.options.carrier == "http":
                    self._ensure_http_agent(box)
            except BaseException:
                if box.sandbox is None:
                    self._boxes.forget(box)
                raise
            if sandbox is None or sandbox.closed:
                sandbox = self._new_sandbox(box)
                box.sandbox = sandbox
            # Open the channel now: acquire returns a box that answers, and a
            # broken image (no python3) fails here with the agent's reason.
            sandbox.ping(timeout=30.0)
            sandbox.last_used = time.monotonic()
            return sandbox

    def get(self, key: SandboxKey) -> DockerSandbox | None:
        box = self._boxes.box(key)
        with box.lock:
            sandbox = box.sandbox
            if sandbox is not None and not sandbox.closed and box.looks_alive(self.options.carrier):
                return sandbox
            attrs = self._inspect(key)
            if attrs is None or not _running(attrs) or not self._adoptable(attrs, key):
                if sandbox is None:
                    self._boxes.forget(box)
                return None
            box.container_id = attrs["Id"]
            box.dead = False
            if self.options.carrier == "http":
                # Not a container start: the agent of a box adopted from an earlier
                # provider instance answers to a token we do not know.
                try:
                    self._ensure_http_agent(box)
                except BaseException:
                    if sandbox is None:
                        self._boxes.forget(box)
                    raise
            if sandbox is None or sandbox.closed:
                sandbox = self._new_sandbox(box)
                box.sandbox = sandbox
            return sandbox

    def release(self, key: SandboxKey) -> None:
        self._drop(key, remove=False)

    def destroy(self, key: SandboxKey) -> None:
        self._drop(key, remove=True)

    def shutdown(self) -> None:
        self._reaper.stop()
        boxes = self._boxes.take_all()
        for box in boxes:
            with box.lock:
                self._close_box(box)
        try:
            client = self.client  # also cleans up after a crashed earlier instance
        except SandboxError:
            if boxes:
                log.warning("shutdown: the Docker engine is unreachable; containers may remain")
            return
        try:
            containers = client.containers.list(all=True, filters=owner_filter(self.options))
        except Exception as exc:
            raise engine_error(exc, "listing containers at shutdown") from None
        with ThreadPoolExecutor(8, thread_name_prefix="sandkit-docker-shutdown") as pool:
            list(pool.map(self._shut_one, containers))
        # Agent volumes the engine could not delete with their container (it only
        # logs that); prune spares volumes still used by a (stopped) container.
        try:
            client.volumes.prune(filters=owner_filter(self.options))
        except docker.errors.APIError as exc:
            log.warning("shutdown: pruning agent volumes: %s", exc)
        if self.options.shutdown == "remove":
            # The owner's internal network (carrier http), now without containers.
            try:
                client.networks.prune(filters=owner_filter(self.options))
            except docker.errors.APIError as exc:
                log.warning("shutdown: pruning networks: %s", exc)

    def _shut_one(self, container: Any) -> None:
        try:
            if self.options.shutdown == "remove":
                container.remove(force=True, v=True)
            elif container.status == "running":
                container.stop(timeout=self.options.stop_timeout_s)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: removal already in progress
                log.warning("shutdown: %s: %s", container.name, exc)

    def reap_idle(self, max_idle_s: float) -> list[SandboxKey]:
        return self._boxes.reap_idle(max_idle_s, lambda box: self._stop_box(box, remove=False))

    # -- boxes ------------------------------------------------------------------------

    def _drop(self, key: SandboxKey, remove: bool) -> None:
        box = self._boxes.box(key)
        with box.lock:
            self._stop_box(box, remove)
        self._boxes.forget(box)

    def _close_box(self, box: _Box) -> None:
        sandbox, box.sandbox, box.stream = box.sandbox, None, None
        if sandbox is not None:
            sandbox.close()
        box.agent.replace(None)

    def _stop_box(self, box: _Box, remove: bool) -> None:
        """Close the sandbox, then stop or remove the container (by name: ours or adopted)."""
        self._close_box(box)
        box.dead = True
        name = container_name(self.options, box.key)
        api = self.client.api
        try:
            if remove:
                api.remove_container(name, force=True, v=True)
            else:
                api.stop(name, timeout=self.options.stop_timeout_s)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if not (remove and exc.status_code == 409):  # removal already in progress
                raise engine_error(exc, f"stopping sandbox {box.key.sandbox_id}") from None
        except Exception as exc:
            raise engine_error(exc, f"stopping sandbox {box.key.sandbox_id}") from None
        box.container_id = None

    # -- container lifecycle ------------------------------------------------------------

    def _inspect(self, key: SandboxKey) -> dict[str, Any] | None:
        try:
            attrs: dict[str, Any] = self.client.api.inspect_container(
                container_name(self.options, key)
            )
        except docker.errors.NotFound:
            return None
        except Exception as exc:
            raise engine_error(exc, f"inspecting sandbox {key.sandbox_id}") from None
        return attrs

    def _adoptable(
        self, attrs: dict[str, Any], key: SandboxKey, spec: dict[str, Any] | None = None
    ) -> bool:
        """Ours, for this key, and created with the settings we would use now."""
        if spec is None:
            layout = ThreadLayout.for_key(self.settings, key)
            spec = create_kwargs(self.options, layout, self._payload().digest)
        labels = attrs.get("Config", {}).get("Labels") or {}
        return bool(
            labels.get(LABEL_OWNER) == self.options.owner
            and labels.get(LABEL_SANDBOX_ID) == key.sandbox_id
            and labels.get(LABEL_SPEC) == spec["labels"][LABEL_SPEC]
        )

    def _ensure_running(self, box: _Box) -> None:
        """Make the key's container exist and run; adopt, restart or (re)create it."""
        key = box.key
        layout = ThreadLayout.for_key(self.settings, key)
        self._prepare_host_dirs(layout)
        payload = self._payload()
        kwargs = create_kwargs(self.options, layout, payload.digest)
        mask = layout.host_mapping().mask
        try:
            attrs = self._inspect(key)
            if attrs is not None and not self._adoptable(attrs, key, kwargs):
                log.info("recreating %s: created with other settings", kwargs["name"])
                self._remove_quietly(attrs["Id"])
                attrs = None
            if attrs is None or not _running(attrs):
                # Also after a recreate: a running box adopted so far had no need of it.
                self._ensure_network()
            if attrs is None:
                attrs, created = self._create(kwargs, mask)
            else:
                created = False
            state = attrs["State"]
            if _running(attrs):
                needs_payload = attrs["Config"]["Labels"].get(LABEL_AGENT) != payload.digest
                if needs_payload and box.container_id != attrs["Id"]:
                    self._put_payload(attrs["Id"], payload)
            elif state.get("Paused"):
                self.client.api.unpause(attrs["Id"])
            elif state.get("Status") in ("created", "exited"):
                if state.get("Status") == "created" and not created:
                    attrs = self._wait_foreign_start(attrs)
                if not _running(attrs):
                    self._check_capacity()
                    if created or attrs["Config"]["Labels"].get(LABEL_AGENT) != payload.digest:
                        self._put_payload(attrs["Id"], payload)
                    self.client.api.start(attrs["Id"])
            else:  # restarting, removing, dead: start from scratch
                self._remove_quietly(attrs["Id"])
                attrs, _ = self._create(kwargs, mask)
                self._put_payload(attrs["Id"], payload)
                self.client.api.start(attrs["Id"])
        except SandboxError:
            raise
        except Exception as exc:
            raise engine_error(exc, f"starting sandbox {key.sandbox_id}", mask) from None
        box.container_id = attrs["Id"]
        box.dead = False

    def _create(self, kwargs: dict[str, Any], mask: Any) -> tuple[dict[str, Any], bool]:
        """Create the container; if another process won the race (409), adopt theirs."""
        self._check_capacity()
        self._ensure_image(pull_missing=False)
        try:
            try:
                container = self.client.containers.create(**kwargs)
            except docker.errors.ImageNotFound:
                self._ensure_image(pull_missing=True)
                container = self.client.containers.create(**kwargs)
        except docker.errors.APIError as exc:
            if exc.status_code != 409:
                raise
            # The engine reserves the name before the winner's container can be
            # inspected; give it a moment to appear.
            deadline = time.monotonic() + FOREIGN_START_WAIT_S
            while (attrs := self._inspect_name(kwargs["name"])) is None:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
            return attrs, False
        return container.attrs, True

    def _inspect_name(self, name: str) -> dict[str, Any] | None:
        try:
            attrs: dict[str, Any] = self.client.api.inspect_container(name)
        except docker.errors.NotFound:
            return None
        return attrs

    def _wait_foreign_start(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Another process created this container and is about to start it: let it."""
        deadline = time.monotonic() + FOREIGN_START_WAIT_S
        while time.monotonic() < deadline:
            time.sleep(0.05)
            fresh = self._inspect_name(attrs["Name"].lstrip("/"))
            if fresh is None or fresh["State"].get("Status") != "created":
                return fresh if fresh is not None else attrs
        return attrs

    def _remove_quietly(self, container_id: str) -> None:
        """Remove a container and wait until its name is free again."""
        with contextlib.suppress(docker.errors.NotFound):
            try:
                self.client.api.remove_container(container_id, force=True, v=True)
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: someone else is removing it
                    raise
        deadline = time.monotonic() + FOREIGN_START_WAIT_S
        while self._inspect_name(container_id) is not None and time.monotonic() < deadline:
            time.sleep(0.05)

    def _ensure_network(self) -> None:
        """Create the owner's internal network (carrier http, network_mode none) if missing.

        Internal: no route out of the host. Inter-container traffic off: boxes
        on it cannot reach each other, only the host reaches them.
        """
        name = self.options.internal_network
        if self.options.container_network != name:
            return
        networks = self.client.networks
        with self._network_lock:
            found = sorted(
                (n for n in networks.list(names=[name]) if n.name == name),
                key=lambda n: (n.attrs.get("Created", ""), n.id),
            )
            for extra in found[1:]:  # a create race between processes: keep the oldest
                with contextlib.suppress(docker.errors.APIError):
                    extra.remove()
            if found:
                return
            log.info("creating network %s (internal, no inter-container traffic)", name)
            networks.create(
                name,
                driver="bridge",
                internal=True,
                check_duplicate=True,
                options={"com.docker.network.bridge.enable_icc": "false"},
                labels={**self.options.labels, LABEL_OWNER: self.options.owner},
            )

    def _put_payload(self, container_id: str, payload: Payload) -> None:
        if not self.client.api.put_archive(container_id, AGENT_DIR, payload.archive):
            raise SandboxError(ErrorCode.UNAVAILABLE, "could not copy the agent into the container")

    def _ensure_image(self, pull_missing: bool) -> None:
        policy = self.options.pull
        if policy == "always" and not self._pulled:
            pull_missing = True
        elif not pull_missing:
            return
        image = self.options.image
        with self._image_lock:
            if self._pulled and policy == "always":
                return
            if policy == "never":
                raise SandboxError(
                    ErrorCode.UNAVAILABLE,
                    f"image {image} is not present and pull is 'never'; build it "
                    "(deploy/images/build-base-image.sh) or set providers.docker.image",
                )
            try:
                if policy != "always":
                    try:
                        self.client.images.get(image)
                        return
                    except docker.errors.ImageNotFound:
                        pass
                repository, tag = _split_image(image)
                log.info("pulling %s", image)
                self.client.images.pull(repository, tag=tag)
                self._pulled = True
            except docker.errors.DockerException as exc:
                raise SandboxError(
                    ErrorCode.UNAVAILABLE,
                    f"image {image} is not present and could not be pulled ({exc}); build it "
                    "(deploy/images/build-base-image.sh) or set providers.docker.image",
                ) from None

    def _check_capacity(self) -> None:
        cap = self.options.max_running
        if not cap:
            return
        running = self.client.containers.list(
            filters={**owner_filter(self.options), "status": "running"}
        )
        if len(running) >= cap:
            raise SandboxError(
                ErrorCode.CAPACITY,
                f"{len(running)} sandboxes are running, the limit (max_running) is {cap}",
            )

    def _prepare_host_dirs(self, layout: ThreadLayout) -> None:
        """Create the thread dirs and make them writable by the container's uid."""
        layout.create_dirs()
        for mount in layout.mounts:
            if not os.path.isdir(mount.real):
                raise SandboxError(
                    ErrorCode.UNAVAILABLE,
                    f"the host directory behind {mount.virtual} does not exist",
                )
        if not self.options.chown_thread_dirs:
            return
        uid, gid = self.options.uid, self.options.gid
        if not layout.hand_over(uid, gid):
            log.warning(
                "cannot chown the thread dirs of %s to %d:%d; the container may not be able to "
                "write them (run as root or as that uid, or set user)",
                layout.key,
                uid,
                gid,
            )

    # -- agent channel ------------------------------------------------------------------

    def _agent_config(self, key: SandboxKey) -> dict[str, Any]:
        return make_agent_config(
            box_mapping(ThreadLayout.for_key(self.settings, key)),
            self.settings.limits.to_limits(),
            execute_enabled=self.options.execute_enabled,
            secrets=self.settings.secret_values(),
            scrubbed_env=tuple(self.settings.scrubbed_env),
            rg_path=RG_PATH if self._payload().has_rg else None,
        )

    def _new_sandbox(self, box: _Box) -> DockerSandbox:
        limits = self.settings.limits.to_limits()
        transport: Transport
        if self.options.carrier == "http":
            transport = SlotTransport(box.agent, box.key.sandbox_id)
        else:
            transport = StdioTransport(
                lambda: self._open_stream(box),
                self._agent_config(box.key),
                name=f"sandkit-docker-{box.key.sandbox_id}",
            )
        return DockerSandbox(box.key, transport, limits=limits)

    def _answers(self, sandbox: DockerSandbox) -> bool:
        """carrier http: nothing tells us the agent or its container died, so ask it."""
        if self.options.carrier != "http":
            return True  # the exec stream's EOF already says so
        try:
            sandbox.ping(timeout=HTTP_PROBE_TIMEOUT_S)
        except SandboxError:
            return False
        return True

    def _ensure_http_agent(self, box: _Box) -> None:
        """An HTTP agent in the running container that answers to a token we hold.

        Reuse the current one, adopt one whose token we can derive
        (`token_secret`), or start a new one with a fresh token; starting
        stops any earlier agent of the box (its token died with its provider).
        """
        attrs = self._inspect(box.key)  # fresh: a (re)started container has a new IP
        if attrs is None or not _running(attrs):
            box.dead = True
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"the container of sandbox {box.key.sandbox_id} is not running; acquire it again",
            )
        container_id = attrs["Id"]
        url = f"http://{_container_ip(attrs, self.options.container_network)}:" + str(
            self.options.http_port
        )
        slot = box.agent
        frame = max_frame_bytes(self.settings.limits.to_limits())
        secret = self.options.token_secret
        candidates = []
        if slot.transport is not None and slot.transport.base_url == url:
            candidates.append(slot.transport)
        if secret is not None:
            token = http_agent.make_token(container_id, secret.get_secret_value())
            candidates.append(HttpTransport(url, token, max_frame_bytes=frame))
        for candidate in candidates:
            try:
                candidate.call("ping", {}, HTTP_PROBE_TIMEOUT_S)
            except SandboxError:
                if candidate is not slot.transport:
                    candidate.close()
                continue
            slot.replace(candidate)
            return
        token = http_agent.make_token(
            container_id, secret.get_secret_value() if secret is not None else None
        )
        files = http_agent.agent_files(
            self._agent_config(box.key), token, self.options.uid, self.options.gid
        )
        argv = http_agent.launch_argv(self.options.python, self.options.http_port, files)
        api = self.client.api
        try:
            if not api.put_archive(container_id, AGENT_DIR, files.archive):
                raise SandboxError(ErrorCode.UNAVAILABLE, "could not copy the agent config in")
            exec_id = api.exec_create(
                container_id, argv, user=self.options.user, workdir="/", stdout=False, stderr=False
            )["Id"]
            api.exec_start(exec_id, detach=True)
        except SandboxError:
            raise
        except docker.errors.NotFound:
            box.dead = True
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"the container of sandbox {box.key.sandbox_id} is gone; acquire it again",
            ) from None
        except Exception as exc:
            raise engine_error(exc, "starting the HTTP agent") from None
        transport = HttpTransport(url, token, max_frame_bytes=frame)
        try:
            http_agent.wait_ready(transport, lambda: self._exec_exit_code(exec_id))
        except BaseException:
            transport.close()
            raise
        slot.replace(transport)

    def _exec_exit_code(self, exec_id: str) -> int | None:
        try:
            info = self.client.api.exec_inspect(exec_id)
        except Exception:  # the engine will say more on the next real call
            return None
        if info.get("Running") or info.get("ExitCode") is None:
            return None
        return int(info["ExitCode"])

    def _open_stream(self, box: _Box) -> ByteStream:
        """A fresh `agent.pyz --stdio` in the key's container (the transport's opener)."""
        container_id = box.container_id
        if container_id is None or box.dead:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"sandbox {box.key.sandbox_id} is not running; acquire it again",
            )
        if box.agent_tag is not None and box.agent_container == container_id:
            self._end_agent(container_id, box.agent_tag)
        tag = secrets.token_hex(8)
        argv = [self.options.python, "-I", AGENT_PATH, "--stdio", "--tag", tag]
        try:
            # cwd "/": the agent's own cwd must not be a mount, or a symlink to
            # /proc/self/cwd would resolve inside the jail.
            stream = DockerExecStream.open(
                self.client,
                container_id,
                argv,
                user=self.options.user,
                workdir="/",
            )
        except docker.errors.NotFound:
            box.dead = True
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"the container of sandbox {box.key.sandbox_id} is gone; acquire it again",
            ) from None
        except docker.errors.APIError as exc:
            box.dead = True
            if exc.status_code == 409:
                raise SandboxError(
                    ErrorCode.UNAVAILABLE,
                    f"the container of sandbox {box.key.sandbox_id} is not running; "
                    "acquire it again",
                ) from None
            raise engine_error(exc, "starting the agent") from None
        except Exception as exc:
            box.dead = True
            raise engine_error(exc, "starting the agent") from None
        box.stream = stream
        box.agent_tag, box.agent_container = tag, container_id
        return stream

    def _end_agent(self, container_id: str, tag: str) -> None:
        """End the agent a new channel replaces, if it still runs.

        Its channel is gone, but the agent may not know: with the engine's
        live-restore, a restarted dockerd never closes the stdin of an exec it
        started before, and a hung agent that was given up on is still busy.
        Left alone, each would idle in the box for good. Best effort.
        """
        try:
            api = self.client.api
            exec_id = api.exec_create(
                container_id,
                [self.options.python, "-I", "-c", _END_AGENT, tag],
                user=self.options.user,
                workdir="/",
                stdout=False,
                stderr=False,
            )["Id"]
            api.exec_start(exec_id)
        except Exception as exc:  # the new agent matters more; the next start tries again
            log.debug("ending the replaced agent in %s: %s", container_id[:12], exc)


def _container_ip(attrs: dict[str, Any], network: str) -> str:
    """The container's address on `network` (a name, or an id: then its only network)."""
    networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
    preferred = networks.get(network) or {}
    addresses = [preferred.get("IPAddress")] + [n.get("IPAddress") for n in networks.values()]
    for address in addresses:
        if address:
            return str(address)
    raise SandboxError(
        ErrorCode.UNAVAILABLE,
        f"the container has no IP address on network {network!r}, which carrier http needs",
    )


def _running(attrs: dict[str, Any]) -> bool:
    state = attrs.get("State") or {}
    return bool(state.get("Running")) and not state.get("Paused") and not state.get("Restarting")


def _split_image(image: str) -> tuple[str, str]:
    if "@" in image:
        repository, digest = image.split("@", 1)
        return repository, digest
    name, _, tag = image.rpartition(":")
    if name and "/" not in tag:
        return name, tag
    return image, "latest"
