"""Egress policies: what a box may reach, decided outside the box, changed while it runs.

For providers that enforce egress. A subclass supplies two fixtures:

- `egress_provider`: a provider with command execution on, whose egress settings make the
  names `pkg.test` and `other.test` resolve to one plain-HTTP test server of the subclass's
  own (the proxy's hosts table), a ceiling that allows that server, and the default policy
  `{"mode": "allow", "allow": ["pkg.test:*"]}`;
- `upstream_port`: the port that server serves plain HTTP on.

The only traffic is to that server, and to the box's own loopback through the proxy (which
refuses it without connecting).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from sandkit import ErrorCode, SandboxKey
from sandkit.provider import SandboxProvider

from .suite import raises_code, unique

REFUSED = "not in this sandbox's egress allow list"
# In a box: GET a URL with urllib (it reads the proxy variables); exit 3 on any error.
FETCH = """
import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())
except Exception as exc:
    print('ERROR', exc); sys.exit(3)
"""
# In a box: one request in absolute form straight to the proxy (no NO_PROXY shortcut).
VIA_PROXY = """
import os, socket, sys, urllib.parse
proxy = urllib.parse.urlsplit(os.environ['HTTP_PROXY'])
with socket.create_connection((proxy.hostname, proxy.port), timeout=20) as s:
    head = 'GET %s HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n'
    s.sendall((head % sys.argv[1]).encode())
    print(s.recv(4096).decode('latin-1').splitlines()[0])
"""

# In a box (or on the host): one TCP connect to (argv[1], argv[2]) that goes around any
# proxy; prints "open" or "closed <exception type>".
CONNECT_PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()
    print("open")
except OSError as exc:
    print("closed", type(exc).__name__)
"""


def run(box: Any, script: str, *args: str) -> Any:
    box.write_file("egress_probe.py", script)
    return box.execute(shlex.join(["python3", "egress_probe.py", *args]), timeout=60)


class EgressTests:
    @pytest.fixture
    def egress_provider(self) -> SandboxProvider:  # pragma: no cover - supplied by a subclass
        raise NotImplementedError

    @pytest.fixture
    def upstream_port(self) -> int:  # pragma: no cover - supplied by a subclass
        raise NotImplementedError

    @pytest.fixture
    def key(self, egress_provider: SandboxProvider) -> Iterator[SandboxKey]:
        key = SandboxKey(unique("user"), unique("egress"))
        yield key
        egress_provider.destroy(key)

    def url(self, host: str, port: int, path: str = "/") -> str:
        return f"http://{host}:{port}{path}"

    def test_the_default_policy_allows_its_names_only(
        self, egress_provider: SandboxProvider, key: SandboxKey, upstream_port: int
    ) -> None:
        box = egress_provider.acquire(key)
        allowed = run(box, FETCH, self.url("pkg.test", upstream_port, "/whoami"))
        assert allowed.exit_code == 0, allowed
        denied = run(box, FETCH, self.url("other.test", upstream_port, "/whoami"))
        assert denied.exit_code == 3 and REFUSED in denied.stdout, denied

    def test_the_box_s_own_loopback_is_refused_through_the_proxy(
        self, egress_provider: SandboxProvider, key: SandboxKey
    ) -> None:
        box = egress_provider.acquire(key)
        for target in ("http://localhost:8765/", "http://127.0.0.1:8765/", "http://[::1]:8765/"):
            answer = run(box, VIA_PROXY, target)
            assert answer.exit_code == 0 and " 403 " in answer.stdout, (target, answer)

    def test_a_policy_changes_on_a_running_box_and_outlives_a_release(
        self, egress_provider: SandboxProvider, key: SandboxKey, upstream_port: int
    ) -> None:
        box = egress_provider.acquire(key)
        assert run(box, FETCH, self.url("other.test", upstream_port)).exit_code == 3
        wanted = {"mode": "allow", "allow": ["other.test:*"]}
        changed = egress_provider.set_egress(key, wanted)
        assert changed.allow == ("other.test:*",)
        assert run(box, FETCH, self.url("other.test", upstream_port)).exit_code == 0
        assert run(box, FETCH, self.url("pkg.test", upstream_port)).exit_code == 3
        egress_provider.release(key)
        again = egress_provider.acquire(key)
        assert egress_provider.egress(key) == changed
        assert run(again, FETCH, self.url("other.test", upstream_port)).exit_code == 0
        egress_provider.set_egress(key, {"mode": "none"})
        assert run(again, FETCH, self.url("other.test", upstream_port)).exit_code == 3

    def test_destroy_forgets_the_key_s_policy(
        self, egress_provider: SandboxProvider, key: SandboxKey
    ) -> None:
        default = egress_provider.egress(key)
        egress_provider.acquire(key)
        egress_provider.set_egress(key, {"mode": "allow", "allow": ["other.test:*"]})
        egress_provider.destroy(key)
        assert egress_provider.egress(key) == default

    def test_refusals(self, egress_provider: SandboxProvider, key: SandboxKey) -> None:
        with raises_code(ErrorCode.ACCESS_DENIED):  # beyond the ceiling
            egress_provider.set_egress(key, {"mode": "allow", "allow": ["10.0.0.0/8:*"]})
        for bad in ({"mode": "bogus"}, {"mode": "allow", "allow": ["no spaces allowed"]}, 42):
            with raises_code(ErrorCode.INVALID_ARGUMENT):
                egress_provider.set_egress(key, bad)  # type: ignore[arg-type]
        assert egress_provider.egress(key) is not None
