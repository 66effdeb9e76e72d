"""The disk full: every write path and a command fill the thread's file system.

A write that does not fit is TOO_LARGE ("No space left on device"), leaves the old
content and no temp file; files written before are intact; a command that fills the
disk just fails; once space is freed, writes work again.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit import ErrorCode, SandboxError, Settings
from sandkit.provider import SandboxProvider
from tests.docker_support import default_base_image, require_docker, unavailable

from .faults_support import fresh_key, note, survived
from .figures import Figures
from .provider_process import OUTPUTS, WORKSPACE, blob, lost_files, seed_files, stray_temp_files
from .targets import LIMITS, OWNER, SECRET, SESSION, Target, forbidden_for


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "32m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` for the block (root only)."""
    if os.geteuid() != 0:
        unavailable("mounting a small tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=755", "tmpfs", str(where)],
        check=True,
        capture_output=True,
    )
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


@contextlib.contextmanager
def full_disk_provider(
    target: Target, make_provider: Callable[..., SandboxProvider], tmp_path: Path
) -> Iterator[tuple[SandboxProvider, Path]]:
    """A provider whose thread data sits on a 32 MiB file system.

    Host-dir kinds: the data root is a small tmpfs. E2B: the files live in the sandbox,
    so the stand-in gives each sandbox a small tmpfs at /mnt/user-data.
    """
    if target.kind == "e2b":
        from e2b_standin import Cloud
        from sandkit_e2b.provider import E2BProvider

        from .targets import API_KEY

        cloud = Cloud(
            require_docker(),
            {"base": default_base_image()},
            SESSION,
            tmpfs={"/mnt/user-data": "size=32m,mode=755"},
        )
        root = tmp_path / "data-e2b"
        root.mkdir()
        settings = Settings(data_root=root, execute_enabled=True, secrets=[SECRET], limits=LIMITS)
        options = {
            "api_key": API_KEY,
            "owner": OWNER,
            "maintenance_interval_s": 0,
            "shutdown": "kill",
            "sync_back": False,
        }
        provider = E2BProvider(
            settings.model_copy(update={"providers": {"e2b": options}}),
            sandbox_class=cloud.sandbox_class(),
        )
        try:
            yield provider, root
        finally:
            provider.shutdown()
            cloud.remove_all()
        return
    with small_tmpfs(tmp_path / "small") as root:
        provider = make_provider(root)
        try:
            yield provider, root
        finally:
            provider.shutdown()  # before the unmount: no box may hold the file system


def test_disk_full_is_too_large_and_loses_nothing(
    target: Target, make_provider: Callable[..., SandboxProvider], tmp_path: Path, figures: Figures
) -> None:
    """Fill the thread's file system through every write path and through a command.

    Each write that does not fit is TOO_LARGE ("No space left on device"), leaves the
    old content and no temp file; files written before are intact; a command that
    fills the disk just fails (exit code, stderr); after space is freed, writes work.
    """
    with full_disk_provider(target, make_provider, tmp_path) as (provider, root):
        forbidden = forbidden_for(root)
        box = provider.acquire(fresh_key("full"))
        expected = seed_files(box, "before")
        victim = f"{WORKSPACE}/victim.txt"
        old = "old content\n" * 8000
        box.write_file(victim, old)
        codes: list[str] = []

        def refused(call: Callable[[], Any]) -> SandboxError:
            with pytest.raises(SandboxError) as info:
                call()
            assert info.value.code is ErrorCode.TOO_LARGE, info.value
            assert not any(f in info.value.message for f in forbidden), info.value.message
            codes.append(f"{info.value.code.value}: {info.value.message}")
            return info.value

        # write_bytes until the file system refuses (32 MiB, 4 MiB each: bounded).
        chunk = blob("fill", 4 * 1024 * 1024)
        for i in range(16):
            try:
                box.write_bytes(f"{WORKSPACE}/fill/chunk{i}.bin", chunk)
            except SandboxError as exc:
                assert exc.code is ErrorCode.TOO_LARGE, exc
                assert "space" in exc.message.lower(), exc.message
                codes.append(f"{exc.code.value}: {exc.message}")
                break
        else:
            pytest.fail("64 MiB fitted on a 32 MiB file system")
        big_text = "new content\n" * (6 * 1024 * 1024 // 12)
        refused(lambda: box.write_file(victim, big_text))
        refused(lambda: box.write_file(victim, big_text, append=True))
        refused(lambda: box.write_bytes(victim, big_text.encode()))
        # A command fills the rest: it fails on its own, it is not a sandkit error.
        filler = box.execute(f"head -c 64M /dev/zero > {WORKSPACE}/fill/dd.bin")
        assert filler.exit_code != 0 and "space" in filler.stderr.lower(), filler
        refused(lambda: box.write_file(f"{WORKSPACE}/small.txt", "x" * 65536))
        refused(lambda: box.edit_file(victim, "old content\n" * 8000, "edited\n" * 20000))
        refused(lambda: box.write_file(victim, "y" * 65536, append=True))

        assert box.read_bytes(victim) == old.encode()
        lost = lost_files(box, expected)
        assert stray_temp_files(box) == []
        # Freeing space makes the next write work.
        assert box.execute(f"rm -rf {WORKSPACE}/fill").exit_code == 0
        box.write_file(victim, big_text)
        assert box.read_bytes(victim) == big_text.encode()
        box.write_file(victim, "appended\n", append=True)
        assert box.read_bytes(victim).endswith(b"new content\nappended\n")
        assert lost_files(box, expected) == lost
        survived(figures, target.kind, len(lost))
        note(
            target.kind,
            "disk full",
            refusals=len(codes),
            files_lost=len(lost),
            first=json.dumps(codes[0]),
        )
        assert lost == []
        assert (
            box.read_bytes(f"{OUTPUTS}/before-report.md") == expected[f"{OUTPUTS}/before-report.md"]
        )
