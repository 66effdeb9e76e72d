"""Every hardening test runs once per provider kind, through `target` and `make_provider`.

A kind whose platform is missing (no Docker engine, no cluster) skips with the
reason on a laptop and fails under CI=true, like the provider suites.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit.provider import SandboxProvider

from .figures import FIGURES, Figures
from .targets import BUILDERS, KINDS, Target

_built: dict[str, Target] = {}


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


def pytest_terminal_summary(terminalreporter: Any) -> None:
    table = FIGURES.table()
    if table:
        terminalreporter.section("hardening figures")
        terminalreporter.write_line(table)
        FIGURES.dump()
