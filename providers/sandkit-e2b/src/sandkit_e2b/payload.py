"""What goes into every sandbox: the shared agent payload (`sandkit.boxkit`), gzipped.

Gzip, so a cold create uploads ~2.5 MiB rather than ~6 MiB. The archive is
installed under a directory named by its digest, so a sandbox created by
another sandkit version is recognised (`files.exists`) and given this
version's agent next to its old one.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip

from sandkit import boxkit
from sandkit.boxkit import AGENT_DIR as AGENT_ROOT

__all__ = ["AGENT_ROOT", "Payload", "build_payload"]


@dataclasses.dataclass(frozen=True)
class Payload:
    archive: bytes  # tar.gz: agent.pyz [, bin/rg]
    digest: str  # of the uncompressed tar (the shared payload's digest)
    has_rg: bool

    @property
    def directory(self) -> str:
        return f"{AGENT_ROOT}/p-{self.digest}"

    @property
    def agent_path(self) -> str:
        return f"{self.directory}/agent.pyz"

    @property
    def rg_path(self) -> str | None:
        return f"{self.directory}/bin/rg" if self.has_rg else None

    def upload_path(self, install: str) -> str:
        """Where one install uploads the archive: its own file, as two providers adopting
        one sandbox install at once."""
        return f"/tmp/sandkit-payload-{self.digest}-{install}.tar.gz"


@functools.cache
def build_payload(with_rg: bool = True) -> Payload:
    shared = boxkit.build_payload(with_rg)
    # mtime=0: the same content gives the same bytes.
    archive = gzip.compress(shared.archive, compresslevel=6, mtime=0)
    return Payload(archive, shared.digest, shared.has_rg)
