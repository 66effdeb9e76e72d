"""Egress policies and exposed ports of Docker boxes, end to end.

The only servers anything talks to are the test's own: two upstream containers on a
network the test creates with `internal: true` (tests/net_support.py), which is also
the only network the egress proxy joins. Names resolve through the operator's hosts
table or the test's DNS server. Ranges that must always be refused (link-local,
metadata, the host) are checked in tests/test_net_policy.py, against the decision,
never here.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandkit_docker.network import proxy_name
from sandkit_docker.provider import DockerProvider
from tests.docker_support import in_ci
from tests.gvisor_support import assert_in_gvisor, require_docker_runsc
from tests.net_support import STREAM_DOWNLOAD, Upstreams, nettools_image, start_upstreams

from sandkit import ErrorCode, SandboxError, SandboxKey, Settings
from sandkit.net.proxy import own_addresses
from sandkit.testing.conformance import EgressConformance, ExposeConformance
from sandkit.testing.conformance.exposing import serve, wait_for

pytestmark = pytest.mark.docker

BOUND_S = 30.0
WORKSPACE = "/mnt/user-data/workspace"
PIP = "/mnt/pip"


@pytest.fixture(scope="module")
def upstreams(
    docker_client: Any,
    image: str,
    options_for: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Upstreams]:
    work = tmp_path_factory.mktemp("upstreams")
    labels = options_for()["labels"]
    prefix = options_for()["owner"].replace("sandkit-test", "sktest")
    yield from start_upstreams(docker_client, image, prefix, labels, work / "srv")


@pytest.fixture(scope="module")
def box_image(docker_client: Any, image: str) -> str:
    """The base image, with curl and git from this host when they fit it."""
    return nettools_image(docker_client, image) or image


@pytest.fixture(scope="module")
def pip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pip itself (this interpreter's, pure Python), to run in a box that has none."""
    import pip

    target = tmp_path_factory.mktemp("pip")
    shutil.copytree(Path(pip.__file__).parent, target / "pip")
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def net_settings(upstreams: Upstreams, data_root: Path, **egress: Any) -> dict[str, Any]:
    options = {
        "ceiling": {"mode": "open", "allow": [f"{upstreams.subnet}:*"]},
        "policy": {"mode": "allow", "allow": ["pkg.test:*", "*.pkg.test"]},
        "hosts": upstreams.hosts(),
        "network": upstreams.network,
        "dns": [upstreams.ip],
        **egress,
    }
    return {"egress": options, "expose": {"enabled": True}}


@pytest.fixture(scope="module")
def net_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("netdata")


@pytest.fixture(scope="module")
def maker(upstreams: Upstreams, box_image: str, pip_dir: Path, options_for: Any) -> Any:
    """make(root, **options): a provider with egress and expose on the test's upstreams."""

    def make(root: Path, **overrides: Any) -> DockerProvider:
        egress = overrides.pop("egress", {})
        image = overrides.pop("image", box_image)
        options = {**options_for(**net_settings(upstreams, root, **egress), **overrides)}
        options["image"] = image
        settings = Settings(
            data_root=root,
            mounts=[{"virtual": PIP, "host": str(pip_dir), "read_only": True}],
            providers={"docker": options},
        )
        return DockerProvider(settings)

    return make


@pytest.fixture(scope="module")
def net_provider(maker: Any, net_root: Path) -> Iterator[DockerProvider]:
    provider = maker(net_root)
    yield provider
    with contextlib.suppress(Exception):
        provider.shutdown()


def key(name: str) -> SandboxKey:
    return SandboxKey("net", name)


def fetch(url: str, ca: bool = True, timeout: float = 20) -> str:
    """A command that GETs `url` with Python's urllib (which reads the proxy variables)."""
    script = (
        (
            "import ssl, sys, urllib.request\n"
            "ctx = ssl.create_default_context(cafile='ca.pem') if %r else None\n"
            "try:\n"
            "    r = urllib.request.urlopen(sys.argv[1], timeout=%r, context=ctx)\n"
            "    print(r.read().decode())\n"
            "except Exception as exc:\n"
            "    print('ERROR', exc); sys.exit(3)\n"
        )
        .replace("%r", repr(ca), 1)
        .replace("%r", repr(timeout), 1)
    )
    return f"python3 -c {shlex.quote(script)} {shlex.quote(url)}"


