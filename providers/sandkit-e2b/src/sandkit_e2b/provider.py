"""`E2BProvider`: one E2B sandbox per `SandboxKey`, the sandkit agent inside.

E2B supplies the lifecycle (create, list by metadata, connect, pause, kill,
timeouts) and a carrier (a background command's stdin/stdout, or the
sandbox's public host URL); every operation is answered by the same agent
and runtime as on the other providers. The SDK's `Sandbox` class is
injected (`sandbox_class=`, default `e2b.Sandbox` via `sdk_class`), and
only its public surface is used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import secrets
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import PurePosixPath
from typing import Any

from sandkit.boxkit import IdleReaper, TrackedSandbox, box_mapping
from sandkit.boxkit import BoxTable
from sandkit.config import Settings
from sandkit.errors import ErrorCode, SandboxError
from sandkit.paths import UPLOADS, ThreadLayout
from sandkit.provider import SandboxKey, SandboxProvider
from sandkit.remote import agent_config as make_agent_config
from sandkit.runtime.pathmap import RESERVED_PREFIXES
from sandkit.transports.base import Transport
from sandkit.transports.http import HttpTransport
from sandkit.transports.stdio import StdioTransport

from .errors import is_gone, service_error
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
HTTP_START_TIMEOUT_S = 30.0


class E2BSandbox(TrackedSandbox):
    """A `TrackedSandbox` that reports an unreachable agent (so acquire checks it answers)."""

    def __init__(
        self,
        key: SandboxKey,
        transport: Transport,
        *,
        on_unavailable: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(key, transport, **kwargs)
        self._on_unavailable = on_unavailable

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        with super()._running():
            try:
                yield
            except SandboxError as exc:
                if exc.code is ErrorCode.UNAVAILABLE and self._on_unavailable is not None:
                    self._on_unavailable()
                raise


@dataclasses.dataclass(eq=False)
class _Box:
    """What this provider knows about one key's E2B sandbox."""

    key: SandboxKey
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    sdk: Any = None  # the connected SDK Sandbox instance
    sandbox: E2BSandbox | None = None
    stream: CommandStream | None = None  # carrier stdio: the current agent channel
    http_agent: CommandOutput | None = None  # carrier http: the agent process
    # Set when E2B said the sandbox is gone or not running: acquire re-checks.
    dead: bool = False
    # Set when a call found the agent unreachable: acquire checks it answers.
    suspect: bool = False
    extended_at: float = 0.0

    @property
    def e2b_id(self) -> str | None:
        return None if self.sdk is None else str(self.sdk.sandbox_id)

    def looks_alive(self) -> bool:
        """Cheap check without an API call: the agent answers over a live channel."""
        if self.dead or self.suspect or self.sdk is None:
            return False
        if self.http_agent is not None:
            return not self.http_agent.finished.is_set()
        return self.stream is not None and not self.stream.at_eof


