"""Exposed ports of local sandboxes: a unix socket per port, carried to this host's loopback.

A local sandbox's commands run on the host, so a server it starts listens on the host's
own network: `expose(key, port)` gives the platform the same kind of endpoint as a box
provider (a socket under the data root, mode 0600; `sandkit.net.ports`) whose
connections go to 127.0.0.1:<port>. It is not a boundary (another local sandbox, or any
process of the host, can listen on that port or connect to it directly), but the preview
gateway, `unexpose` and the end of a sandbox behave as on every other provider.
"""

from __future__ import annotations

import socket
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..config import Settings
from ..errors import ErrorCode, SandboxError
from ..net.ports import PortSockets
from ..network import Endpoint, ExposeOptions
from ..provider import SandboxKey

CONNECT_TIMEOUT_S = 10.0


class LocalOptions(BaseModel):
    """`providers.local` in the settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    expose: ExposeOptions = Field(
        default_factory=ExposeOptions,
        description="May ports of a sandbox's servers be exposed (to the preview gateway).",
    )

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalOptions:
        try:
            return cls.model_validate(settings.provider_options("local"))
        except ValueError as exc:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT, f"invalid providers.local options: {exc}"
            ) from None


class _Loopback:
    """One connection to 127.0.0.1:<port> on this host (what `PortSockets` carries)."""

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT_S)
        self._sock.settimeout(None)

    def socket(self, port: int) -> socket.socket:
        return self._sock

    def close(self) -> None:
        self._sock.close()


class LocalPorts:
    """The exposed ports of one local provider."""

    def __init__(self, options: ExposeOptions, root: Path) -> None:
        self.options = options
        self._sockets = PortSockets(root, lambda _target, port: _Loopback(port))

    def expose(self, key: SandboxKey, port: int, running: bool) -> Endpoint:
        """`running`: the key has a sandbox (else UNAVAILABLE, as for a box not running)."""
        if not self.options.enabled:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT,
                "ports cannot be exposed: providers.local.expose.enabled is false",
            )
        self.options.check_port(port)
        if not running:
            raise SandboxError(
                ErrorCode.UNAVAILABLE,
                f"sandbox {key.sandbox_id} is not running; acquire it before exposing a port",
            )
        self.options.check_capacity(set(self._sockets.of_box(key.sandbox_id)), port)
        return _endpoint(key, port, self._sockets.open(key.sandbox_id, "127.0.0.1", port))

    def unexpose(self, key: SandboxKey, port: int) -> None:
        self.options.check_port(port, exposing=False)
        self._sockets.close(key.sandbox_id, port)

    def exposed(self, key: SandboxKey) -> list[Endpoint]:
        found = sorted(self._sockets.of_box(key.sandbox_id).items())
        return [_endpoint(key, port, path) for port, path in found]

    def endpoint(self, key: SandboxKey, port: int) -> Endpoint | None:
        path = self._sockets.path(key.sandbox_id, port) if isinstance(port, int) else None
        return _endpoint(key, port, path) if path is not None else None

    def close_box(self, key: SandboxKey) -> None:
        self._sockets.close_box(key.sandbox_id)

    def close_all(self) -> None:
        self._sockets.close_all()


def _endpoint(key: SandboxKey, port: int, path: Path) -> Endpoint:
    return Endpoint.over_socket(key.user_id, key.thread_id, port, str(path))