def run(box: Any, command: str, timeout: float = 60) -> Any:
    return box.execute(command, timeout=timeout)


@pytest.fixture
def box(net_provider: DockerProvider, upstreams: Upstreams, request: Any) -> Iterator[Any]:
    k = key(re.sub(r"[^A-Za-z0-9_.-]", "-", request.node.name)[:80])
    sandbox = net_provider.acquire(k)
    sandbox.write_file("ca.pem", upstreams.ca.read_text())
    yield sandbox
    net_provider.destroy(k)


# -- the default is no network at all ------------------------------------------------


def test_without_egress_settings_boxes_are_as_before(
    make_provider: Any, docker_client: Any, owner: str
) -> None:
    provider = make_provider()
    k = key("plain")
    sandbox = provider.acquire(k)
    (container,) = docker_client.containers.list(
        filters={"label": f"sandkit.sandbox-id={k.sandbox_id}"}
    )
    assert container.attrs["HostConfig"]["NetworkMode"] == "none"
    assert not [m for m in container.attrs["Mounts"] if "sandkit-net" in m["Destination"]]
    assert not docker_client.containers.list(all=True, filters={"name": f"{owner}-egress"})
    env = sandbox.execute("env").stdout
    assert "proxy" not in env.lower()
    with pytest.raises(SandboxError) as info:
        provider.set_egress(k, "open")
    assert info.value.code is ErrorCode.ACCESS_DENIED
    with pytest.raises(SandboxError) as info:
        provider.expose(k, 8000)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_egress_needs_network_mode_none(maker: Any, tmp_path: Path) -> None:
    with pytest.raises(SandboxError) as info:
        maker(tmp_path, network_mode="bridge")
    assert (
        info.value.code is ErrorCode.INVALID_ARGUMENT and "network_mode none" in info.value.message
    )


def test_gvisor_boxes_need_runsc_with_host_uds(
    maker: Any, docker_client: Any, upstreams: Upstreams, options_for: Any, tmp_path: Path
) -> None:
    """gVisor serves a box's unix sockets itself: the engine's runsc must pass them to the
    host (--host-uds). Registered without it, the provider refuses before starting a box;
    with it, a box's allowed egress and exposed port work as on runc."""
    runtime = require_docker_runsc(docker_client)
    args = (docker_client.info().get("Runtimes") or {})[runtime].get("runtimeArgs") or []
    provider = maker(tmp_path, runtime=runtime, owner=options_for()["owner"] + "-gvisor")
    try:
        if not any(str(a).lstrip("-") == "host-uds=all" for a in args):
            with pytest.raises(SandboxError) as info:
                provider.acquire(key("gvisor"))
            assert info.value.code is ErrorCode.INVALID_ARGUMENT
            assert "--host-uds=all" in info.value.message
            if in_ci():  # deploy/docker/dockerd.sh gvisor registers it with the flag
                pytest.fail(f"the engine's runsc lacks --host-uds=all: {args}")
            return
        sandbox = provider.acquire(key("gvisor"))
        assert_in_gvisor(sandbox)
        sandbox.write_file("ca.pem", upstreams.ca.read_text())
        assert run(sandbox, fetch("https://pkg.test/whoami")).exit_code == 0
        assert run(sandbox, fetch("https://other.test/whoami")).exit_code == 3
        serve(sandbox, 8000, "served from gVisor\n")
        wait_for(provider.expose(sandbox.key, 8000), "/index.html", b"served from gVisor")
    finally:
        provider.shutdown()


# -- allowed traffic ------------------------------------------------------------------


