"""The egress proxy and the in-box relay on this machine, no container involved.

Every server a test talks to is one it started on 127.0.0.1. The proxy decides with
the real policy code; only where it connects to is redirected in `LoopbackProxy`: an
allowed name is decided as if it resolved to a public address (never contacted) and
then reached at the test's loopback server. Refusals need no redirection: they never
connect anywhere.
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
    client_hello_sni,
    parse_head,
    short_unix_path,
    split_authority,
)

from .net_support import make_certificate

FAKE_PUBLIC = "93.184.216.34"  # decided on, never connected to
BOUND_S = 20.0


class LoopbackProxy(EgressProxy):
    """Decides for real; connects allowed names to the test's loopback servers."""

    upstreams: dict[str, int] = {}

    async def _decide(self, box: Any, host: str, port: int) -> Decision:
        decider = box.decider
        first = decider.check_name(host, port)
        if not first.resolve or host not in self.upstreams:
            return await super()._decide(box, host, port)
        decision = decider.check_addresses(host, port, [FAKE_PUBLIC])
        if decision.allowed:
            return Decision(True, addresses=("127.0.0.1",))
        return decision

    async def _connect(self, decision: Decision, port: int) -> Any:
        # Only ever the test's own server: a decision that wrongly allowed anything else
        # fails the test here instead of sending a packet.
        assert decision.addresses == ("127.0.0.1",), decision
        return await super()._connect(decision, self.target_port)

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
    assert client_hello_sni(b"GET / HTTP/1.1") == (False, None)
    assert client_hello_sni(b"\x16\x03") == (None, None)
