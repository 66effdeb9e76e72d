"""Shared fixtures: an isolated configuration and local providers on a temp data root."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit.config import Settings
from sandkit.local import LocalProvider
from sandkit.testing.ambient import clear_ambient_configuration
from tests.hardening.figures import FIGURES


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest groups first (pytest-xdist hands them out in this order): the hardening
    modules, then the provider suites, then the rest, so no long one starts last."""

    def weight(item: pytest.Item) -> int:
        path = item.nodeid
        if "tests/hardening/" in path:
            return 0
        return 1 if path.startswith(("providers/", "examples/")) else 2

    items.sort(key=weight)  # stable: the order within a group stays


@pytest.fixture(autouse=True, scope="session")
def _no_ambient_configuration() -> Iterator[None]:
    """A developer's sandkit configuration must not change test results (the CLI tests
    look for ./sandkit.yaml themselves, so the config file is only unset here)."""
    with pytest.MonkeyPatch.context() as patch:
        clear_ambient_configuration(patch, None)
        yield


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def make_local(data_root: Path) -> Iterator[Callable[..., LocalProvider]]:
    """Build LocalProviders on `data_root` (settings as keywords); all shut down after."""
    made: list[LocalProvider] = []

    def make(**overrides: Any) -> LocalProvider:
        settings = Settings(**{"data_root": data_root, **overrides})
        provider = LocalProvider(settings)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.shutdown()


# The hardening figures (tests/hardening/figures.py): collected where the tests run, which
# under pytest-xdist is the workers; each hands its own to the controller, which prints them.


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["sandkit_figures"] = FIGURES.export()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    exported = getattr(node, "workeroutput", {}).get("sandkit_figures")
    if exported:
        FIGURES.merge(exported)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if hasattr(terminalreporter.config, "workeroutput"):
        return  # a worker: the controller prints
    table = FIGURES.table()
    if table:
        terminalreporter.section("hardening figures")
        terminalreporter.write_line(table)
        FIGURES.dump()