def test_an_allowed_name_works_over_http_and_https(box: Any) -> None:
    result = run(
        box, fetch("http://pkg.test/hello.txt") + " && " + fetch("https://pkg.test/whoami")
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "hello through the proxy"
    assert json.loads(lines[-1]) == {"server": "up", "host": "pkg.test"}
    wildcard = run(box, fetch("https://alt.pkg.test/whoami"))
    assert (
        wildcard.exit_code == 3 and "not in this sandbox's egress allow list" not in wildcard.stdout
    )
    # alt.pkg.test is allowed by *.pkg.test but has no address: the proxy says so.
    assert "cannot resolve alt.pkg.test" in wildcard.stdout


def test_pip_installs_through_the_proxy(box: Any) -> None:
    command = (
        f"PYTHONPATH={PIP} python3 -m pip --disable-pip-version-check --no-cache-dir "
        "download --no-deps -d dl --cert ca.pem -i https://pkg.test/simple sktestpkg"
        " && ls dl"
    )
    result = run(box, command, timeout=120)
    assert result.exit_code == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "sktestpkg-1.0-py3-none-any.whl" in result.stdout


def test_pip_sees_a_refusal_with_its_reason(box: Any) -> None:
    command = (
        f"PYTHONPATH={PIP} python3 -m pip --disable-pip-version-check --no-cache-dir "
        "download -vv --no-deps -d dl --retries 0 --timeout 10 -i https://other.test/simple x"
    )
    result = run(box, command, timeout=120)
    assert result.exit_code != 0
    assert "sandkit egress: other.test:443 is not in this sandbox's egress allow list" in (
        result.stdout + result.stderr
    )


def test_curl_and_git_work_with_the_proxy_variables(box: Any, upstreams: Upstreams) -> None:
    if run(box, "command -v curl && command -v git").exit_code != 0:
        pytest.skip("the box image has no curl/git (the host's could not be copied in)")
    result = run(box, "curl -sS --cacert ca.pem https://pkg.test/hello.txt")
    assert result.exit_code == 0 and result.stdout == "hello through the proxy\n", result.stderr
    denied = run(box, "curl -sS http://other.test/hello.txt; curl -sS https://other.test/")
    assert (
        "sandkit egress: other.test:80 is not in this sandbox's egress allow list" in denied.stdout
    )
    assert "CONNECT tunnel failed, response 403" in denied.stderr
    if upstreams.git_repo:
        clone = run(
            box,
            "GIT_SSL_CAINFO=ca.pem git clone -q https://pkg.test/repo.git r && cat r/README",
        )
        assert clone.exit_code == 0, clone.stderr
        assert "hello from the test's repository" in clone.stdout


# -- refusals -------------------------------------------------------------------------


REFUSED = [
    ("https://other.test/", "other.test:443 is not in this sandbox's egress allow list"),
    ("http://evil.test/", "evil.test:80 is not in this sandbox's egress allow list"),
    ("http://localhost:8765/", "localhost is this machine"),
    ("http://loop.pkg.test/", "no sandbox may reach"),  # the hosts table says 127.0.0.1
    ("http://rebind.pkg.test/", "no sandbox may reach"),  # the DNS says 127.0.0.1
    ("http://private.pkg.test/", "private address"),  # the DNS says the upstream's
    ("http://127.0.0.1:2375/", "no sandbox may reach"),
    ("http://2130706433/", "a number, not a host name"),
]


def test_refused_destinations_fail_fast_and_say_why(box: Any) -> None:
    for url, words in REFUSED:
        started = time.monotonic()
        # NO_PROXY sends localhost to the box's own loopback; here it must go to the proxy.
        result = run(box, "no_proxy= NO_PROXY= " + fetch(url, ca=False))
        assert time.monotonic() - started < BOUND_S
        assert result.exit_code == 3, (url, result.stdout)
        assert "sandkit egress" in result.stdout and words in result.stdout, (url, result.stdout)


def test_ip_literals_and_dns_answers_need_a_cidr_rule(
    net_provider: DockerProvider, box: Any, upstreams: Upstreams
) -> None:
    k = box.key
    net_provider.set_egress(
        k, {"mode": "allow", "allow": ["pkg.test:*", "dns.test", "rebind.pkg.test"]}
    )
    literal = run(box, fetch(f"http://{upstreams.ip}/hello.txt", ca=False))
    assert literal.exit_code == 3 and "private address" in literal.stdout
    by_dns = run(box, fetch("http://dns.test/whoami", ca=False))
    assert by_dns.exit_code == 3 and "private address" in by_dns.stdout
    rebound = run(box, fetch("http://rebind.pkg.test/", ca=False))
    assert rebound.exit_code == 3 and "no sandbox may reach" in rebound.stdout
    # The operator allows the upstream's address: both work, and only that address.
    net_provider.set_egress(k, {"mode": "allow", "allow": ["dns.test", f"{upstreams.ip}/32:80"]})
    assert run(box, fetch("http://dns.test/whoami", ca=False)).exit_code == 0
    assert run(box, fetch(f"http://{upstreams.ip}/hello.txt", ca=False)).exit_code == 0
    other = run(box, fetch(f"http://{upstreams.other_ip}/hello.txt", ca=False))
    assert other.exit_code == 3


def test_a_relay_is_listening_when_acquire_returns(net_provider: DockerProvider, box: Any) -> None:
    """The relay's exec is waited for (an exec without attached output would be answered
    at once, and the box's first request could find nothing listening), and its failure
    is an error, not a box without a way out."""
    record = net_provider._boxes.box(box.key)
    assert record.container_id is not None
    started = time.monotonic()
    with pytest.raises(SandboxError) as info:
        net_provider.net._exec_detached(
            record.container_id, ["sh", "-c", "sleep 1; echo nope; exit 3"], "testing", wait=True
        )
    assert time.monotonic() - started >= 1.0  # it waited for the exit
    assert info.value.code is ErrorCode.UNAVAILABLE and "exit code 3; nope" in info.value.message
    port = net_provider.options.egress.proxy_port
    probe = f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}))'"
    assert run(box, probe).exit_code == 0


