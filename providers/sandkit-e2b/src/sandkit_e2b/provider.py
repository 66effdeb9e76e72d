"""`E2BProvider`: one E2B sandbox per `SandboxKey`, the sandkit agent inside.

E2B supplies the lifecycle (create, list by metadata, connect, pause, kill,
timeouts) and a carrier (a background command's stdin/stdout, or the
sandbox's public host URL); every operation is answered by the same agent
and runtime as on the other providers. The SDK's `Sandbox` class is
injected (`sandbox_class=`, default `e2b.Sandbox` via `sdk_class`), and
only its public surface is used. The lifecycle itself (locks, reaping,
capacity, carriers, shutdown) is `sandkit.boxkit`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import posixpath
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sandkit.boxkit import BoxProvider, BoxRecord, BoxSandbox
from sandkit.config import Settings
from sandkit.errors import ErrorCode, SandboxError
from sandkit.models import WriteResult
from sandkit.net.policy import Policy
from sandkit.network import EgressPolicy, Endpoint
from sandkit.paths import UPLOADS, ThreadLayout
from sandkit.provider import SandboxKey
from sandkit.runtime.pathmap import RESERVED_PREFIXES
from sandkit.uploads import UploadedFile

from .errors import is_gone, service_error
from .network import E2BNetwork, to_e2b
from .options import E2BOptions
from .payload import AGENT_ROOT, Payload, build_payload
from .stream import CommandOutput, CommandStream
from .sync import apply_archive, build_seed, pack_command

log = logging.getLogger("sandkit.e2b")

META_SANDBOX_ID = "sandkit.sandbox-id"
META_USER = "sandkit.user"
META_THREAD = "sandkit.thread"
META_OWNER = "sandkit.owner"
META_SPEC = "sandkit.spec"

# Set-up commands in the sandbox (tar, chown) get this long.
SETUP_TIMEOUT_S = 300
# envd, E2B's own daemon in every sandbox: never exposed through sandkit.
ENVD_PORT = 49983
# The header E2B wants on a sandbox URL when the sandbox was made with restricted
# public traffic (`network={"allow_public_traffic": False}`).
TRAFFIC_TOKEN_HEADER = "e2b-traffic-access-token"
HTTP_START_TIMEOUT_S = 30.0


E2BSandbox = BoxSandbox


@dataclasses.dataclass(eq=False)
class _Box(BoxRecord):
    """The kit's record plus the key's E2B sandbox."""

    sdk: Any = None  # the connected SDK Sandbox instance
    http_agent: CommandOutput | None = None  # carrier http: the agent process
    extended_at: float = 0.0

    @property
    def e2b_id(self) -> str | None:
        return None if self.sdk is None else str(self.sdk.sandbox_id)


class E2BProvider(BoxProvider[_Box, E2BOptions]):
    name = "e2b"
    handshake_timeout_s = 60.0
    # Enforced by E2B's own network filter (network.py); ports are E2B's sandbox URLs.
    supports_egress = True
    supports_expose = True

    def __init__(self, settings: Settings | None = None, *, sandbox_class: Any = None) -> None:
        super().__init__(settings, E2BOptions, _Box)
        self._sandbox_class = sandbox_class
        # Exposed ports of the boxes this instance holds open (they end with the box).
        self._ports: dict[SandboxKey, dict[int, Endpoint]] = {}
        self._ports_lock = threading.Lock()
        self._check_network_options()

    # -- the SDK ----------------------------------------------------------------------

    @property
    def sdk(self) -> Any:
        """The SDK's Sandbox class (loaded on first use)."""
        if self._sandbox_class is None:
            self._sandbox_class = self.options.load_sdk_class()
        return self._sandbox_class

    def _api(self) -> dict[str, Any]:
        """Connection options for every control-plane call."""
        key = self.options.resolved_api_key()
        if key is None:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                "no E2B API key: set E2B_API_KEY or providers.e2b.api_key",
            )
        api: dict[str, Any] = {"api_key": key, "request_timeout": self.options.request_timeout_s}
        if self.options.domain:
            api["domain"] = self.options.domain
        return api

    def _archive(self) -> Payload:
        return build_payload(self.options.upload_rg)

    def _metadata(self, key: SandboxKey) -> dict[str, str]:
        return {
            **self.options.metadata,
            META_SANDBOX_ID: key.sandbox_id,
            META_USER: key.user_id,
            META_THREAD: key.thread_id,
            META_OWNER: self.options.owner,
            META_SPEC: self._spec(key),
        }

    def _spec(self, key: SandboxKey) -> str:
        """Hash of what shapes a sandbox; one created under other settings is replaced."""
        layout = self._layout(key)
        spec: dict[str, Any] = {
            "template": self.options.template,
            "user": self.options.user,
            "envs": self.options.envs,
            "internet": self.options.allow_internet_access,
            "on_timeout": self.options.on_timeout,
            "mounts": [[m.virtual, m.read_only] for m in layout.mounts],
        }
        # Only when on, so sandboxes made before these settings existed keep their hash.
        if self.options.egress.enabled:
            spec["egress"] = True  # its policy is re-applied on every connect
        if self._restricted_traffic():
            spec["public_traffic"] = False  # a create-time option of E2B's
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]

    def _list(self, metadata: dict[str, str], states: list[str] | None = None) -> list[Any]:
        """Every sandbox whose metadata includes `metadata` (all pages)."""
        from e2b import SandboxQuery, SandboxState

        query = SandboxQuery(
            metadata=metadata,
            state=[SandboxState(s) for s in states] if states else None,
        )
        try:
            pages = self.sdk.list(query=query, limit=100, **self._api())
            found: list[Any] = []
            while pages.has_next:
                found.extend(pages.next_items())
        except Exception as exc:
            raise service_error(exc, "listing E2B sandboxes") from None
        return found

    def _find(self, key: SandboxKey, states: list[str] | None = None) -> list[Any]:
        """The key's sandboxes of this owner, oldest first (the one to keep is first)."""
        infos = self._list(
            {META_SANDBOX_ID: key.sandbox_id, META_OWNER: self.options.owner}, states
        )
        return sorted(infos, key=lambda i: (i.started_at, i.sandbox_id))

    def _connect(self, sandbox_id: str, missing_ok: bool = False) -> Any:
        """Connect (resuming a paused sandbox); extends a running one's timeout, never shortens.
        With `missing_ok`, None for a sandbox that is gone."""
        try:
            return self.sdk.connect(sandbox_id, timeout=self.options.timeout_s, **self._api())
        except Exception as exc:
            if missing_ok and is_gone(exc):
                return None
            raise service_error(exc, f"connecting to E2B sandbox {sandbox_id}") from None

    def _kill(self, sandbox_id: str) -> None:
        try:
            self.sdk.kill(sandbox_id, **self._api())
        except Exception as exc:
            if not is_gone(exc):
                raise service_error(exc, f"killing E2B sandbox {sandbox_id}") from None

    def _pause(self, sandbox_id: str) -> None:
        try:
            self.sdk.pause(sandbox_id, **self._api())
        except Exception as exc:
            if not is_gone(exc):
                raise service_error(exc, f"pausing E2B sandbox {sandbox_id}") from None

    # -- the kit's hooks --------------------------------------------------------------

    def _looks_alive(self, box: _Box) -> bool:
        agent = box.http_agent
        return (
            box.sdk is not None
            and super()._looks_alive(box)
            and (agent is None or not agent.finished.is_set())
        )

    def _stop_ends_processes(self) -> bool:
        # A paused sandbox would keep them, frozen, until it is resumed.
        return self.options.release == "kill" and self.options.shutdown == "kill"

    def _box_rg_path(self) -> str | None:
        return self._archive().rg_path

    def _adopt_running(self, box: _Box) -> bool:
        running = [i for i in self._find(box.key, ["running"]) if self._adoptable(i, box.key)]
        if not running:
            return False
        if box.dead or box.sdk is None or box.e2b_id != running[0].sandbox_id:
            box.sdk = self._connect(running[0].sandbox_id)
            box.extended_at = time.monotonic()
            self._push_egress(box.key, str(running[0].sandbox_id))
            self._ensure_payload(box.sdk)
        return True

    def _stop_box(self, box: _Box, remove: bool) -> None:
        """destroy (or release with release: kill): sync back and kill; release: pause."""
        if remove or self.options.release == "kill":
            self._retire(box.key, box)
        else:
            ids = [box.e2b_id] if box.e2b_id and not box.dead else []
            if not ids:
                ids = [i.sandbox_id for i in self._find(box.key, ["running"])]
            for sandbox_id in ids:
                self._pause(str(sandbox_id))
        box.sdk = None

    def _list_boxes(self) -> Sequence[Any]:
        states = ["running"] if self.options.shutdown == "pause" else None
        return self._list({META_OWNER: self.options.owner}, states)

    def _shut_box(self, info: Any) -> None:
        if self.options.shutdown == "pause":
            self._pause(info.sandbox_id)
            return
        key = _key_of(info) if self.options.sync_back else None
        if key is not None:
            sandbox = self._connect(info.sandbox_id, missing_ok=True)
            if sandbox is None:
                # Listed a moment ago, gone now (killed or timed out meanwhile): there is
                # nothing left to copy back or to stop.
                log.warning("E2B sandbox %s was gone at shutdown", info.sandbox_id)
                return
            self._sync_back(sandbox, key)
        self._kill(info.sandbox_id)

    def _describe(self, info: Any) -> str:
        return f"E2B sandbox {info.sandbox_id}"

    def _count_running(self) -> int:
        return len(self._list({META_OWNER: self.options.owner}, ["running"]))

    def _background_round(self, idle_timeout_s: float) -> list[SandboxKey]:
        """Extend the timeouts of boxes in use, then release idle ones."""
        self.keep_alive()
        return self.reap_idle(idle_timeout_s)

    # -- network: egress through E2B's network options, ports as its sandbox URLs ------

    def _check_network_options(self) -> None:
        """Refuse at start what E2B's network options cannot carry (network.py)."""
        egress = self.options.egress
        if not egress.enabled:
            return
        where = "providers.e2b.egress"
        if self.options.allow_internet_access:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT,
                f"{where}: with egress policies, providers.e2b.allow_internet_access must stay "
                "false (the policy decides; 'open' is the policy for a whole internet)",
            )
        if egress.hosts:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT,
                f"{where}.hosts: E2B's sandboxes resolve names themselves; a hosts table "
                "cannot be applied on E2B",
            )
        for what, check in (
            ("ceiling's deny rules", Policy("open", (), egress.effective_ceiling.compiled().deny)),
            ("policy", Policy.from_dict(egress.enforced(egress.policy))),
        ):
            try:
                to_e2b(check)
            except SandboxError as exc:
                raise SandboxError(exc.code, f"{where}: the {what}: {exc.message}") from None

    def _restricted_traffic(self) -> bool:
        """Sandbox URLs need E2B's traffic token: with expose on, unless the HTTP carrier
        (which reaches the agent at the sandbox URL without that token) is used."""
        return self.options.expose.enabled and self.options.carrier == "stdio"

    def _command_env(self) -> dict[str, str]:
        return {}  # no proxy: E2B filters the sandbox's own connections

    def _reserved_ports(self) -> set[int]:
        reserved = {ENVD_PORT}
        if self.options.carrier == "http":
            reserved.add(self.options.http_port)
        return reserved

    def egress(self, key: SandboxKey) -> EgressPolicy | None:
        if self.options.allow_internet_access:
            return None  # E2B's open internet, not a policy sandkit keeps
        return super().egress(key)

    def set_egress(
        self, key: SandboxKey, policy: EgressPolicy | str | dict[str, Any]
    ) -> EgressPolicy:
        if self.options.allow_internet_access:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT,
                "providers.e2b.allow_internet_access is on: every sandbox has E2B's open "
                "internet and sandkit keeps no policy; use providers.e2b.egress instead",
            )
        wanted = self.options.egress.check(EgressPolicy.parse(policy))
        self._network_for(wanted)  # INVALID_ARGUMENT before anything is stored
        return super().set_egress(key, wanted)

    def _network_for(self, policy: EgressPolicy) -> E2BNetwork:
        return to_e2b(Policy.from_dict(self.options.egress.enforced(policy)))

    def _key_network(self, key: SandboxKey) -> E2BNetwork:
        """E2B's options for the key's stored policy (the default one if the stored one
        cannot be carried under today's settings)."""
        try:
            return self._network_for(self._key_egress(key))
        except SandboxError as exc:
            log.warning("%s: its egress policy cannot be enforced now (%s)", key, exc.message)
            return self._network_for(self.options.egress.policy)

    def _update_network(self, sandbox_id: str, network: E2BNetwork) -> None:
        """Replace the sandbox's whole network config (E2B clears what is left out)."""
        try:
            self.sdk.update_network(sandbox_id, network.update(), **self._api())
        except Exception as exc:
            raise service_error(exc, f"setting the network of E2B sandbox {sandbox_id}") from None

    def _push_egress(self, key: SandboxKey, sandbox_id: str) -> None:
        """After a connect (resume, restart, another process's sandbox): the key's policy
        as stored now, which may have changed while the sandbox was paused."""
        if self.options.egress.enabled:
            self._update_network(sandbox_id, self._key_network(key))

    def _apply_egress(self, box: _Box, policy: EgressPolicy) -> None:
        if not self.options.egress.enabled:
            return  # policy none, as every sandbox was made
        network = self._network_for(policy)
        if box.sdk is not None and not box.dead:
            ids = [str(box.e2b_id)]
        else:  # held by no one here: a running one (another process's) follows now
            ids = [
                str(i.sandbox_id)
                for i in self._find(box.key, ["running"])
                if self._adoptable(i, box.key)
            ]
        for sandbox_id in ids:
            try:
                self._update_network(sandbox_id, network)
            except SandboxError as exc:
                # Paused or gone since: the next connect applies the stored policy.
                log.info("%s: the policy waits for the next connect (%s)", box.key, exc.message)
                if exc.code != ErrorCode.UNAVAILABLE:
                    raise

    def _expose_port(self, box: _Box, port: int) -> Endpoint:
        sdk = self._running_sdk(box)
        with self._ports_lock:
            known = self._ports.get(box.key, {}).get(port)
        if known is not None:
            return known
        token = getattr(sdk, "traffic_access_token", None)
        if self._restricted_traffic() and not token:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"E2B gave no traffic access token for sandbox {box.e2b_id}; acquire it again",
            )
        endpoint = Endpoint(
            user_id=box.key.user_id,
            thread_id=box.key.thread_id,
            port=port,
            url=f"{self.options.http_scheme}://{sdk.get_host(port)}",
            headers={TRAFFIC_TOKEN_HEADER: str(token)} if self._restricted_traffic() else {},
        )
        with self._ports_lock:
            self._ports.setdefault(box.key, {})[port] = endpoint
        return endpoint

    def _unexpose_port(self, box: _Box, port: int) -> None:
        with self._ports_lock:
            ports = self._ports.get(box.key)
            if ports is not None:
                ports.pop(port, None)
                if not ports:
                    del self._ports[box.key]

    def _exposed_ports(self, box: _Box) -> list[Endpoint]:
        if box.sdk is None or box.dead:
            return []
        with self._ports_lock:
            return list(self._ports.get(box.key, {}).values())

    def _find_endpoint(self, key: SandboxKey, port: int) -> Endpoint | None:
        with self._ports_lock:
            return self._ports.get(key, {}).get(port)

    def _forget_ports(self, key: SandboxKey) -> None:
        with self._ports_lock:
            self._ports.pop(key, None)

    # -- uploads ----------------------------------------------------------------------

    def upload(self, key: SandboxKey, path: str, data: bytes) -> WriteResult:
        """The host copy (what a new sandbox is seeded from), then the key's sandbox if it
        has one: an E2B sandbox holds its own copy of the thread, and its uploads belong to
        root, so the file arrives through the control plane (a paused one is resumed)."""
        result = super().upload(key, path, data)
        # Read-only uploads belong to root (commands cannot change them); writable ones
        # to the sandbox user, like the rest of the thread.
        owner = "root" if self.settings.uploads_read_only else self.options.user
        self._in_sandbox(
            key,
            lambda sdk: sdk.files.write(
                result.path, data, user=owner, request_timeout=self.options.request_timeout_s
            ),
            f"uploading {result.path}",
        )
        return result

    def remove_upload(self, key: SandboxKey, path: str) -> UploadedFile:
        removed = super().remove_upload(key, path)
        # The same file, then the directories it leaves empty (as on the host).
        rel = removed.path[len(UPLOADS) + 1 :]
        script = f"cd {shlex.quote(UPLOADS)} && rm -f -- {shlex.quote(rel)}"
        parent = posixpath.dirname(rel)
        if parent:
            script += f" && (rmdir -p -- {shlex.quote(parent)} 2>/dev/null || true)"
        doing = f"removing {removed.path}"
        self._in_sandbox(key, lambda sdk: self._root(sdk, script, doing), doing)
        return removed

    def _in_sandbox(self, key: SandboxKey, change: Callable[[Any], object], doing: str) -> None:
        """Apply `change` to the key's E2B sandbox, if it has one (none: the next one is
        seeded from the host copy, which has the change already)."""
        if not any(self._adoptable(i, key) for i in self._find(key)):
            return
        self.acquire(key)
        box = self._boxes.box(key)
        with box.lock:
            if box.sdk is None:
                raise SandboxError(ErrorCode.UNAVAILABLE, f"sandbox {key.sandbox_id} is gone")
            try:
                change(box.sdk)
            except Exception as exc:
                raise service_error(exc, doing) from None

    # -- boxes ------------------------------------------------------------------------

    def _close_box(self, box: _Box) -> None:
        """Stop the agent and wait for it (before a pause), then close the handles."""
        self._forget_ports(box.key)
        stream, agent, box.http_agent = box.stream, box.http_agent, None
        timeout = self.options.request_timeout_s
        if isinstance(stream, CommandStream):
            stream.shutdown(timeout)
        if agent is not None and box.sdk is not None:
            agent.stop(box.sdk.commands, timeout)
        super()._close_box(box)

    def _adoptable(self, info: Any, key: SandboxKey) -> bool:
        metadata = info.metadata or {}
        return bool(
            metadata.get(META_OWNER) == self.options.owner
            and metadata.get(META_SANDBOX_ID) == key.sandbox_id
            and metadata.get(META_SPEC) == self._spec(key)
        )

    def _retire(self, key: SandboxKey, box: _Box) -> None:
        """Sync the key's sandbox back (if configured) and kill all of its sandboxes."""
        infos = self._find(key)
        if not infos:
            return
        if self.options.sync_back:
            keep = [i for i in infos if self._adoptable(i, key)] or infos
            sdk = box.sdk if box.e2b_id == keep[0].sandbox_id and not box.dead else None
            self._sync_back(sdk or self._connect(keep[0].sandbox_id), key)
        for info in infos:
            self._kill(info.sandbox_id)

    def _ensure_running(self, box: _Box) -> None:
        """Find the key's sandbox (resuming it if paused) or create it."""
        if box.sdk is not None and not box.dead:
            return
        key = box.key
        box.sdk = None
        if box.stream is not None:
            box.stream.close()
            box.stream = None
        infos = self._find(key)
        stale = [i for i in infos if not self._adoptable(i, key)]
        usable = [i for i in infos if self._adoptable(i, key)]
        if stale:
            log.info("replacing %d sandbox(es) of %s created with other settings", len(stale), key)
            if self.options.sync_back and not usable:
                self._sync_back(self._connect(stale[0].sandbox_id), key)
            for info in stale:
                self._kill(info.sandbox_id)
        for extra in usable[1:]:  # left by a create race: the oldest one is the key's
            log.warning("killing duplicate sandbox %s of %s", extra.sandbox_id, key)
            self._kill(extra.sandbox_id)
        if usable:
            sdk = self._connect(usable[0].sandbox_id)
            self._push_egress(key, str(usable[0].sandbox_id))
            self._ensure_payload(sdk)
        else:
            sdk = self._create(key)
        box.sdk = sdk
        box.dead = False
        box.extended_at = time.monotonic()

    def _create(self, key: SandboxKey) -> Any:
        self._check_capacity()
        layout = self._layout(key)
        layout.create_dirs()
        for mount in layout.mounts:
            if not mount.virtual.startswith(RESERVED_PREFIXES[0]) and not os.path.isdir(mount.real):
                raise SandboxError(
                    ErrorCode.UNAVAILABLE,
                    f"the host directory behind {mount.virtual} does not exist",
                )
        internet = self.options.allow_internet_access
        network: dict[str, Any] = {}
        if self.options.egress.enabled:
            wanted = self._key_network(key)
            internet, network = wanted.allow_internet_access, wanted.network_opts()
        if self._restricted_traffic():
            network["allow_public_traffic"] = False
        try:
            sdk = self.sdk.create(
                template=self.options.template,
                timeout=self.options.timeout_s,
                metadata=self._metadata(key),
                envs=dict(self.options.envs) or None,
                allow_internet_access=internet,
                lifecycle={"on_timeout": self.options.on_timeout},
                idempotency_key=str(uuid.uuid4()),
                **({"network": network} if network else {}),
                **self._api(),
            )
        except Exception as exc:
            raise service_error(exc, f"creating an E2B sandbox ({self.options.template})") from None
        try:
            self._set_up(sdk, layout)
            winner = self._settle_race(key, str(sdk.sandbox_id))
        except BaseException:
            with contextlib.suppress(Exception):
                self._kill(str(sdk.sandbox_id))
            raise
        if winner != sdk.sandbox_id:
            log.info("another process created %s's sandbox first; adopting it", key)
            self._kill(str(sdk.sandbox_id))
            sdk = self._connect(winner)
            self._push_egress(key, winner)
            self._ensure_payload(sdk)
        return sdk

    def _settle_race(self, key: SandboxKey, ours: str) -> str:
        """Two processes creating one key's sandbox at once: the oldest one wins."""
        usable = [i for i in self._find(key) if self._adoptable(i, key)]
        return str(usable[0].sandbox_id) if usable else ours

    # -- inside the sandbox -------------------------------------------------------------

    def _root(self, sdk: Any, script: str, doing: str) -> str:
        """Run a set-up script as root; its stdout."""
        try:
            result = sdk.commands.run(
                script,
                user="root",
                cwd="/",
                timeout=SETUP_TIMEOUT_S,
                request_timeout=self.options.request_timeout_s,
            )
        except Exception as exc:
            code, stderr = getattr(exc, "exit_code", None), getattr(exc, "stderr", None)
            if isinstance(code, int):  # CommandExitException: the script failed
                lines = str(stderr or "").strip().splitlines()
                last = lines[-1][:500] if lines else "no error output"
                raise SandboxError(
                    ErrorCode.UNAVAILABLE, f"{doing} failed (exit code {code}): {last}"
                ) from None
            raise service_error(exc, doing) from None
        return str(getattr(result, "stdout", "") or "")

    def _write_root(self, sdk: Any, path: str, data: Any, doing: str) -> None:
        try:
            sdk.files.write(path, data, user="root", request_timeout=self.options.request_timeout_s)
        except Exception as exc:
            raise service_error(exc, doing) from None

    def _payload_script(self, payload: Payload, upload: str) -> str:
        """Unpack into a staging directory of this install's own, then rename it into place.

        Two providers adopting one sandbox install at once: the first rename wins, the
        other's (`mv -T` onto a non-empty directory fails) drops its identical copy.
        """
        directory, agent = shlex.quote(payload.directory), shlex.quote(payload.agent_path)
        upload = shlex.quote(upload)
        return (
            f"mkdir -p {shlex.quote(AGENT_ROOT)} && staged=$(mktemp -d {directory}.tmp-XXXXXX) && "
            f'tar -xzf {upload} -C "$staged" --no-same-owner && rm -f {upload} && '
            f'chmod -R a+rX,go-w "$staged" && '
            f'{{ mv -T "$staged" {directory} 2>/dev/null || '
            f'{{ rm -rf "$staged"; test -e {agent}; }}; }}'
        )

    def _upload_payload(self, sdk: Any, payload: Payload) -> str:
        """Upload the archive to a file of this install's own; the install script for it."""
        upload = payload.upload_path(uuid.uuid4().hex[:12])
        self._write_root(sdk, upload, payload.archive, "uploading the agent")
        return self._payload_script(payload, upload)

    def _ensure_payload(self, sdk: Any) -> None:
        """Install this version's agent into an adopted sandbox that lacks it."""
        payload = self._archive()
        try:
            present = sdk.files.exists(payload.agent_path, user="root")
        except Exception as exc:
            raise service_error(exc, "checking the agent in the sandbox") from None
        if present:
            return
        self._root(sdk, self._upload_payload(sdk, payload), "installing the agent")

    def _set_up(self, sdk: Any, layout: ThreadLayout) -> None:
        """A new sandbox: the agent, the thread's files from the host, the virtual layout."""
        install = self._upload_payload(sdk, self._archive())
        seed = build_seed(layout.mounts)
        seed_path = f"/tmp/sandkit-seed-{uuid.uuid4().hex[:12]}.tar"
        if seed is not None:
            with seed:
                self._write_root(sdk, seed_path, seed, "uploading the thread's files")
        user = shlex.quote(self.options.user)
        writable = [shlex.quote(m.virtual) for m in layout.mounts if not m.read_only]
        read_only = [shlex.quote(m.virtual) for m in layout.mounts if m.read_only]
        lines = [
            "set -e",
            install,
            "mkdir -p " + " ".join(shlex.quote(m.virtual) for m in layout.mounts),
        ]
        if seed is not None:
            lines.append(f"tar -xf {seed_path} -C / --no-same-owner && rm -f {seed_path}")
        lines += [
            # Parents of the mounts (e.g. /mnt/user-data) belong to root: the user
            # cannot remove or replace a mount directory.
            "for d in " + " ".join(shlex.quote(m.virtual) for m in layout.mounts) + "; do "
            'p=$(dirname "$d"); while [ "$p" != / ]; do chown root:root "$p"; '
            'chmod 755 "$p"; p=$(dirname "$p"); done; done',
        ]
        if writable:
            lines.append(f"chown -R {user}:{user} " + " ".join(writable))
        if read_only:
            ro = " ".join(read_only)
            lines.append(f"chown -R root:root {ro} && chmod -R a+rX,go-w {ro}")
        self._root(sdk, "\n".join(lines), "setting up the sandbox")

    def _sync_back(self, sdk: Any, key: SandboxKey) -> None:
        """Copy the sandbox's writable mounts over the host copy (before a kill)."""
        layout = self._layout(key)
        mounts = [m for m in layout.mounts if not m.read_only]
        if not mounts:
            return
        remote = f"/tmp/sandkit-sync-{uuid.uuid4().hex[:12]}.tar"
        out = self._root(sdk, pack_command(mounts, remote), "archiving the thread's files")
        try:
            size = int(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise SandboxError(
                ErrorCode.UNAVAILABLE, f"archiving the thread's files: unexpected output {out!r}"
            ) from None
        if size > self.options.sync_max_bytes:
            with contextlib.suppress(SandboxError):
                self._root(sdk, f"rm -f {shlex.quote(remote)}", "removing the archive")
            raise SandboxError(
                ErrorCode.TOO_LARGE,
                f"the thread's files of sandbox {key.sandbox_id} are {size} bytes as an "
                f"archive, over sync_max_bytes ({self.options.sync_max_bytes}); the sandbox "
                "was kept",
            )
        try:
            chunks = sdk.files.read(
                remote,
                format="stream",
                user="root",
                request_timeout=self.options.request_timeout_s,
            )
            apply_archive(chunks, layout.data_root, mounts)
        except Exception as exc:
            raise service_error(exc, "copying the thread's files back") from None

    # -- agent channel ------------------------------------------------------------------

    def _agent_argv(self) -> str:
        python = shlex.quote(self.options.python)
        return f"{python} -I -S {shlex.quote(self._archive().agent_path)}"

    def _mark_dead(self, box: _Box, sdk: Any) -> None:
        if box.sdk is sdk:
            box.dead = True
            self._forget_ports(box.key)

    def _open_stream(self, box: _Box) -> CommandStream:
        sdk = box.sdk
        if sdk is None:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"sandbox {box.key.sandbox_id} is not running; acquire it again",
            )
        # The leading newline separates anything a login shell prints from the frames.
        command = f"printf '\\n'; exec {self._agent_argv()} --stdio"
        try:
            handle = sdk.commands.run(
                command, background=True, stdin=True, user=self.options.user, cwd="/", timeout=0
            )
        except Exception as exc:
            if is_gone(exc):
                box.dead = True
            raise service_error(exc, "starting the agent") from None
        if box.stream is not None:
            box.stream.close()
        return CommandStream(
            sdk.commands,
            handle,
            on_gone=lambda _exc: self._mark_dead(box, sdk),
            request_timeout=self.options.request_timeout_s,
            name=f"sandkit-e2b-{box.key.sandbox_id}",
        )

    def _agent_url(self, box: _Box) -> str:
        return f"{self.options.http_scheme}://{self._running_sdk(box).get_host(self.options.http_port)}"

    def _box_uid(self, box: _Box) -> str:
        return str(box.e2b_id)

    def _launch_http_agent(self, box: _Box, config: dict[str, Any], token: str) -> None:
        """Config and token as files of the sandbox user, then `agent.pyz --http` as a
        background command; returns once it says it listens."""
        sdk = self._running_sdk(box)
        old, box.http_agent = box.http_agent, None
        if old is not None:
            old.stop(sdk.commands, self.options.request_timeout_s)
        tag = uuid.uuid4().hex[:12]
        config_path, token_path = f"/tmp/sandkit-{tag}.json", f"/tmp/sandkit-{tag}.token"
        port = self.options.http_port
        try:
            sdk.files.write(config_path, json.dumps(config), user=self.options.user)
            sdk.files.write(token_path, token, user=self.options.user)
        except Exception as exc:
            raise service_error(exc, "writing the agent's configuration") from None
        listening = threading.Event()

        def on_stdout(text: str) -> None:
            if '"listening"' in text:
                listening.set()

        command = (
            f"exec {self._agent_argv()} --http 0.0.0.0:{port} "
            f"--config {config_path} --token-file {token_path}"
        )
        try:
            handle = sdk.commands.run(
                command, background=True, user=self.options.user, cwd="/", timeout=0
            )
        except Exception as exc:
            raise service_error(exc, "starting the agent") from None
        agent = CommandOutput(handle, on_stdout, lambda _exc: self._mark_dead(box, sdk))
        deadline = time.monotonic() + HTTP_START_TIMEOUT_S
        while not listening.wait(0.05):
            if agent.finished.is_set() or time.monotonic() > deadline:
                agent.stop(sdk.commands, self.options.request_timeout_s)
                raise SandboxError(
                    ErrorCode.UNAVAILABLE,
                    f"the agent did not start listening ({agent.detail() or 'no answer'})",
                )
        box.http_agent = agent

    def _running_sdk(self, box: _Box) -> Any:
        if box.sdk is None or box.dead:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"sandbox {box.key.sandbox_id} is not running; acquire it again",
            )
        return box.sdk

    # -- maintenance ------------------------------------------------------------------------

    def keep_alive(self) -> int:
        """Extend the E2B timeout of every box used since its last extension (or busy).

        `connect` with the configured timeout only ever lengthens a running
        sandbox's timeout, so a longer one set elsewhere is kept.
        """
        boxes = self._boxes.current()
        extended = 0
        for box in boxes:
            sandbox = box.sandbox
            if sandbox is None or sandbox.closed or box.dead or box.e2b_id is None:
                continue
            if not sandbox.busy and sandbox.last_used <= box.extended_at:
                continue
            with box.lock:
                if box.sandbox is not sandbox or sandbox.closed or box.dead or box.sdk is None:
                    continue
                started = time.monotonic()
                try:
                    self._connect(str(box.e2b_id))
                except SandboxError as exc:
                    log.warning("extending the timeout of %s: %s", box.key, exc)
                    continue
                box.extended_at = started
                extended += 1
        return extended


def _key_of(info: Any) -> SandboxKey | None:
    metadata = info.metadata or {}
    try:
        return SandboxKey(metadata.get(META_USER, ""), metadata.get(META_THREAD, ""))
    except SandboxError:
        return None
