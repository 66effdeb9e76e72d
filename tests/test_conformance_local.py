"""The local provider runs the whole conformance suite."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandkit import ErrorCode, SandboxError, SandboxKey
from sandkit.config import LimitsSettings, Settings
from sandkit.local import LocalProvider, LocalSandbox
from sandkit.paths import UPLOADS
from sandkit.runtime.limits import Limits
from sandkit.testing.conformance import ExposeConformance, SandboxConformance, SearchConformance
from sandkit.testing.conformance.suite import CheckedSandbox, SeedUpload

SECRET = "sk-test-7f3a9c1e5b2d-do-not-print"
# Small enough that a runaway pattern costs the suite seconds, not half a minute.
LIMITS = LimitsSettings(search_timeout_s=3.0, exec_stream_bytes=256 * 1024)


class TestLocalConformance(SandboxConformance):
    processes_outlive_provider = False  # they live in the provider's process

    @pytest.fixture
    def provider(self, make_local: Callable[..., LocalProvider]) -> Iterator[LocalProvider]:
        yield make_local(execute_enabled=True, secrets=[SECRET], limits=LIMITS)

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
        """Uploads arrive from the platform, i.e. straight into the host directory."""
        uploads = (
            data_root / "users" / key.user_id / "threads" / key.thread_id / "user-data" / "uploads"
        )

        def seed(rel: str, data: bytes) -> str:
            host = uploads / rel
            host.parent.mkdir(parents=True, exist_ok=True)
            host.write_bytes(data)
            return f"{UPLOADS}/{rel}"

        return seed

    def test_the_ripgrep_engine_is_in_use(self, sandbox: LocalSandbox) -> None:
        assert sandbox.runtime.context.rg_path is not None


class TestLocalSearchPythonEngine(SearchConformance):
    """glob and grep again with ripgrep switched off: both engines give one result."""

    @pytest.fixture
    def provider(
        self, make_local: Callable[..., LocalProvider], monkeypatch: pytest.MonkeyPatch
    ) -> Iterator[LocalProvider]:
        monkeypatch.setenv("SANDKIT_RG", "none")
        provider = make_local(execute_enabled=True, limits=LIMITS)
        assert provider.acquire(SandboxKey("probe", "probe")).runtime.context.rg_path is None
        yield provider

    @pytest.fixture
    def forbidden_strings(self, data_root: Path) -> list[str]:
        return sorted({str(data_root), os.path.realpath(data_root)})

    @pytest.fixture
    def limits(self) -> Limits:
        return LIMITS.to_limits()


def test_no_conformance_test_shadows_another() -> None:
    """Mixins with a same-named test would silently drop one of them."""
    owners: dict[str, str] = {}
    for cls in SandboxConformance.__mro__[1:]:
        for name in vars(cls):
            if name.startswith("test"):
                assert name not in owners, f"{name} in {owners.get(name)} and {cls.__name__}"
                owners[name] = cls.__name__


class _Leaky:
    """Stands in for a sandbox that leaks a host path in a result and in an error."""

    def read_file(self, path: str) -> dict[str, str]:
        return {"path": "/srv/data/users/u/x.txt"}

    def list_dir(self, path: str) -> None:
        raise SandboxError(ErrorCode.NOT_FOUND, "/srv/data/users/u does not exist")

    async def aread_bytes(self, path: str) -> bytes:
        return b"prefix /srv/data/users suffix"

    def read_bytes(self, path: str) -> bytes:
        return b"\x00\xff clean"


def test_the_leak_check_catches_results_errors_and_bytes() -> None:
    """The suite's masking guarantee is only as good as this proxy."""
    box = CheckedSandbox(_Leaky(), ["/srv/data"])  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="forbidden host string"):
        box.read_file("x")
    with pytest.raises(AssertionError, match="forbidden host string"):
        box.list_dir("x")
    with pytest.raises(AssertionError, match="forbidden host string"):
        asyncio.run(box.aread_bytes("x"))
    assert box.read_bytes("x") == b"\x00\xff clean"


class TestLocalExposeConformance(ExposeConformance):
    """Exposed ports on the host's loopback (local/ports.py): the servers the suite starts
    listen on this host's 127.0.0.1, reached through the provider's socket per port."""

    @pytest.fixture
    def expose_provider(self, tmp_path: Path) -> Iterator[LocalProvider]:
        settings = Settings(
            data_root=tmp_path / "data",
            execute_enabled=True,
            providers={"local": {"expose": {"enabled": True, "max_ports": 2}}},
        )
        provider = LocalProvider(settings)
        yield provider
        provider.shutdown()
