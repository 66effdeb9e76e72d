"""`providers.docker` in the settings, validated.

Every hardening default is on; each field says what turning it off costs.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from sandkit.boxkit import BoxOptions
from sandkit.network import EgressOptions

_USER_RE = re.compile(r"(\d+):(\d+)")


class DockerEgressOptions(EgressOptions):
    """`providers.docker.egress`: the shared policy settings plus where the proxy runs."""

    network: str = Field(
        "bridge",
        description="Docker network of the egress proxy container: its way out (boxes "
        "never join it; they keep network_mode none).",
    )
    image: str | None = Field(
        None, description="Image of the proxy container; None: the boxes' image (python3)."
    )
    dns: list[str] = Field(
        default_factory=list,
        description="DNS servers of the proxy container; empty: the engine's default.",
    )
    mem_limit: str = Field("256m", description="Memory limit of the proxy container.")


class DockerOptions(BoxOptions):
    """Options of the Docker provider (`providers: {docker: {...}}` in sandkit.yaml).

    The shared ones (owner, python, carrier, http_port, token_secret, execute_enabled,
    reap_interval_s, max_running) are `BoxOptions`'s. Carrier http with network_mode
    none puts the box on `<owner>-internal`, an internal network without egress.
    """

    provider_name: ClassVar[str] = "docker"

    agent_sleep: Literal["dormant", "exit"] = Field(
        "exit",
        description="how an idle agent sleeps (BoxOptions.agent_sleep); `exit` here: a new "
        "exec is cheap on an engine, and the box keeps nothing of the agent "
        "(docs/benchmarks.md, idle cost).",
    )
    image: str = Field(
        "python:3.12-slim", description="Any image with python3 and its standard library."
    )
    pull: Literal["missing", "never", "always"] = Field(
        "missing", description="Pull the image when it is not present (or always / never)."
    )
    docker_host: str | None = Field(
        None, description="Engine URL; None uses DOCKER_HOST or the local socket."
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
    labels: dict[str, str] = Field(default_factory=dict, description="Extra container labels.")
    stop_timeout_s: int = Field(3, ge=0, le=300, description="Grace period on stop.")
    shutdown: Literal["remove", "stop"] = Field(
        "remove", description="What shutdown() does to this owner's containers."
    )
    egress: DockerEgressOptions = Field(
        default_factory=DockerEgressOptions,
        description="Where boxes may connect to, through the owner's egress proxy "
        "(docs/providers/docker.md#network); off by default.",
    )

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
        if (self.egress.enabled or self.expose.enabled) and self.network_mode != "none":
            raise ValueError(
                "egress policies and exposed ports need network_mode none: the box's only "
                f"ways in and out are then the provider's; {self.network_mode!r} would be another"
            )
        if self.carrier == "http" and self.egress.enabled:
            # The agent's port needs an interface, and an interface is a route: a box on
            # the internal network reached a server on the host's bridge address directly.
            raise ValueError(
                "carrier http gives the box a network interface (its agent listens there), "
                "which an egress policy rules out (a box with a policy has only lo and "
                "reaches out through the proxy alone); use carrier stdio with egress"
            )
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
