"""The whole conformance suite through the agent: stdio child processes and HTTP.

A small provider here runs each key's sandbox as `RemoteSandbox` over a
local `agent.pyz --stdio` process on the thread's host directories, so the
suite (lifecycle included) exercises agent, protocol and transport with the
same expectations as the in-process local provider.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandkit import SandboxKey
from sandkit.config import LimitsSettings, Settings
from sandkit.local import build_context
from sandkit.paths import UPLOADS, ThreadLayout
from sandkit.provider import SandboxProvider
from sandkit.remote import RemoteSandbox
from sandkit.runtime.limits import Limits
from sandkit.transports.http import HttpTransport
from sandkit.transports.local_process import agent_opener
from sandkit.transports.stdio import StdioTransport

from .conformance import SandboxConformance
from .conformance.suite import SeedUpload
from .remote_support import HttpAgent, config_of, find_rg, start_http_agent

SECRET = "sk-test-7f3a9c1e5b2d-do-not-print"
LIMITS = LimitsSettings(search_timeout_s=3.0)
HTTP_KEY = SandboxKey("http-user", "http-thread")


class AgentProcessProvider(SandboxProvider):
    """One local agent process per key, spoken to over stdio."""

    name = "agent-process"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._rg = find_rg()
        self._lock = threading.Lock()
        self._active: dict[SandboxKey, RemoteSandbox] = {}

    def acquire(self, key: SandboxKey) -> RemoteSandbox:
        with self._lock:
            sandbox = self._active.get(key)
            if sandbox is None:
                layout = ThreadLayout.for_key(self.settings, key)
                layout.create_dirs()
                context = build_context(self.settings, layout, self._rg)
                transport = StdioTransport(agent_opener(), config_of(context))
                sandbox = RemoteSandbox(transport, key.sandbox_id, limits=context.limits)
                self._active[key] = sandbox
            return sandbox

    def get(self, key: SandboxKey) -> RemoteSandbox | None:
        with self._lock:
            return self._active.get(key)

    def release(self, key: SandboxKey) -> None:
        with self._lock:
            sandbox = self._active.pop(key, None)
        if sandbox is not None:
            sandbox.close()

    def destroy(self, key: SandboxKey) -> None:
        self.release(key)

    def shutdown(self) -> None:
        with self._lock:
            sandboxes = list(self._active.values())
            self._active.clear()
        for sandbox in sandboxes:
            sandbox.close()


def host_seed(data_root: Path, key: SandboxKey) -> SeedUpload:
    uploads = (
        data_root / "users" / key.user_id / "threads" / key.thread_id / "user-data" / "uploads"
    )

    def seed(rel: str, data: bytes) -> str:
        host = uploads / rel
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_bytes(data)
        return f"{UPLOADS}/{rel}"

    return seed


def settings_for(data_root: Path) -> Settings:
    return Settings(data_root=data_root, execute_enabled=True, secrets=[SECRET], limits=LIMITS)


class TestStdioAgentConformance(SandboxConformance):
    @pytest.fixture
    def provider(self, data_root: Path) -> Iterator[AgentProcessProvider]:
        provider = AgentProcessProvider(settings_for(data_root))
        try:
            yield provider
        finally:
            provider.shutdown()

    @pytest.fixture
    def forbidden_strings(self, data_root: Path) -> list[str]:
        return sorted({str(data_root), os.path.realpath(data_root)})

    @pytest.fixture
    def secret_values(self) -> list[str]:
        return [SECRET]

    @pytest.fixture
    def limits(self) -> Limits:
        return LIMITS.to_limits()

    @pytest.fixture
    def seed_upload(self, data_root: Path, key: SandboxKey) -> SeedUpload:
        return host_seed(data_root, key)


@pytest.fixture(scope="module")
def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("http-agent") / "data"


@pytest.fixture(scope="module")
def http_agent(shared_root: Path) -> Iterator[HttpAgent]:
    settings = settings_for(shared_root)
    layout = ThreadLayout.for_key(settings, HTTP_KEY)
    layout.create_dirs()
    context = build_context(settings, layout, find_rg())
    agent = start_http_agent(context, shared_root.parent)
    try:
        yield agent
    finally:
        agent.stop()


class TestHttpAgentConformance(SandboxConformance):
    """One HTTP agent for the whole class; each test works in its own directory.

    Lifecycle tests skip (no provider): starting an agent per test would
    only measure process start-up.
    """

    @pytest.fixture
    def data_root(self, shared_root: Path) -> Path:
        return shared_root

    @pytest.fixture
    def key(self) -> SandboxKey:
        return HTTP_KEY

    @pytest.fixture
    def sandbox(self, http_agent: HttpAgent) -> Iterator[RemoteSandbox]:
        transport = HttpTransport(http_agent.url, http_agent.token)
        sandbox = RemoteSandbox(transport, HTTP_KEY.sandbox_id, limits=LIMITS.to_limits())
        try:
            yield sandbox
        finally:
            sandbox.close()

    @pytest.fixture
    def forbidden_strings(self, data_root: Path) -> list[str]:
        return sorted({str(data_root), os.path.realpath(data_root)})

    @pytest.fixture
    def secret_values(self) -> list[str]:
        return [SECRET]

    @pytest.fixture
    def limits(self) -> Limits:
        return LIMITS.to_limits()

    @pytest.fixture
    def seed_upload(self, data_root: Path, key: SandboxKey) -> SeedUpload:
        return host_seed(data_root, key)
