"""Providers that cannot enforce egress or expose ports (the bwrap example) refuse the
settings at start, instead of running boxes with a policy nobody enforces
(docs/network.md#providers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandkit import ErrorCode, SandboxError, SandboxKey, Settings
from sandkit.local import LocalProvider


@pytest.mark.parametrize(
    ("module", "cls", "name", "extra"),
    [
        ("sandkit_bwrap.provider", "BwrapProvider", "bwrap", {}),
    ],
)
@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"egress": {"ceiling": {"mode": "open"}}}, "egress: a ceiling above none"),
        ({"expose": {"enabled": True}}, "expose.enabled"),
    ],
)
def test_unsupported_network_settings_are_refused(
    tmp_path: Path,
    module: str,
    cls: str,
    name: str,
    extra: dict[str, Any],
    options: Any,
    words: str,
) -> None:
    provider_class = getattr(pytest.importorskip(module), cls)
    settings = Settings(data_root=tmp_path, providers={name: {**options, **extra}})
    with pytest.raises(SandboxError) as info:
        provider_class(settings)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert words in info.value.message and "cannot do this" in info.value.message


def test_local_enforces_no_egress_and_exposes_only_when_enabled(tmp_path: Path) -> None:
    local = LocalProvider(Settings(data_root=tmp_path))
    key = SandboxKey("u", "t")
    assert local.egress(key) is None
    with pytest.raises(SandboxError) as info:
        local.set_egress(key, "open")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    local.acquire(key)
    with pytest.raises(SandboxError) as info:
        local.expose(key, 8000)  # off by default
    assert info.value.code is ErrorCode.INVALID_ARGUMENT and "expose.enabled" in info.value.message
    with pytest.raises(SandboxError) as info:
        LocalProvider(Settings(data_root=tmp_path, providers={"local": {"bogus": 1}}))
    assert info.value.code is ErrorCode.INVALID_ARGUMENT and "providers.local" in info.value.message