class E2BProvider(SandboxProvider):
    name = "e2b"

    def __init__(self, settings: Settings | None = None, *, sandbox_class: Any = None) -> None:
        self.settings = settings or Settings()
        self.options = E2BOptions.from_settings(self.settings)
        self._sandbox_class = sandbox_class
        self._boxes: BoxTable[_Box] = BoxTable(_Box)
        self._maintainer = IdleReaper("sandkit-e2b-maintainer", self._maintain)

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

    def _payload(self) -> Payload:
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
        layout = ThreadLayout.for_key(self.settings, key)
        spec = {
            "template": self.options.template,
            "user": self.options.user,
            "envs": self.options.envs,
            "internet": self.options.allow_internet_access,
            "on_timeout": self.options.on_timeout,
            "mounts": [[m.virtual, m.read_only] for m in layout.mounts],
        }
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

    def _connect(self, sandbox_id: str) -> Any:
        """Connect (resuming a paused sandbox); extends a running one's timeout, never shortens."""
        try:
            return self.sdk.connect(sandbox_id, timeout=self.options.timeout_s, **self._api())
        except Exception as exc:
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

    # -- SandboxProvider ------------------------------------------------------------

    def acquire(self, key: SandboxKey) -> E2BSandbox:
        self._maintainer.start(self.options.maintenance_interval_s, self.settings.idle_timeout_s)
        with self._boxes.locked(key) as box:
            sandbox = box.sandbox
            if sandbox is not None and not sandbox.closed and box.looks_alive():
                sandbox.last_used = time.monotonic()
                return sandbox
            try:
                self._ensure_running(box)
                if sandbox is None or sandbox.closed:
                    sandbox = self._new_sandbox(box)
                    box.sandbox = sandbox
                elif self.options.carrier == "http" and not box.looks_alive():
                    self._revive_http_agent(box, sandbox)
                # (stdio: the transport starts a new agent on the next call.)
                box.suspect = False
                # Open the channel now: acquire returns a box that answers, and a
                # template without python3 fails here with the agent's reason.
                sandbox.ping(timeout=60.0)
            except BaseException:
                if box.sandbox is None:
                    self._boxes.forget(box)
                raise
            sandbox.last_used = time.monotonic()
            return sandbox

    def get(self, key: SandboxKey) -> E2BSandbox | None:
        box = self._boxes.box(key)
        with box.lock:
            sandbox = box.sandbox
            if sandbox is not None and not sandbox.closed and box.looks_alive():
                return sandbox
            running = [i for i in self._find(key, ["running"]) if self._adoptable(i, key)]
            if not running:
                if sandbox is None:
                    self._boxes.forget(box)
                return None
            if box.dead or box.sdk is None or box.e2b_id != running[0].sandbox_id:
                box.sdk = self._connect(running[0].sandbox_id)
                box.dead = False
                box.extended_at = time.monotonic()
                self._ensure_payload(box.sdk)
            if sandbox is None or sandbox.closed:
                sandbox = self._new_sandbox(box)
                box.sandbox = sandbox
            return sandbox

    def release(self, key: SandboxKey) -> None:
        box = self._boxes.box(key)
        with box.lock:
            self._release_locked(box)
        self._boxes.forget(box)

    def _release_locked(self, box: _Box) -> None:
        self._close_box(box, wait=True)
        if self.options.release == "kill":
            self._retire(box.key, box)
        else:
            ids = [box.e2b_id] if box.e2b_id and not box.dead else []
            if not ids:
                ids = [i.sandbox_id for i in self._find(box.key, ["running"])]
            for sandbox_id in ids:
                self._pause(str(sandbox_id))
        box.sdk = None
        box.dead = True

    def destroy(self, key: SandboxKey) -> None:
        box = self._boxes.box(key)
        with box.lock:
            self._close_box(box, wait=True)
            self._retire(key, box)
            box.sdk = None
            box.dead = True
        self._boxes.forget(box)

    def shutdown(self) -> None:
        self._maintainer.stop()
        boxes = self._boxes.take_all()
        for box in boxes:
            with box.lock:
                self._close_box(box, wait=True)
        try:
            states = ["running"] if self.options.shutdown == "pause" else None
            infos = self._list({META_OWNER: self.options.owner}, states)
        except SandboxError as exc:
            if boxes:
                log.warning("shutdown: cannot list sandboxes (%s); some may remain", exc)
            return
        with ThreadPoolExecutor(8, thread_name_prefix="sandkit-e2b-shutdown") as pool:
            list(pool.map(self._shut_one, infos))

    def _shut_one(self, info: Any) -> None:
        try:
            if self.options.shutdown == "pause":
                self._pause(info.sandbox_id)
                return
            if self.options.sync_back:
                key = _key_of(info)
                if key is not None:
                    self._sync_back(self._connect(info.sandbox_id), key)
            self._kill(info.sandbox_id)
        except SandboxError as exc:
            log.warning("shutdown: sandbox %s: %s", info.sandbox_id, exc)

    def reap_idle(self, max_idle_s: float) -> list[SandboxKey]:
        return self._boxes.reap_idle(max_idle_s, self._release_locked)

    # -- uploads ----------------------------------------------------------------------

    def add_upload(self, key: SandboxKey, relative_path: str, data: bytes) -> str:
        """Deliver a user's file into the thread's uploads; returns its virtual path.

        Uploads are read-only to the agent and owned by root in the sandbox, so
        they arrive through the control plane: into the host copy (what a new
        sandbox is seeded from) and into the running sandbox.
        """
        rel = _relative(relative_path)
        layout = ThreadLayout.for_key(self.settings, key)
        host = layout.user_data_dir / "uploads" / rel
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_bytes(data)
        virtual = f"{UPLOADS}/{rel}"
        self.acquire(key)
        box = self._boxes.box(key)
        with box.lock:
            if box.sdk is None:
                raise SandboxError(ErrorCode.UNAVAILABLE, f"sandbox {key.sandbox_id} is gone")
            # Read-only uploads belong to root (commands cannot change them);
            # writable ones to the sandbox user, like the rest of the thread.
            owner = "root" if self.settings.uploads_read_only else self.options.user
            try:
                box.sdk.files.write(virtual, data, user=owner)
            except Exception as exc:
                raise service_error(exc, f"uploading {virtual}") from None
        return virtual

    # -- boxes ------------------------------------------------------------------------

    def _close_box(self, box: _Box, wait: bool) -> None:
        """Close the sandbox handle and stop its agent (waiting for it before a pause)."""
        sandbox, box.sandbox = box.sandbox, None
        stream, box.stream = box.stream, None
        agent, box.http_agent = box.http_agent, None
        timeout = self.options.request_timeout_s
        if wait and stream is not None:
            stream.shutdown(timeout)
        if agent is not None and box.sdk is not None:
            if wait:
                agent.stop(box.sdk.commands, timeout)
            else:
                sdk = box.sdk
                threading.Thread(
                    target=agent.stop, args=(sdk.commands, timeout), daemon=True
                ).start()
        if sandbox is not None:
            sandbox.close()

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
            self._ensure_payload(sdk)
        else:
            sdk = self._create(key)
        box.sdk = sdk
        box.dead = False
        box.extended_at = time.monotonic()

    def _create(self, key: SandboxKey) -> Any:
        self._check_capacity()
        layout = ThreadLayout.for_key(self.settings, key)
        layout.create_dirs()
        for mount in layout.mounts:
            if not mount.virtual.startswith(RESERVED_PREFIXES[0]) and not os.path.isdir(mount.real):
                raise SandboxError(
                    ErrorCode.UNAVAILABLE,
                    f"the host directory behind {mount.virtual} does not exist",
                )
        try:
            sdk = self.sdk.create(
                template=self.options.template,
                timeout=self.options.timeout_s,
                metadata=self._metadata(key),
                envs=dict(self.options.envs) or None,
                allow_internet_access=self.options.allow_internet_access,
                lifecycle={"on_timeout": self.options.on_timeout},
                idempotency_key=str(uuid.uuid4()),
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
            self._ensure_payload(sdk)
        return sdk

    def _settle_race(self, key: SandboxKey, ours: str) -> str:
        """Two processes creating one key's sandbox at once: the oldest one wins."""
        usable = [i for i in self._find(key) if self._adoptable(i, key)]
        return str(usable[0].sandbox_id) if usable else ours

    def _check_capacity(self) -> None:
        cap = self.options.max_running
        if not cap:
            return
        running = self._list({META_OWNER: self.options.owner}, ["running"])
        if len(running) >= cap:
            raise SandboxError(
                ErrorCode.CAPACITY,
                f"{len(running)} sandboxes are running, the limit (max_running) is {cap}",
            )

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

    def _payload_script(self, payload: Payload) -> str:
        directory = shlex.quote(payload.directory)
        upload = shlex.quote(payload.upload_path)
        return (
            f"mkdir -p {shlex.quote(AGENT_ROOT)} && rm -rf {directory}.tmp && "
            f"mkdir {directory}.tmp && tar -xzf {upload} -C {directory}.tmp --no-same-owner && "
            f"chmod -R a+rX,go-w {directory}.tmp && rm -rf {directory} && "
            f"mv {directory}.tmp {directory} && rm -f {upload}"
        )

    def _ensure_payload(self, sdk: Any) -> None:
        """Install this version's agent into an adopted sandbox that lacks it."""
        payload = self._payload()
        try:
            present = sdk.files.exists(payload.agent_path, user="root")
        except Exception as exc:
            raise service_error(exc, "checking the agent in the sandbox") from None
        if present:
            return
        self._write_root(sdk, payload.upload_path, payload.archive, "uploading the agent")
        self._root(sdk, self._payload_script(payload), "installing the agent")

    def _set_up(self, sdk: Any, layout: ThreadLayout) -> None:
        """A new sandbox: the agent, the thread's files from the host, the virtual layout."""
        payload = self._payload()
        self._write_root(sdk, payload.upload_path, payload.archive, "uploading the agent")
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
            self._payload_script(payload),
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
        layout = ThreadLayout.for_key(self.settings, key)
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
        except SandboxError:
            raise
        except Exception as exc:
            raise service_error(exc, "copying the thread's files back") from None

    # -- agent channel ------------------------------------------------------------------

    def _agent_config(self, key: SandboxKey) -> dict[str, Any]:
        layout = ThreadLayout.for_key(self.settings, key)
        return make_agent_config(
            # The host paths (data root, thread dirs) are hidden roots, as in every
            # box: a path the caller types with the data root in it comes back masked.
            box_mapping(layout),
            self.settings.limits.to_limits(),
            execute_enabled=self.options.execute_enabled,
            secrets=self.settings.secret_values(),
            scrubbed_env=tuple(self.settings.scrubbed_env),
            rg_path=self._payload().rg_path,
        )

    def _agent_argv(self) -> str:
        python = shlex.quote(self.options.python)
        return f"{python} -I -S {shlex.quote(self._payload().agent_path)}"

    def _new_sandbox(self, box: _Box) -> E2BSandbox:
        limits = self.settings.limits.to_limits()
        config = self._agent_config(box.key)
        name = f"sandkit-e2b-{box.key.sandbox_id}"
        transport: Transport
        if self.options.carrier == "http":
            transport = self._start_http_agent(box, config)
        else:
            transport = StdioTransport(
                lambda: self._open_stream(box), config, open_timeout=60.0, name=name
            )
        return E2BSandbox(
            box.key, transport, limits=limits, on_unavailable=lambda: _set_suspect(box)
        )

    def _revive_http_agent(self, box: _Box, sandbox: E2BSandbox) -> None:
        """The HTTP agent did not answer: if it still does not, a new one behind the same handle."""
        agent = box.http_agent
        if agent is not None and not agent.finished.is_set():
            try:
                sandbox.transport.call("ping", {}, 10.0)
                return
            except SandboxError:
                pass
        box.http_agent = None
        if agent is not None and box.sdk is not None:
            agent.stop(box.sdk.commands, self.options.request_timeout_s)
        old = sandbox.transport
        sandbox.transport = self._start_http_agent(box, self._agent_config(box.key))
        old.close()

    def _mark_dead(self, box: _Box, sdk: Any) -> None:
        if box.sdk is sdk:
            box.dead = True

    def _open_stream(self, box: _Box) -> CommandStream:
        """A fresh `agent.pyz --stdio` in the key's sandbox (the transport's opener)."""
        sdk = box.sdk
        if sdk is None or box.dead:
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
        old, box.stream = (
            box.stream,
            CommandStream(
                sdk.commands,
                handle,
                on_gone=lambda _exc: self._mark_dead(box, sdk),
                request_timeout=self.options.request_timeout_s,
                name=f"sandkit-e2b-{box.key.sandbox_id}",
            ),
        )
        if old is not None:
            old.close()
        return box.stream

    def _start_http_agent(self, box: _Box, config: dict[str, Any]) -> HttpTransport:
        """Start `agent.pyz --http` in the sandbox and point an HttpTransport at its host URL."""
        sdk = box.sdk
        if sdk is None or box.dead:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"sandbox {box.key.sandbox_id} is not running; acquire it again",
            )
        token = secrets.token_urlsafe(32)
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
        from sandkit.agent.protocol import max_frame_bytes

        url = f"{self.options.http_scheme}://{sdk.get_host(port)}"
        return HttpTransport(
            url, token, max_frame_bytes=max_frame_bytes(self.settings.limits.to_limits())
        )

    # -- maintenance ------------------------------------------------------------------------

    def _maintain(self, idle_timeout_s: float) -> list[SandboxKey]:
        """One maintenance round: extend the timeouts of boxes in use, release idle ones."""
        self.keep_alive()
        return self.reap_idle(idle_timeout_s)

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


def _set_suspect(box: _Box) -> None:
    box.suspect = True


def _key_of(info: Any) -> SandboxKey | None:
    metadata = info.metadata or {}
    try:
        return SandboxKey(metadata.get(META_USER, ""), metadata.get(META_THREAD, ""))
    except SandboxError:
        return None


def _relative(path: str) -> str:
    parts = PurePosixPath(path).parts if isinstance(path, str) else ()
    if (
        not isinstance(path, str)
        or not parts
        or path.startswith("/")
        or "\0" in path
        or any(p in (".", "..") for p in parts)
    ):
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT, f"an upload path must be relative, without ..: {path!r}"
        )
    return "/".join(parts)
