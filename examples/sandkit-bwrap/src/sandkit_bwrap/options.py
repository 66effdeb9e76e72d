"""`providers.bwrap` in the settings, validated."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field, field_validator, model_validator

from sandkit.boxkit import BoxOptions

MIB = 1024 * 1024

# Host paths bound read-only into every box (a symlink, as with merged /usr, stays one).
HOST_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What of the host's /etc a box sees (read-only; passwd, group and hosts are the box's own).
ETC = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "debian_version",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "magic",
    "magic.mime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "profile",
    "protocols",
    "services",
    "ssl",
    "terminfo",
    "timezone",
)


class BwrapOptions(BoxOptions):
    """Options of the bwrap provider (`providers: {bwrap: {...}}` in sandkit.yaml).

    The shared ones (owner, python, execute_enabled, reap_interval_s, max_running) are
    `BoxOptions`'s; only carrier stdio exists (a box has no network).
    """

    provider_name: ClassVar[str] = "bwrap"

    bwrap: str = Field("bwrap", description="The bubblewrap binary (Debian: bubblewrap).")
    state_dir: Path | None = Field(
        None,
        description="Where each box keeps its pid file and agent payload "
        "(<state_dir>/<owner>-<sandbox_id>/); default <data_root>/.bwrap.",
    )
    uid: int = Field(1000, ge=1, description="uid the agent and every command run as.")
    gid: int = Field(1000, ge=1, description="gid the agent and every command run as.")
    chown_thread_dirs: bool = Field(
        True, description="chown the thread's own host dirs to uid:gid so the box can write them."
    )
    host_dirs: tuple[str, ...] = Field(HOST_DIRS, description="Host dirs bound read-only.")
    etc: tuple[str, ...] = Field(ETC, description="Entries of the host's /etc bound read-only.")
    tmp_size_bytes: int = Field(256 * MIB, ge=MIB, description="Size of the box's tmpfs /tmp.")
    cgroup: bool = Field(
        True,
        description="Give each box its own cgroup (pids_limit, memory_limit_bytes); a box "
        "that cannot get one is not started. False: boxes are not bounded.",
    )
    pids_limit: int = Field(256, ge=0, description="Max tasks of a box; 0 = no limit.")
    memory_limit_bytes: int = Field(
        1024 * MIB, ge=0, description="Memory of a box, tmpfs included; 0 = no limit."
    )
    start_timeout_s: float = Field(10.0, gt=0, description="How long a box may take to start.")

    @field_validator("carrier")
    @classmethod
    def _stdio_only(cls, value: str) -> str:
        if value != "stdio":
            raise ValueError(
                "carrier http is not supported: a bwrap box has no network interface; "
                "the agent is reached over stdio (carrier: stdio)"
            )
        return value

    @field_validator("host_dirs")
    @classmethod
    def _absolute(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            if not path.startswith("/") or ".." in path.split("/") or path == "/":
                raise ValueError(f"host_dirs takes absolute paths below /: {path!r}")
        return value

    @field_validator("etc")
    @classmethod
    def _below_etc(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name or name.startswith("/") or ".." in name.split("/"):
                raise ValueError(f"etc takes names below /etc: {name!r}")
        return value

    @model_validator(mode="after")
    def _tmp_fits(self) -> BwrapOptions:
        # tmpfs pages count against the box's memory and cannot be swapped out: a full
        # /tmp as large as the limit leaves nothing for the agent.
        memory = self.memory_limit_bytes
        if self.cgroup and memory and self.tmp_size_bytes > memory // 2:
            raise ValueError("tmp_size_bytes must be at most half of memory_limit_bytes")
        return self
