"""JSON-RPC over one long-lived byte stream to `agent.pyz --stdio`.

Many requests share the channel: each carries an id, a reader thread
completes the matching waiter (a threading event for sync callers, an
asyncio future for async ones — no thread per call). When the channel
drops, its in-flight requests fail and the next call opens a new one.

Retry rules (the user-visible part, also in docs/agent.md):
- a request whose frame could not be written is sent again once on a fresh
  channel (the agent never saw it complete);
- a request in flight when the channel dropped is sent again once only if
  it changes nothing (read_file, read_bytes, list_dir, glob, grep); writes,
  edits and commands fail with UNAVAILABLE, since they may have happened;
- a channel that cannot be (re)opened is UNAVAILABLE at once.
A call that outlives its deadline fails with TIMEOUT; the channel is then
pinged, and closed if the agent does not answer (so the next call starts a
fresh agent instead of waiting on a hung one).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..agent import PROTOCOL_VERSION
from ..agent import protocol as p
from ..errors import ErrorCode, SandboxError
from ..runtime.limits import Limits
from .base import StreamCall, Transport, TransportClosed, retryable, timed_out, unavailable
from .streams import ByteStream, StreamOpener

INLINE_WRITE_BYTES = 64 * 1024
# The agent answers `sleep` on its reading thread, at once; this only bounds a wedged one.
SLEEP_ANSWER_S = 10.0


class _Dropped(Exception):
    """The channel went away before the answer came."""


class _Waiter:
    """Where the reader thread puts one response."""

    def resolve(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    def drop(self, reason: str) -> None:
        raise NotImplementedError


class _SyncWaiter(_Waiter):
    __slots__ = ("_event", "dropped", "message")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.message: dict[str, Any] | None = None
        self.dropped: str | None = None

    def resolve(self, message: dict[str, Any]) -> None:
        self.message = message
        self._event.set()

    def drop(self, reason: str) -> None:
        self.dropped = reason
        self._event.set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(max(timeout, 0.0))


class _AsyncWaiter(_Waiter):
    __slots__ = ("future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[dict[str, Any]] = loop.create_future()

    def resolve(self, message: dict[str, Any]) -> None:
        self._complete(message, None)

    def drop(self, reason: str) -> None:
        self._complete(None, _Dropped(reason))

    def _complete(self, message: dict[str, Any] | None, error: BaseException | None) -> None:
        def complete() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(message)  # type: ignore[arg-type]

        # A closed loop means nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(complete)


class _StreamWaiter(_Waiter):
    """A streaming request's events and its final response, in arrival order."""

    def __init__(self) -> None:
        self.items: queue.Queue[tuple[str, Any]] = queue.Queue()

    def event(self, params: dict[str, Any]) -> None:
        self.items.put(("event", params))

    def resolve(self, message: dict[str, Any]) -> None:
        self.items.put(("final", message))

    def drop(self, reason: str) -> None:
        self.items.put(("dropped", reason))


class _WakeWaiter(_Waiter):
    """The answer to the `initialize` that wakes a sleeping agent: a fresh agent that
    cannot take it closes the channel (its requests then fail or go to a new agent)."""

    def __init__(self, channel: _Channel) -> None:
        self._channel = channel

    def resolve(self, message: dict[str, Any]) -> None:
        result = message.get("result")
        if "error" in message:
            reason = p.error_from_wire(message["error"]).message
        elif not isinstance(result, dict) or result.get("protocol_version") != PROTOCOL_VERSION:
            reason = "protocol mismatch"
        else:
            return
        self._channel.kill(f"the agent did not wake up: {reason}")

    def drop(self, reason: str) -> None:
        pass


