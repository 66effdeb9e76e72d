"""Hostile network use from inside a box, on every kind that enforces egress (issue 15).

One list of attacks, the same on Docker and Kubernetes (runc and gVisor): a box asks the
egress proxy for what its policy denies (denied names, IP literals in every spelling,
its own loopback, names the operator maps to loopback, the proxy itself, another box),
smuggles a second destination past the first (a Host header, a pipelined request, a TLS
server name other than the CONNECT host), ignores the proxy (direct TCP, its own DNS
queries), reaches for the platform's control plane, keeps a connection open while its
policy is taken away, and floods the proxy to starve another box. Every attempt is
counted in the hardening figures ("network attacks tried / got through").

The only servers are the lab's (tests/hardening/network_support.py): two upstreams this
session started on a network or namespace of its own, the proxy, boxes of the test. A
refusal by the proxy happens before it connects anywhere (a 403 or 400, never the 502 of
a failed connect); the attacks that bypass the proxy are refused by the platform (a box
on Docker has only `lo`; on Kubernetes NetworkPolicy drops the packets).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sandkit import ErrorCode, SandboxError, SandboxKey
from sandkit.network import Endpoint
from sandkit.provider import SandboxProvider
from sandkit.sandbox import Sandbox
from sandkit.testing.conformance.egress import CONNECT_PROBE, FETCH, REFUSED, VIA_PROXY, run
from sandkit.testing.conformance.exposing import http_get
from tests.net_support import STREAM_DOWNLOAD

from .figures import Figures
from .network_support import LABS, NetLab
from .targets import Target

NET_KINDS = tuple(LABS)
pytestmark = pytest.mark.parametrize("target", NET_KINDS, indirect=True)

# Read at import: the suite's ambient-configuration guard clears SANDKIT_* variables.
K8S_NETPOL_ENFORCED = os.environ.get("SANDKIT_NETPOL", "").strip() == "1"
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
BOUND_S = 60.0  # a refused or cut connection is seen within this, on a loaded machine
FLOOD = 300  # connections one box holds open at its proxy (the per-box cap is 256)
SERVED_PORT = 8000

# In a box: a DNS query for a name of the lab's, straight to a server (not through any proxy).
DNS_QUERY = """
import socket, sys
header = bytes([0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0])
query = header + b"\\x05exfil\\x04test\\x00" + bytes([0, 1, 0, 1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
try:
    s.sendto(query, (sys.argv[1], int(sys.argv[2])))
    s.recv(512)
    print("answered")
except OSError as exc:
    print("closed", type(exc).__name__)
"""
# In a box: raw bytes to the proxy (HTTP_PROXY), everything it answers until it closes.
RAW = """
import os, socket, sys, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
with socket.create_connection((proxy.hostname, proxy.port), timeout=20) as s:
    s.sendall(sys.argv[1].encode().decode("unicode_escape").encode("latin-1"))
    got = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
print(got.decode("latin-1"))
"""
# In a box: CONNECT host:port, then a TLS handshake that names `sni`; prints what happened.
TLS_SNI = """
import os, socket, ssl, sys, urllib.parse
host, port, sni = sys.argv[1], int(sys.argv[2]), sys.argv[3]
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
s = socket.create_connection((proxy.hostname, proxy.port), timeout=20)
target = "%s:%d" % (host, port)
s.sendall(("CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n" % (target, target)).encode())
head = b""
while b"\\r\\n\\r\\n" not in head:
    chunk = s.recv(4096)
    if not chunk:
        break
    head += chunk
status = head.decode("latin-1").split("\\r\\n")[0]
if " 200 " not in status:
    print("refused", status)
    sys.exit(0)
ctx = ssl.create_default_context(cafile="ca.pem")
try:
    tls = ctx.wrap_socket(s, server_hostname=sni)
    request = "GET /whoami HTTP/1.1\\r\\nHost: %s\\r\\nConnection: close\\r\\n\\r\\n" % sni
    tls.sendall(request.encode())
    answer = b""
    while True:
        chunk = tls.recv(4096)
        if not chunk:
            break
        answer += chunk
    print("handshake ok", answer.decode("latin-1").split("\\r\\n\\r\\n")[-1])
except (OSError, ssl.SSLError) as exc:
    print("cut", type(exc).__name__)
"""
# In a box: hold FLOOD idle connections to the proxy, count the immediate 503s, wait.
HOLD = """
import os, select, socket, sys, time, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
held = []
for _ in range(int(sys.argv[1])):
    try:
        held.append(socket.create_connection((proxy.hostname, proxy.port), timeout=10))
    except OSError as exc:
        print("connect failed", type(exc).__name__, flush=True)
        break
# The proxy answers the ones past its per-box cap at once (503): wait for the first such
# answer (bounded; a loaded proxy may take a while to accept them all), then a moment more.
busy, waiting, deadline, settle = 0, list(held), time.monotonic() + 30, None
while waiting and time.monotonic() < (settle or deadline):
    ready, _, _ = select.select(waiting, [], [], 0.5)
    for s in ready:
        waiting.remove(s)
        try:
            busy += b" 503 " in s.recv(4096)
        except OSError:
            pass
    if busy and settle is None:
        settle = time.monotonic() + 1
print("holding", len(held), "busy", busy, flush=True)
time.sleep(float(sys.argv[2]))
"""
# In a box: its network interfaces (gVisor has no /sys/class/net).
INTERFACES = "import socket; print(sorted(name for _, name in socket.if_nameindex()))"
# Where a platform's control plane would be reachable from a box, if it were mounted.
CONTROL_PATHS = (
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/var/run/secrets/kubernetes.io/serviceaccount/token",
    "/run/secrets/kubernetes.io/serviceaccount/token",
)


class Attempts:
    """Counts every attack in the figures and collects the ones that got through."""

    def __init__(self, figures: Figures, kind: str) -> None:
        self.figures, self.kind = figures, kind
        self.through: list[str] = []

    def refused(self, label: str, refused: bool, said: Any) -> None:
        self.figures.add(self.kind, "net_tried")
        self.figures.add(self.kind, "net_through", 0 if refused else 1)
        if not refused:
            self.through.append(f"{label}: {str(said)[-400:]!r}")

    def check(self) -> None:
        assert not self.through, "got through:\n" + "\n".join(self.through)


# Module scope, not session: the lab's upstream pods carry the Kubernetes tests' session
# label, and a lab kept to the end of the worker's session was still there when that worker
# later ran the check that no pod of the session is left (a CI failure).
@pytest.fixture(scope="module")
def lab(target: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetLab]:
    with LABS[target.kind](target.kind, tmp_path_factory.mktemp(f"lab-{target.kind}")) as made:
        yield made


@pytest.fixture(scope="module")
def net_provider(
    target: Target, lab: NetLab, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SandboxProvider]:
    provider = target.make(tmp_path_factory.mktemp(f"net-{target.kind}"), options=lab.options)
    yield provider
    with contextlib.suppress(Exception):
        provider.shutdown()


def new_box(provider: SandboxProvider, lab: NetLab, name: str) -> Sandbox:
    box = provider.acquire(SandboxKey("nethostile", f"{name}-{uuid.uuid4().hex[:8]}"))
    box.write_file("ca.pem", lab.ca_pem)
    return box


@pytest.fixture
def box(net_provider: SandboxProvider, lab: NetLab) -> Iterator[Sandbox]:
    made = new_box(net_provider, lab, "box")
    yield made
    net_provider.destroy(made.key)


@pytest.fixture
def attempts(target: Target, figures: Figures) -> Attempts:
    return Attempts(figures, target.kind)


def require_platform_enforcement(target: Target) -> None:
    """Direct connections are dropped by the platform: Docker always (no interface but
    lo), Kubernetes where the cluster enforces NetworkPolicy (.ci/run's dev cluster)."""
    if target.kind.startswith("kubernetes") and not K8S_NETPOL_ENFORCED:
        reason = "NetworkPolicy is not enforced here (SANDKIT_NETPOL=1 with a cluster that does)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


def served(endpoint: Endpoint) -> bool:
    with contextlib.suppress(OSError):
        return b" 200 " in http_get(endpoint, "/")[:20]
    return False


def proxy_refused(answer: str) -> bool:
    """The proxy said no before connecting anywhere: 403 or 400, not 502 (a failed try)."""
    first = answer.strip().splitlines()[0] if answer.strip() else ""
    return first.startswith("HTTP/1.1 ") and first.split()[1] in ("400", "403")


def test_the_proxy_refuses_what_the_policy_does_not_allow(
    net_provider: SandboxProvider, lab: NetLab, box: Sandbox, attempts: Attempts
) -> None:
    http = lab.http_port
    allowed = run(box, FETCH, f"http://pkg.test:{http}/whoami")
    assert allowed.exit_code == 0 and '"server": "up"' in allowed.stdout, allowed  # control
    denied = run(box, FETCH, f"http://other.test:{http}/whoami")
    attempts.refused("a denied name", denied.exit_code == 3 and REFUSED in denied.stdout, denied)
    # Every spelling of an address: the upstreams' own (the ceiling allows them, the policy
    # names only pkg.test), and of the box's loopback; each must be refused before the
    # proxy connects anywhere.
    spellings = [
        f"{lab.upstream_ip}:{http}",
        f"{lab.other_ip}:{http}",
        f"localhost:{http}",
        f"LOCALHOST.:{http}",
        f"127.0.0.1:{http}",
        f"127.1:{http}",
        f"0177.0.0.1:{http}",
        f"0x7f000001:{http}",
        f"2130706433:{http}",
        f"0.0.0.0:{http}",
        f"[::1]:{http}",
        f"[::ffff:127.0.0.1]:{http}",
        f"[::]:{http}",
        f"local.test:{http}",
    ]
    # Authorities that parsers read differently: whichever way the proxy reads them, the
    # denied server must not answer and nothing may be connected to in vain.
    confusing = [f"pkg.test@other.test:{http}", f"other.test:{http}#@pkg.test"]
    for authority in spellings + confusing:
        get = f"GET http://{authority}/whoami HTTP/1.1\\r\\nHost: x\\r\\n"
        answer = run(box, RAW, get + "Connection: close\\r\\n\\r\\n").stdout
        if authority in confusing:
            refused = '"other"' not in answer and " 502 " not in answer.split("\n")[0]
        else:
            refused = proxy_refused(answer)
        attempts.refused(f"GET http://{authority}/", refused, answer)
        connect = f"CONNECT {authority} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
        answer = run(box, RAW, connect).stdout
        attempts.refused(f"CONNECT {authority}", proxy_refused(answer), answer)
    # The operator's name for 127.0.0.1, even when the policy allows the name.
    net_provider.set_egress(box.key, {"mode": "allow", "allow": ["pkg.test:*", "local.test:*"]})
    mapped = run(box, VIA_PROXY, f"http://local.test:{http}/").stdout
    attempts.refused("an allowed name mapped to 127.0.0.1", proxy_refused(mapped), mapped)
    # The proxy itself, by its address.
    host, port = lab.proxy_address(net_provider)
    for proxied in (f"http://{host}:{port}/", f"http://{host}:{http}/"):
        itself = run(box, VIA_PROXY, proxied).stdout
        attempts.refused(f"the proxy itself ({proxied})", proxy_refused(itself), itself)
    attempts.check()


def test_a_second_destination_cannot_ride_on_an_allowed_one(
    lab: NetLab, box: Sandbox, attempts: Attempts
) -> None:
    http = lab.http_port
    # The Host header names other.test: the request still goes to pkg.test's server only.
    host_header = f"GET http://pkg.test:{http}/whoami HTTP/1.1\\r\\nHost: other.test\\r\\n"
    answer = run(box, RAW, host_header + "Connection: close\\r\\n\\r\\n").stdout
    assert '"server": "up"' in answer, answer  # the allowed request itself was served
    attempts.refused("a Host header naming a denied server", '"other"' not in answer, answer)
    # A second request pipelined on the allowed connection, in absolute form to other.test.
    pipelined = (
        f"GET http://pkg.test:{http}/whoami HTTP/1.1\\r\\nHost: pkg.test\\r\\n\\r\\n"
        f"GET http://other.test:{http}/whoami HTTP/1.1\\r\\nHost: other.test\\r\\n"
        "Connection: close\\r\\n\\r\\n"
    )
    answer = run(box, RAW, pipelined).stdout
    attempts.refused("a pipelined request to a denied server", '"other"' not in answer, answer)
    # TLS: the CONNECT host is allowed, the server name in the ClientHello is not.
    control = run(box, TLS_SNI, "pkg.test", str(lab.tls_port), "pkg.test").stdout
    assert control.startswith("handshake ok") and '"server": "up"' in control, control
    sni = run(box, TLS_SNI, "pkg.test", str(lab.tls_port), "other.test").stdout
    attempts.refused(
        "a TLS server name other than the CONNECT host", "handshake ok" not in sni, sni
    )
    attempts.check()


def test_a_box_cannot_go_around_the_proxy(
    target: Target, lab: NetLab, box: Sandbox, attempts: Attempts
) -> None:
    require_platform_enforcement(target)
    for ip in (lab.upstream_ip, lab.other_ip):
        for port in (lab.http_port, lab.tls_port):
            said = run(box, CONNECT_PROBE, ip, str(port)).stdout.strip()
            attempts.refused(f"direct TCP to {ip}:{port}", said.startswith("closed"), said)
        said = run(box, DNS_QUERY, ip, str(lab.dns_port)).stdout.strip()
        attempts.refused(f"a DNS query straight to {ip}", said.startswith("closed"), said)
    # And the way it may take stays open.
    assert run(box, FETCH, f"http://pkg.test:{lab.http_port}/whoami").exit_code == 0
    attempts.check()


def test_another_box_is_out_of_reach(
    target: Target,
    net_provider: SandboxProvider,
    lab: NetLab,
    box: Sandbox,
    attempts: Attempts,
) -> None:
    other = new_box(net_provider, lab, "other")
    try:
        other.spawn(f"exec python3 -m http.server {SERVED_PORT} --bind 0.0.0.0")
        endpoint = net_provider.expose(other.key, SERVED_PORT)
        deadline = time.monotonic() + BOUND_S
        while not served(endpoint):  # control: it serves the platform
            assert time.monotonic() < deadline, "the other box's server did not answer"
            time.sleep(0.3)
        address = lab.box_address(other)
        if address is None:  # Docker: a box has only lo, so nothing can name it
            interfaces = run(other, INTERFACES)
            attempts.refused(
                "an address for the other box", "['lo']" in interfaces.stdout, interfaces
            )
        else:
            require_platform_enforcement(target)
            said = run(box, CONNECT_PROBE, address, str(SERVED_PORT)).stdout.strip()
            attempts.refused("direct TCP to the other box", said.startswith("closed"), said)
            via = run(box, VIA_PROXY, f"http://{address}:{SERVED_PORT}/").stdout
            attempts.refused("the other box through the proxy", proxy_refused(via), via)
        # Its exposed port is the platform's, never a box's: not on this box's loopback.
        said = run(box, CONNECT_PROBE, "127.0.0.1", str(SERVED_PORT)).stdout.strip()
        attempts.refused(
            "the other box's exposed port on loopback", said.startswith("closed"), said
        )
    finally:
        net_provider.destroy(other.key)
    attempts.check()


def test_the_platform_s_control_plane_is_not_in_the_box(box: Sandbox, attempts: Attempts) -> None:
    script = "import os, sys; print([p for p in sys.argv[1:] if os.path.exists(p)])"
    said = run(box, script, *CONTROL_PATHS).stdout.strip()
    attempts.refused("an engine socket or service-account token", said == "[]", said)
    attempts.check()


def test_a_policy_taken_away_cuts_open_connections(
    net_provider: SandboxProvider, lab: NetLab, box: Sandbox, attempts: Attempts
) -> None:
    box.write_file("download.py", STREAM_DOWNLOAD)
    url = f"http://pkg.test:{lab.http_port}/stream"
    handle = box.spawn(f"exec python3 download.py {url}").handle
    deadline = time.monotonic() + BOUND_S
    while "open" not in box.process_output(handle).stdout:
        assert time.monotonic() < deadline, box.process_output(handle)
        time.sleep(0.1)
    assert box.process_output(handle).running, box.process_output(handle)  # still flowing
    net_provider.set_egress(box.key, {"mode": "none"})
    done = box.wait_process(handle, timeout=BOUND_S)
    attempts.refused("a download kept open past a policy of none", done.exit_code is not None, done)
    later = run(box, FETCH, f"http://pkg.test:{lab.http_port}/whoami")
    attempts.refused("a new request under a policy of none", later.exit_code == 3, later)
    attempts.check()


def test_one_box_cannot_starve_another_s_egress(
    net_provider: SandboxProvider, lab: NetLab, box: Sandbox, attempts: Attempts
) -> None:
    other = new_box(net_provider, lab, "flooder")
    try:
        other.write_file("hold.py", HOLD)
        handle = other.spawn(f"exec python3 hold.py {FLOOD} {BOUND_S}").handle
        deadline = time.monotonic() + BOUND_S
        while "holding" not in (said := other.process_output(handle).stdout):
            assert time.monotonic() < deadline, other.process_output(handle)
            time.sleep(0.2)
        busy = int(said.split("busy")[1].split()[0])
        assert busy > 0, f"the proxy took all {FLOOD} idle connections of one box: {said}"
        served = run(box, FETCH, f"http://pkg.test:{lab.http_port}/whoami")
        attempts.refused("a flooding box starving another", served.exit_code == 0, served)
        other.signal_process(handle, "KILL")
    finally:
        net_provider.destroy(other.key)
    attempts.check()


def test_set_egress_beyond_the_ceiling_is_refused(
    net_provider: SandboxProvider, lab: NetLab, box: Sandbox, attempts: Attempts
) -> None:
    """Even the platform cannot widen a box past the operator's ceiling, e.g. to a box."""
    for wider in ("10.0.0.0/8:*", "0.0.0.0/0:*", "127.0.0.0/8:*", "169.254.169.254:*"):
        try:
            net_provider.set_egress(box.key, {"mode": "allow", "allow": [wider]})
        except SandboxError as exc:
            attempts.refused(f"set_egress {wider}", exc.code is ErrorCode.ACCESS_DENIED, exc)
        else:
            attempts.refused(f"set_egress {wider}", False, "accepted")
    attempts.check()
