"""Every hardening test runs once per provider kind, through `target` and `make_provider`.

A kind whose platform is missing (no Docker engine, no cluster) skips with the
reason on a laptop and fails under CI=true, like the provider suites.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit.provider import SandboxProvider

from .figures import FIGURES, Figures
from .targets import BUILDERS, GVISOR_KINDS, KINDS, POOL_KINDS, Target

_built: dict[str, Target] = {}


# The heaviest per-kind cases, which on the gVisor kinds measure speed and nothing else
# (the code under test is the runc kinds' code; the kernel behaviour they depend on is
# covered by the cases that do run there): deselected on those kinds, not skipped, unless
# SANDKIT_HARDENING_GVISOR_FULL=1. docs/security.md ("gVisor in CI") has the reasoning.
GVISOR_DESELECTED = {
    "test_fifty_threads_of_mixed_operations",  # 50 boxes x 200 ops: 350 s, CPU-bound
    "test_fifty_threads_with_a_warm_pool",  # the same with a pool
    "test_one_gib_file",  # 1 GiB through the gofer: 115 s
}
# Cases about warm pools: not collected for the kinds that have none (local, E2B).
POOL_CASES = {"test_fifty_threads_with_a_warm_pool"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    full_gvisor = os.environ.get("SANDKIT_HARDENING_GVISOR_FULL", "") == "1"
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        kind = callspec.params.get("target") if callspec is not None else None
        name = getattr(item, "originalname", item.name)
        heavy = kind in GVISOR_KINDS and name in GVISOR_DESELECTED and not full_gvisor
        no_pool = name in POOL_CASES and kind not in POOL_KINDS
        (drop if heavy or no_pool else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session", params=KINDS)
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    kind = str(request.param)
    if kind not in _built:
        _built[kind] = BUILDERS[kind]()  # skips (or fails in CI) when the platform is missing
    yield _built[kind]


@pytest.fixture(scope="session", autouse=True)
def _remove_leftovers() -> Iterator[None]:
    yield
    for built in _built.values():
        with contextlib.suppress(Exception):
            built.cleanup()


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    return root


@pytest.fixture
def make_provider(target: Target, data_root: Path) -> Iterator[Callable[..., SandboxProvider]]:
    """Providers of the current kind (default: on `data_root`); all shut down afterwards."""
    made: list[SandboxProvider] = []

    def make(root: Path | None = None, **kwargs: Any) -> SandboxProvider:
        provider = target.make(root or data_root, **kwargs)
        made.append(provider)
        return provider

    yield make
    for provider in reversed(made):
        with contextlib.suppress(Exception):
            provider.shutdown()


@pytest.fixture
def provider(make_provider: Callable[..., SandboxProvider]) -> SandboxProvider:
    return make_provider()


@pytest.fixture(scope="session")
def figures() -> Figures:
    return FIGURES