class _StdioStream(StreamCall):
    def __init__(
        self,
        transport: StdioTransport,
        channel: _Channel,
        request_id: int,
        waiter: _StreamWaiter,
        method: str,
        timeout: float,
    ) -> None:
        self._transport = transport
        self._channel = channel
        self._id = request_id
        self._waiter = waiter
        self._method = method
        self._timeout = timeout
        self._deadline = time.monotonic() + timeout
        self._done = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            while not self._done:
                try:
                    kind, value = self._waiter.items.get(
                        timeout=max(self._deadline - time.monotonic(), 0.0)
                    )
                except queue.Empty:
                    self.cancel()
                    raise timed_out(self._method, self._timeout) from None
                if kind == "event":
                    yield {"event": {k: v for k, v in value.items() if k != "id"}}
                    continue
                if kind == "cancelled":
                    return
                self._done = True
                if kind == "dropped":
                    raise self._transport._lost(self._method, str(value))
                yield {"result": _result(value)}
        finally:
            self.cancel()

    def cancel(self) -> None:
        if self._done:
            return
        self._done = True
        self._channel.unregister(self._id)
        self._waiter.items.put(("cancelled", None))  # wakes a reader blocked on the queue
        notice = {"jsonrpc": "2.0", "method": p.CANCEL, "params": {"id": self._id}}
        with contextlib.suppress(_Dropped):
            self._channel.send(p.frame(notice))


class _Channel:
    """One open stream, its reader thread and its in-flight requests."""

    def __init__(
        self,
        stream: ByteStream,
        max_frame: int,
        name: str,
        wake: Callable[[_Channel], bytes] | None = None,
    ) -> None:
        self.stream = stream
        self.max_frame = max_frame
        self.alive = True
        self.reason = ""
        self.probing = False
        # The agent sleeps (answered `sleep`): the next frame written must be `initialize`
        # for the fresh agent that frame wakes; `wake` makes that frame.
        self.asleep = False
        self._wake = wake
        self.write_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[int, _Waiter] = {}
        self._agent_said = ""
        self._reader = threading.Thread(target=self._read_loop, name=name, daemon=True)

    def start(self) -> None:
        self._reader.start()

    def register(self, request_id: int, waiter: _Waiter) -> bool:
        with self._lock:
            if not self.alive:
                return False
            self._pending[request_id] = waiter
            return True

    def unregister(self, request_id: int) -> None:
        with self._lock:
            self._pending.pop(request_id, None)

    def send(self, data: bytes) -> None:
        with self.write_lock:
            self.send_locked(data)

    def send_locked(self, data: bytes) -> None:
        """Write a whole frame; the caller holds `write_lock`."""
        if not self.alive:
            raise _Dropped(self.reason)
        try:
            if self.asleep and self._wake is not None:
                self.asleep = False
                self.stream.write(self._wake(self))
            self.stream.write(data)
        except (OSError, EOFError, ValueError) as exc:
            self.kill("writing to the agent failed: %s" % (exc or type(exc).__name__))
            raise _Dropped(self.reason) from None

    @property
    def idle(self) -> bool:
        with self._lock:
            return self.alive and not self._pending

    def kill(self, reason: str) -> None:
        """Mark dead, fail every waiter, release the stream (idempotent)."""
        with self._lock:
            if not self.alive:
                return
            self.alive = False
            self.reason = reason
            pending = list(self._pending.values())
            self._pending.clear()
        for waiter in pending:
            waiter.drop(reason)
        with contextlib.suppress(Exception):  # closing is best effort
            self.stream.close()

    def _read_loop(self) -> None:
        reader = p.FrameReader(self.stream.read, self.max_frame)
        reason = "the agent closed the channel"
        try:
            while True:
                item = reader.next()
                if item is None:
                    break
                if isinstance(item, p.Oversized):
                    self._route_error(
                        p.find_id(item.head),
                        SandboxError(
                            ErrorCode.TOO_LARGE,
                            f"the agent's answer is larger than {item.limit} bytes",
                        ),
                    )
                elif item.strip():
                    self._route(item)
        except Exception as exc:
            reason = f"reading from the agent failed: {exc or type(exc).__name__}"
        if self._agent_said:
            reason = f"{reason}: {self._agent_said}"
        extra = self.stream.exit_detail()
        if extra:
            reason = f"{reason} ({extra})"
        self.kill(reason)

    def _route(self, data: bytes) -> None:
        try:
            message = json.loads(data)
        except ValueError:
            self._route_error(
                p.find_id(data), SandboxError(ErrorCode.INTERNAL, "the agent sent malformed JSON")
            )
            return
        if not isinstance(message, dict):
            return
        request_id = message.get("id")
        if request_id is None and message.get("method") == p.EVENT:
            params = message.get("params")
            target = params.get("id") if isinstance(params, dict) else None
            with self._lock:
                listener = self._pending.get(target) if isinstance(target, int) else None
            if isinstance(listener, _StreamWaiter):
                listener.event(params)  # type: ignore[arg-type]
            return
        with self._lock:
            waiter = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if waiter is not None:
            waiter.resolve(message)
        elif request_id is None and "error" in message:
            # An error about no request in particular, e.g. the agent's start
            # check failing; kept to explain the channel closing right after.
            self._agent_said = p.error_from_wire(message["error"]).message

    def _route_error(self, request_id: Any, error: SandboxError) -> None:
        with self._lock:
            waiter = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if waiter is not None:
            waiter.resolve(p.error_response(request_id, p.SANDBOX_ERROR, error))


