"""Shared fixtures: an isolated configuration and local providers on a temp data root."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit.config import Settings
from sandkit.local import LocalProvider


@pytest.fixture(autouse=True, scope="session")
def _no_ambient_configuration() -> Iterator[None]:
    """A developer's sandkit configuration must not change test results.

    Only what configures sandkit itself is cleared (settings fields, the config
    file, the rg override); test-infrastructure variables such as
    SANDKIT_BASE_IMAGE, which `.ci/run` exports, stay.
    """
    configuring = {f"SANDKIT_{name.upper()}" for name in Settings.model_fields}
    configuring |= {"SANDKIT_CONFIG", "SANDKIT_RG", "SANDKIT_USER", "SANDKIT_THREAD"}
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name in configuring or any(name.startswith(v + "__") for v in configuring):
                patch.delenv(name)
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
