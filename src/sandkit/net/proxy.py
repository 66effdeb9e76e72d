"""The egress proxy: the only way out of a box, outside the box (stdlib, asyncio).

A provider runs one per owner (Docker: a container; Kubernetes: a pod) over a
state directory it writes to (its layout: `state.py`).

A box is known by where its connection arrives, never by what it says: in unix
mode by the socket in its own directory (the box sees only its own, read-only),
in TCP mode by its source address (pods cannot change theirs). Each connection
is one request: HTTP CONNECT or a plain-HTTP request in absolute form. The
decision is `policy.Decider`'s; the proxy resolves names itself (only the names
the decision says to, as absolute names, with the system resolver of the machine
it runs on: nothing a box sends picks another resolver) and connects only to the
addresses that decision returned. A refusal is an HTTP 403 whose reason phrase
says why (Python, pip and git print it), at once, without touching the network.
A policy change applies to new connections at once and closes open tunnels the
new policy denies.

When names count in the box's policy (`Decider.by_name`), a CONNECT tunnel whose
first bytes are TLS must open with one whole, well-formed ClientHello (reassembled
across TLS records and reads, at most `MAX_HELLO_BYTES`, within
`CLIENT_HELLO_TIMEOUT_S`) naming one server that is the CONNECT host or allowed
itself, without Encrypted Client Hello; anything else closes the tunnel before a
byte of it reaches the server. Bytes that are not TLS (ssh, plain HTTP) are passed
on unread: the policy then holds for the address and port only.
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
from typing import Any, Dict, List, NamedTuple, Optional, Set, Tuple

from .policy import (
    Decider,
    Decision,
    Policy,
    PolicyError,
    absolute,
    load_networks,
    normalize_host,
    parse_address,
)
from .relay import BACKLOG, pump
from .state import BOXES, CONFIG, CONTROL, EGRESS, POLICY, SOCKET

MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
RESOLVE_TIMEOUT_S = 10.0
CLIENT_HELLO_TIMEOUT_S = 10.0  # from the hello's first byte to its last
MAX_HELLO_BYTES = 64 * 1024  # the records carrying one ClientHello, headers included
MAX_PLAINTEXT = 16 * 1024  # a TLS record's most (RFC 8446 5.1)
# encrypted_client_hello (RFC 9849; 0xfe08-0xfe0d were its drafts') and draft ESNI.
ECH_EXTENSIONS = frozenset(range(0xFE00, 0xFE0E)) | {0xFFCE}
# PROXY protocol v1 and v2: a header a server behind a load balancer may trust for the
# client's address, and then route the TLS that follows by its server name.
PROXY_PROTOCOL = (b"PROXY ", b"\r\n\r\n\x00\r\nQUIT\n")
# A fatal TLS alert, access_denied: what a client prints when its hello is refused.
TLS_ACCESS_DENIED = b"\x15\x03\x03\x00\x02\x02\x31"
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
    """`host:port` (IPv6 in brackets) into host and port. Brackets hold an IPv6 address
    and nothing else (no zone, no IPv4 in any notation)."""
    value = authority.strip()
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket:
            raise BadRequest("unterminated IPv6 address")
        if parse_address("[%s]" % host) is None:
            raise BadRequest("brackets must hold an IPv6 address (no zone)")
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


class Hello(NamedTuple):
    """What the first bytes of a tunnel are: `state` "more" (incomplete), "not-tls",
    "bad" (TLS that cannot be read as one ClientHello: `reason` says why) or "ok",
    with the server names and whether it carries Encrypted Client Hello."""

    state: str
    reason: str = ""
    names: Tuple[str, ...] = ()
    ech: bool = False


class _Malformed(Exception):
    pass


class _Cursor:
    """Reads a TLS structure; running past its end is `_Malformed`, never a guess."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise _Malformed("a length runs past the end of the ClientHello")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def vector(self, length_size: int) -> bytes:
        return self.take(self.number(length_size))

    def done(self) -> bool:
        return self.pos == len(self.data)


def _looks_like_tls(data: bytes) -> Optional[bool]:
    """True for a TLS record header (content type 20-24, version 3.x) or an SSLv2-format
    ClientHello; False for anything else; None when too few bytes say."""
    if not data:
        return None
    first = data[0]
    if 0x14 <= first <= 0x18:
        return None if len(data) < 2 else data[1] == 0x03
    if first & 0x80:
        if len(data) < 4:
            return None
        return data[2] == 0x01 and data[3] == 0x03
    return False


