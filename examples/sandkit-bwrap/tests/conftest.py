"""Fixtures for the bwrap provider tests: real bubblewrap boxes on this host, no mocks.

Every provider a test makes uses this session's owner, so whatever a failing
test leaves running is found (by its cgroup) and shut down at the end.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("sandkit_bwrap") is None:  # not installed: run from the tree
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from bwrap_support import TEST_OWNER, bwrap_options, require_bwrap
from sandkit_bwrap import BwrapProvider

from sandkit import Settings
from sandkit.testing import no_ambient_configuration  # noqa: F401 - an autouse fixture

ProviderFactory = Callable[..., BwrapProvider]


@pytest.fixture(scope="session")
def bwrap_ready() -> None:
    require_bwrap()


@pytest.fixture(scope="session", autouse=True)
def _shut_down_leftovers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    yield
    # Boxes of this owner are found by their cgroups, whichever state dir they used.
    with contextlib.suppress(Exception):
        root = tmp_path_factory.mktemp("leftovers")
        BwrapProvider(Settings(data_root=root, providers={"bwrap": bwrap_options()})).shutdown()


@pytest.fixture
def owner() -> str:
    return TEST_OWNER


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    return root


@pytest.fixture
def make_provider(bwrap_ready: None, data_root: Path) -> Iterator[ProviderFactory]:
    """Build providers (default: the test owner on `data_root`); all shut down afterwards."""
    made: list[BwrapProvider] = []

    def make(settings: dict[str, Any] | None = None, **options: Any) -> BwrapProvider:
        fields: dict[str, Any] = {"data_root": data_root, **(settings or {})}
        fields["providers"] = {"bwrap": bwrap_options(**options)}
        provider = BwrapProvider(Settings(**fields))
        made.append(provider)
        return provider

    yield make
    for provider in reversed(made):
        with contextlib.suppress(Exception):
            provider.shutdown()


@pytest.fixture
def provider(make_provider: ProviderFactory) -> BwrapProvider:
    return make_provider()
