"""`providers.docker` in the settings, validated.

Every hardening default is on; each field says what turning it off costs.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from sandkit.config import Settings
from sandkit.errors import ErrorCode, SandboxError

_OWNER_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}")
_USER_RE = re.compile(r"(\d+):(\d+)")


class DockerOptions(BaseModel):
    """Options of the Docker provider (`providers: {docker: {...}}` in sandkit.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(
        "python:3.12-slim", description="Any image with python3 and its standard library."
    )
    pull: Literal["missing", "never", "always"] = Field(
        "missing", description="Pull the image when it is not present (or always / never)."
    )
    docker_host: str | None = Field(
        None, description="Engine URL; None uses DOCKER_HOST or the local socket."
    )
    owner: str = Field(
        "sandkit",
        description="Name of this deployment: prefixes container names and is the "
        "`sandkit.owner` label, so two deployments never adopt each other's boxes.",
    )
    user: str = Field("1000:1000", description="uid:gid the container and every command run as.")
    allow_root: bool = Field(False, description="Allow `user` with uid 0 (not recommended).")
    chown_thread_dirs: bool = Field(
        True,
        description="chown the thread's own host dirs to `user` so the container can write "
        "them (needs a root or same-uid host process).",
    )
    network_mode: str = Field(
        "none", description="Docker network mode: none (default), bridge, host or a network name."
    )
    carrier: Literal["stdio", "http"] = Field(
        "stdio",
        description="How the provider talks to the agent. stdio: one exec socket through the "
        "engine (no network needed). http: the agent listens on the container's IP with a "
        "per-agent bearer token; with network_mode none the box joins `<owner>-internal`, an "
        "internal network without egress.",
    )
    http_port: int = Field(8765, ge=1024, le=65535, description="Agent port (carrier http).")
    token_secret: SecretStr | None = Field(
        None,
        description="carrier http: derive each container's bearer token from this secret, so "
        "provider instances sharing it reuse a running agent; None: a random token per agent "
        "start (a restarted provider restarts the agent).",
    )
    mem_limit: str | int = Field("1g", description="Memory limit (swap disabled).")
    cpus: float = Field(1.0, ge=0, description="CPU quota in cores; 0 means unlimited.")
    pids_limit: int = Field(256, ge=0, description="Max processes+threads; 0 means unlimited.")
    read_only_rootfs: bool = Field(True, description="Read-only root filesystem.")
    tmpfs: dict[str, str] = Field(
        default_factory=lambda: {"/tmp": "rw,nosuid,nodev,size=256m,mode=1777"},
        description="Writable tmpfs mounts (path -> mount options).",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment of the container; commands get the runtime's "
        "curated environment (PATH, LANG, HOME=workspace) plus variables passed to execute.",
    )
    init: bool = Field(True, description="Run docker-init as PID 1 (reaps zombies).")
    cap_drop: list[str] = Field(default_factory=lambda: ["ALL"])
    cap_add: list[str] = Field(default_factory=list)
    security_opt: list[str] = Field(default_factory=lambda: ["no-new-privileges"])
    runtime: str | None = Field(None, description="OCI runtime, e.g. runsc for gVisor.")
    command: list[str] = Field(
        default_factory=lambda: ["sleep", "infinity"],
        description="Main process; it only keeps the container alive.",
    )
    python: str = Field("python3", description="Interpreter in the image that runs the agent.")
    labels: dict[str, str] = Field(default_factory=dict, description="Extra container labels.")
    execute_enabled: bool = Field(True, description="Allow `execute` inside the container.")
    stop_timeout_s: int = Field(3, ge=0, le=300, description="Grace period on stop.")
    shutdown: Literal["remove", "stop"] = Field(
        "remove", description="What shutdown() does to this owner's containers."
    )
    reap_interval_s: float = Field(
        60.0, ge=0, description="Background idle reaper period; 0 disables it."
    )
    max_running: int = Field(
        0, ge=0, description="Refuse (CAPACITY) to start more running boxes; 0 = no cap."
    )

    @field_validator("owner")
    @classmethod
    def _owner_ok(cls, value: str) -> str:
        if not _OWNER_RE.fullmatch(value):
            raise ValueError("owner must match [a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}")
        return value

    @field_validator("user")
    @classmethod
    def _user_ok(cls, value: str) -> str:
        if not _USER_RE.fullmatch(value):
            raise ValueError("user must be numeric uid:gid, e.g. 1000:1000")
        return value

    @model_validator(mode="after")
    def _no_root(self) -> DockerOptions:
        if self.uid == 0 and not self.allow_root:
            raise ValueError("user runs as root; set allow_root: true if you really mean it")
        if not self.command:
            raise ValueError("command must not be empty")
        if self.carrier == "http" and (
            self.network_mode == "host" or self.network_mode.startswith("container:")
        ):
            raise ValueError(
                f"carrier http needs a network of the box's own; network_mode "
                f"{self.network_mode!r} would expose the agent's port outside it"
            )
        return self

    @property
    def container_network(self) -> str:
        """The network mode the container gets: the agent over HTTP needs an interface."""
        if self.carrier == "http" and self.network_mode == "none":
            return self.internal_network
        return self.network_mode

    @property
    def internal_network(self) -> str:
        """The owner's network without egress, for carrier http with network_mode none."""
        return f"{self.owner}-internal"

    @property
    def uid(self) -> int:
        return int(self.user.split(":")[0])

    @property
    def gid(self) -> int:
        return int(self.user.split(":")[1])

    @classmethod
    def from_settings(cls, settings: Settings) -> DockerOptions:
        try:
            return cls.model_validate(settings.provider_options("docker"))
        except ValueError as exc:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT, f"invalid providers.docker options: {exc}"
            ) from None
