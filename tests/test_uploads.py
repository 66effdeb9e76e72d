"""A host application's uploads on the local provider (the shared host-side implementation).

The box providers use the same code (Docker, Kubernetes) or wrap it (E2B); their
conformance suites seed every upload through `provider.upload` into a running box.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandkit import ErrorCode, SandboxError, SandboxKey, Settings
from sandkit.local import LocalProvider
from sandkit.paths import UPLOADS, ThreadLayout

KEY = SandboxKey("alice", "thread-1")


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[LocalProvider]:
    settings = Settings(data_root=tmp_path / "data", limits={"transfer_max_bytes": 1024})
    with LocalProvider(settings) as made:
        yield made


def host_uploads(provider: LocalProvider, key: SandboxKey = KEY) -> Path:
    return ThreadLayout.for_key(provider.settings, key).user_data_dir / "uploads"


def test_put_list_replace_remove_and_a_running_box_sees_each_at_once(
    provider: LocalProvider,
) -> None:
    box = provider.acquire(KEY)
    first = provider.upload(KEY, "report.csv", b"a,b\n")
    assert (first.path, first.bytes_written, first.created) == (f"{UPLOADS}/report.csv", 4, True)
    assert box.read_file(f"{UPLOADS}/report.csv").content == "a,b\n"
    provider.upload(KEY, f"{UPLOADS}/deep/er/data.bin", bytes(range(256)))
    again = provider.upload(KEY, "report.csv", b"a,b,c\n")
    assert again.created is False and box.read_bytes(f"{UPLOADS}/report.csv") == b"a,b,c\n"
    listing = provider.list_uploads(KEY)
    assert [(f.path, f.size) for f in listing.files] == [
        (f"{UPLOADS}/deep/er/data.bin", 256),
        (f"{UPLOADS}/report.csv", 6),
    ]
    assert listing.truncated is False
    removed = provider.remove_upload(KEY, "deep/er/data.bin")
    assert (removed.path, removed.size) == (f"{UPLOADS}/deep/er/data.bin", 256)
    # The directories it leaves empty go too; the box sees that at once.
    assert [e.name for e in box.list_dir(UPLOADS).entries] == ["report.csv"]
    with pytest.raises(SandboxError) as missing:
        provider.remove_upload(KEY, "deep/er/data.bin")
    assert missing.value.code is ErrorCode.NOT_FOUND


def test_the_agent_still_cannot_change_an_upload(provider: LocalProvider) -> None:
    provider.upload(KEY, "keep.txt", b"original\n")
    box = provider.acquire(KEY)
    for change in (
        lambda: box.write_file(f"{UPLOADS}/keep.txt", "changed"),
        lambda: box.write_bytes(f"{UPLOADS}/keep.txt", b"changed"),
        lambda: box.edit_file(f"{UPLOADS}/keep.txt", "original", "changed"),
        lambda: box.write_file(f"{UPLOADS}/new.txt", "new"),
    ):
        with pytest.raises(SandboxError) as refused:
            change()
        assert refused.value.code is ErrorCode.READ_ONLY
    assert (host_uploads(provider) / "keep.txt").read_bytes() == b"original\n"


def test_a_key_never_acquired_gets_its_upload_and_the_first_box_sees_it(
    provider: LocalProvider,
) -> None:
    other = SandboxKey("bob", "fresh")
    provider.upload(other, "hello.txt", b"hi\n")
    assert provider.list_uploads(KEY).files == []  # keys never share uploads
    assert provider.acquire(other).read_file(f"{UPLOADS}/hello.txt").content == "hi\n"


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("../workspace/x.txt", ErrorCode.ACCESS_DENIED),
        (f"{UPLOADS}/../outputs/x.txt", ErrorCode.ACCESS_DENIED),
        ("/etc/passwd", ErrorCode.ACCESS_DENIED),
        ("", ErrorCode.INVALID_ARGUMENT),
        ("a\0b", ErrorCode.INVALID_ARGUMENT),
        ("x" * 300, ErrorCode.INVALID_ARGUMENT),
        (UPLOADS, ErrorCode.IS_A_DIRECTORY),
        ("dir", ErrorCode.IS_A_DIRECTORY),
        ("file.txt/below", ErrorCode.NOT_A_DIRECTORY),
    ],
    ids=repr,
)
def test_hostile_or_wrong_paths_are_refused_with_the_file_operations_codes(
    provider: LocalProvider, tmp_path: Path, path: str, code: ErrorCode
) -> None:
    provider.upload(KEY, "dir/inner.txt", b"x")
    provider.upload(KEY, "file.txt", b"x")
    with pytest.raises(SandboxError) as refused:
        provider.upload(KEY, path, b"data")
    assert refused.value.code is code
    assert str(tmp_path) not in refused.value.message  # virtual paths only
    assert sorted(f.path for f in provider.list_uploads(KEY).files) == [
        f"{UPLOADS}/dir/inner.txt",
        f"{UPLOADS}/file.txt",
    ]


def test_a_symlink_in_the_uploads_is_never_followed(
    provider: LocalProvider, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_bytes(b"untouched")
    provider.upload(KEY, "seed.txt", b"x")
    (host_uploads(provider) / "link").symlink_to(outside)
    for attempt in (
        lambda: provider.upload(KEY, "link/victim.txt", b"overwritten"),
        lambda: provider.upload(KEY, "link/new.txt", b"planted"),
        lambda: provider.remove_upload(KEY, "link/victim.txt"),
    ):
        with pytest.raises(SandboxError) as refused:
            attempt()
        assert refused.value.code is ErrorCode.ACCESS_DENIED
    assert sorted(os.listdir(outside)) == ["victim.txt"]
    assert (outside / "victim.txt").read_bytes() == b"untouched"
    assert [f.path for f in provider.list_uploads(KEY).files] == [f"{UPLOADS}/seed.txt"]


def test_the_configured_transfer_limit_bounds_an_upload(provider: LocalProvider) -> None:
    provider.upload(KEY, "max.bin", b"x" * 1024)
    with pytest.raises(SandboxError) as refused:
        provider.upload(KEY, "big.bin", b"x" * 1025)
    assert refused.value.code is ErrorCode.TOO_LARGE
    assert "transfer_max_bytes" in refused.value.message
    assert [f.path for f in provider.list_uploads(KEY).files] == [f"{UPLOADS}/max.bin"]


def test_odd_names_round_trip(provider: LocalProvider) -> None:
    for name in ("new\nline.txt", "sp ace.txt", "ünï.txt"):
        provider.upload(KEY, name, b"x")
    assert {f.path for f in provider.list_uploads(KEY).files} == {
        f"{UPLOADS}/new\nline.txt",
        f"{UPLOADS}/sp ace.txt",
        f"{UPLOADS}/ünï.txt",
    }
    provider.remove_upload(KEY, "new\nline.txt")
    assert len(provider.list_uploads(KEY).files) == 2


def test_modes_ignore_the_umask_and_owners_follow_the_directory(provider: LocalProvider) -> None:
    """A box's uid reads (and on writable uploads owns) what a root provider uploads."""
    uploads = host_uploads(provider)
    uploads.mkdir(parents=True)
    if os.geteuid() == 0:
        os.chown(uploads, 4321, 4321)
    old = os.umask(0o077)
    try:
        provider.upload(KEY, "sub/f.txt", b"x")
    finally:
        os.umask(old)
    for path, mode in ((uploads / "sub", 0o755), (uploads / "sub" / "f.txt", 0o644)):
        info = path.stat()
        assert info.st_mode & 0o777 == mode
        if os.geteuid() == 0:
            assert (info.st_uid, info.st_gid) == (4321, 4321)
