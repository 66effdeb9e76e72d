"""Settings: one YAML file plus `SANDKIT_*` environment variables.

Every cap has a hard ceiling enforced at load time, so a typo in a config
file cannot turn a bounded tool into an unbounded one.

Which file (`config_source`): `$SANDKIT_CONFIG` when set; else the first
`sandkit.yaml` found from the current directory up to the project root (the
first directory holding `.git` or `.hg`; without one, up to the filesystem
root); else the user's `$XDG_CONFIG_HOME/sandkit/sandkit.yaml`
(`~/.config/sandkit/sandkit.yaml`); else none. Relative paths in a file
(`data_root`, `skills_dir`, a mount's `host`) are relative to that file's
directory. A file that does not parse is `INVALID_ARGUMENT` naming the file
and line.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from .errors import ErrorCode, SandboxError
from .runtime.limits import KIB, MIB, Limits
from .runtime.pathmap import RESERVED_PREFIXES, normalize_virtual, overlaps

GIB = 1024 * MIB
CONFIG_ENV = "SANDKIT_CONFIG"
DEFAULT_CONFIG_FILE = "sandkit.yaml"

# Credential variables never handed to sandboxed commands unless passed explicitly.
DEFAULT_SCRUBBED_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "E2B_API_KEY",
    "HF_TOKEN",
    "KUBECONFIG",
    "DOCKER_AUTH_CONFIG",
)


def default_data_root() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return Path(base) / "sandkit"


PROJECT_MARKERS = (".git", ".hg")


def user_config_file() -> Path:
    """`$XDG_CONFIG_HOME/sandkit/sandkit.yaml` (default `~/.config/sandkit/sandkit.yaml`)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(base) / "sandkit" / DEFAULT_CONFIG_FILE


@dataclasses.dataclass(frozen=True)
class ConfigSource:
    """The settings file in use (None: defaults and environment only) and how it was found."""

    path: Path | None
    found_by: str  # "SANDKIT_CONFIG", "project" (walking up), "user", "none"

    def describe(self) -> str:
        if self.path is None:
            return "no settings file (defaults and SANDKIT_* variables)"
        how = {
            "SANDKIT_CONFIG": "from SANDKIT_CONFIG",
            "project": "found from the current directory",
            "user": "the user config",
        }.get(self.found_by, self.found_by)
        return f"{self.path} ({how})"


