"""LangChain's standard sandbox suite on the local provider: SandkitBackend and the reference.

Locally `execute` runs on the host, where the virtual layout does not exist; the
suite's own commands (`cat PATH`, `mkdir -p PATH`) name the paths the backend
was given. So the suite works under a custom mount whose virtual path is its host
path, as a platform would mount a shared directory at the same place. The Docker,
Kubernetes and E2B runs (providers/*/tests) use the workspace itself.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from sandkit import SandboxKey, Settings
from sandkit.config import MountSpec
from sandkit.local import LocalProvider
from tests.deepagents_standard import ReferenceStandard, SandkitStandard, StandardBox


def _local_box(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[StandardBox]:
    base = tmp_path_factory.mktemp(f"standard-{name}")
    ops = (base / "ops").resolve()
    ops.mkdir()
    settings = Settings(
        data_root=base / "data",
        execute_enabled=True,
        mounts=[MountSpec(virtual=str(ops), host=ops, read_only=False)],
    )
    provider = LocalProvider(settings)
    try:
        yield StandardBox(
            provider.acquire(SandboxKey("standard", name)),
            root=f"{ops}/",
            has_python_alias=shutil.which("python") is not None,
        )
    finally:
        provider.shutdown()


class TestSandkitStandardLocal(SandkitStandard):
    @pytest.fixture(scope="class")
    def standard_box(self, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandardBox]:
        yield from _local_box(tmp_path_factory, "sandkit")


class TestReferenceStandardLocal(ReferenceStandard):
    @pytest.fixture(scope="class")
    def standard_box(self, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandardBox]:
        yield from _local_box(tmp_path_factory, "reference")