def read_client_hello(data: bytes, limit: int = MAX_HELLO_BYTES) -> Hello:
    """The ClientHello at the start of `data`, reassembled from as many handshake records
    as carry it, parsed strictly: every length must add up, as a server parses it. A
    PROXY protocol header (which would put a hello behind it) is "bad" too."""
    for signature in PROXY_PROTOCOL:
        if data[: len(signature)] == signature[: len(data)]:
            if len(data) < len(signature):
                return Hello("more")
            return Hello("bad", "a PROXY protocol header (a box does not speak for the proxy)")
    tls = _looks_like_tls(data)
    if tls is None:
        return Hello("more")
    if not tls:
        return Hello("not-tls")
    if data[0] & 0x80:
        return Hello("bad", "an SSLv2-format ClientHello (it cannot name a server)")
    message = b""
    pos = 0
    while True:
        if pos >= limit:
            return Hello("bad", "the ClientHello is over %d bytes" % limit)
        if len(data) - pos < 5:
            return Hello("more")
        kind, major, minor = data[pos], data[pos + 1], data[pos + 2]
        length = int.from_bytes(data[pos + 3 : pos + 5], "big")
        if kind != 0x16:
            return Hello("bad", "a TLS record of type %d before the ClientHello ended" % kind)
        if major != 3 or minor > 4:
            return Hello("bad", "TLS record version %d.%d" % (major, minor))
        if not 0 < length <= MAX_PLAINTEXT:
            return Hello("bad", "a TLS handshake record of %d bytes" % length)
        if pos + 5 + length > limit:
            return Hello("bad", "the ClientHello is over %d bytes" % limit)
        if len(data) < pos + 5 + length:
            return Hello("more")
        message += data[pos + 5 : pos + 5 + length]
        pos += 5 + length
        if len(message) < 4:
            continue
        if message[0] != 0x01:
            return Hello("bad", "the first handshake message is not a ClientHello")
        size = int.from_bytes(message[1:4], "big")
        if 4 + size > limit:
            return Hello("bad", "the ClientHello is over %d bytes" % limit)
        if len(message) < 4 + size:
            continue
        if len(message) > 4 + size:
            return Hello("bad", "another handshake message follows the ClientHello")
        try:
            return _client_hello_body(message[4:])
        except _Malformed as exc:
            return Hello("bad", str(exc))


def _client_hello_body(body: bytes) -> Hello:
    hello = _Cursor(body)
    hello.take(2 + 32)  # legacy_version, random
    if len(hello.vector(1)) > 32:
        raise _Malformed("a session id over 32 bytes")
    suites = hello.vector(2)
    if not suites or len(suites) % 2:
        raise _Malformed("bad cipher suites")
    if not hello.vector(1):
        raise _Malformed("no compression methods")
    if hello.done():
        return Hello("ok")  # no extensions at all (TLS 1.2 and older may)
    extensions = _Cursor(hello.vector(2))
    if not hello.done():
        raise _Malformed("bytes after the extensions")
    seen: Set[int] = set()
    names: Tuple[str, ...] = ()
    while not extensions.done():
        kind = extensions.number(2)
        data = extensions.vector(2)
        if kind in seen:  # servers differ on which copy counts: none does
            raise _Malformed("extension %d twice" % kind)
        seen.add(kind)
        if kind == 0:
            names = _server_names(data)
    return Hello("ok", names=names, ech=bool(seen & ECH_EXTENSIONS))


def _server_names(data: bytes) -> Tuple[str, ...]:
    outer = _Cursor(data)
    entries = _Cursor(outer.vector(2))
    if not outer.done() or entries.done():
        raise _Malformed("a malformed server_name extension")
    names: List[str] = []
    while not entries.done():
        kind = entries.number(1)
        raw = entries.vector(2)
        if kind != 0:
            raise _Malformed("a server name of type %d" % kind)
        if not raw or not all(c in _NAME_BYTES for c in raw):
            raise _Malformed("a server name that is no host name")
        names.append(raw.decode("ascii"))
    if len(names) > 1:
        raise _Malformed("%d server names (one is allowed)" % len(names))
    return tuple(names)


