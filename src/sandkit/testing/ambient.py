"""A test suite's guard against a developer's own sandkit configuration."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from ..config import CONFIG_ENV, Settings


def clear_ambient_configuration(patch: pytest.MonkeyPatch, config_file: str | None) -> None:
    """Unset every variable that configures sandkit (settings fields, the config file, the
    rg override, the CLI's user and thread); point the config file at `config_file`, and
    the user's config directory at one that does not exist (no ~/.config/sandkit).

    Variables of the test infrastructure (SANDKIT_BASE_IMAGE, say) stay.
    """
    patch.setenv("XDG_CONFIG_HOME", os.path.join(os.sep, "nonexistent", "sandkit-tests"))
    configuring = {f"SANDKIT_{name.upper()}" for name in Settings.model_fields}
    configuring |= {CONFIG_ENV, "SANDKIT_RG", "SANDKIT_USER", "SANDKIT_THREAD"}
    for name in list(os.environ):
        if name in configuring or any(name.startswith(v + "__") for v in configuring):
            patch.delenv(name)
    if config_file is not None:
        patch.setenv(CONFIG_ENV, config_file)


@pytest.fixture(scope="session", autouse=True)
def no_ambient_configuration() -> Iterator[None]:
    """A developer's SANDKIT_* variables or ./sandkit.yaml must not change test results.

    Import it into a provider suite's conftest (it is autouse); values the suite
    needs from the environment (an image, a kubeconfig) are read at import time.
    """
    with pytest.MonkeyPatch.context() as patch:
        clear_ambient_configuration(patch, os.devnull)
        yield
