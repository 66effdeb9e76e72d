"""`BoxOptions`: the option fields every box provider shares.

A provider subclasses it with its own fields (image, resources, ...) and may
re-declare a shared field to give it another default or description. Its
section of the settings is `providers.<provider_name>`.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from ..config import Settings
from ..errors import ErrorCode, SandboxError
from ..network import EgressOptions, ExposeOptions
from .pool import WarmPoolOptions


class BoxOptions(BaseModel):
    """Shared options of a box provider (`providers: {<name>: {...}}` in sandkit.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider_name: ClassVar[str] = "box"
    # What an owner may look like (it names boxes on the platform).
    owner_pattern: ClassVar[re.Pattern[str]] = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}")
    owner_rule: ClassVar[str] = "owner must match [a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}"

    owner: str = Field(
        "sandkit",
        description="Name of this deployment: it names and labels every box, so two "
        "deployments never adopt each other's boxes.",
    )
    python: str = Field("python3", description="Interpreter in the box that runs the agent.")
    execute_enabled: bool = Field(True, description="Allow `execute` inside the box.")
    carrier: Literal["stdio", "http"] = Field(
        "stdio",
        description="How the provider talks to the agent. stdio: one long-lived channel "
        "through the platform's own exec API (no network needed); http: the agent listens "
        "on http_port in the box with a per-agent bearer token.",
    )
    http_port: int = Field(8765, ge=1024, le=65535, description="Agent port (carrier http).")
    token_secret: SecretStr | None = Field(
        None,
        description="carrier http: derive each box's bearer token from this secret, so "
        "provider instances sharing it reuse a running agent; None: a random token per "
        "agent start (a restarted provider restarts the agent).",
    )
    reap_interval_s: float = Field(
        60.0,
        ge=0,
        description="Period of the background thread that releases boxes idle for "
        "settings.idle_timeout_s; 0 disables it.",
    )
    agent_sleep_s: float = Field(
        60.0,
        ge=0,
        description="carrier stdio: an agent idle this long is put to sleep by the "
        "background thread (its memory goes back to the host; the next call wakes a fresh "
        "one, docs/agent.md#sleep); 0 keeps agents awake.",
    )
    agent_sleep: Literal["dormant", "exit"] = Field(
        "dormant",
        description="how an idle agent sleeps: `dormant` (a bare interpreter keeps its "
        "channel; the wake needs no new exec) or `exit` (the channel is closed and the agent "
        "ends; the box costs what a bare container does, the wake opens a new channel).",
    )
    max_running: int = Field(
        0, ge=0, description="Refuse (CAPACITY) to run more boxes of this owner; 0 = no cap."
    )
    warm_pool: WarmPoolOptions = Field(
        default_factory=WarmPoolOptions,
        description="Boxes started ahead for new threads (docs/pools.md); off by default.",
    )
    egress: EgressOptions = Field(
        default_factory=EgressOptions,
        description="Where boxes may connect to: the default policy and the ceiling of "
        "set_egress (docs/security.md#network); off by default (no network).",
    )
    expose: ExposeOptions = Field(
        default_factory=ExposeOptions,
        description="Whether expose() may open ports of a box to the platform; off by default.",
    )

    @field_validator("owner")
    @classmethod
    def _owner_ok(cls, value: str) -> str:
        if not cls.owner_pattern.fullmatch(value):
            raise ValueError(cls.owner_rule)
        return value

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """The provider's section of `settings`, validated (INVALID_ARGUMENT when not)."""
        try:
            return cls.model_validate(settings.provider_options(cls.provider_name))
        except ValueError as exc:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT, f"invalid providers.{cls.provider_name} options: {exc}"
            ) from None
