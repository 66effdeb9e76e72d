"""`DockerProvider`: one hardened container per `SandboxKey`, the agent inside.

The container's main process only keeps it alive; every operation goes to
one long-lived agent per sandbox: `agent.pyz --stdio` over a Docker exec
socket (carrier stdio, the default) or `agent.pyz --http` reached at the
container's IP with a bearer token (carrier http). Containers are found
again by name (`<owner>-<sandbox_id>`) and labels, so a restarted provider
adopts its boxes instead of creating duplicates. The lifecycle itself
(locks, reaping, capacity, carriers, shutdown) is `sandkit.boxkit`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import docker
import docker.errors

from sandkit.boxkit import (
    AGENT_PATH,
    BoxProvider,
    BoxRecord,
    BoxSandbox,
    ByteStream,
    Claim,
    claim_storage,
    end_tagged_argv,
    host_copy,
    http_agent,
    prepare_host_dirs,
    retire_storage,
    storage_identity,
)
from sandkit.config import Settings
from sandkit.errors import ErrorCode, SandboxError
from sandkit.network import EgressPolicy, Endpoint
from sandkit.paths import ThreadLayout
from sandkit.provider import SandboxKey

from .client import connect
from .deaths import DeathWatch
from .errors import box_state_error, engine_error
from .network import LABEL_ROLE, DockerNet
from .options import DockerOptions
from .spec import (
    LABEL_OWNER,
    LABEL_POOL,
    LABEL_POOL_STORAGE,
    LABEL_SANDBOX_ID,
    LABEL_SPEC,
    container_name,
    create_kwargs,
    owner_filter,
    pool_container_name,
)
from .stream import DockerExecStream

log = logging.getLogger("sandkit.docker")

# How long to wait for a container another process created to be started by it.
FOREIGN_START_WAIT_S = 10.0
# After the engine reports an agent's exec ended: what was in flight is read meanwhile.
EXEC_DIED_GRACE_S = 1.0
DockerSandbox = BoxSandbox


@dataclasses.dataclass(eq=False)
class _Box(BoxRecord):
    """The kit's record plus the key's container and its stdio agent."""

    container_id: str | None = None
    # A claimed warm pool box: its storage was renamed away under its mounts, so it is
    # removed (not stopped) at release; the next acquire starts a box of the key's own.
    pooled: bool = False
    # The stdio agent of the current stream: its tag, and the container it runs in.
    agent_tag: str | None = None
    agent_container: str | None = None


class DockerProvider(BoxProvider[_Box, DockerOptions]):
    name = "docker"
    supports_pool = True
    supports_egress = True
    supports_expose = True

    def __init__(self, settings: Settings | None = None) -> None:
        self._net_helper: DockerNet | None = None
        self._client: docker.DockerClient | None = None
        self._client_lock = threading.Lock()
        self._image_lock = threading.Lock()
        self._network_lock = threading.Lock()
        self._pulled = False
        self._payload_path: str | None = None
        super().__init__(settings, DockerOptions, _Box)  # it may start the pool
        self._deaths = DeathWatch(
            lambda: self.client,
            f"{LABEL_OWNER}={self.owner}",
            self._container_died,
            self._exec_died,
        )

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

    @property
    def net(self) -> DockerNet:
        """Egress and exposed ports (network.py); made on first use."""
        if self._net_helper is None:
            self._net_helper = DockerNet(self)
        return self._net_helper

    # -- the kit's hooks --------------------------------------------------------------

    def _adopt_running(self, box: _Box) -> bool:
        attrs = self._inspect(box.key)
        if attrs is None or not _running(attrs) or not self._adoptable(attrs, box.key):
            return False
        box.container_id = attrs["Id"]
        box.pooled = _pooled(attrs)
        self.net.bind(box.key, _net_name(attrs, box.key))
        return True

    def _stop_box(self, box: _Box, remove: bool) -> None:
        """Stop or remove the key's container: the claimed pool box it holds, else the one
        with the key's name (ours, adopted or another replica's); for a record that holds
        none, whichever the engine has for the key."""
        target: str | None = container_name(self.options, box.key)
        pooled = box.pooled
        if box.container_id is None:
            attrs = self._inspect(box.key)
            target, pooled = (attrs["Id"], _pooled(attrs)) if attrs else (None, False)
        elif pooled:
            target = box.container_id
        remove = remove or pooled  # a claimed pool box cannot start again: its storage moved
        net = self.net
        net_name = net.bound(box.key) or box.key.sandbox_id
        try:
            if target is not None and remove:
                self._remove(target)
            elif target is not None:
                self.client.api.stop(target, timeout=self.options.stop_timeout_s)
        except docker.errors.NotFound:
            pass
        except Exception as exc:
            raise engine_error(exc, f"stopping sandbox {box.key.sandbox_id}") from None
        box.container_id = None
        if net.enabled:
            net.unbind(box.key)
            net.forget_box(net_name, removed=remove)

    def _list_boxes(self) -> Sequence[Any]:
        try:
            # ignore_removed: a box removed between the list and its inspect is no error.
            found = self.client.containers.list(
                all=True, filters=owner_filter(self.options), ignore_removed=True
            )
            return list(found)
        except Exception as exc:
            raise engine_error(exc, "listing containers") from None

    def _shut_box(self, container: Any) -> None:
        try:
            if self.options.shutdown == "remove":
                self._remove(container.id)
            elif container.status == "running":
                container.stop(timeout=self.options.stop_timeout_s)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: removal already in progress
                raise engine_error(exc, f"shutting down {container.name}") from None

    def _after_shutdown(self, handles: Sequence[Any]) -> None:
        self._deaths.stop()
        if self.options.shutdown == "remove":  # unclaimed pool boxes' storage
            shutil.rmtree(self._pool_root(), ignore_errors=True)
            if self.net.enabled:  # the proxy went with the boxes; their state goes now
                self.net.clear_all()
        # Agent volumes the engine could not delete with their container (it only
        # logs that); prune spares volumes still used by a (stopped) container.
        client = self.client
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

    def _count_running(self) -> int:
        # Created ones too: a box between its create and its start counts already. The
        # egress proxy is the owner's too, but no box.
        # One list call, not an inspect per box (seconds per start at a thousand boxes,
        # and a NotFound when one is removed meanwhile).
        status = {"status": ["created", "running"]}
        found = self.client.api.containers(filters={**owner_filter(self.options), **status})
        return sum(1 for c in found if LABEL_ROLE not in (c.get("Labels") or {}))

    # -- warm pool ------------------------------------------------------------------

    def _pool_spec(self) -> str:
        kwargs = self._create_kwargs(self._pool_layout("x"), "pool-x", "x")
        spec: str = kwargs["labels"][LABEL_SPEC]
        return spec

    def _pool_slots(self) -> list[str]:
        labels = [f"{LABEL_OWNER}={self.owner}", LABEL_POOL]
        try:
            # The engine's summaries: no inspect per box, none of a box claimed and
            # removed meanwhile (NotFound).
            found = self.client.api.containers(filters={"label": labels, "status": "running"})
        except Exception as exc:
            raise engine_error(exc, "listing pool boxes") from None
        spec = self._pool_spec()
        slots = []
        for container in found:
            tags = container.get("Labels") or {}
            slot = tags.get(LABEL_POOL, "")
            if not self._pool_unclaimed(slot):
                continue
            name = (container.get("Names") or ["/"])[0].lstrip("/")
            if tags.get(LABEL_SPEC) == spec:
                slots.append(slot)
            else:  # made with other settings: of no use to anyone
                log.info("removing pool box %s: created with other settings", name)
                self._pool_remove(slot)
        return slots

    def _pool_start(self, slot: str, record: _Box) -> None:
        layout = self._pool_layout(slot)
        options = self.options
        prepare_host_dirs(layout, (options.uid, options.gid) if options.chown_thread_dirs else None)
        net_name = f"pool-{slot}"
        self._net_prepare(net_name, self.options.egress.enforced(self.options.egress.policy))
        kwargs = self._create_kwargs(layout, net_name, slot, storage_identity(layout.user_data_dir))
        try:
            self._ensure_network()
            attrs, _ = self._create(kwargs, layout.host_mapping().mask, check=False)
            self.client.api.start(attrs["Id"])
        except Exception as exc:
            raise engine_error(exc, "starting a pool box") from None
        record.container_id = attrs["Id"]
        record.pooled = True
        self.net.start_egress_relay(attrs["Id"])

    def _pool_attach(self, slot: str, record: _Box) -> bool:
        attrs = self._inspect_name(pool_container_name(self.options, slot))
        if attrs is None or not _running(attrs) or not _pooled(attrs):
            return False
        if not self._pool_unclaimed(slot):
            return False
        record.container_id = attrs["Id"]
        record.pooled = True
        return True

    def _pool_claim(self, slot: str, record: _Box, key: SandboxKey) -> Claim:
        """Rename the box's storage to the key's thread dir: atomic on the host (one
        replica wins a box, one box wins a key), and all a claim does: no engine call.
        From then on the key's thread dir names the box (`_claimed_box`). A cold start
        of the key elsewhere makes the thread dir before it looks for a box, so either
        its mkdir comes first and the rename fails (TAKEN), or it finds this box."""
        moved = claim_storage(self.settings, self.owner, slot, self._layout(key))
        if moved is not Claim.CLAIMED:
            return moved
        net = self.net
        if net.enabled:  # the box keeps its network directories; the key's policy now
            net_name = f"pool-{slot}"
            net.set_policy(net_name, self._enforced_egress(key))
            net.bind(key, net_name)
        return Claim.CLAIMED

    def _pool_remove(self, slot: str) -> None:
        """Remove an unclaimed pool box (a claimed one keeps its pool name: see retire)."""
        if not retire_storage(self.settings, self.owner, slot):
            return  # claimed meanwhile (maybe by another replica): a key's box now
        try:
            self._remove(pool_container_name(self.options, slot))
        except Exception as exc:
            raise engine_error(exc, "removing a pool box") from None
        shutil.rmtree(self._pool_root() / slot, ignore_errors=True)
        if self.net.enabled:
            self.net.forget_box(f"pool-{slot}", removed=True)

    # -- containers -----------------------------------------------------------------

    def _inspect(self, key: SandboxKey) -> dict[str, Any] | None:
        """The key's container: by its name, else the pool box it claimed."""
        try:
            attrs = self._inspect_name(container_name(self.options, key))
            return attrs if attrs is not None else self._claimed_box(key)
        except Exception as exc:
            raise engine_error(exc, f"inspecting sandbox {key.sandbox_id}") from None

    def _claimed_box(self, key: SandboxKey) -> dict[str, Any] | None:
        """The pool box whose storage is the key's thread dir now (one list call)."""
        identity = storage_identity(self._layout(key).user_data_dir)
        if identity is None:
            return None
        labels = [f"{LABEL_OWNER}={self.owner}", f"{LABEL_POOL_STORAGE}={identity}"]
        for container in self.client.api.containers(all=True, filters={"label": labels}):
            attrs = self._inspect_name(container["Id"])
            if attrs is not None:
                return attrs
        return None

    def _adoptable(
        self, attrs: dict[str, Any], key: SandboxKey, spec: dict[str, Any] | None = None
    ) -> bool:
        """Ours, for this key, and created with the settings we would use now (a claimed
        pool box is the key's by its storage, which only a claim makes the key's; or by
        its name, which claims of earlier versions gave it)."""
        labels = attrs.get("Config", {}).get("Labels") or {}
        if labels.get(LABEL_OWNER) != self.options.owner:
            return False
        if LABEL_POOL in labels:
            mine = attrs.get("Name", "").lstrip("/") == container_name(self.options, key)
            if not mine:
                storage = storage_identity(self._layout(key).user_data_dir)
                mine = storage is not None and labels.get(LABEL_POOL_STORAGE) == storage
            return mine and labels.get(LABEL_SPEC) == self._pool_spec()
        if spec is None:
            spec = self._create_kwargs(self._layout(key), key.sandbox_id)
        return bool(
            labels.get(LABEL_SANDBOX_ID) == key.sandbox_id
            and labels.get(LABEL_SPEC) == spec["labels"][LABEL_SPEC]
        )

    def _ensure_running(self, box: _Box) -> None:
        """Make the key's container exist and run; adopt, restart or (re)create it."""
        key = box.key
        layout = self._layout(key)
        options = self.options
        # The thread dir exists before we look for a box: a pool claim racing this start
        # then fails its rename (see _pool_claim). Handing the dirs over (a chown of the
        # tree) waits until no box of the key runs: a running box changes what it walks.
        layout.create_dirs()
        owner = (options.uid, options.gid) if options.chown_thread_dirs else None
        kwargs = self._create_kwargs(layout, key.sandbox_id)
        mask = layout.host_mapping().mask
        try:
            attrs = self._inspect(key)
            net_name = _net_name(attrs, key) if attrs is not None else key.sandbox_id
            self._net_prepare(net_name, self._enforced_egress(key))
            if attrs is not None and not self._adoptable(attrs, key, kwargs):
                log.info("recreating %s: created with other settings", kwargs["name"])
                self._remove_quietly(attrs["Id"])
                attrs = None
            if attrs is not None and _pooled(attrs) and not _running(attrs):
                # A claimed pool box cannot start again (its storage moved): a new one.
                self._remove_quietly(attrs["Id"])
                attrs = None
            if attrs is None or not _running(attrs):
                # Also after a recreate: a running box adopted so far had no need of it.
                self._ensure_network()
            if attrs is None:
                prepare_host_dirs(layout, owner)
                attrs, created = self._create(kwargs, mask)
            else:
                created = False
            state = attrs["State"]
            if _running(attrs):
                pass  # adopted as it is (the spec, payload included, matches)
            elif state.get("Paused"):
                self.client.api.unpause(attrs["Id"])
            elif state.get("Status") in ("created", "exited"):
                if state.get("Status") == "created" and not created:
                    attrs = self._wait_foreign_start(attrs)
                if not _running(attrs):
                    if not created:
                        prepare_host_dirs(layout, owner)
                    # Ours just now: counted at its create. An old one counts from here.
                    with contextlib.nullcontext() if created else self._starting():
                        self.client.api.start(attrs["Id"])
            else:  # restarting, removing, dead: start from scratch
                self._remove_quietly(attrs["Id"])
                prepare_host_dirs(layout, owner)
                attrs, _ = self._create(kwargs, mask)
                self.client.api.start(attrs["Id"])
        except Exception as exc:
            raise engine_error(exc, f"starting sandbox {key.sandbox_id}", mask) from None
        box.container_id = attrs["Id"]
        box.pooled = _pooled(attrs)
        net_name = _net_name(attrs, key)
        self.net.start_egress_relay(attrs["Id"])
        self.net.bind(key, net_name)

    def _create_kwargs(
        self,
        layout: ThreadLayout,
        net_name: str,
        pool_slot: str | None = None,
        pool_storage: str | None = None,
    ) -> dict[str, Any]:
        net = self.net
        return create_kwargs(
            self.options,
            layout,
            self._payload_dir(),
            pool_slot,
            pool_storage,
            net_mounts=net.mounts(net_name),
            net_dir=str(net.box_dir(net_name)),
        )

    def _net_prepare(self, net_name: str, policy: dict[str, Any]) -> None:
        """Before a box starts: its network directories, its policy, a proxy that has it."""
        net = self.net
        if not net.enabled:
            return
        try:
            net.check_runtime()
        except Exception as exc:
            raise engine_error(exc, "asking the engine about its runtimes") from None
        net.prepare(net_name, policy)
        if net.egress:
            try:
                net.ensure_proxy(self._payload_dir())
            except Exception as exc:
                raise engine_error(exc, "starting the egress proxy") from None
            net.sync()

    def _create(
        self, kwargs: dict[str, Any], mask: Any, check: bool = True
    ) -> tuple[dict[str, Any], bool]:
        """Create the container; if another process won the race (409), adopt theirs."""
        with self._starting() if check else contextlib.nullcontext():
            return self._create_unchecked(kwargs)

    def _create_unchecked(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], bool]:
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
        self._remove(container_id)
        deadline = time.monotonic() + FOREIGN_START_WAIT_S
        while self._inspect_name(container_id) is not None and time.monotonic() < deadline:
            time.sleep(0.05)

    def _remove(self, ref: str) -> None:
        """Remove a container and its volumes; one gone or being removed already is fine."""
        with contextlib.suppress(docker.errors.NotFound):
            try:
                self.client.api.remove_container(ref, force=True, v=True)
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: someone else is removing it
                    raise

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

    def _payload_dir(self) -> str:
        """The payload's host copy that boxes mount read-only (made once per version)."""
        if self._payload_path is None:
            base = self.settings.data_root.expanduser().absolute() / ".sandkit" / "payload"
            self._payload_path = str(host_copy(self._payload(), base))
        return self._payload_path

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

    # -- network ----------------------------------------------------------------------

    def _apply_egress(self, box: _Box, policy: EgressPolicy) -> None:
        net_name = self.net.bound(box.key)
        if net_name is None:
            return  # not running: its start applies the stored policy
        self.net.set_policy(net_name, self.options.egress.enforced(policy))
        if box.container_id is not None:  # in case a command ended it
            with contextlib.suppress(SandboxError):
                self.net.start_egress_relay(box.container_id)

    def _expose_port(self, box: _Box, port: int) -> Endpoint:
        net = self.net
        net_name = net.bound(box.key)
        if net_name is None or box.container_id is None:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"sandbox {box.key.sandbox_id} is not running; acquire it before exposing a port",
            )
        net.start_ingress_relay(box.container_id, net_name, port)
        net.set_exposed(net_name, [*net.exposed(net_name), port])
        return net.endpoint(box.key, net_name, port)

    def _unexpose_port(self, box: _Box, port: int) -> None:
        net = self.net
        net_name = net.bound(box.key)
        if net_name is None:
            return
        ports = net.exposed(net_name)
        if port in ports:
            net.set_exposed(net_name, [p for p in ports if p != port])
        net.stop_ingress_relay(box.container_id, net_name, port)

    def _exposed_ports(self, box: _Box) -> list[Endpoint]:
        net = self.net
        net_name = net.bound(box.key)
        if net_name is None:
            return []
        return [net.endpoint(box.key, net_name, p) for p in net.exposed(net_name)]

    def _find_endpoint(self, key: SandboxKey, port: int) -> Endpoint | None:
        return self.net.find_endpoint(key, port) if self.net.expose else None

    # -- carrier http -----------------------------------------------------------------

    def _agent_url(self, box: _Box) -> str:
        # Fresh: a (re)started container has a new IP. A claimed pool box is the one it is.
        held = box.container_id if box.pooled else None
        attrs = self._inspect_name(held) if held else self._inspect(box.key)
        if attrs is None or not _running(attrs):
            box.dead = True
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"the container of sandbox {box.key.sandbox_id} is not running; acquire it again",
            )
        box.container_id = attrs["Id"]
        ip = _container_ip(attrs, self.options.container_network)
        return f"http://{ip}:{self.options.http_port}"

    def _box_uid(self, box: _Box) -> str:
        return str(box.container_id)

    def _launch_http_agent(
        self, box: _Box, config: dict[str, Any], token: str
    ) -> Callable[[], int | None]:
        """Config and token as files (`put_archive`), then a detached exec of LAUNCH."""
        options = self.options
        files = http_agent.agent_files(config, token, options.uid, options.gid)
        argv = http_agent.launch_argv(options.python, options.http_port)
        api = self.client.api
        container_id = str(box.container_id)
        try:
            if not api.put_archive(container_id, http_agent.RUN_PARENT, files.archive):
                raise SandboxError(ErrorCode.UNAVAILABLE, "could not copy the agent config in")
            exec_id = api.exec_create(
                container_id,
                argv,
                user=options.user,
                workdir="/",
                stdout=False,
                stderr=False,
                environment=http_agent.launch_env(files),
            )["Id"]
            api.exec_start(exec_id, detach=True)
        except Exception as exc:
            raise self._box_failed(box, exc, "starting the HTTP agent") from None
        return lambda: self._exec_exit_code(exec_id)

    def _exec_exit_code(self, exec_id: str) -> int | None:
        try:
            info = self.client.api.exec_inspect(exec_id)
        except Exception:  # the engine will say more on the next real call
            return None
        if info.get("Running") or info.get("ExitCode") is None:
            return None
        return int(info["ExitCode"])

    # -- carrier stdio ----------------------------------------------------------------

    def _open_stream(self, box: _Box) -> ByteStream:
        container_id = box.container_id
        if container_id is None:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"sandbox {box.key.sandbox_id} is not running; acquire it again",
            )
        if box.agent_tag is not None and box.agent_container == container_id:
            self._end_agent(container_id, box.agent_tag)
        tag = secrets.token_hex(8)
        argv = [self.options.python, "-I", "-S", AGENT_PATH, "--stdio", "--tag", tag]
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
        except Exception as exc:
            raise self._box_failed(box, exc, "starting the agent") from None
        box.agent_tag, box.agent_container = tag, container_id
        self._deaths.start()
        return stream

    def _box_failed(self, box: _Box, exc: Exception, doing: str) -> SandboxError:
        """An engine call into the box failed: the box is dead only when the engine says it
        is gone or stopped; anything else (an engine under load) may pass."""
        said = box_state_error(exc, f"the container of sandbox {box.key.sandbox_id}")
        if said is None:
            return engine_error(exc, doing)
        box.dead = True
        return said

    def _agent_ended(self, box: _Box) -> None:
        box.agent_tag = None  # it ends at the EOF: the next channel need not kill it

    def _container_died(self, container_id: str) -> None:
        """The engine says a container of ours died: end the channels into it, unless it
        runs again already (a restart after the event was sent)."""
        boxes = [b for b in self._boxes.current() if b.agent_container == container_id]
        if not boxes:
            return
        try:
            if _running(self._inspect_name(container_id) or {}):
                return
        except Exception as exc:  # the engine is in trouble: the next call will say so
            log.debug("inspecting container %s after its death: %s", container_id[:12], exc)
            return
        for box in boxes:
            self._box_died(box)

    def _exec_died(self, container_id: str, exec_id: str) -> None:
        """An exec in a container of ours ended: if it was a box's agent, end its channel
        when the engine does not (see deaths.py)."""
        for box in self._boxes.current():
            stream = box.stream
            if (
                box.agent_container == container_id
                and isinstance(stream, DockerExecStream)
                and stream.exec_id == exec_id
            ):
                stream.end_unless_ended(EXEC_DIED_GRACE_S)

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
                end_tagged_argv(self.options.python, tag),
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


def _net_name(attrs: dict[str, Any] | None, key: SandboxKey) -> str:
    """The network directory of a container: a claimed pool box keeps its slot's."""
    labels = ((attrs or {}).get("Config") or {}).get("Labels") or {}
    slot = labels.get(LABEL_POOL)
    return f"pool-{slot}" if slot else key.sandbox_id


def _pooled(attrs: dict[str, Any]) -> bool:
    return LABEL_POOL in ((attrs.get("Config") or {}).get("Labels") or {})


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
