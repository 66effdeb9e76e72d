"""A pool box's storage becomes a key's by a rename that never replaces anything."""

from __future__ import annotations

from pathlib import Path

from sandkit import SandboxKey, Settings
from sandkit.boxkit import (
    Claim,
    claim_storage,
    pool_layout,
    prepare_host_dirs,
    retire_storage,
    storage_identity,
)
from sandkit.paths import ThreadLayout

OWNER = "t0"


def fresh_slot(settings: Settings, slot: str) -> ThreadLayout:
    layout = pool_layout(settings, OWNER, slot)
    prepare_host_dirs(layout, None)
    (layout.user_data_dir / "workspace" / "marker").write_text(slot)
    return layout


def test_a_claim_moves_the_slot_storage_to_the_key(tmp_path: Path) -> None:
    settings = Settings(data_root=tmp_path)
    fresh_slot(settings, "a1")
    target = ThreadLayout.for_key(settings, SandboxKey("u", "t"))
    assert claim_storage(settings, OWNER, "a1", target) is Claim.CLAIMED
    assert (target.user_data_dir / "workspace" / "marker").read_text() == "a1"
    assert not (tmp_path / ".sandkit" / "pool" / OWNER / "a1").exists()


def test_the_second_claim_of_a_slot_finds_it_gone(tmp_path: Path) -> None:
    settings = Settings(data_root=tmp_path)
    fresh_slot(settings, "a1")
    first = ThreadLayout.for_key(settings, SandboxKey("u", "one"))
    second = ThreadLayout.for_key(settings, SandboxKey("u", "two"))
    assert claim_storage(settings, OWNER, "a1", first) is Claim.CLAIMED
    assert claim_storage(settings, OWNER, "a1", second) is Claim.GONE
    assert not second.user_data_dir.exists()


def test_a_key_with_a_thread_dir_even_an_empty_one_is_never_replaced(tmp_path: Path) -> None:
    # Plain rename(2) would replace an empty directory: a cold start's half-made one.
    settings = Settings(data_root=tmp_path)
    fresh_slot(settings, "a1")
    fresh_slot(settings, "b2")
    empty = ThreadLayout.for_key(settings, SandboxKey("u", "empty"))
    empty.user_data_dir.mkdir(parents=True)
    inode = empty.user_data_dir.stat().st_ino
    assert claim_storage(settings, OWNER, "a1", empty) is Claim.TAKEN
    assert empty.user_data_dir.stat().st_ino == inode and not any(empty.user_data_dir.iterdir())
    full = ThreadLayout.for_key(settings, SandboxKey("u", "full"))
    prepare_host_dirs(full, None)
    assert claim_storage(settings, OWNER, "b2", full) is Claim.TAKEN
    assert not (full.user_data_dir / "workspace" / "marker").exists()
    assert (pool_layout(settings, OWNER, "b2").user_data_dir / "workspace" / "marker").exists()


def test_the_claimed_storage_keeps_its_identity_and_names_its_box(tmp_path: Path) -> None:
    # A box labelled with its storage's identity at its start is the key's after the claim.
    settings = Settings(data_root=tmp_path)
    slot = fresh_slot(settings, "a1")
    label = storage_identity(slot.user_data_dir)
    target = ThreadLayout.for_key(settings, SandboxKey("u", "t"))
    assert label is not None and storage_identity(target.user_data_dir) is None
    assert claim_storage(settings, OWNER, "a1", target) is Claim.CLAIMED
    assert storage_identity(target.user_data_dir) == label
    other = ThreadLayout.for_key(settings, SandboxKey("u", "other"))
    prepare_host_dirs(other, None)
    assert storage_identity(other.user_data_dir) != label
    (tmp_path / "file").write_text("x")
    assert storage_identity(tmp_path / "file") is None  # a directory's identity only


def test_a_removal_and_a_claim_of_one_pool_box_never_both_win(tmp_path: Path) -> None:
    settings = Settings(data_root=tmp_path)
    key = ThreadLayout.for_key(settings, SandboxKey("u", "late"))
    fresh_slot(settings, "a1")
    assert retire_storage(settings, OWNER, "a1") is True  # removed first: no claim gets it
    assert claim_storage(settings, OWNER, "a1", key) is Claim.GONE
    assert not key.user_data_dir.exists()
    fresh_slot(settings, "b2")
    assert claim_storage(settings, OWNER, "b2", key) is Claim.CLAIMED  # claimed first
    assert retire_storage(settings, OWNER, "b2") is False  # the box is the key's: left alone
    assert (key.user_data_dir / "workspace" / "marker").read_text() == "b2"
