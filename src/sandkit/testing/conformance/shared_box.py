"""Fixtures for a provider that hands one running box to a whole test class.

The suite gives every test its own directory, so one box may serve a class
(that keeps container and pod suites fast); the lifecycle tests make their
own keys and therefore their own boxes. A subclass supplies `provider`,
`shared_key`, `forbidden_strings`, `seed_upload` and the `configured_secret` it
configured; `host_seeder` and `host_forbidden` cover providers whose thread
data lives in host directories, and `check_live_upload` is the upload check for
a provider whose commands are confined to the box.
"""

from __future__ import annotations

import os
import shlex
import uuid
from pathlib import Path
from typing import ClassVar

import pytest

from sandkit import ErrorCode, SandboxError, SandboxKey
from sandkit.config import LimitsSettings
from sandkit.paths import UPLOADS
from sandkit.provider import SandboxProvider
from sandkit.runtime.limits import Limits
from sandkit.sandbox import Sandbox

from . import SandboxConformance
from .suite import SeedUpload

# Small enough that a runaway pattern costs the suite seconds, not half a minute.
SUITE_LIMITS = LimitsSettings(search_timeout_s=3.0, exec_stream_bytes=256 * 1024)


def host_forbidden(data_root: Path) -> list[str]:
    """The host data root, in both spellings, must never come back."""
    return sorted({str(data_root), os.path.realpath(data_root)})


def host_seeder(data_root: Path, key: SandboxKey) -> SeedUpload:
    """Uploads arrive from the platform: straight into the thread's host directory."""
    uploads = data_root / "users" / key.user_id / "threads" / key.thread_id / "user-data"
    uploads = uploads / "uploads"

    def seed(rel: str, data: bytes) -> str:
        host = uploads / rel
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_bytes(data)
        return f"{UPLOADS}/{rel}"

    return seed


class SharedBoxConformance(SandboxConformance):
    configured_secret: ClassVar[str]
    suite_limits: ClassVar[LimitsSettings] = SUITE_LIMITS

    @pytest.fixture
    def key(self, shared_key: SandboxKey) -> SandboxKey:
        return shared_key

    @pytest.fixture
    def sandbox(self, provider: SandboxProvider, key: SandboxKey) -> Sandbox:
        # Not released after each test: the next test reuses the running box.
        return provider.acquire(key)

    @pytest.fixture
    def secret_values(self) -> list[str]:
        return [self.configured_secret]

    @pytest.fixture
    def limits(self) -> Limits:
        return self.suite_limits.to_limits()


def check_live_upload(provider: SandboxProvider, key: SandboxKey) -> None:
    """`provider.upload` reaches the key's running box at once, so do a replacement and a
    removal; the box's own commands can neither change nor delete an upload."""
    box = provider.acquire(key)
    rel = f"live-{uuid.uuid4().hex[:8]}/in.txt"
    path = provider.upload(key, rel, b"from the host\n").path
    assert path == f"{UPLOADS}/{rel}"
    parent = path.rsplit("/", 1)[0]
    directory, quoted = shlex.quote(parent), shlex.quote(path)
    assert box.execute(f"cat {quoted}").stdout == "from the host\n"
    attempts = (
        f"echo changed > {quoted}",
        f"rm -f {quoted}",
        f"mv {quoted} {quoted}.moved",
        f"touch {directory}/planted",
        f"rm -rf {directory}",
    )
    box.execute("; ".join(attempts))  # each one fails; the next is tried all the same
    assert box.read_bytes(path) == b"from the host\n"
    assert [e.name for e in box.list_dir(parent).entries] == ["in.txt"]
    provider.upload(key, rel, b"replaced\n")
    assert box.execute(f"cat {quoted}").stdout == "replaced\n"
    assert f"{UPLOADS}/{rel}" in [f.path for f in provider.list_uploads(key).files]
    provider.remove_upload(key, rel)
    assert box.execute(f"test -e {quoted}").exit_code != 0
    try:
        box.read_file(path)
    except SandboxError as exc:
        assert exc.code is ErrorCode.NOT_FOUND
    else:
        raise AssertionError(f"{path} is still there after remove_upload")
