"""The shared conformance suite every provider runs unchanged.

    from sandkit.testing.conformance import SandboxConformance

    class TestMyProviderConformance(SandboxConformance):
        @pytest.fixture
        def provider(self): ...          # or: def sandbox(self): ...
        @pytest.fixture
        def forbidden_strings(self): ...

See `suite.py` for every fixture a provider may supply; `shared_box.py`
serves one running box to a whole class (what container and pod suites
want). It ships in the wheel (`pip install 'sandkit[testing]'`), so a
provider written outside this repository inherits it, as fsspec's
implementations inherit `fsspec/tests/abstract`.
"""

from __future__ import annotations

from .asyncops import AsyncTests
from .egress import EgressTests
from .executing import ExecuteTests, RedactionTests
from .exposing import ExposeTests
from .files import BytesTests, EditFileTests, ReadFileTests, WriteFileTests
from .globbing import GlobTests
from .grepping import GrepTests
from .jail import NameTests, ReadOnlyTests, SymlinkTests
from .lifecycle import LifecycleTests
from .listing import ListDirTests
from .masking import MaskingTests
from .processes import ProcessTests, StreamTests
from .suite import CheckedSandbox, ConformanceBase


class SearchConformance(GlobTests, GrepTests):
    """glob and grep only: for running the search area against a second engine."""


class OperationConformance(
    ReadFileTests,
    WriteFileTests,
    EditFileTests,
    BytesTests,
    ListDirTests,
    GlobTests,
    GrepTests,
    ExecuteTests,
    RedactionTests,
    StreamTests,
    ProcessTests,
    ReadOnlyTests,
    SymlinkTests,
    NameTests,
    MaskingTests,
    AsyncTests,
):
    """Every operation test, for a subclass that can only hand out one `sandbox`."""


class SandboxConformance(OperationConformance, LifecycleTests):
    """Every conformance test; subclass it and supply the fixtures in `suite.py`."""


class EgressConformance(EgressTests):
    """Egress policies, for a provider that enforces them: supply `egress_provider` and
    `upstream_port` (see `egress.py`)."""


class ExposeConformance(ExposeTests):
    """Exposed ports and the preview gateway, for a provider that can expose them: supply
    `expose_provider` (see `exposing.py`)."""


__all__ = [
    "CheckedSandbox",
    "ConformanceBase",
    "EgressConformance",
    "ExposeConformance",
    "OperationConformance",
    "SandboxConformance",
    "SearchConformance",
]
