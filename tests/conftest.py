"""Shared fixtures: an isolated configuration and local providers on a temp data root."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit.config import Settings
from sandkit.local import LocalProvider
from sandkit.testing.ambient import clear_ambient_configuration


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
