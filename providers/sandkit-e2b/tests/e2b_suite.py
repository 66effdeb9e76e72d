"""The conformance fixtures shared by the stand-in run and the live run.

A module using `E2BConformance` supplies the module fixtures `e2b_provider`,
`e2b_root` (the provider's data root) and `shared_key`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sandkit_e2b.provider import E2BProvider

from sandkit.provider import SandboxProvider
from sandkit.testing.conformance.shared_box import SharedBoxConformance, host_forbidden

# E2B's own home directory must never come back from the API either.
E2B_HOME = "/home/user"


class E2BConformance(SharedBoxConformance):
    @pytest.fixture
    def provider(self, e2b_provider: E2BProvider) -> E2BProvider:
        return e2b_provider

    def another_instance(self, provider: SandboxProvider) -> SandboxProvider:
        assert isinstance(provider, E2BProvider)
        return E2BProvider(provider.settings, sandbox_class=provider.sdk)

    @pytest.fixture
    def forbidden_strings(self, e2b_root: Path) -> list[str]:
        return [*host_forbidden(e2b_root), E2B_HOME]