def config_source(start: Path | None = None) -> ConfigSource:
    """Which settings file applies when run from `start` (default: the current directory)."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return ConfigSource(Path(explicit), "SANDKIT_CONFIG")
    here = (start or Path.cwd()).absolute()
    for directory in (here, *here.parents):
        candidate = directory / DEFAULT_CONFIG_FILE
        if candidate.is_file():
            return ConfigSource(candidate, "project")
        if any((directory / marker).exists() for marker in PROJECT_MARKERS):
            break  # the project root: its parents are other projects
    user = user_config_file()
    if user.is_file():
        return ConfigSource(user, "user")
    return ConfigSource(None, "none")


def _config_error(path: Path | str, line: int | None, problem: str) -> SandboxError:
    where = f"{path}:{line}" if line is not None else str(path)
    return SandboxError(ErrorCode.INVALID_ARGUMENT, f"invalid configuration: {where}: {problem}")


def read_config_file(path: Path) -> dict[str, Any]:
    """The settings in a YAML file; a file that does not parse is INVALID_ARGUMENT."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise _config_error(path, None, f"cannot read it ({exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # Where the broken construct starts (an unclosed `[` and the like), else where
        # the parser stopped.
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        detail = f"{context}: {problem}" if context else problem
        line = mark.line + 1 if mark is not None else None
        raise _config_error(path, line, f"not valid YAML ({detail})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _config_error(
            path, 1, f"the file must be a mapping of settings (key: value), not a {_kind(data)}"
        )
    return _relative_to(data, path.absolute().parent)


def _kind(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def _relative_to(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """Relative paths of a settings file are relative to the file, not to the cwd."""

    def resolve(value: Any) -> Any:
        if isinstance(value, str) and value and not value.startswith("~"):
            path = Path(value)
            return str(path if path.is_absolute() else base / path)
        return value

    data = dict(data)
    for name in ("data_root", "skills_dir"):
        if name in data:
            data[name] = resolve(data[name])
    mounts = data.get("mounts")
    if isinstance(mounts, list):
        data["mounts"] = [
            {**m, "host": resolve(m["host"])} if isinstance(m, dict) and "host" in m else m
            for m in mounts
        ]
    return data


class _YamlFile(YamlConfigSettingsSource):
    def _read_file(self, file_path: Any) -> dict[str, Any]:
        return read_config_file(Path(str(file_path)))


_DEFAULTS = Limits()


class LimitsSettings(BaseModel):
    """Configurable caps; `le=` is the hard ceiling no config can exceed.

    The defaults are `runtime.limits.Limits`'s (one place); this adds the ceilings.
    """

    model_config = ConfigDict(extra="forbid")

    read_max_lines: int = Field(_DEFAULTS.read_max_lines, ge=1, le=20_000)
    read_max_bytes: int = Field(_DEFAULTS.read_max_bytes, ge=1 * KIB, le=4 * MIB)
    write_max_bytes: int = Field(_DEFAULTS.write_max_bytes, ge=1, le=1 * GIB)
    transfer_max_bytes: int = Field(_DEFAULTS.transfer_max_bytes, ge=1, le=1 * GIB)
    list_max_entries: int = Field(_DEFAULTS.list_max_entries, ge=1, le=10_000)
    list_max_depth: int = Field(_DEFAULTS.list_max_depth, ge=1, le=50)
    glob_default_results: int = Field(_DEFAULTS.glob_default_results, ge=1, le=1000)
    glob_max_results: int = Field(_DEFAULTS.glob_max_results, ge=1, le=1000)
    grep_default_results: int = Field(_DEFAULTS.grep_default_results, ge=1, le=500)
    grep_max_results: int = Field(_DEFAULTS.grep_max_results, ge=1, le=500)
    grep_max_file_bytes: int = Field(_DEFAULTS.grep_max_file_bytes, ge=1, le=64 * MIB)
    grep_line_chars: int = Field(_DEFAULTS.grep_line_chars, ge=20, le=2000)
    grep_max_context: int = Field(_DEFAULTS.grep_max_context, ge=0, le=100)
    search_timeout_s: float = Field(_DEFAULTS.search_timeout_s, gt=0, le=600)
    exec_default_timeout_s: float = Field(_DEFAULTS.exec_default_timeout_s, gt=0, le=86_400)
    exec_max_timeout_s: float = Field(_DEFAULTS.exec_max_timeout_s, gt=0, le=86_400)
    exec_output_bytes: int = Field(_DEFAULTS.exec_output_bytes, ge=1 * KIB, le=16 * MIB)
    exec_stream_bytes: int = Field(_DEFAULTS.exec_stream_bytes, ge=1 * KIB, le=4 * GIB)
    process_max_live: int = Field(_DEFAULTS.process_max_live, ge=1, le=256)
    process_output_bytes: int = Field(_DEFAULTS.process_output_bytes, ge=4 * KIB, le=64 * MIB)
    process_wait_max_s: float = Field(_DEFAULTS.process_wait_max_s, gt=0, le=600)
    # The local provider's bound on its commands (docs/providers/local.md); Docker,
    # Kubernetes and E2B boxes are bounded by their own options.
    exec_max_processes: int = Field(_DEFAULTS.exec_max_processes, ge=8, le=4096)
    exec_memory_bytes: int = Field(_DEFAULTS.exec_memory_bytes, ge=16 * MIB, le=64 * GIB)

    @model_validator(mode="after")
    def _defaults_below_ceilings(self) -> LimitsSettings:
        if self.glob_default_results > self.glob_max_results:
            raise ValueError("glob_default_results must be <= glob_max_results")
        if self.grep_default_results > self.grep_max_results:
            raise ValueError("grep_default_results must be <= grep_max_results")
        if self.exec_default_timeout_s > self.exec_max_timeout_s:
            raise ValueError("exec_default_timeout_s must be <= exec_max_timeout_s")
        return self

    def to_limits(self) -> Limits:
        return Limits(**self.model_dump())


class MountSpec(BaseModel):
    """A custom mount: host directory `host` seen by the agent at `virtual`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    virtual: str
    host: Path
    read_only: bool = True

    @field_validator("virtual")
    @classmethod
    def _virtual_ok(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("virtual mount path must be absolute")
        normal = normalize_virtual(value)
        if normal == "/":
            raise ValueError("cannot mount over /")
        for reserved in RESERVED_PREFIXES:
            if overlaps(normal, reserved):
                raise ValueError(f"{normal} overlaps the reserved prefix {reserved}")
        return normal


class GatewaySettings(BaseModel):
    """`gateway`: the preview gateway (`sandkit gateway`, `sandkit.gateway`)."""

    model_config = ConfigDict(extra="forbid")

    secrets: list[SecretStr] = Field(
        default_factory=list,
        description="HMAC secrets of preview tokens (>= 16 bytes each): the first signs, "
        "all verify (rotate by putting the new one first).",
    )
    token_ttl_s: float = Field(3600.0, gt=0, le=7 * 86_400, description="Token lifetime.")
    public_url: str = Field(
        "http://127.0.0.1:8080", description="Where users reach the gateway (path mode)."
    )
    base_domain: str | None = Field(
        None,
        description="Host mode: boxes at <port>-<sandbox id>.<base_domain> (wildcard DNS).",
    )

    @field_validator("secrets")
    @classmethod
    def _long_enough(cls, secrets: list[SecretStr]) -> list[SecretStr]:
        for secret in secrets:
            if len(secret.get_secret_value().encode()) < 16:
                raise ValueError("each gateway secret needs at least 16 bytes")
        return secrets


class Settings(BaseSettings):
    """Everything an operator configures; providers read their own section."""

    model_config = SettingsConfigDict(
        env_prefix="SANDKIT_", env_nested_delimiter="__", extra="forbid"
    )

    provider: str = "local"
    data_root: Path = Field(default_factory=default_data_root)
    skills_dir: Path | None = None
    uploads_read_only: bool = True
    mounts: list[MountSpec] = Field(default_factory=list)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    execute_enabled: bool = Field(
        False, description="Local provider only: commands run on the host, so off by default."
    )
    secrets: list[SecretStr] = Field(default_factory=list)
    scrubbed_env: list[str] = Field(default_factory=lambda: list(DEFAULT_SCRUBBED_ENV))
    idle_timeout_s: float = Field(1800.0, gt=0)
    reap_running_processes: bool = Field(
        False,
        description="Idle reaping also releases a sandbox whose background processes run "
        "(by default such a sandbox counts as in use).",
    )
    providers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per-provider options, e.g. providers.docker.image."
    )
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)

    @field_validator("mounts")
    @classmethod
    def _mounts_disjoint(cls, mounts: list[MountSpec]) -> list[MountSpec]:
        for i, a in enumerate(mounts):
            for b in mounts[i + 1 :]:
                if overlaps(a.virtual, b.virtual):
                    raise ValueError(f"mounts {a.virtual} and {b.virtual} overlap")
        return mounts

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        source = config_source()
        if source.path is None:
            return (init_settings, env_settings)
        return (init_settings, env_settings, _YamlFile(settings_cls, yaml_file=source.path))

    def secret_values(self) -> tuple[str, ...]:
        return tuple(s.get_secret_value() for s in self.secrets if s.get_secret_value())

    def provider_options(self, name: str) -> dict[str, Any]:
        return dict(self.providers.get(name, {}))
