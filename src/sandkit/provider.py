"""Deployment side of the contract: who owns which box, and how to get it.

`SandboxProvider` decides where a `SandboxKey`'s sandbox runs; providers are
plugins found through the `sandkit.providers` entry-point group.
"""

from __future__ import annotations

import abc
import hashlib
import re
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, field_validator

from .errors import ErrorCode, SandboxError
from .models import WriteResult
from .network import EgressPolicy, Endpoint
from .runtime.limits import Limits
from .sandbox import Sandbox
from .uploads import HostUploads, UploadedFile, UploadList

if TYPE_CHECKING:
    from .config import Settings

ENTRY_POINT_GROUP = "sandkit.providers"
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def check_id(kind: str, value: object) -> str:
    if not isinstance(value, str) or not _ID_RE.fullmatch(value) or value in (".", ".."):
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT,
            f"{kind} must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,127}}: {value!r}"[:300],
        )
    return value


class SandboxKey(BaseModel):
    """Who a sandbox belongs to; two users with one thread id never share."""

    model_config = ConfigDict(frozen=True)

    user_id: str
    thread_id: str

    def __init__(self, user_id: str, thread_id: str) -> None:
        # Checked here so a bad id is a SandboxError, not a pydantic ValidationError.
        check_id("user_id", user_id)
        check_id("thread_id", thread_id)
        super().__init__(user_id=user_id, thread_id=thread_id)

    @field_validator("user_id", "thread_id", mode="before")
    @classmethod
    def _valid_id(cls, value: object) -> str:
        try:
            return check_id("id", value)
        except SandboxError as exc:
            raise ValueError(exc.message) from None

    @property
    def sandbox_id(self) -> str:
        """`sk-` + 20 hex of sha256(user NUL thread): stable and a DNS-1123 label."""
        digest = hashlib.sha256(f"{self.user_id}\0{self.thread_id}".encode()).hexdigest()
        return "sk-" + digest[:20]

    def __str__(self) -> str:
        return f"{self.user_id}/{self.thread_id}"


class SandboxProvider(abc.ABC):
    """Starts, finds, stops and removes sandboxes for keys."""

    name: str
    settings: Settings

    @property
    def limits(self) -> Limits:
        """The caps this provider's sandboxes run with (tools describe them before a
        sandbox exists)."""
        return self.settings.limits.to_limits()

    @property
    def execute_enabled(self) -> bool:
        """Whether this provider's sandboxes may run commands (tool sets offer bash only
        then); False only where the operator turned execute off (the local provider)."""
        return True

    @abc.abstractmethod
    def acquire(self, key: SandboxKey) -> Sandbox:
        """Return the key's running sandbox, creating or restarting it; idempotent."""

    @abc.abstractmethod
    def get(self, key: SandboxKey) -> Sandbox | None:
        """The key's sandbox if it is running, without creating one."""

    @abc.abstractmethod
    def release(self, key: SandboxKey) -> None:
        """Stop the box, keep the thread's data; the next acquire resumes it."""

    @abc.abstractmethod
    def destroy(self, key: SandboxKey) -> None:
        """Remove the box; thread data on the host survives."""

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Leave nothing of ours running."""

    def reap_idle(self, max_idle_s: float) -> list[SandboxKey]:
        """Release sandboxes unused for longer than `max_idle_s`; returns their keys."""
        return []

    # -- uploads (docs/operations.md#uploads) ----------------------------------------------
    # Provider calls, not sandbox operations: the host application puts a user's files
    # where the agent can read but never change them. No box need run; a running one sees
    # a change at once.

    def upload(self, key: SandboxKey, path: str, data: bytes) -> WriteResult:
        """Create or replace a file of the key's uploads (`path` relative to
        /mnt/user-data/uploads, or below it), at most `limits.transfer_max_bytes`."""
        return self._host_uploads(key).put(path, data)

    def list_uploads(self, key: SandboxKey) -> UploadList:
        """The key's uploaded files, sorted by path."""
        return self._host_uploads(key).list_files()

    def remove_upload(self, key: SandboxKey, path: str) -> UploadedFile:
        """Delete a file of the key's uploads (NOT_FOUND when there is none)."""
        return self._host_uploads(key).remove(path)

    def _host_uploads(self, key: SandboxKey) -> HostUploads:
        """Where the key's uploads live on this host: below the data root, as the thread
        layout says; a provider whose storage lives elsewhere overrides this."""
        from .paths import ThreadLayout  # paths imports this module

        layout = ThreadLayout.for_key(self.settings, key)
        return HostUploads(layout.user_data_dir / "uploads", self.limits, layout.data_root)

    # -- network (docs/security.md#network) ---------------------------------------------
    # Provider calls, not sandbox operations: what a box may reach and what may reach it
    # is decided and enforced outside the box, by the platform the provider drives.

    def egress(self, key: SandboxKey) -> EgressPolicy | None:
        """The egress policy sandkit enforces for the key's box (`none`: no network), or
        None where the provider enforces none: commands then reach what the platform
        under them lets them reach (local: the host's network)."""
        return None

    def set_egress(
        self, key: SandboxKey, policy: EgressPolicy | str | dict[str, Any]
    ) -> EgressPolicy:
        """Change where the key's box may connect to, also while it runs (new connections
        follow at once; open ones the new policy denies are closed). ACCESS_DENIED beyond
        the operator's ceiling; INVALID_ARGUMENT where the provider cannot enforce one."""
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT, f"the {self.name} provider cannot enforce an egress policy"
        )

    def expose(self, key: SandboxKey, port: int) -> Endpoint:
        """Make `port` of the key's running box reachable from the provider's side; the
        preview gateway (`sandkit.gateway`) turns it into a URL for the platform's users."""
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT, f"the {self.name} provider cannot expose ports"
        )

    def unexpose(self, key: SandboxKey, port: int) -> None:  # noqa: B027 - nothing exposed
        """Close an exposed port again (not exposed: nothing to do)."""

    def exposed(self, key: SandboxKey) -> list[Endpoint]:
        """The key's exposed ports, lowest first."""
        return []

    def endpoint(self, key: SandboxKey, port: int) -> Endpoint | None:
        """The endpoint of an exposed port of a running box, else None (the gateway's look-up:
        cheap, no platform call)."""
        return None

    def __enter__(self) -> SandboxProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def available_providers() -> dict[str, Any]:
    """Installed providers by name (entry points, not yet loaded)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def create_provider(name: str, settings: Settings | None = None) -> SandboxProvider:
    """Instantiate a provider by its registered name with the given settings."""
    from .config import Settings

    found = available_providers()
    if name not in found:
        known = ", ".join(sorted(found)) or "none"
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT, f"unknown provider {name!r} (installed: {known})"
        )
    factory = found[name].load()
    provider: SandboxProvider = factory(settings or Settings())
    return provider
