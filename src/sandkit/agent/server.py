"""Carrier-independent request handling: one JSON-RPC message in, one out.

The stdio and HTTP carriers only move bytes; checking requests, the
`initialize` handshake, dispatching to the shared `Runtime` and turning
every failure into a JSON-RPC error with a stable `ErrorCode` happen here.
"""

from __future__ import annotations

import os
import sys
import threading

from ..runtime.errors import ErrorCode, SandboxError
from . import AGENT_VERSION, PROTOCOL_VERSION
from . import protocol as p

# Not `typing`: an agent loads only what its first answer needs (docs/benchmarks.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, FrozenSet, List, Optional

    from ..runtime.context import Context

    # Builds the object whose `call(method, params)` runs an operation.
    RuntimeFactory = Callable[[Context], Any]


def log(message: str) -> None:
    """Diagnostics go to stderr only (stdout is the protocol channel)."""
    try:
        sys.stderr.write("sandkit-agent: %s\n" % message)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _default_runtime(context: Context) -> Any:
    from ..runtime.service import Runtime

    return Runtime(context)


def _operation_names() -> FrozenSet[str]:
    from ..runtime.operations import OPERATIONS

    return frozenset(OPERATIONS)


class Request:
    """A checked request; `notify` requests (no id) get no response."""

    __slots__ = ("id", "method", "notify", "params")

    def __init__(
        self, id: p.RequestId, method: str, params: Dict[str, Any], notify: bool = False
    ) -> None:
        self.id = id
        self.method = method
        self.params = params
        self.notify = notify

    def __repr__(self) -> str:
        return "Request(id=%r, method=%r, params=%r, notify=%r)" % (
            self.id,
            self.method,
            self.params,
            self.notify,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Request) or other.__class__ is not self.__class__:
            return NotImplemented
        return (self.id, self.method, self.params, self.notify) == (
            other.id,
            other.method,
            other.params,
            other.notify,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value


class BadRequest(Exception):
    def __init__(self, response: Dict[str, Any]) -> None:
        super().__init__(response["error"]["message"])
        self.response = response


class AgentCore:
    """The agent's state (one Context once initialized) and its dispatcher."""

    def __init__(
        self,
        context: Optional[Context] = None,
        allow_initialize: bool = True,
        runtime_factory: RuntimeFactory = _default_runtime,
        operations: Optional[FrozenSet[str]] = None,
        config: Optional[Dict[str, Any]] = None,
        supervisor: Optional[List[str]] = None,
    ) -> None:
        """`supervisor` is the argv of this agent program: with it, background processes
        go to the box's supervisor (started from it when needed, see runtime/procd.py);
        `config` is the config `context` was built from (it keys the supervisor)."""
        self._lock = threading.Lock()
        self._allow_initialize = allow_initialize
        self._runtime_factory = runtime_factory
        self._operations = operations
        self._supervisor = supervisor
        self._streams: Dict[Any, Any] = {}
        self.activity = Activity()
        self._warming: List[threading.Thread] = []
        self.context: Optional[Context] = None
        self._runtime: Any = None
        if context is not None:
            self._install(context, config)

    @property
    def operations(self) -> FrozenSet[str]:
        if self._operations is None:
            self._operations = _operation_names()
        return self._operations

    @property
    def max_frame_bytes(self) -> int:
        context = self.context
        if context is None:
            return p.PRE_INITIALIZE_FRAME_BYTES
        return p.max_frame_bytes(context.limits)

    def _install(self, context: Context, config: Optional[Dict[str, Any]]) -> None:
        if context.execute_enabled:
            from ..runtime.appkernel import bound_processes

            bound_processes(context.limits)  # gVisor only: see runtime/appkernel.py
        if self._supervisor is not None and config is not None and context.execute_enabled:
            from ..runtime.procd import ProcdClient

            client = ProcdClient(context, config, self._supervisor)
            context = context.replace(processes=client)
        self._runtime = self._runtime_factory(context)
        self.context = context
        # The operations' modules load on first use, so the answer to initialize does not
        # wait for them; this loads the rest meanwhile (a first grep then costs what a
        # later one does, docs/benchmarks.md).
        warming = threading.Thread(
            target=_warm_up,
            args=(context, self.activity),
            name="sandkit-agent-warm",
            daemon=True,
        )
        warming.start()
        self._warming.append(warming)

    def close(self) -> None:
        """Stop the warm-up, and the ready shell with a start it may be in, before the
        program ends or becomes the dormant waiter (idempotent). The interpreter's
        shutdown frees what an import still running on another thread waits on: a warm-up
        cut off mid-import crashed the agent on exit (SIGSEGV in sem_wait, ~1 in 1,000
        stdio channels closed right after initialize), and one cut off mid-grep left its
        sample in the box's temporary directory."""
        self.activity.close()
        for warming in self._warming:
            warming.join(WARM_UP_STOP_S)
        if self.context is not None:
            self.context.calls.ready.close()

    # -- parsing ------------------------------------------------------------

    def parse(self, raw: Any) -> Request:
        """Check a decoded JSON value; raise BadRequest with the error response."""
        if isinstance(raw, list):
            raise BadRequest(
                self._error(None, p.INVALID_REQUEST, "batch requests are not supported")
            )
        if not isinstance(raw, dict):
            raise BadRequest(
                self._error(None, p.INVALID_REQUEST, "a request must be a JSON object")
            )
        notify = "id" not in raw
        request_id = raw.get("id")
        if request_id is not None and (
            isinstance(request_id, bool) or not isinstance(request_id, (int, str))
        ):
            raise BadRequest(self._error(None, p.INVALID_REQUEST, "id must be a string or integer"))
        if raw.get("jsonrpc") != p.JSONRPC:
            raise BadRequest(self._error(request_id, p.INVALID_REQUEST, 'jsonrpc must be "2.0"'))
        method = raw.get("method")
        if not isinstance(method, str):
            raise BadRequest(self._error(request_id, p.INVALID_REQUEST, "method must be a string"))
        params = raw.get("params", {})
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise BadRequest(
                self._error(request_id, p.INVALID_PARAMS, "params must be an object (by name)")
            )
        return Request(request_id, method, params, notify)

    def parse_frame(self, data: bytes) -> Request:
        import json

        try:
            raw = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise BadRequest(
                self._error(p.find_id(data), p.PARSE_ERROR, "malformed JSON frame")
            ) from None
        return self.parse(raw)

    def oversized(self, marker: p.Oversized) -> Dict[str, Any]:
        return p.error_response(
            p.find_id(marker.head),
            p.INVALID_REQUEST,
            SandboxError(
                ErrorCode.TOO_LARGE,
                "request is larger than the agent's frame limit of %d bytes" % marker.limit,
            ),
        )

    @staticmethod
    def _error(request_id: p.RequestId, rpc_code: int, message: str) -> Dict[str, Any]:
        return p.error_response(
            request_id, rpc_code, SandboxError(ErrorCode.INVALID_ARGUMENT, message)
        )

    # -- dispatch -----------------------------------------------------------

    def is_control(self, request: Request) -> bool:
        return request.method in p.CONTROL_METHODS

    def handle(self, request: Request) -> Optional[Dict[str, Any]]:
        """Run one request; the response dict, or None for a notification."""
        if request.notify:
            # Notifications get no answer, so nothing is run for them either.
            return None
        counted = request.method not in p.SLOW_METHODS
        if counted:
            self.activity.enter()
        try:
            result = self._dispatch(request)
        except SandboxError as exc:
            rpc_code = p.SANDBOX_ERROR
            if exc.code is ErrorCode.INVALID_ARGUMENT and request.method not in self._known():
                rpc_code = p.METHOD_NOT_FOUND
            # Already masked and redacted: the runtime cleans every error it raises.
            return p.error_response(request.id, rpc_code, exc)
        except _NotInitialized:
            return p.error_response(
                request.id,
                p.NOT_INITIALIZED,
                SandboxError(
                    ErrorCode.INVALID_ARGUMENT,
                    "the agent is not initialized: send initialize first",
                ),
            )
        except Exception as exc:
            return self.internal_error(request, exc)
        finally:
            if counted:
                self.activity.leave()
        return p.result_response(request.id, result)

    def is_stream(self, request: Request) -> bool:
        return request.method in p.STREAM_METHODS and not request.notify

    def run_stream(
        self, request: Request, send: Callable[[bytes], None]
    ) -> Optional[Dict[str, Any]]:
        """Run a streaming request: each event goes out through `send` (one frame) as it
        happens; returns the final response, or None when the client went away (a failed
        send or a cancel ends the command)."""
        from ..runtime.cancel import Cancel, Cancelled

        runtime = self._runtime
        if runtime is None:
            return self.handle(request)  # the usual not-initialized answer
        cancel = Cancel()
        with self._lock:
            self._streams[request.id] = cancel

        def emit(payload: Dict[str, Any]) -> None:
            if cancel.is_set():
                return
            try:
                send(p.dumps(p.event(request.id, payload)))
            except (OSError, ValueError):
                cancel.set()  # nobody reads the events any more: end the command

        try:
            result = runtime.stream(request.method, request.params, emit, cancel)
        except Cancelled:
            return None
        except SandboxError as exc:
            return p.error_response(request.id, p.SANDBOX_ERROR, exc)
        except Exception as exc:
            return self.internal_error(request, exc)
        finally:
            with self._lock:
                self._streams.pop(request.id, None)
            cancel.close()
        return p.result_response(request.id, result)

    def cancel(self, request: Request) -> None:
        """The client gave up on a running stream: end its command (unknown ids: nothing)."""
        with self._lock:
            cancel = self._streams.get(request.params.get("id"))
        if cancel is not None:
            cancel.set()

    def internal_error(self, request: Request, exc: BaseException) -> Dict[str, Any]:
        # The traceback names files of this process; it goes to the log, and
        # the caller gets only the exception type.
        import traceback

        log(
            "internal error in %s:\n%s"
            % (
                request.method,
                "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            )
        )
        return p.error_response(
            request.id,
            p.INTERNAL_ERROR,
            SandboxError(
                ErrorCode.INTERNAL,
                "internal error in %s (%s); details are in the agent's log"
                % (request.method, type(exc).__name__),
            ),
        )

    def encode(self, request: Request, response: Dict[str, Any]) -> bytes:
        """Serialise a response; a result that is not JSON becomes INTERNAL."""
        try:
            return p.dumps(response)
        except (TypeError, ValueError) as exc:
            return p.dumps(self.internal_error(request, exc))

    def _known(self) -> FrozenSet[str]:
        return self.operations | p.CONTROL_METHODS

    def _dispatch(self, request: Request) -> Any:
        method = request.method
        if method == "initialize":
            return self._initialize(request.params)
        if method == "ping":
            return {"pong": True}
        if method == p.SLEEP:
            return {"sleeping": False}  # a carrier that can sleep answers it itself
        if method == "info":
            return self.info()
        runtime = self._runtime
        if runtime is None:
            if method not in self.operations:
                raise SandboxError(ErrorCode.INVALID_ARGUMENT, "unknown operation %r" % method)
            raise _NotInitialized()
        # The runtime checks the method and its params (the same checks as in-process).
        params = p.decode_params(method, request.params)
        return p.encode_result(method, runtime.call(method, params))

    def _initialize(self, params: Dict[str, Any]) -> Dict[str, Any]:
        if not self._allow_initialize:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT,
                "this agent was configured at start (--config); initialize is not accepted",
            )
        with self._lock:
            if self.context is not None:
                raise SandboxError(ErrorCode.INVALID_ARGUMENT, "the agent is already initialized")
            self._install(p.context_from_config(params), params)
        return {
            "agent_version": AGENT_VERSION,
            "protocol_version": PROTOCOL_VERSION,
            "python": _python_version(),
        }

    def info(self) -> Dict[str, Any]:
        context = self.context
        rg_path = context.rg_path if context is not None else None
        return {
            "agent_version": AGENT_VERSION,
            "protocol_version": PROTOCOL_VERSION,
            "python": _python_version(),
            "initialized": context is not None,
            "execute_enabled": bool(context and context.execute_enabled),
            "rg_available": bool(rg_path) and os.access(str(rg_path), os.X_OK),
            "pid": os.getpid(),
        }


class _NotInitialized(Exception):
    pass


class Activity:
    """The operations in flight that a caller is waiting on (not commands or long polls:
    those wait on a process, not on this interpreter). The warm-up thread steps aside while
    there are any: a first grep that met it mid-step shared the interpreter with it and
    took twice a warm one's time, and up to 130 ms (docs/benchmarks.md)."""

    def __init__(self) -> None:
        self._count = 0
        self._closed = False
        self._changed = threading.Condition()

    def enter(self) -> None:
        with self._changed:
            self._count += 1

    def leave(self) -> None:
        with self._changed:
            self._count -= 1
            self._changed.notify_all()

    def wait_quiet(self, timeout: Optional[float] = None) -> bool:
        """Block until no operation is in flight; False if `timeout` passed first, or once
        the agent is closing (whoever waits has nothing more to do)."""
        with self._changed:
            quiet = self._changed.wait_for(lambda: self._count == 0 or self._closed, timeout)
            return quiet and not self._closed

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()


# How long a thread waits for the interpreter while the warm-up holds it (Python's default
# is 5 ms): an operation that comes during a warm-up step waits this long for each of its
# turns, not 5 ms (a new box's first command took 10 ms more than a later one).
WARM_UP_SWITCH_S = 0.0002
# What it goes back to: the interpreter's own, read before any warm-up (two that overlap,
# after a second `initialize`, must not leave the short one behind).
_SWITCH_S = sys.getswitchinterval()
# How long a closing agent waits for the warm-up's step in progress (a module's import,
# or ripgrep's first run on a small sample, bounded by its own timeout).
WARM_UP_STOP_S = 30.0


def _warm_up(context: Context, activity: Activity) -> None:
    sys.setswitchinterval(WARM_UP_SWITCH_S)
    try:
        _warm_up_steps(context, activity)
    finally:
        sys.setswitchinterval(_SWITCH_S)


def _warm_up_steps(context: Context, activity: Activity) -> None:
    """Load what operations need, one step at a time and only while none is running: the
    stdio carrier's worker pools (made at the first operation); the search, which a first
    grep pays for the most (its modules, `subprocess` included, and the Unicode tables);
    the commands' module; ripgrep's first run and the first assembly and encoding of
    matches, unless a grep came first; then every other operation's module."""
    from . import workers  # noqa: F401 - the carrier's pools, made at the first operation

    try:
        if not activity.wait_quiet():
            return
        from ..runtime import rxinfo, search

        if not activity.wait_quiet():
            return
        rxinfo.warm()
        if not activity.wait_quiet():
            return
        from ..runtime import process  # noqa: F401

        if not activity.wait_quiet():
            return
        sample = search.warm(context)
        if sample is not None:
            p.dumps(p.result_response(0, p.encode_result("grep", sample)))
    except Exception as exc:
        log("warming up the search and the commands: %s" % exc)
    from ..runtime.operations import OPERATIONS

    for operation in OPERATIONS.values():
        if not activity.wait_quiet():
            return
        try:
            operation.function  # noqa: B018 - imports its module
        except Exception as exc:  # a broken module says so on its first call too
            log("loading %s: %s" % (operation.name, exc))


def _python_version() -> str:
    # Not platform.python_version(): importing `platform` costs ~10 ms of every start.
    return "%d.%d.%d" % sys.version_info[:3]
