"""sandkit's bubblewrap provider: one bwrap sandbox per (user, thread) on this host.

Written outside the core on `sandkit.boxkit`, as an example of a provider
that inherits the kit's lifecycle and the shared conformance suite
(`docs/providers/writing.md`).
"""

from .box import probe
from .options import BwrapOptions
from .provider import BwrapProvider

__all__ = ["BwrapOptions", "BwrapProvider", "probe"]
