"""The provider suites' guard against a developer's own sandkit configuration."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _no_ambient_configuration() -> Iterator[None]:
    """A developer's SANDKIT_* variables or ./sandkit.yaml must not change test results.

    A provider suite's conftest imports this fixture; values it needs from the
    environment (test image, kubeconfig) are read at import, before this runs.
    """
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("SANDKIT_"):
                patch.delenv(name)
        patch.setenv("SANDKIT_CONFIG", os.devnull)
        yield
