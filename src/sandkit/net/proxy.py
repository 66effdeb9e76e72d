"""The egress proxy: the only way out of a box, outside the box (stdlib, asyncio).

A provider runs one per owner (Docker: a container; Kubernetes: a pod) over a
state directory it writes to (its layout: `state.py`).

A box is known by where its connection arrives, never by what it says: in unix
mode by the socket in its own directory (the box sees only its own, read-only),
in TCP mode by its source address (pods cannot change theirs). Each connection
is one request: HTTP CONNECT (then, for TLS, the ClientHello's server name must
be allowed too) or a plain-HTTP request in absolute form. The decision is
`policy.Decider`'s; the proxy resolves names itself and connects only to the
addresses that decision returned. A refusal is an HTTP 403 whose reason phrase
says why (Python, pip and git print it), at once, without touching the network.
A policy change applies to new connections at once and closes open tunnels the
new policy denies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import sys
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from .policy import Decider, Decision, Policy, PolicyError, load_networks, normalize_host
from .relay import BACKLOG, pump
from .state import BOXES, CONFIG, CONTROL, EGRESS, POLICY, SOCKET

MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
RESOLVE_TIMEOUT_S = 10.0
CLIENT_HELLO_TIMEOUT_S = 10.0
MAX_RECORD = 16 * 1024 + 5
CHUNK = 64 * 1024
RESCAN_S = 2.0
DEFAULT_MAX_PER_BOX = 256
DEFAULT_MAX_TOTAL = 4096
LOG_PER_BOX_PER_S = 5
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
    }
)


def _log(event: Dict[str, Any]) -> None:
    event.setdefault("t", round(time.time(), 3))
    sys.stderr.write(json.dumps(event, sort_keys=True) + "\n")
    sys.stderr.flush()


def _reason(text: str) -> str:
    """An HTTP reason phrase: printable ASCII, one line, bounded."""
    clean = "".join(c if 32 <= ord(c) < 127 else "?" for c in text)
    return clean[:300]


def response(status: int, reason: str, extra: str = "") -> bytes:
    """A complete HTTP/1.1 response that says `reason` in its status line and body."""
    phrase = _reason("sandkit egress: " + reason)
    body = (phrase + "\n").encode("ascii")
    head = (
        "HTTP/1.1 %d %s\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "Content-Length: %d\r\n"
        "Connection: close\r\n"
        "X-Sandkit-Egress: %s\r\n"
        "%s\r\n" % (status, phrase, len(body), "denied" if status == 403 else "error", extra)
    )
    return head.encode("ascii") + body


# -- HTTP and TLS parsing ---------------------------------------------------------------


class BadRequest(Exception):
    pass


def parse_head(data: bytes) -> Tuple[str, str, str, List[Tuple[str, str]]]:
    """Method, target, version and headers of a request head (ends with CRLFCRLF)."""
    try:
        text = data.decode("iso-8859-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes everything
        raise BadRequest("request is not text") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("not an HTTP/1.x request line")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise BadRequest("malformed header line")
        headers.append((name, value.strip()))
    return parts[0].upper(), parts[1], parts[2], headers


def split_authority(authority: str, default_port: Optional[int]) -> Tuple[str, int]:
    """`host:port` (IPv6 in brackets) into host and port."""
    value = authority.strip()
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket:
            raise BadRequest("unterminated IPv6 address")
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise BadRequest("junk after an IPv6 address")
    elif value.count(":") == 1:
        host, _, port_text = value.partition(":")
    elif ":" in value:
        raise BadRequest("an IPv6 address must be in brackets")
    else:
        host, port_text = value, ""
    if not port_text:
        if default_port is None:
            raise BadRequest("CONNECT needs host:port")
        return host, default_port
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise BadRequest("bad port %r" % port_text[:10])
    return host, int(port_text)


def client_hello_sni(data: bytes) -> Tuple[Optional[bool], Optional[str]]:
    """(is this a TLS ClientHello? None: need more bytes, its server name or None)."""
    if len(data) < 1:
        return None, None
    if data[0] != 0x16:
        return False, None
    if len(data) < 5:
        return None, None
    length = int.from_bytes(data[3:5], "big")
    if len(data) < 5 + length:
        return (None, None) if 5 + length <= MAX_RECORD else (True, None)
    body = data[5 : 5 + length]
    try:
        if body[0] != 0x01:
            return True, None
        pos = 4 + 2 + 32  # handshake header, version, random
        pos += 1 + body[pos]  # session id
        pos += 2 + int.from_bytes(body[pos : pos + 2], "big")  # cipher suites
        pos += 1 + body[pos]  # compression methods
        end = pos + 2 + int.from_bytes(body[pos : pos + 2], "big")
        pos += 2
        while pos + 4 <= end:
            kind = int.from_bytes(body[pos : pos + 2], "big")
            size = int.from_bytes(body[pos + 2 : pos + 4], "big")
            pos += 4
            if kind == 0:  # server_name: list length, then (type, length, name)
                inner = pos + 2
                while inner + 3 <= pos + size:
                    name_type = body[inner]
                    name_len = int.from_bytes(body[inner + 1 : inner + 3], "big")
                    name = body[inner + 3 : inner + 3 + name_len]
                    if name_type == 0:
                        return True, name.decode("ascii", "replace")
                    inner += 3 + name_len
                return True, None
            pos += size
    except IndexError:
        return True, None
    return True, None


# -- the proxy --------------------------------------------------------------------------


class Tunnel:
    """An open connection of a box: what it reached, and how to end it."""

    def __init__(self, host: str, port: int, address: str, writers: List[asyncio.StreamWriter]):
        self.host = host
        self.port = port
        self.address = address
        self.writers = writers

    def close(self) -> None:
        for writer in self.writers:
            with contextlib.suppress(Exception):
                writer.close()


class Box:
    def __init__(self, name: str) -> None:
        self.name = name
        self.decider: Optional[Decider] = None
        self.stamp: Optional[Tuple[int, int]] = None
        self.address: Optional[str] = None
        self.server: Optional[asyncio.AbstractServer] = None
        self.socket_ino: Optional[int] = None
        self.tunnels: Set[Tunnel] = set()
        self.active = 0
        self.log_window = (0.0, 0)


class EgressProxy:
    """One egress proxy over a state directory (see the module doc)."""

    def __init__(self, root: str, listen: Optional[Tuple[str, int]] = None) -> None:
        self.root = root
        self.listen = listen  # TCP mode (boxes known by source address)
        self.boxes: Dict[str, Box] = {}
        self.by_address: Dict[str, Box] = {}
        self.hosts: Dict[str, List[str]] = {}
        self.denied: Tuple[Any, ...] = ()
        self.max_per_box = DEFAULT_MAX_PER_BOX
        self.max_total = DEFAULT_MAX_TOTAL
        self.active = 0
        self.config_stamp: Optional[Tuple[int, int]] = None
        self._lock: Optional[asyncio.Lock] = None
        self._servers: List[asyncio.AbstractServer] = []

    # state ------------------------------------------------------------------------

    def _path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def _read_config(self) -> bool:
        path = self._path(CONFIG)
        stamp = _stamp(path)
        if stamp == self.config_stamp:
            return False
        self.config_stamp = stamp
        data: Dict[str, Any] = {}
        if stamp is not None:
            try:
                with open(path, encoding="utf-8") as handle:
                    data = json.load(handle)
            except (OSError, ValueError) as exc:
                _log({"event": "config", "error": str(exc)})
        hosts = data.get("hosts") or {}
        clean: Dict[str, List[str]] = {}
        for name, addresses in hosts.items() if isinstance(hosts, dict) else ():
            try:
                clean[normalize_host(str(name))] = [str(a) for a in addresses]
            except PolicyError:
                continue
        self.hosts = clean
        self.denied = load_networks(list(data.get("denied") or []) + own_addresses())
        self.max_per_box = int(data.get("max_per_box") or DEFAULT_MAX_PER_BOX)
        self.max_total = int(data.get("max_total") or DEFAULT_MAX_TOTAL)
        return True

    async def sync(self) -> Dict[str, Any]:
        """Re-read proxy.json and every box's policy; open and close listeners to match."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            config_changed = self._read_config()
            names = set()
            boxes_dir = self._path(BOXES)
            with contextlib.suppress(FileNotFoundError):
                names = {n for n in os.listdir(boxes_dir) if not n.startswith(".")}
            for name in sorted(names):
                await self._sync_box(name, config_changed)
            for name in sorted(set(self.boxes) - names):
                await self._drop_box(name)
            for name in list(self.boxes):
                if name not in names or _stamp(self._path(BOXES, name, POLICY)) is None:
                    await self._drop_box(name)
            return {"ok": True, "boxes": len(self.boxes), "active": self.active}

    async def _sync_box(self, name: str, config_changed: bool) -> None:
        path = self._path(BOXES, name, POLICY)
        stamp = _stamp(path)
        if stamp is None:
            return
        box = self.boxes.get(name)
        if box is None:
            box = self.boxes[name] = Box(name)
        if stamp != box.stamp or config_changed or box.decider is None:
            try:
                with open(path, encoding="utf-8") as handle:
                    data = json.load(handle)
                policy = Policy.from_dict(
                    {k: data[k] for k in ("mode", "allow", "deny") if k in data}
                )
                box.decider = Decider(policy, self.hosts, self.denied)
                address = data.get("address")
            except (OSError, ValueError, PolicyError) as exc:
                _log({"event": "policy", "box": name, "error": str(exc)})
                box.decider = Decider(Policy())  # unreadable: nothing leaves the box
                address = None
            box.stamp = stamp
            if self.listen is not None:
                if box.address and self.by_address.get(box.address) is box:
                    del self.by_address[box.address]
                box.address = str(address) if address else None
                if box.address:
                    self.by_address[box.address] = box
            self._recheck(box)
        if self.listen is None:
            await self._ensure_listener(box)

    async def _ensure_listener(self, box: Box) -> None:
        directory = self._path(BOXES, box.name, EGRESS)
        path = os.path.join(directory, SOCKET)
        try:
            st = os.stat(path)
            current = st.st_ino if stat.S_ISSOCK(st.st_mode) else None
        except FileNotFoundError:
            current = None
        if box.server is not None and current is not None and current == box.socket_ino:
            return
        if box.server is not None:
            box.server.close()
            box.server = None
        if not os.path.isdir(directory):
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

        def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Any:
            return self._serve(box, reader, writer)

        short = short_unix_path(path)
        try:
            box.server = await asyncio.start_unix_server(handler, short[0], backlog=BACKLOG)
        finally:
            short[1]()
        os.chmod(path, 0o666)
        box.socket_ino = os.stat(path).st_ino

    async def _drop_box(self, name: str) -> None:
        box = self.boxes.pop(name, None)
        if box is None:
            return
        if box.server is not None:
            box.server.close()
        if box.address and self.by_address.get(box.address) is box:
            del self.by_address[box.address]
        for tunnel in list(box.tunnels):
            tunnel.close()

    def _recheck(self, box: Box) -> None:
        """Close the box's open tunnels its (new) policy denies."""
        decider = box.decider
        if decider is None:
            return
        for tunnel in list(box.tunnels):
            decision = decider.check_name(tunnel.host, tunnel.port)
            if decision.resolve:
                decision = decider.check_addresses(tunnel.host, tunnel.port, [tunnel.address])
            if not decision.allowed:
                _log({"event": "closed", "box": box.name, "host": tunnel.host, "port": tunnel.port})
                tunnel.close()
                box.tunnels.discard(tunnel)

    # serving ------------------------------------------------------------------------

    async def serve_forever(self) -> None:
        await self.sync()
        control = self._path(CONTROL)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(control)
        short = short_unix_path(control)
        try:
            self._servers.append(await asyncio.start_unix_server(self._control, short[0]))
        finally:
            short[1]()
        os.chmod(control, 0o600)
        if self.listen is not None:
            host, port = self.listen
            server = await asyncio.start_server(
                self._serve_tcp, host, port, reuse_address=True, backlog=BACKLOG
            )
            self._servers.append(server)
        _log({"event": "ready", "boxes": len(self.boxes), "tcp": bool(self.listen)})
        while True:
            await asyncio.sleep(RESCAN_S)
            try:
                await self.sync()
            except Exception as exc:  # never let a bad file stop the proxy
                _log({"event": "sync", "error": repr(exc)})

    async def _control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), HEAD_TIMEOUT_S)
            request = json.loads(line or b"{}")
            op = request.get("op")
            if op == "sync":
                reply: Dict[str, Any] = await self.sync()
            elif op == "ping":
                reply = {"ok": True, "boxes": len(self.boxes), "pid": os.getpid()}
            elif op == "stats":
                reply = {
                    "ok": True,
                    "active": self.active,
                    "boxes": {n: b.active for n, b in self.boxes.items()},
                }
            else:
                reply = {"ok": False, "error": "unknown op %r" % (op,)}
        except Exception as exc:
            reply = {"ok": False, "error": repr(exc)}
        with contextlib.suppress(Exception):
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
            writer.close()

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if peer else ""
        if address.startswith("::ffff:"):
            address = address[7:]
        box = self.by_address.get(address)
        if box is None:
            await _reply(writer, response(403, "this address is no known sandbox"))
            return
        await self._serve(box, reader, writer)

    async def _serve(
        self, box: Box, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if box.active >= self.max_per_box or self.active >= self.max_total:
            await _reply(writer, response(503, "too many open connections for this sandbox"))
            return
        box.active += 1
        self.active += 1
        try:
            await self._request(box, reader, writer)
        except Exception as exc:  # a broken client must not hurt the proxy
            _log({"event": "error", "box": box.name, "error": repr(exc)})
        finally:
            box.active -= 1
            self.active -= 1
            with contextlib.suppress(Exception):
                writer.close()

    async def _request(
        self, box: Box, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            await _reply(writer, response(431, "request head too large"))
            return
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
            return
        if len(head) > MAX_HEAD_BYTES:
            await _reply(writer, response(431, "request head too large"))
            return
        try:
            method, target, version, headers = parse_head(head)
            if method == "CONNECT":
                host, port = split_authority(target, None)
                plain = None
            else:
                host, port, path = _plain_target(target, headers)
                plain = (method, path, version, headers)
        except BadRequest as exc:
            await _reply(writer, response(400, str(exc)))
            return
        decision = await self._decide(box, host, port)
        if not decision.allowed:
            self._log_denied(box, host, port, decision.reason)
            await _reply(writer, response(403, decision.reason))
            return
        upstream = await self._connect(decision, port)
        if isinstance(upstream, str):
            await _reply(
                writer, response(502, "cannot connect to %s:%d (%s)" % (host, port, upstream))
            )
            return
        up_reader, up_writer, address = upstream
        tunnel = Tunnel(host, port, address, [writer, up_writer])
        box.tunnels.add(tunnel)
        try:
            if plain is None:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await self._tunnel(box, host, port, reader, writer, up_reader, up_writer)
            else:
                up_writer.write(_rewrite(plain, host, port))
                await up_writer.drain()
                await _pipe_both(reader, writer, up_reader, up_writer, b"")
        finally:
            box.tunnels.discard(tunnel)
            tunnel.close()

    async def _tunnel(
        self,
        box: Box,
        host: str,
        port: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        """CONNECT: bytes both ways; a TLS ClientHello's server name must be allowed too."""
        down = asyncio.ensure_future(pump(up_reader, writer))
        first = b""
        try:
            while True:
                is_tls, sni = client_hello_sni(first)
                if is_tls is not None:
                    break
                chunk = await asyncio.wait_for(reader.read(CHUNK), CLIENT_HELLO_TIMEOUT_S)
                if not chunk:
                    break
                first += chunk
        except (asyncio.TimeoutError, ConnectionError):
            is_tls, sni = False, None
        if is_tls and sni is not None and box.decider is not None:
            name_ok = _same_host(sni, host)
            if not name_ok:
                check = box.decider.check_name(sni, port)
                name_ok = check.allowed
            if not name_ok:
                self._log_denied(box, sni, port, "TLS server name differs from the CONNECT host")
                down.cancel()
                return
        await _pipe_both(reader, writer, up_reader, up_writer, first, down)

    async def _decide(self, box: Box, host: str, port: int) -> Decision:
        decider = box.decider
        if decider is None:
            return Decision(False, "this sandbox has no egress policy")
        first = decider.check_name(host, port)
        if not first.resolve:
            return first
        name = normalize_host(host)
        loop = asyncio.get_event_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(name, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S
            )
        except asyncio.TimeoutError:
            return Decision(False, "resolving %s timed out" % name)
        except OSError as exc:
            return Decision(False, "cannot resolve %s (%s)" % (name, exc.strerror or exc))
        return decider.check_addresses(name, port, [str(info[4][0]) for info in infos])

    async def _connect(self, decision: Decision, port: int) -> Any:
        last = "no address"
        for address in decision.addresses:
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(address, port), CONNECT_TIMEOUT_S
                )
            except asyncio.TimeoutError:
                last = "timed out"
                continue
            except OSError as exc:
                last = exc.strerror or str(exc)
                continue
            _nodelay(up_writer)
            return up_reader, up_writer, address
        return last

    def _log_denied(self, box: Box, host: str, port: int, reason: str) -> None:
        now = time.monotonic()
        start, count = box.log_window
        if now - start >= 1.0:
            box.log_window = (now, 1)
        elif count < LOG_PER_BOX_PER_S:
            box.log_window = (start, count + 1)
        else:
            return
        _log(
            {"event": "denied", "box": box.name, "host": host[:300], "port": port, "reason": reason}
        )


def _same_host(a: str, b: str) -> bool:
    try:
        return normalize_host(a) == normalize_host(b)
    except PolicyError:
        return a.strip().lower().strip("[]") == b.strip().lower().strip("[]")


def _plain_target(target: str, headers: List[Tuple[str, str]]) -> Tuple[str, int, str]:
    """Host, port and origin-form path of a plain-HTTP proxy request."""
    lower = target.lower()
    if lower.startswith("http://"):
        rest = target[7:]
        authority, slash, path = rest.partition("/")
        return (*split_authority(authority, 80), "/" + path if slash else "/")
    if lower.startswith("https://"):
        raise BadRequest("send https through CONNECT")
    if target.startswith("/"):
        for name, value in headers:
            if name.lower() == "host":
                return (*split_authority(value, 80), target)
        raise BadRequest("no Host header")
    raise BadRequest("unsupported request target")


def _rewrite(plain: Tuple[str, str, str, List[Tuple[str, str]]], host: str, port: int) -> bytes:
    """The request as the origin server gets it: origin-form, Host set, one request only."""
    method, path, version, headers = plain
    upgrade = [v for n, v in headers if n.lower() == "upgrade"]
    lines = ["%s %s %s" % (method, path, version)]
    authority = host if port == 80 else "%s:%d" % (host, port)
    if ":" in host and not host.startswith("["):
        authority = "[%s]" % host if port == 80 else "[%s]:%d" % (host, port)
    lines.append("Host: " + authority)
    for name, value in headers:
        lower = name.lower()
        if lower in HOP_BY_HOP or lower == "host":
            continue
        lines.append("%s: %s" % (name, value))
    if upgrade:
        lines.append("Upgrade: " + upgrade[0])
        lines.append("Connection: Upgrade")
    else:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("iso-8859-1")


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    first: bytes,
    down: Optional["asyncio.Future[None]"] = None,
) -> None:
    """Client -> upstream and back until the upstream is done (a client's end of input is
    passed on; the upstream's end of output ends the whole connection)."""
    if first:
        up_writer.write(first)
        with contextlib.suppress(ConnectionError, OSError):
            await up_writer.drain()
    if down is None:
        down = asyncio.ensure_future(pump(up_reader, writer))
    up = asyncio.ensure_future(pump(reader, up_writer))
    try:
        await down
    finally:
        up.cancel()
        with contextlib.suppress(BaseException):
            await up


async def _reply(writer: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(Exception):
        writer.write(data)
        await writer.drain()
        writer.close()


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _stamp(path: str) -> Optional[Tuple[int, int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def own_addresses() -> List[str]:
    """This machine's (the proxy's) addresses and its gateways: the host, seen from here."""
    found: List[str] = []
    with contextlib.suppress(OSError), open("/proc/net/fib_trie", encoding="ascii") as handle:
        previous = ""
        for line in handle:
            stripped = line.strip()
            if "/32 host LOCAL" in stripped and previous.startswith("|--"):
                found.append(previous.split()[-1])
            previous = stripped
    with contextlib.suppress(OSError), open("/proc/net/if_inet6", encoding="ascii") as handle:
        for line in handle:
            hexa = line.split()[0]
            found.append(":".join(hexa[i : i + 4] for i in range(0, 32, 4)))
    with contextlib.suppress(OSError, ValueError), open("/proc/net/route", encoding="ascii") as f:
        for line in list(f)[1:]:
            gateway = int(line.split()[2], 16)
            if gateway:
                found.append(socket.inet_ntoa(gateway.to_bytes(4, "little")))
    return found


def short_unix_path(path: str) -> Tuple[str, Any]:
    """A path short enough for AF_UNIX (108 bytes): `path` itself, or a /proc/self/fd
    form of it through a directory descriptor held until the returned closer runs."""
    if len(os.fsencode(path)) < 100:
        return path, lambda: None
    directory, name = os.path.split(path)
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_PATH", 0) | getattr(os, "O_DIRECTORY", 0))
    return "/proc/self/fd/%d/%s" % (fd, name), lambda: os.close(fd)


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # asyncio.run cancels the tasks and returns


def run(root: str, listen: Optional[Tuple[str, int]] = None) -> int:
    proxy = EgressProxy(root, listen)
    # As a pod's main process (PID 1) SIGTERM would be ignored without a handler.
    signal.signal(signal.SIGTERM, _stop)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(proxy.serve_forever())
    return 0