def _result(message: dict[str, Any]) -> Any:
    if "error" in message:
        raise p.error_from_wire(message["error"])
    return message.get("result")


class StdioTransport(Transport):
    """Talks to `agent.pyz --stdio` through streams made by `opener`.

    `config` is the `initialize` params (`sandkit.agent.protocol.agent_config`);
    it is sent first on every new channel.
    """

    def __init__(
        self,
        opener: StreamOpener,
        config: Mapping[str, Any],
        *,
        open_timeout: float = 30.0,
        probe_timeout: float = 5.0,
        name: str = "sandkit-agent",
    ) -> None:
        self._opener = opener
        self._config = dict(config)
        limits = Limits.from_dict(dict(self._config.get("limits") or {}))
        self._send_limit = p.max_frame_bytes(limits)
        self._receive_limit = self._send_limit + p.FRAME_SLACK_BYTES
        self.open_timeout = open_timeout
        self.probe_timeout = probe_timeout
        self.name = name
        self.agent_info: dict[str, Any] | None = None
        self._ids = itertools.count(1)
        self._open_lock = threading.Lock()
        self._channel: _Channel | None = None
        self._closed = False

    # -- channel ------------------------------------------------------------

    def _live_channel(self) -> _Channel | None:
        channel = self._channel
        return channel if channel is not None and channel.alive else None

    def _ensure_channel(self) -> _Channel:
        channel = self._live_channel()
        if channel is not None:
            return channel
        with self._open_lock:
            if self._closed:
                raise TransportClosed()
            channel = self._live_channel()
            if channel is None:
                channel = self._open()
                self._channel = channel
            return channel

    def _open(self) -> _Channel:
        try:
            stream = self._opener()
        except SandboxError as exc:
            raise unavailable(f"could not start the agent: {exc.message}") from None
        except Exception as exc:
            raise unavailable(f"could not start the agent: {exc}") from None
        channel = _Channel(stream, self._receive_limit, self.name, self._wake_frame)
        channel.start()
        try:
            info = self._exchange(channel, "initialize", self._config, self.open_timeout)
        except _Dropped as exc:
            channel.kill("initialize failed")
            raise unavailable(f"the agent did not start: {exc}") from None
        except SandboxError as exc:
            channel.kill("initialize failed")
            raise unavailable(f"initialize failed: {exc}") from None
        version = info.get("protocol_version") if isinstance(info, dict) else None
        if version != PROTOCOL_VERSION:
            channel.kill("protocol mismatch")
            raise unavailable(
                f"the agent speaks protocol {version!r}, this client {PROTOCOL_VERSION}"
            )
        self.agent_info = info
        return channel

    def _frame(self, request_id: int, method: str, params: Mapping[str, Any]) -> bytes:
        return p.frame(p.request(request_id, method, params))

    def _wake_frame(self, channel: _Channel) -> bytes:
        request_id = next(self._ids)
        channel.register(request_id, _WakeWaiter(channel))
        return self._frame(request_id, "initialize", self._config)

    def sleep(self, timeout: float = SLEEP_ANSWER_S) -> bool:
        """Ask an idle agent to sleep (agent/dormant.py); True if it does. Nothing else is
        written on the channel until the answer: after `sleeping: true`, the next frame
        is the `initialize` that the woken agent needs (see `_Channel.send_locked`)."""
        channel = self._live_channel()
        if channel is None or channel.asleep:
            return False
        with channel.write_lock:
            if not channel.alive or channel.asleep:
                return False
            request_id = next(self._ids)
            waiter = _SyncWaiter()
            if not channel.register(request_id, waiter):
                return False
            try:
                channel.send_locked(self._frame(request_id, p.SLEEP, {}))
            except _Dropped:
                return False
            if not waiter.wait(timeout):
                channel.unregister(request_id)
                # Whether it sleeps is unknown, so the channel cannot be trusted.
                channel.kill("the agent did not answer sleep")
                return False
            result = (waiter.message or {}).get("result")
            channel.asleep = isinstance(result, dict) and result.get("sleeping") is True
            return channel.asleep

    def hang_up(self) -> bool:
        """Close an idle channel: the agent ends at the end of its input, and the next call
        opens a fresh channel (as after an agent that died between calls)."""
        channel = self._live_channel()
        if channel is None:
            return False
        with channel.write_lock:  # no frame is half-written, none starts meanwhile
            if not channel.idle:
                return False
            channel.kill("the idle agent was ended; the next call starts one")
        return True

    def _exchange(
        self, channel: _Channel, method: str, params: Mapping[str, Any], timeout: float
    ) -> Any:
        """One request on one channel, no retry. Raises _Dropped or SandboxError."""
        request_id = next(self._ids)
        data = self._frame(request_id, method, params)
        waiter = _SyncWaiter()
        if not channel.register(request_id, waiter):
            raise _Dropped(channel.reason)
        channel.send(data)
        if not waiter.wait(timeout):
            channel.unregister(request_id)
            if method not in p.CONTROL_METHODS:
                self._probe(channel)
            raise timed_out(method, timeout)
        if waiter.dropped is not None:
            raise _Dropped(waiter.dropped)
        return _result(waiter.message or {})

    def _probe(self, channel: _Channel) -> None:
        """After a timeout: close the channel if the agent stopped answering."""
        if channel.probing or not channel.alive:
            return
        channel.probing = True

        def probe() -> None:
            try:
                self._exchange(channel, "ping", {}, self.probe_timeout)
            except (_Dropped, SandboxError):
                channel.kill("the agent stopped answering (no reply to ping)")
            finally:
                channel.probing = False

        threading.Thread(target=probe, name=self.name + "-probe", daemon=True).start()

    # -- calls ----------------------------------------------------------------

    def _check_size(self, method: str, params: Mapping[str, Any]) -> bytes:
        try:
            body = p.dumps({"method": method, "params": params})
        except (TypeError, ValueError) as exc:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT, f"arguments of {method} are not JSON: {exc}"
            ) from None
        if len(body) > self._send_limit:
            raise SandboxError(
                ErrorCode.TOO_LARGE,
                f"the {method} request is {len(body)} bytes, over the frame limit of "
                f"{self._send_limit}",
            )
        return body

    def _request_frame(self, request_id: int, body: bytes) -> bytes:
        # `body` is '{"method":...,"params":...}'; the id goes first (see find_id).
        return b'{"jsonrpc":"2.0","id":%d,%s\n' % (request_id, body[1:])

    def call(self, method: str, params: dict[str, Any], timeout: float) -> Any:
        body = self._check_size(method, params)
        deadline = time.monotonic() + timeout
        for attempt in (1, 2):
            channel = self._ensure_channel()
            request_id = next(self._ids)
            waiter = _SyncWaiter()
            try:
                try:
                    if not channel.register(request_id, waiter):
                        raise _Dropped(channel.reason)
                    channel.send(self._request_frame(request_id, body))
                except _Dropped as exc:
                    if attempt == 1:
                        continue  # never reached the agent whole: safe to resend
                    raise unavailable(f"the agent is unreachable ({exc})") from None
                if not waiter.wait(deadline - time.monotonic()):
                    channel.unregister(request_id)
                    self._probe(channel)
                    raise timed_out(method, timeout)
                if waiter.dropped is not None:
                    raise _Dropped(waiter.dropped)
            except _Dropped as exc:
                if attempt == 1 and retryable(method):
                    continue
                raise self._lost(method, str(exc)) from None
            return _result(waiter.message or {})
        raise AssertionError("unreachable")

    async def acall(self, method: str, params: dict[str, Any], timeout: float) -> Any:
        body = self._check_size(method, params)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for attempt in (1, 2):
            live = self._live_channel()
            channel = live if live is not None else await asyncio.to_thread(self._ensure_channel)
            request_id = next(self._ids)
            waiter = _AsyncWaiter(loop)
            try:
                try:
                    if not channel.register(request_id, waiter):
                        raise _Dropped(channel.reason)
                    await self._asend(channel, self._request_frame(request_id, body))
                except _Dropped as exc:
                    channel.unregister(request_id)
                    if attempt == 1:
                        continue  # never reached the agent whole: safe to resend
                    raise unavailable(f"the agent is unreachable ({exc})") from None
                try:
                    message = await asyncio.wait_for(waiter.future, deadline - loop.time())
                except TimeoutError:
                    channel.unregister(request_id)
                    self._probe(channel)
                    raise timed_out(method, timeout) from None
                except asyncio.CancelledError:
                    channel.unregister(request_id)
                    raise
            except _Dropped as exc:
                if attempt == 1 and retryable(method):
                    continue
                raise self._lost(method, str(exc)) from None
            return _result(message)
        raise AssertionError("unreachable")

    def open_stream(self, method: str, params: dict[str, Any], timeout: float) -> StreamCall:
        body = self._check_size(method, params)
        for attempt in (1, 2):
            channel = self._ensure_channel()
            request_id = next(self._ids)
            waiter = _StreamWaiter()
            try:
                if not channel.register(request_id, waiter):
                    raise _Dropped(channel.reason)
                channel.send(self._request_frame(request_id, body))
            except _Dropped as exc:
                if attempt == 1:
                    continue  # never reached the agent whole: safe to resend
                raise unavailable(f"the agent is unreachable ({exc})") from None
            return _StdioStream(self, channel, request_id, waiter, method, timeout)
        raise AssertionError("unreachable")

    async def _asend(self, channel: _Channel, data: bytes) -> None:
        # Small frames are written inline when the channel is free; big ones
        # (or a busy channel) in a thread, so the event loop never blocks.
        if len(data) <= INLINE_WRITE_BYTES and channel.write_lock.acquire(blocking=False):
            try:
                channel.send_locked(data)
            finally:
                channel.write_lock.release()
        else:
            await asyncio.to_thread(channel.send, data)

    def _lost(self, method: str, reason: str) -> SandboxError:
        if self._closed:
            return TransportClosed()
        if retryable(method):
            return unavailable(f"the agent is unreachable ({reason})")
        return unavailable(
            f"the channel to the agent dropped while {method} was running ({reason}); "
            "it may or may not have taken effect, so it was not repeated"
        )

    def close(self) -> None:
        with self._open_lock:
            self._closed = True
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.kill("the transport was closed")
