"""What a provider's own test suite is built from (needs `pip install 'sandkit[testing]'`).

    from sandkit.testing import SandboxConformance, no_ambient_configuration

- `conformance`: the suite every provider passes unchanged (subclass
  `SandboxConformance`, supply a `provider` and `forbidden_strings`);
- `no_ambient_configuration`: an autouse-able fixture that keeps a
  developer's `SANDKIT_*` variables and `./sandkit.yaml` out of the results.

`docs/providers/writing.md` walks through a provider that uses both.
"""

import pytest

# Plain asserts in the suite report their values, as in a test module.
pytest.register_assert_rewrite("sandkit.testing.conformance")

from .ambient import no_ambient_configuration  # noqa: E402
from .conformance import (  # noqa: E402
    CheckedSandbox,
    ConformanceBase,
    OperationConformance,
    SandboxConformance,
    SearchConformance,
)
from .conformance.shared_box import (  # noqa: E402
    SUITE_LIMITS,
    SharedBoxConformance,
    host_forbidden,
    host_seeder,
)
from .conformance.suite import SeedUpload  # noqa: E402

__all__ = [
    "SUITE_LIMITS",
    "CheckedSandbox",
    "ConformanceBase",
    "OperationConformance",
    "SandboxConformance",
    "SearchConformance",
    "SeedUpload",
    "SharedBoxConformance",
    "host_forbidden",
    "host_seeder",
    "no_ambient_configuration",
]