def test_no_route_out_but_the_proxy(
    net_provider: DockerProvider, box: Any, upstreams: Upstreams, docker_client: Any
) -> None:
    script = (
        "import errno, os, socket\n"
        "print(sorted(os.listdir('/sys/class/net')))\n"
        "s = socket.socket()\n"
        "s.settimeout(5)\n"
        "try:\n"
        "    s.connect((%r, 80)); print('CONNECTED')\n"
        "except OSError as e:\n"
        "    print('refused', errno.errorcode.get(e.errno, e.errno))\n"
        "try:\n"
        "    socket.getaddrinfo('pkg.test', 80); print('RESOLVED')\n"
        "except OSError as e:\n"
        "    print('no dns')\n"
        "print(os.path.exists('/var/run/docker.sock'), os.path.exists('/run/docker.sock'))\n"
        "print(sorted(os.listdir('/opt/sandkit-net')))\n"
    ).replace("%r", repr(upstreams.ip))
    result = run(box, f"python3 -c {shlex.quote(script)}")
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "['lo']"
    assert lines[1] == "refused ENETUNREACH"
    assert lines[2] == "no dns"
    assert lines[3] == "False False"
    assert lines[4] == "['egress', 'ingress']"
    # The egress directory is read-only in the box: its socket cannot be replaced.
    replaced = run(
        box, "rm -f /opt/sandkit-net/egress/egress.sock; touch /opt/sandkit-net/egress/x"
    )
    assert "Read-only file system" in replaced.stderr
    # The proxy has no engine socket either, and only the test's internal network.
    proxy = docker_client.containers.get(proxy_name(net_provider.options))
    assert not [m for m in proxy.attrs["Mounts"] if "docker.sock" in (m.get("Source") or "")]
    assert list(proxy.attrs["NetworkSettings"]["Networks"]) == [upstreams.network]


