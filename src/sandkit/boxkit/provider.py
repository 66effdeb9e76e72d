"""`BoxProvider`: the lifecycle of a box provider, written once.

A *box* is what a platform runs for one key: a container, a pod, a microVM,
a bubblewrap sandbox. Everything that is the same on every platform lives
here: idempotent acquire under concurrency (one lock per key, a fresh look
at the platform when the box may have died), `get`, `release`, `destroy`,
`shutdown` (finishing past a failure on one box), idle reaping, capacity,
the agent's configuration and both carriers (stdio over the platform's exec
channel, HTTP with a bearer token). Re-adoption after a restart follows from
the hooks: a box is found on the platform by its deterministic name and
labels, never from memory.

A provider implements what is truly its own:

    _ensure_running(box)        make the key's box exist and run: adopt, start or create it
    _adopt_running(box)         attach the key's box if it already runs; False if not (`get`)
    _stop_box(box, remove)      stop (release) or remove (destroy) the key's box
    _open_stream(box)           a fresh `agent.pyz --stdio` in the box (carrier stdio)
    _list_boxes()               every box of this owner on the platform (shutdown)
    _shut_box(handle)           stop or remove one of those at shutdown
    _count_running()            this owner's running boxes (max_running)

and for carrier http `_agent_url`, `_launch_http_agent` and `_box_uid`.
`docs/providers/writing.md` walks through a provider built on it.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from ..agent.protocol import agent_config, max_frame_bytes
from ..config import Settings
from ..errors import ErrorCode, SandboxError
from ..net import state as netstate
from ..network import EgressPolicy, Endpoint
from ..paths import ThreadLayout
from ..provider import SandboxKey, SandboxProvider
from ..transports.base import Transport
from ..transports.http import HttpTransport
from ..transports.stdio import StdioTransport
from ..transports.streams import ByteStream
from .http_agent import AgentSlot, SlotTransport, make_token, wait_ready
from .layout import box_mapping
from .options import BoxOptions
from .payload import RG_PATH, Payload, build_payload
from .pool import Claim, WarmPool, pool_key
from .poolstorage import pool_layout, pool_root
from .reaper import IdleReaper
from .sandbox import BoxSandbox
from .sweep import failed, sweep, with_retries
from .table import BoxTable

log = logging.getLogger("sandkit.boxkit")

# carrier http: how long a ping may take before the agent counts as gone.
HTTP_PROBE_TIMEOUT_S = 3.0


@dataclasses.dataclass(eq=False)
class BoxRecord:
    """What a provider knows about one key's box; subclass it for the platform's handles."""

    key: SandboxKey
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    sandbox: BoxSandbox | None = None
    # carrier stdio: the current agent channel; carrier http: the current agent.
    stream: ByteStream | None = None
    http: AgentSlot = dataclasses.field(default_factory=AgentSlot)
    # The platform said the box is gone or stopped: acquire looks again.
    dead: bool = False
    # A call could not reach the agent: acquire checks the box before trusting it.
    suspect: bool = False


B = TypeVar("B", bound=BoxRecord)
O = TypeVar("O", bound=BoxOptions)  # noqa: E741 - the options type


class BoxProvider(SandboxProvider, Generic[B, O], abc.ABC):
    """The lifecycle of boxes of type `B` configured by options `O` (see the module doc)."""

    # How long a new agent channel may take to answer (a pod's exec is slower).
    handshake_timeout_s: ClassVar[float] = 60.0
    # What `acquire` hands out (a subclass may add platform details, e.g. a pod name).
    sandbox_class: ClassVar[type[BoxSandbox]] = BoxSandbox
    # Whether the platform can hand a box to a key after it started (warm pools).
    supports_pool: ClassVar[bool] = False
    # Whether the provider enforces egress policies / can expose ports (docs/security.md).
    supports_egress: ClassVar[bool] = False
    supports_expose: ClassVar[bool] = False

    def __init__(
        self, settings: Settings | None, options_class: type[O], record_class: type[B]
    ) -> None:
        """A subclass passes its options model and its record type, after setting its own
        attributes (a warm pool's thread starts here and uses the provider at once)."""
        self.settings = settings or Settings()
        self.options: O = options_class.from_settings(self.settings)
        self._record_class = record_class
        self._boxes: BoxTable[B] = BoxTable(record_class)
        self._reaper = IdleReaper(f"sandkit-{self.name}-reaper", self._background_round)
        # Held from the capacity check to the box's creation, so concurrent starts (and a
        # pool refill) of this instance cannot pass max_running together.
        self._capacity_lock = threading.RLock()
        self._pool: WarmPool[B] | None = None
        for wanted, supported, what in (
            (self.options.egress.enabled, self.supports_egress, "egress: a ceiling above none"),
            (self.options.expose.enabled, self.supports_expose, "expose.enabled"),
        ):
            if wanted and not supported:
                raise SandboxError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"providers.{self.name}.{what}: the {self.name} provider cannot do this",
                )
        if self.options.warm_pool.size:
            if not self.supports_pool:
                raise SandboxError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"providers.{self.name}.warm_pool: the {self.name} provider has no warm "
                    "pool (docs/pools.md says why)",
                )
            self._pool = WarmPool(self, self.options.warm_pool, f"sandkit-{self.name}-pool")
            self._pool.start()

    # -- what a provider implements --------------------------------------------------------

    @abc.abstractmethod
    def _ensure_running(self, box: B) -> None:
        """Make the key's box exist and run (adopt, restart or create it); set the record's
        platform handles. Raise UNAVAILABLE/CAPACITY with a message that says what to fix."""

    @abc.abstractmethod
    def _adopt_running(self, box: B) -> bool:
        """If the key's box runs (made with the current settings), attach it to the record."""

    @abc.abstractmethod
    def _stop_box(self, box: B, remove: bool) -> None:
        """Stop (release: data kept, the next acquire resumes) or remove (destroy) the box.
        Its channels are closed already; a box that is gone is not an error."""

    @abc.abstractmethod
    def _open_stream(self, box: B) -> ByteStream:
        """Start a fresh `agent.pyz --stdio` in the running box; its stdin/stdout."""

    @abc.abstractmethod
    def _list_boxes(self) -> Sequence[Any]:
        """Every box of this owner on the platform, whoever started it (for shutdown)."""

    @abc.abstractmethod
    def _shut_box(self, handle: Any) -> None:
        """Stop or remove one box of `_list_boxes` at shutdown (per the options)."""

    @abc.abstractmethod
    def _count_running(self) -> int:
        """How many boxes of this owner run now (for `max_running`)."""

    # carrier http ---------------------------------------------------------------------

    def _agent_url(self, box: B) -> str:
        """Where the box's HTTP agent listens (looked up afresh: a restart moves it)."""
        raise SandboxError(ErrorCode.INVALID_ARGUMENT, f"{self.name} has no carrier http")

    def _box_uid(self, box: B) -> str:
        """The box's identity on the platform (tokens derived from `token_secret`)."""
        raise SandboxError(ErrorCode.INVALID_ARGUMENT, f"{self.name} has no carrier http")

    def _launch_http_agent(
        self, box: B, config: dict[str, Any], token: str
    ) -> Callable[[], int | None] | None:
        """Start `agent.pyz --http` in the box with `config` and `token`, stopping any
        earlier HTTP agent of the box. May return how to ask whether the launch ended
        (its exit code, else None) while the kit waits for the agent to answer."""
        raise SandboxError(ErrorCode.INVALID_ARGUMENT, f"{self.name} has no carrier http")

    # warm pools (supports_pool = True) --------------------------------------------------

    def _pool_root(self) -> Path:
        """Where this owner's pool boxes keep their storage on the host (poolstorage.py)."""
        return pool_root(self.settings, self.owner)

    def _pool_layout(self, slot: str) -> ThreadLayout:
        return pool_layout(self.settings, self.owner, slot)

    def _pool_unclaimed(self, slot: str) -> bool:
        """A claim (or a removal, which retires it first) moves the slot's storage away:
        a pool box without it is some key's, or about to go, whatever its labels say yet."""
        return self._pool_layout(slot).user_data_dir.exists()

    def _pool_slots(self) -> list[str]:
        """Slots of this owner's pool boxes that run and are not claimed (any instance's)."""
        raise NotImplementedError

    def _pool_start(self, slot: str, record: B) -> None:
        """Start a pool box for `slot` with fresh, empty storage of its own; set the
        record's platform handles."""
        raise NotImplementedError

    def _pool_attach(self, slot: str, record: B) -> bool:
        """Attach a running, unclaimed pool box (after a restart); False if there is none."""
        raise NotImplementedError

    def _pool_claim(self, slot: str, record: B, key: SandboxKey) -> Claim:
        """Atomically make the pool box and its storage the key's (see `Claim`)."""
        raise NotImplementedError

    def _pool_remove(self, slot: str) -> None:
        """Remove an unclaimed pool box and its storage (gone already: fine)."""
        raise NotImplementedError

    # network (supports_egress / supports_expose) ---------------------------------------

    def _apply_egress(self, box: B, policy: EgressPolicy) -> None:
        """Make what enforces the key's egress follow `policy` now, if its box runs (a box's
        start applies the stored policy itself). Called under the key's lock."""

    def _expose_port(self, box: B, port: int) -> Endpoint:
        """Open `port` of the key's running box to the provider's side (idempotent)."""
        raise NotImplementedError

    def _unexpose_port(self, box: B, port: int) -> None:
        """Close an exposed port of the key's box (not exposed, box gone: nothing to do)."""
        raise NotImplementedError

    def _exposed_ports(self, box: B) -> list[Endpoint]:
        """The key's exposed ports."""
        return []

    def _find_endpoint(self, key: SandboxKey, port: int) -> Endpoint | None:
        """An exposed port of a running box, from what the provider knows (no platform
        call: the gateway asks for every connection it opens)."""
        return None

    # what a provider may refine ---------------------------------------------------------

    def _looks_alive(self, box: B) -> bool:
        """Cheap check without asking the platform: the agent's channel is live."""
        if box.dead or box.suspect:
            return False
        if self.options.carrier == "http":
            return box.http.transport is not None and not box.http.down
        return box.stream is not None and not box.stream.at_eof

    def _payload(self) -> Payload:
        return build_payload(True)

    def _box_rg_path(self) -> str | None:
        """Where ripgrep is in the box (None: the agent's Python engine only)."""
        return RG_PATH if self._payload().has_rg else None

    def _hidden_paths(self) -> tuple[str, ...]:
        """Host paths besides the data root that anything the box prints must not show."""
        return ()

    def _close_box(self, box: B) -> None:
        """Close the record's sandbox and channels (the box itself is left as it is)."""
        sandbox, box.sandbox, box.stream = box.sandbox, None, None
        if sandbox is not None:
            sandbox.close()
        box.http.replace(None)

    def _box_died(self, box: B) -> None:
        """The platform reported the box dead (an event, not a guess): end its channel,
        so a call waiting on it fails UNAVAILABLE now, not when its own timeout passes."""
        box.suspect = True
        stream = box.stream
        if stream is not None:
            stream.close()

    def _stop_ends_processes(self) -> bool:
        """Does stopping a box end what runs in it? (Not for a VM that is paused.)"""
        return True

    def _end_processes(self, box: B) -> None:
        """End the box's background processes before a stop that would keep them."""
        sandbox = box.sandbox
        if sandbox is None or sandbox.closed or not self.options.execute_enabled:
            return
        try:
            sandbox.end_processes()
        except SandboxError as exc:  # the box may be gone already: its processes with it
            log.info("ending the processes of %s before the stop: %s", box.key, exc)

    def _after_shutdown(self, handles: Sequence[Any]) -> None:
        """Clean-up once every box is shut (networks, volumes, waiting for deletions)."""

    def _background_round(self, idle_timeout_s: float) -> list[SandboxKey]:
        """One round of the background thread; a provider may add its upkeep."""
        reaped = self.reap_idle(idle_timeout_s)
        self.sleep_idle_agents(self.options.agent_sleep_s)
        return reaped

    def sleep_idle_agents(self, idle_s: float) -> int:
        """Put the agents of boxes idle for `idle_s` to sleep (0: none); how many went.
        Pool boxes stay awake: a claim is meant to answer at once."""
        if not idle_s:
            return 0
        cutoff = time.monotonic() - idle_s
        slept = 0
        ends = self.options.agent_sleep == "exit"
        for box in self._boxes.current():
            sandbox = box.sandbox
            if sandbox is None or not sandbox.idle_since(cutoff):
                continue
            if sandbox.hang_up() if ends else sandbox.sleep():
                slept += 1
                if ends:
                    self._agent_ended(box)
        return slept

    def _agent_ended(self, box: B) -> None:
        """A channel was closed on purpose (`agent_sleep: exit`): its agent ends by itself."""

    # -- SandboxProvider -------------------------------------------------------------------

    def acquire(self, key: SandboxKey) -> BoxSandbox:
        self._reaper.start(self.options.reap_interval_s, self.settings.idle_timeout_s)
        with self._boxes.locked(key) as box:
            sandbox = box.sandbox
            if (
                sandbox is not None
                and not sandbox.closed
                and self._looks_alive(box)
                and self._answers(sandbox)
            ):
                sandbox.last_used = time.monotonic()
                return sandbox
            claimed = self._claim_from_pool(box) if sandbox is None else None
            if claimed is not None:
                return claimed
            try:
                self._ensure_running(box)
                box.dead = False
                if self.options.carrier == "http":
                    self._ensure_http_agent(box)
                if sandbox is None or sandbox.closed:
                    sandbox = box.sandbox = self._new_sandbox(box)
                box.suspect = False
                # Open the channel now: acquire returns a box that answers, and a broken
                # image (no python3) fails here with the agent's reason.
                sandbox.ping(timeout=self.handshake_timeout_s)
            except BaseException:
                if box.sandbox is None:
                    self._boxes.forget(box)
                raise
            sandbox.last_used = time.monotonic()
            return sandbox

    def get(self, key: SandboxKey) -> BoxSandbox | None:
        with self._boxes.locked(key) as box:
            sandbox = box.sandbox
            if sandbox is not None and not sandbox.closed and self._looks_alive(box):
                return sandbox
            try:
                if not self._adopt_running(box):
                    if box.sandbox is None:
                        self._boxes.forget(box)
                    return None
                box.dead = False
                if self.options.carrier == "http":
                    # Not a box start: an agent adopted from an earlier provider instance
                    # answers to a token we may not know.
                    self._ensure_http_agent(box)
            except BaseException:
                if box.sandbox is None:
                    self._boxes.forget(box)
                raise
            if sandbox is None or sandbox.closed:
                sandbox = box.sandbox = self._new_sandbox(box)
            return sandbox

    def release(self, key: SandboxKey) -> None:
        self._drop(key, remove=False)

    def destroy(self, key: SandboxKey) -> None:
        self._drop(key, remove=True)

    def shutdown(self) -> None:
        """Close every channel, then stop or remove every box of this owner on the
        platform (also those of a crashed earlier instance), each retried; raises
        UNAVAILABLE at the end naming what could not be done."""
        self._reaper.stop()
        if self._pool is not None:
            self._pool.stop()  # its boxes are this owner's: the sweep below removes them
        held = self._boxes.take_all()
        for box in held:
            with box.lock:
                if not self._stop_ends_processes():
                    self._end_processes(box)
                self._close_box(box)
        try:
            handles = self._list_boxes()
        except SandboxError as exc:
            # Runs from __exit__ and atexit hooks: loud only when boxes may be left running.
            log.warning("%s shutdown: %s; boxes of owner %s may remain", self.name, exc, self.owner)
            if held:
                raise failed(f"{self.name} shutdown", [str(exc)]) from None
            return
        failures = sweep(handles, self._shut_box, self._describe)
        self._after_shutdown(handles)
        if failures:
            raise failed(f"{self.name} shutdown", failures)

    def reap_idle(self, max_idle_s: float) -> list[SandboxKey]:
        keep = None if self.settings.reap_running_processes else self._runs_processes
        return self._boxes.reap_idle(max_idle_s, lambda box: self._stop_locked(box, False), keep)

    def _runs_processes(self, box: B) -> bool:
        """Has the box background processes running? (Then it is not idle.)"""
        sandbox = box.sandbox
        if sandbox is None or not self.options.execute_enabled:
            return False
        used = sandbox.last_used  # asking is not using: the box stays as idle as it was
        try:
            return any(p.running for p in sandbox.list_processes().processes)
        except SandboxError:
            return False  # cannot tell: an unreachable box is reaped
        finally:
            sandbox.last_used = used

    @property
    def owner(self) -> str:
        return self.options.owner

    # -- network (docs/security.md#network) ------------------------------------------------

    def egress(self, key: SandboxKey) -> EgressPolicy | None:
        if not self.supports_egress:
            return super().egress(key)
        return self._key_egress(key)

    def _key_egress(self, key: SandboxKey) -> EgressPolicy:
        """The key's stored policy within today's ceiling, else the default policy."""
        options = self.options.egress
        stored = netstate.read_json(self._egress_file(key))
        if stored is None:
            return options.policy
        try:
            return options.check(EgressPolicy.parse(stored))
        except SandboxError as exc:  # the operator lowered the ceiling since
            log.warning("%s: its egress policy is beyond the ceiling now (%s)", key, exc.message)
            return options.policy

    def set_egress(
        self, key: SandboxKey, policy: EgressPolicy | str | dict[str, Any]
    ) -> EgressPolicy:
        if not self.supports_egress:
            return super().set_egress(key, policy)
        wanted = self.options.egress.check(EgressPolicy.parse(policy))
        with self._boxes.locked(key) as box:
            try:
                netstate.write_json(self._egress_file(key), wanted.to_wire(), mode=0o600)
                self._apply_egress(box, wanted)
            finally:
                if box.sandbox is None:
                    self._boxes.forget(box)
        return wanted

    def expose(self, key: SandboxKey, port: int) -> Endpoint:
        if not self.supports_expose or not self.options.expose.enabled:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT,
                f"ports cannot be exposed: providers.{self.name}.expose.enabled is false"
                if self.supports_expose
                else f"the {self.name} provider cannot expose ports",
            )
        self._check_port(port)
        with self._boxes.locked(key) as box:
            sandbox = box.sandbox
            if sandbox is None or sandbox.closed or box.dead:
                if box.sandbox is None:
                    self._boxes.forget(box)
                raise SandboxError(
                    ErrorCode.UNAVAILABLE,
                    f"sandbox {key.sandbox_id} is not running; acquire it before exposing a port",
                )
            self.options.expose.check_capacity({e.port for e in self._exposed_ports(box)}, port)
            return self._expose_port(box, port)

    def unexpose(self, key: SandboxKey, port: int) -> None:
        if not self.supports_expose:
            return
        self._check_port(port, exposing=False)
        with self._boxes.locked(key) as box:
            try:
                self._unexpose_port(box, port)
            finally:
                if box.sandbox is None:
                    self._boxes.forget(box)

    def exposed(self, key: SandboxKey) -> list[Endpoint]:
        if not self.supports_expose:
            return []
        with self._boxes.locked(key) as box:
            try:
                return sorted(self._exposed_ports(box), key=lambda e: e.port)
            finally:
                if box.sandbox is None:
                    self._boxes.forget(box)

    def endpoint(self, key: SandboxKey, port: int) -> Endpoint | None:
        if not self.supports_expose or not isinstance(port, int) or not 1 <= port <= 65535:
            return None
        return self._find_endpoint(key, port)

    def _check_port(self, port: object, exposing: bool = True) -> int:
        return self.options.expose.check_port(port, self._reserved_ports(), exposing)

    def _reserved_ports(self) -> set[int]:
        """Ports in the box that are sandkit's own (the agent's, the egress relay's)."""
        reserved = {self.options.http_port} if self.options.carrier == "http" else set()
        if self.options.egress.enabled:
            reserved.add(self.options.egress.proxy_port)
        return reserved

    def _net_root(self) -> Path:
        """This owner's network state on the provider's machine."""
        root = self.settings.data_root.expanduser().absolute() / ".sandkit" / "net"
        return root / self.name / self.owner

    def _egress_file(self, key: SandboxKey) -> Path:
        return self._net_root() / "keys" / f"{key.sandbox_id}.json"

    def _enforced_egress(self, key: SandboxKey) -> dict[str, Any]:
        """What the enforcing component gets for the key's box (the ceiling's denials added)."""
        return self.options.egress.enforced(self._key_egress(key))

    # -- the kit's own steps ---------------------------------------------------------------

    def _describe(self, handle: Any) -> str:
        return f"{self.name} box {getattr(handle, 'name', handle)}"

    def _drop(self, key: SandboxKey, remove: bool) -> None:
        with self._boxes.locked(key) as box:
            self._stop_locked(box, remove)
            if remove and self.supports_egress:
                netstate.remove(self._egress_file(key))
        self._boxes.forget(box)

    def _stop_locked(self, box: B, remove: bool) -> None:
        if not remove and not self._stop_ends_processes():
            self._end_processes(box)
        self._close_box(box)
        what = f"{'removing' if remove else 'stopping'} sandbox {box.key.sandbox_id}"
        try:
            with_retries(lambda: self._stop_box(box, remove), what)
        finally:
            box.dead = True

    @contextlib.contextmanager
    def _starting(self) -> Iterator[None]:
        """Around creating a box: CAPACITY when one more would pass `max_running`, and no
        other start of this instance in between (the new box must count when it ends)."""
        if not self.options.max_running:
            yield
            return
        with self._capacity_lock:
            self._check_capacity()
            yield

    def _check_capacity(self) -> None:
        """CAPACITY when starting one more box would pass `max_running`."""
        cap = self.options.max_running
        if not cap:
            return
        running = self._count_running()
        while running >= cap and self._pool is not None and self._pool.give_up_one():
            running = self._count_running()  # a pool box made room for this start
        if running >= cap:
            raise SandboxError(
                ErrorCode.CAPACITY,
                f"{running} sandboxes are running, the limit (max_running) is {cap}",
            )

    def _claim_from_pool(self, box: B) -> BoxSandbox | None:
        """For a key without a box and without thread data: a pool box, made the key's."""
        pool = self._pool
        if pool is None or not pool.ready_count() or self._layout(box.key).user_data_dir.exists():
            return None
        claimed = pool.claim(box.key)
        if claimed is None:
            return None
        record, sandbox = claimed
        record.key = box.key
        record.sandbox = sandbox
        self._boxes.replace(box, record)
        sandbox.last_used = time.monotonic()
        return sandbox

    def _pool_open(self, slot: str, start: bool) -> tuple[B, BoxSandbox] | None:
        """A pool box's record with an open, answering channel (started or adopted); None
        when the box to adopt is not a pool box any more (claimed or removed meanwhile)."""
        record = self._record_class(key=pool_key(slot))
        if start:
            with self._capacity_lock:
                if not self._pool_room():
                    raise SandboxError(ErrorCode.CAPACITY, "max_running is reached")
                self._pool_start(slot, record)
        elif not self._pool_attach(slot, record):
            return None
        if self.options.carrier == "http":
            self._ensure_http_agent(record)
        sandbox = record.sandbox = self._new_sandbox(record)
        try:
            sandbox.ping(timeout=self.handshake_timeout_s)
        except BaseException:
            sandbox.close()
            raise
        return record, sandbox

    def _pool_room(self) -> bool:
        cap = self.options.max_running
        return not cap or self._count_running() < cap

    def _layout(self, key: SandboxKey) -> ThreadLayout:
        return ThreadLayout.for_key(self.settings, key)

    def _agent_config(self, key: SandboxKey) -> dict[str, Any]:
        """The agent's `initialize` config: the jail as the box sees it, limits, secrets."""
        return agent_config(
            box_mapping(self._layout(key), self._hidden_paths()),
            self.limits,
            execute_enabled=self.options.execute_enabled,
            secrets=self.settings.secret_values(),
            scrubbed_env=tuple(self.settings.scrubbed_env),
            rg_path=self._box_rg_path(),
            env=self._command_env(),
        )

    def _command_env(self) -> dict[str, str]:
        """Variables every command in a box gets: the egress proxy's, when egress is on."""
        return self.options.egress.command_env() if self.supports_egress else {}

    def _new_sandbox(self, box: B) -> BoxSandbox:
        transport: Transport
        if self.options.carrier == "http":
            transport = SlotTransport(box.http, box.key.sandbox_id)
        else:
            transport = StdioTransport(
                lambda: self._open_channel(box),
                self._agent_config(box.key),
                open_timeout=self.handshake_timeout_s,
                name=f"sandkit-{self.name}-{box.key.sandbox_id}",
            )
        return self.sandbox_class(
            box.key, transport, limits=self.limits, on_unavailable=lambda: _suspect(box)
        )

    def _open_channel(self, box: B) -> ByteStream:
        """The stdio transport's opener: a new agent in the box, unless it is known gone."""
        if box.dead:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"sandbox {box.key.sandbox_id} is not running; acquire it again",
            )
        stream = self._open_stream(box)
        box.stream = stream
        return stream

    def _answers(self, sandbox: BoxSandbox) -> bool:
        """carrier http: nothing tells us the agent or its box died, so ask it."""
        if self.options.carrier != "http":
            return True  # the channel's end of stream already says so
        try:
            sandbox.ping(timeout=HTTP_PROBE_TIMEOUT_S)
        except SandboxError:
            return False
        return True

    def _ensure_http_agent(self, box: B) -> None:
        """An HTTP agent in the running box that answers to a token we hold: the current
        one, one whose token we can derive (`token_secret`), or a new one."""
        url = self._agent_url(box)
        slot = box.http
        frame = max_frame_bytes(self.limits)
        secret = self.options.token_secret
        secret_value = secret.get_secret_value() if secret is not None else None
        candidates = []
        if slot.transport is not None and slot.transport.base_url == url:
            candidates.append(slot.transport)
        if secret_value is not None:
            token = make_token(self._box_uid(box), secret_value)
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
        token = make_token(self._box_uid(box), secret_value)
        exit_code = self._launch_http_agent(box, self._agent_config(box.key), token)
        transport = HttpTransport(url, token, max_frame_bytes=frame)
        try:
            wait_ready(transport, exit_code or _still_running)
        except BaseException:
            transport.close()
            raise
        slot.replace(transport)


def _suspect(box: BoxRecord) -> None:
    box.suspect = True


def _still_running() -> int | None:
    return None