_NAME_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


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
        self.hello_timeout_s = CLIENT_HELLO_TIMEOUT_S
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
        """CONNECT: bytes both ways; first, when names count, the TLS check (module doc)."""
        down = asyncio.ensure_future(pump(up_reader, writer))
        first = b""
        decider = box.decider
        if decider is not None and decider.by_name():
            first, problem = await self._first_bytes(decider, host, port, reader)
            if problem is not None:
                self._log_denied(box, host, port, problem)
                down.cancel()
                with contextlib.suppress(BaseException):
                    await down
                if _looks_like_tls(first):
                    with contextlib.suppress(Exception):
                        writer.write(TLS_ACCESS_DENIED)
                        await writer.drain()
                return
        await _pipe_both(reader, writer, up_reader, up_writer, first, down)

    async def _first_bytes(
        self, decider: Decider, host: str, port: int, reader: asyncio.StreamReader
    ) -> Tuple[bytes, Optional[str]]:
        """The client's first bytes, and why they may not go on (None: they may). Waits for
        the first byte as long as the client likes (a server may speak first); a TLS
        ClientHello must then be complete within `hello_timeout_s` and the size bound."""
        try:
            first = await reader.read(CHUNK)
        except ConnectionError:
            return b"", None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.hello_timeout_s
        hello = read_client_hello(first)
        while hello.state == "more":
            left = deadline - loop.time()
            if left <= 0:
                return first, "the TLS ClientHello did not arrive within %gs" % self.hello_timeout_s
            try:
                chunk = await asyncio.wait_for(reader.read(CHUNK), left)
            except asyncio.TimeoutError:
                continue
            except ConnectionError:
                chunk = b""
            if not chunk:
                if not first:
                    return first, None
                return first, "the connection ended inside the TLS ClientHello"
            first += chunk
            hello = read_client_hello(first)
        if hello.state == "not-tls":
            return first, None
        if hello.state == "bad":
            return first, "unreadable TLS ClientHello: " + hello.reason
        return first, _hello_problem(decider, host, port, hello)

    async def _decide(self, box: Box, host: str, port: int) -> Decision:
        decider = box.decider
        if decider is None:
            return Decision(False, "this sandbox has no egress policy")
        first = decider.check_name(host, port)
        if not first.resolve:
            return first
        name = normalize_host(host)
        try:
            addresses = await asyncio.wait_for(self._resolve(name, port), RESOLVE_TIMEOUT_S)
        except asyncio.TimeoutError:
            return Decision(False, "resolving %s timed out" % name)
        except OSError as exc:
            return Decision(False, "cannot resolve %s (%s)" % (name, exc.strerror or exc))
        return decider.check_addresses(name, port, addresses)

    async def _resolve(self, name: str, port: int) -> List[str]:
        """The one place the proxy looks a name up: the system resolver of the machine it
        runs on (Docker: the proxy container's, `egress.dns`; Kubernetes: the proxy pod's),
        asked for the absolute name so that no search domain is tried first."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(absolute(name), port, type=socket.SOCK_STREAM)
        return [str(info[4][0]) for info in infos]

    async def _connect(self, decision: Decision, port: int) -> Any:
        last = "no address"
        for address in decision.addresses:
            if parse_address(address) is None:  # numeric only: connecting never resolves
                continue
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


def _hello_problem(decider: Decider, host: str, port: int, hello: Hello) -> Optional[str]:
    """Why a well-formed ClientHello may not pass a policy where names count (None: it
    may). Its server name must be the CONNECT host or allowed itself; a CONNECT to a
    name needs one (without it a server picks its default site); ECH hides the name the
    server really uses, so it is refused."""
    if hello.ech:
        return "the TLS ClientHello uses Encrypted Client Hello (its server name is hidden)"
    if not hello.names:
        if parse_address(host) is None:
            return "the TLS ClientHello names no server (the CONNECT host is %s)" % host
        return None
    sni = hello.names[0]
    if _same_host(sni, host):
        return None
    if parse_address(sni) is not None:
        return "an IP address as TLS server name (RFC 6066 allows host names only)"
    if decider.check_name(sni, port).allowed:
        return None
    return "TLS server name %s is not the CONNECT host %s nor allowed" % (sni[:255], host)


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