def test_the_host_the_proxy_and_other_boxes_are_refused(
    net_provider: DockerProvider, box: Any, upstreams: Upstreams, docker_client: Any
) -> None:
    """Even a CIDR rule over the whole test network leaves the host's address on it (the
    engine listens there when it listens on TCP), the proxy's own address and other boxes
    out. The proxy refuses before it connects: no packet goes to any of them."""
    network = docker_client.networks.get(upstreams.network)
    host_ip = network.attrs["IPAM"]["Config"][0].get("Gateway")
    proxy = docker_client.containers.get(proxy_name(net_provider.options))
    proxy_ip = proxy.attrs["NetworkSettings"]["Networks"][upstreams.network]["IPAddress"]
    net_provider.set_egress(box.key, {"mode": "allow", "allow": [f"{upstreams.subnet}:*"]})
    assert run(box, fetch(f"http://{upstreams.ip}/hello.txt", ca=False)).exit_code == 0
    targets = [f"http://{proxy_ip}:3128/"]
    if host_ip and host_ip in own_addresses():
        targets += [f"http://{host_ip}:2375/", f"http://{host_ip}:2376/"]
    for url in targets:
        result = run(box, fetch(url, ca=False))
        assert result.exit_code == 3 and "no sandbox may reach" in result.stdout, (url, result)
    # Another box: it has no address at all; its exposed port is a socket in its own
    # directory, which this box does not see, and `localhost` is refused by the proxy.
    other = net_provider.acquire(key("the-other-box"))
    try:
        other.spawn("exec python3 -m http.server 8002 --bind 127.0.0.1")
        net_provider.expose(other.key, 8002)
        seen = run(box, "ls -A /opt/sandkit-net/ingress; ls /opt/sandkit-net/egress")
        assert seen.stdout.split() == ["egress.sock"], seen.stdout
        via_proxy = run(box, "no_proxy= NO_PROXY= " + fetch("http://localhost:8002/", ca=False))
        assert via_proxy.exit_code == 3 and "localhost is this machine" in via_proxy.stdout
        direct = run(box, fetch("http://127.0.0.1:8002/", ca=False))  # NO_PROXY: own loopback
        assert direct.exit_code == 3 and "Connection refused" in direct.stdout
    finally:
        net_provider.destroy(other.key)


# -- changing the policy of a running box ---------------------------------------------


def test_the_policy_changes_on_a_running_box(net_provider: DockerProvider, box: Any) -> None:
    k = box.key
    assert net_provider.egress(k).allow == ("pkg.test:*", "*.pkg.test")
    # A download in flight, then the policy goes to none: new and open connections end.
    download = shlex.quote(STREAM_DOWNLOAD)
    handle = box.spawn(f"python3 -c {download} http://pkg.test/stream")
    deadline = time.monotonic() + BOUND_S
    while "open" not in box.process_output(handle.handle).stdout:
        assert time.monotonic() < deadline, "the download did not start"
        time.sleep(0.1)
    net_provider.set_egress(k, "none")
    done = box.wait_process(handle.handle, timeout=BOUND_S)
    assert done.exit_code is not None, "the open download was not cut"
    said = box.process_output(handle.handle).stdout
    assert "ended" in said or "cut" in said
    refused = run(box, fetch("http://pkg.test/hello.txt", ca=False))
    assert (
        refused.exit_code == 3 and "egress is off for this sandbox (policy none)" in refused.stdout
    )
    net_provider.set_egress(k, {"mode": "allow", "allow": ["other.test"]})
    assert run(box, fetch("https://other.test/whoami")).exit_code == 0
    assert run(box, fetch("https://pkg.test/whoami")).exit_code == 3
    net_provider.set_egress(k, "open")  # public names; the private upstreams need the CIDR
    assert run(box, fetch("https://pkg.test/whoami")).exit_code == 0  # the hosts table
    assert run(box, fetch("http://dns.test/whoami", ca=False)).exit_code == 3


