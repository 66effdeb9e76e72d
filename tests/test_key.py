"""SandboxKey: id validation and the deterministic, DNS-safe sandbox id."""

from __future__ import annotations

import hashlib
import re

import pytest
from pydantic import ValidationError

from sandkit import ErrorCode, SandboxError, SandboxKey

DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

INVALID_IDS = [
    "",
    ".",
    "..",
    "-leading-dash",
    "_leading-underscore",
    ".hidden",
    "a/b",
    "../etc",
    "a\\b",
    "a b",
    " a",
    "a ",
    "a\x00b",
    "a\nb",
    "a\tb",
    "a:b",
    "a@b",
    "a*",
    "a?",
    "$(id)",
    "é",
    "thread-é",
    "\uff46\uff55\uff4c\uff4c",
    "a" * 129,
    "x" + "y" * 128,
]
VALID_IDS = ["a", "A", "0", "a.b", "a..b", "a-b_c.d", "0-0", "x" * 128, "Thread_1.2-3"]


@pytest.mark.parametrize("bad", INVALID_IDS, ids=repr)
@pytest.mark.parametrize("field", ["user", "thread"])
def test_invalid_ids_are_invalid_argument(bad: str, field: str) -> None:
    args = ("alice", bad) if field == "thread" else (bad, "t1")
    with pytest.raises(SandboxError) as info:
        SandboxKey(*args)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize("bad", [None, 1, 1.5, b"alice", ["a"]], ids=repr)
def test_non_string_ids_are_invalid_argument(bad: object) -> None:
    with pytest.raises(SandboxError) as info:
        SandboxKey(bad, "t1")  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_model_validate_rejects_bad_ids_too() -> None:
    # Keys also arrive from JSON (e.g. a CLI or an API request): same code.
    with pytest.raises(SandboxError) as info:
        SandboxKey.model_validate({"user_id": "..", "thread_id": "t"})
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    key = SandboxKey.model_validate({"user_id": "alice", "thread_id": "t"})
    assert key == SandboxKey("alice", "t")


@pytest.mark.parametrize("good", VALID_IDS)
def test_valid_ids_are_accepted(good: str) -> None:
    key = SandboxKey(good, good)
    assert (key.user_id, key.thread_id) == (good, good)


def test_error_message_for_a_huge_id_is_bounded() -> None:
    with pytest.raises(SandboxError) as info:
        SandboxKey("a" * 100_000, "t")
    assert len(info.value.message) <= 300


def test_sandbox_id_is_deterministic() -> None:
    assert SandboxKey("alice", "t1").sandbox_id == SandboxKey("alice", "t1").sandbox_id
    # Pinned: providers find their boxes again after a restart by this value.
    expected = "sk-" + hashlib.sha256(b"alice\x00t1").hexdigest()[:20]
    assert SandboxKey("alice", "t1").sandbox_id == expected


@pytest.mark.parametrize("user, thread", [("a", "b"), ("A" * 128, "Z" * 128), ("x.y", "1-2_3")])
def test_sandbox_id_is_a_dns_1123_label(user: str, thread: str) -> None:
    sandbox_id = SandboxKey(user, thread).sandbox_id
    assert DNS_1123_LABEL.fullmatch(sandbox_id)
    assert len(sandbox_id) <= 63


def test_sandbox_id_differs_across_users_and_threads() -> None:
    ids = {
        SandboxKey("alice", "t1").sandbox_id,
        SandboxKey("bob", "t1").sandbox_id,
        SandboxKey("alice", "t2").sandbox_id,
        # The separator keeps (ab, c) and (a, bc) apart.
        SandboxKey("ab", "c").sandbox_id,
        SandboxKey("a", "bc").sandbox_id,
        # Ids are case-sensitive.
        SandboxKey("Alice", "t1").sandbox_id,
    }
    assert len(ids) == 6


def test_keys_are_hashable_values() -> None:
    assert {SandboxKey("a", "b"): 1}[SandboxKey("a", "b")] == 1
    assert SandboxKey("a", "b") != SandboxKey("b", "a")
    assert str(SandboxKey("a", "b")) == "a/b"
    with pytest.raises(ValidationError):
        SandboxKey("a", "b").user_id = "c"  # type: ignore[misc]
