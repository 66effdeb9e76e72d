"""The wire format shared by the agent and its clients (stdlib only).

JSON-RPC 2.0 messages, one per line (newline-delimited JSON) on stdio, one
per HTTP body on the HTTP carrier. `docs/agent.md` is the reference; this
module is the single implementation both ends import, so they cannot drift.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from ..runtime.errors import ErrorCode, SandboxError
from ..runtime.limits import MIB
from ..runtime.operations import OPERATIONS

# Not `typing`: an agent loads only what its first answer needs (docs/benchmarks.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Union

    from ..runtime.context import Context
    from ..runtime.limits import Limits
    from ..runtime.pathmap import PathMapping

    RequestId = Union[int, str, None]

JSONRPC = "2.0"

# JSON-RPC 2.0 error codes (the `error.code` field). The stable, provider-wide
# code is always in `error.data.code` (an ErrorCode value); these only say
# which layer refused the message.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SANDBOX_ERROR = -32000
UNAUTHORIZED = -32001
NOT_INITIALIZED = -32002

# Methods the agent answers itself (inline, never queued behind operations).
CONTROL_METHODS = frozenset({"initialize", "ping", "info", "sleep"})
# `sleep` (stdio): the client saw the box idle and sends nothing else until the answer.
# An idle agent answers {"sleeping": true} and replaces itself with a small waiting
# process (agent/dormant.py) that starts a fresh agent when the next frame comes, so the
# client's next frame must be `initialize` again. Otherwise (work running, HTTP):
# {"sleeping": false}. See docs/agent.md#sleep.
SLEEP = "sleep"

# Operations that send events while they run: each is a notification
# {"method": EVENT, "params": {"id": <the request's id>, ...}} on the same channel
# before the response; the client ends one early with the notification
# {"method": CANCEL, "params": {"id": ...}} (or, over HTTP, by closing the response).
STREAM_METHODS = frozenset(name for name, op in OPERATIONS.items() if op.streaming)
EVENT = "event"
CANCEL = "cancel"
# Operations that may wait a long time (commands, long polls): their own worker pool.
SLOW_METHODS = frozenset({"execute", "process_output", "wait_process"} | STREAM_METHODS)

# Operations that change nothing: safe to send again after a dropped channel.
READ_ONLY_METHODS = frozenset(
    {name for name, op in OPERATIONS.items() if op.read_only} | {"ping", "info"}
)

# Binary values travel as {"$b64": "<base64>"} at exactly these places.
BYTES_TAG = "$b64"
BYTES_PARAMS: Dict[str, str] = {
    name: op.bytes_param for name, op in OPERATIONS.items() if op.bytes_param is not None
}
BYTES_RESULTS = frozenset(name for name, op in OPERATIONS.items() if op.bytes_result)

# Frames are bounded so a runaway peer means an error, not an exhausted heap.
FRAME_SLACK_BYTES = MIB
PRE_INITIALIZE_FRAME_BYTES = 4 * MIB


def max_frame_bytes(limits: Limits) -> int:
    """Largest frame a legitimate request or response can need under `limits`.

    base64 grows a transfer by 4/3; write_file content is text that JSON may
    escape to six bytes per input byte (\\u0001) in the worst case.
    """
    biggest = max(limits.transfer_max_bytes * 4 // 3, limits.write_max_bytes * 6)
    return biggest + FRAME_SLACK_BYTES


# -- initialize config ----------------------------------------------------------


def agent_config(
    mapping: PathMapping,
    limits: Optional[Limits] = None,
    execute_enabled: bool = False,
    secrets: Iterable[str] = (),
    scrubbed_env: Iterable[str] = (),
    rg_path: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """The `initialize` params (stdio) or `--config` file content (HTTP).

    `mapping` is the mapping as seen *inside* the box (identity roots for a
    container); `rg_path` is a ripgrep path inside the box, or None; `env`:
    variables every command gets (e.g. the egress proxy's), before the caller's.
    """
    from ..runtime.limits import Limits

    config = {
        "mapping": mapping.to_dict(),
        "limits": (limits or Limits()).to_dict(),
        "execute_enabled": bool(execute_enabled),
        "secrets": [str(s) for s in secrets],
        "scrubbed_env": [str(n) for n in scrubbed_env],
        "rg_path": rg_path,
    }
    if env:
        config["env"] = {str(k): str(v) for k, v in env.items()}
    return config


def context_from_config(config: Any) -> Context:
    """Check an `agent_config` dict received from anywhere and build the Context."""
    from ..runtime.context import Context
    from ..runtime.limits import Limits
    from ..runtime.pathmap import PathMapping

    if not isinstance(config, Mapping):
        raise _invalid("config must be an object")
    unknown = set(config) - {
        "mapping",
        "limits",
        "execute_enabled",
        "secrets",
        "scrubbed_env",
        "rg_path",
        "env",
    }
    if unknown:
        raise _invalid("config has unknown field(s): %s" % ", ".join(sorted(unknown)))
    mapping_data = config.get("mapping")
    if not isinstance(mapping_data, Mapping) or not isinstance(mapping_data.get("mounts"), list):
        raise _invalid("config.mapping must be an object with a mounts list")
    try:
        mapping = PathMapping.from_dict(dict(mapping_data))
    except SandboxError:
        raise
    except (TypeError, ValueError, KeyError) as exc:
        raise _invalid("config.mapping is malformed: %s" % exc) from None
    limits_data = config.get("limits", {})
    if not isinstance(limits_data, Mapping):
        raise _invalid("config.limits must be an object")
    try:
        limits = Limits.from_dict(dict(limits_data))
    except (TypeError, ValueError) as exc:
        raise _invalid("config.limits is malformed: %s" % exc) from None
    execute_enabled = config.get("execute_enabled", False)
    if not isinstance(execute_enabled, bool):
        raise _invalid("config.execute_enabled must be true or false")
    rg_path = config.get("rg_path")
    if rg_path is not None and not isinstance(rg_path, str):
        raise _invalid("config.rg_path must be a string or null")
    env = config.get("env", {})
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
        for k, v in env.items()
    ):
        raise _invalid("config.env must map variable names to strings")
    return Context(
        mapping=mapping,
        limits=limits,
        rg_path=rg_path or None,
        execute_enabled=execute_enabled,
        secrets=_strings(config.get("secrets", []), "config.secrets"),
        scrubbed_env=_strings(config.get("scrubbed_env", []), "config.scrubbed_env"),
        env=tuple(sorted(env.items())),
    )


def _strings(value: Any, what: str) -> Tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _invalid("%s must be a list of strings" % what)
    return tuple(value)


def _invalid(message: str) -> SandboxError:
    return SandboxError(ErrorCode.INVALID_ARGUMENT, message)


# -- bytes ------------------------------------------------------------------------


def encode_bytes(data: Union[bytes, bytearray, memoryview]) -> Dict[str, str]:
    import base64

    return {BYTES_TAG: base64.b64encode(data).decode("ascii")}


def decode_bytes(value: Any) -> Any:
    """Bytes from the tagged form; anything else is returned unchanged.

    Untagged values pass through so the runtime rejects them with the same
    error it gives in-process (e.g. write_bytes with a str).
    """
    if isinstance(value, dict) and len(value) == 1 and BYTES_TAG in value:
        text = value[BYTES_TAG]
        if not isinstance(text, str):
            raise _invalid("%s must hold a base64 string" % BYTES_TAG)
        import base64
        import binascii

        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise _invalid("%s is not valid base64" % BYTES_TAG) from None
    return value


def encode_params(method: str, params: Mapping[str, Any]) -> Dict[str, Any]:
    field = BYTES_PARAMS.get(method)
    out = dict(params)
    if field is not None and isinstance(out.get(field), (bytes, bytearray, memoryview)):
        out[field] = encode_bytes(out[field])
    return out


def decode_params(method: str, params: Dict[str, Any]) -> Dict[str, Any]:
    field = BYTES_PARAMS.get(method)
    if field is not None and field in params:
        params = dict(params)
        params[field] = decode_bytes(params[field])
    return params


def encode_result(method: str, result: Any) -> Any:
    if method in BYTES_RESULTS and isinstance(result, (bytes, bytearray, memoryview)):
        return encode_bytes(result)
    return result


def decode_result(method: str, result: Any) -> Any:
    if method in BYTES_RESULTS:
        return decode_bytes(result)
    return result


# -- messages ---------------------------------------------------------------------


def request(request_id: RequestId, method: str, params: Mapping[str, Any]) -> Dict[str, Any]:
    # "id" comes right after "jsonrpc" so a peer can still find it in the
    # head of a frame too large to parse (see `find_id`).
    return {"jsonrpc": JSONRPC, "id": request_id, "method": method, "params": params}


def event(request_id: RequestId, payload: Mapping[str, Any]) -> Dict[str, Any]:
    """A notification carrying one event of the running request `request_id`."""
    return {"jsonrpc": JSONRPC, "method": EVENT, "params": {"id": request_id, **payload}}


def result_response(request_id: RequestId, result: Any) -> Dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": request_id, "result": result}


def error_response(request_id: RequestId, rpc_code: int, error: SandboxError) -> Dict[str, Any]:
    return {
        "jsonrpc": JSONRPC,
        "id": request_id,
        "error": {"code": rpc_code, "message": error.message, "data": error.to_dict()},
    }


def error_from_wire(error: Any) -> SandboxError:
    """The SandboxError carried by a JSON-RPC `error` object."""
    if not isinstance(error, Mapping):
        return SandboxError(ErrorCode.INTERNAL, "agent sent a malformed error")
    data = error.get("data")
    if isinstance(data, Mapping) and "code" in data:
        return SandboxError.from_dict(dict(data))
    rpc_code = error.get("code")
    message = str(error.get("message", "agent error"))
    if rpc_code in (PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS):
        return SandboxError(ErrorCode.INVALID_ARGUMENT, message)
    if rpc_code == UNAUTHORIZED:
        return SandboxError(ErrorCode.ACCESS_DENIED, message)
    return SandboxError(ErrorCode.INTERNAL, message)


def dumps(message: Mapping[str, Any]) -> bytes:
    """One message as compact ASCII JSON (no raw newline can occur inside)."""
    return json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def frame(message: Mapping[str, Any]) -> bytes:
    return dumps(message) + b"\n"


_ID_RE = re.compile(rb'"id"\s*:\s*(-?[0-9]{1,18}|"(?:[^"\\]|\\.){0,200}")')
_ID_SCAN_BYTES = 512


def find_id(head: bytes) -> RequestId:
    """Best-effort id of a message that cannot be parsed (too large or malformed)."""
    match = _ID_RE.search(head[:_ID_SCAN_BYTES])
    if match is None:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    return value if isinstance(value, (int, str)) else None


class Oversized:
    """Marker returned by `FrameReader` for a frame over the limit (already skipped)."""

    def __init__(self, head: bytes, limit: int) -> None:
        self.head = head
        self.limit = limit


class FrameReader:
    """Splits a byte stream into newline-terminated frames, bounded in size.

    `next()` returns a frame (without its newline), an `Oversized` marker for
    a frame longer than `max_frame` (whose bytes are then skipped up to the
    next newline, so the stream stays usable), or None at end of stream.
    """

    def __init__(self, read: Callable[[int], bytes], max_frame: int, chunk: int = MIB) -> None:
        self._read = read
        self.max_frame = max_frame
        self._chunk = chunk
        self._buf = bytearray()
        self._scan = 0  # bytes of _buf known to hold no newline
        self._skipping = False

    @property
    def pending(self) -> int:
        """Bytes read past the last frame returned (part of a frame not complete yet)."""
        return len(self._buf)

    def next(self) -> Union[bytes, Oversized, None]:
        while True:
            newline = self._buf.find(b"\n", self._scan)
            if newline >= 0:
                if self._skipping:
                    self._skipping = False
                    del self._buf[: newline + 1]
                    self._scan = 0
                    continue
                data = bytes(self._buf[:newline])
                del self._buf[: newline + 1]
                self._scan = 0
                if len(data) > self.max_frame:
                    return Oversized(data[:_ID_SCAN_BYTES], self.max_frame)
                return data
            if self._skipping:
                self._buf.clear()
                self._scan = 0
            elif len(self._buf) > self.max_frame:
                head = bytes(self._buf[:_ID_SCAN_BYTES])
                self._buf.clear()
                self._scan = 0
                self._skipping = True
                return Oversized(head, self.max_frame)
            else:
                self._scan = len(self._buf)
            chunk = self._read(self._chunk)
            if not chunk:
                return None
            self._buf += chunk