def test_the_ceiling_bounds_set_egress(net_provider: DockerProvider, box: Any) -> None:
    for beyond in ({"mode": "allow", "allow": ["10.0.0.0/8"]}, {"mode": "open", "allow": ["::/0"]}):
        with pytest.raises(SandboxError) as info:
            net_provider.set_egress(box.key, beyond)
        assert info.value.code is ErrorCode.ACCESS_DENIED
    with pytest.raises(SandboxError) as info:
        net_provider.set_egress(box.key, {"mode": "allow", "allow": ["*"]})
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert net_provider.egress(box.key).mode == "allow"  # unchanged


def test_a_keys_policy_survives_release_and_a_new_provider(
    net_provider: DockerProvider, upstreams: Upstreams, maker: Any, net_root: Path
) -> None:
    k = key("survives")
    net_provider.set_egress(k, {"mode": "allow", "allow": ["other.test"]})  # before any box
    sandbox = net_provider.acquire(k)
    sandbox.write_file("ca.pem", upstreams.ca.read_text())
    assert run(sandbox, fetch("https://other.test/whoami")).exit_code == 0
    net_provider.release(k)
    sandbox = net_provider.acquire(k)
    assert run(sandbox, fetch("https://other.test/whoami")).exit_code == 0
    assert run(sandbox, fetch("https://pkg.test/whoami")).exit_code == 3
    other = maker(net_root)
    try:
        assert other.egress(k).allow == ("other.test",)
        again = other.acquire(k)
        assert run(again, fetch("https://other.test/whoami")).exit_code == 0
    finally:
        other._reaper.stop()  # the module's provider shuts the boxes down
    net_provider.destroy(k)
    assert net_provider.egress(k).allow == ("pkg.test:*", "*.pkg.test")


def test_a_dead_proxy_is_brought_back(
    net_provider: DockerProvider, box: Any, docker_client: Any
) -> None:
    assert run(box, fetch("https://pkg.test/whoami")).exit_code == 0
    docker_client.containers.get(proxy_name(net_provider.options)).kill()
    # The restart policy may bring it back at once; set_egress does in any case.
    net_provider.set_egress(box.key, net_provider.egress(box.key))
    deadline = time.monotonic() + BOUND_S
    while run(box, fetch("https://pkg.test/whoami")).exit_code != 0:
        assert time.monotonic() < deadline, "egress did not come back"
        time.sleep(0.5)


# -- exposed ports ----------------------------------------------------------------------


class TestDockerEgressConformance(EgressConformance):
    """The shared egress semantics over the module's upstreams (plain HTTP on 80)."""

    @pytest.fixture
    def egress_provider(self, net_provider: DockerProvider) -> DockerProvider:
        return net_provider

    @pytest.fixture
    def upstream_port(self) -> int:
        return 80


class TestDockerExposeConformance(ExposeConformance):
    """The shared expose semantics, on a provider with expose on and no egress."""

    @pytest.fixture
    def expose_provider(self, make_provider: Any) -> DockerProvider:
        return make_provider(execute_enabled=True, expose={"enabled": True, "max_ports": 2})


def test_the_egress_relays_port_cannot_be_exposed(net_provider: DockerProvider, box: Any) -> None:
    with pytest.raises(SandboxError) as info:
        net_provider.expose(box.key, net_provider.options.egress.proxy_port)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert "belongs to sandkit" in info.value.message


def test_a_warm_pool_box_takes_its_keys_policy(
    maker: Any, upstreams: Upstreams, options_for: Any, tmp_path: Path
) -> None:
    owner = options_for()["owner"] + "-pool"
    provider = maker(tmp_path, owner=owner, warm_pool={"size": 1})
    try:
        deadline = time.monotonic() + 120
        while not (provider._pool and provider._pool.ready_count()):
            assert time.monotonic() < deadline, "the pool box did not start"
            time.sleep(0.2)
        k = key("pooled")
        provider.set_egress(k, {"mode": "allow", "allow": ["other.test"]})
        sandbox = provider.acquire(k)
        sandbox.write_file("ca.pem", upstreams.ca.read_text())
        assert run(sandbox, fetch("https://other.test/whoami")).exit_code == 0
        assert run(sandbox, fetch("https://pkg.test/whoami")).exit_code == 3
    finally:
        provider.shutdown()
