"""The whole conformance suite through the agent: over stdio and over HTTP.

One local agent process per carrier serves the suite on a thread's host
directories (each test works in its own directory), so agent, protocol and
transport meet the same expectations as the in-process local provider. The
lifecycle tests run against a small provider that starts one agent process
per key.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandkit import SandboxKey
from sandkit.config import LimitsSettings, Settings
from sandkit.local import LocalProvider, build_context
from sandkit.paths import UPLOADS, ThreadLayout
from sandkit.remote import RemoteSandbox
from sandkit.runtime.context import Context
from sandkit.runtime.limits import Limits
from sandkit.testing.conformance import OperationConformance
from sandkit.testing.conformance.executing import ExecuteTests, RedactionTests
from sandkit.testing.conformance.grepping import GrepTests
from sandkit.testing.conformance.lifecycle import LifecycleTests
from sandkit.testing.conformance.processes import ProcessTests, StreamTests
from sandkit.testing.conformance.suite import SeedUpload
from sandkit.transports.http import HttpTransport
from sandkit.transports.local_process import agent_opener
from sandkit.transports.stdio import StdioTransport

from .conformance_areas import carrier_areas_only
from .remote_support import HttpAgent, config_of, find_rg, start_http_agent

SECRET = "sk-test-7f3a9c1e5b2d-do-not-print"
LIMITS = LimitsSettings(search_timeout_s=3.0)
SHARED_KEY = SandboxKey("agent-user", "agent-thread")


class AgentProcessProvider(LocalProvider):
    """The local provider's bookkeeping, but each key's runtime is a local agent
    process spoken to over stdio."""

    name = "agent-process"

    def _open(self, key: SandboxKey, context: Context) -> RemoteSandbox:  # type: ignore[override]
        transport = StdioTransport(agent_opener(), config_of(context))
        return RemoteSandbox(transport, key.sandbox_id, limits=context.limits)


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


class _SharedFixtures:
    """Fixtures for one long-lived agent on a fixed key (each test has its own dir)."""

    @pytest.fixture
    def data_root(self, shared_root: Path) -> Path:
        return shared_root

    @pytest.fixture
    def key(self) -> SandboxKey:
        return SHARED_KEY

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


class _Shared(_SharedFixtures, OperationConformance):
    """The whole suite on the shared agent."""


@pytest.fixture(scope="module")
def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("agent") / "data"
    ThreadLayout.for_key(settings_for(root), SHARED_KEY).create_dirs()
    return root


def shared_context(root: Path) -> Context:
    settings = settings_for(root)
    return build_context(settings, ThreadLayout.for_key(settings, SHARED_KEY), find_rg())


@pytest.fixture(scope="module")
def stdio_transport(shared_root: Path) -> Iterator[StdioTransport]:
    transport = StdioTransport(agent_opener(), config_of(shared_context(shared_root)))
    try:
        yield transport
    finally:
        transport.close()


@pytest.fixture(scope="module")
def http_agent(shared_root: Path) -> Iterator[HttpAgent]:
    agent = start_http_agent(shared_context(shared_root), shared_root.parent)
    try:
        yield agent
    finally:
        agent.stop()


class TestStdioAgentConformance(_Shared):
    """The suite through one `agent.pyz --stdio` child process (lifecycle: see below)."""

    @pytest.fixture
    def sandbox(self, stdio_transport: StdioTransport) -> RemoteSandbox:
        # Not closed per test: closing would close the shared channel.
        return RemoteSandbox(stdio_transport, SHARED_KEY.sandbox_id, limits=LIMITS.to_limits())


class TestSleepingStdioAgentConformance(
    _SharedFixtures, GrepTests, ExecuteTests, RedactionTests, StreamTests, ProcessTests
):
    """The areas where an agent holds state (limits, secrets, ripgrep, its supervisor's
    processes) through a stdio agent put to sleep before every test: each
    test's first call wakes a fresh agent from the dormant one (agent/dormant.py), so
    waking must give the same results and errors as never sleeping."""

    @pytest.fixture
    def sandbox(self, stdio_transport: StdioTransport) -> RemoteSandbox:
        assert stdio_transport.call("ping", {}, 30) == {"pong": True}  # a live channel
        assert stdio_transport.sleep(), "an idle agent goes to sleep"
        return RemoteSandbox(stdio_transport, SHARED_KEY.sandbox_id, limits=LIMITS.to_limits())


@carrier_areas_only
class TestHttpAgentConformance(_Shared):
    """The suite through one `agent.pyz --http` on 127.0.0.1: what the carrier carries (the
    stdio class runs everything; Docker and Kubernetes run all of it over http in boxes)."""

    @pytest.fixture
    def sandbox(self, http_agent: HttpAgent) -> Iterator[RemoteSandbox]:
        transport = HttpTransport(http_agent.url, http_agent.token)
        sandbox = RemoteSandbox(transport, SHARED_KEY.sandbox_id, limits=LIMITS.to_limits())
        try:
            yield sandbox
        finally:
            sandbox.close()


class TestAgentProcessLifecycle(LifecycleTests):
    """Provider lifecycle with one agent process per key."""

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
