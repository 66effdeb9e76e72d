"""`sandkit providers`: what is installed, and whether it imports here."""

from __future__ import annotations

from importlib.metadata import EntryPoint

from pydantic import BaseModel
from rich.text import Text

from ..errors import SandboxError
from ..provider import available_providers
from . import render
from .session import Session


class ProviderStatus(BaseModel):
    name: str
    target: str = ""
    distribution: str | None = None
    version: str | None = None
    loads: bool
    error: str | None = None
    default: bool = False


class ProvidersReport(BaseModel):
    default: str | None
    providers: list[ProviderStatus]


def provider_status(name: str, entry_point: EntryPoint, default: str | None) -> ProviderStatus:
    dist = entry_point.dist
    status = ProviderStatus(
        name=name,
        target=entry_point.value,
        distribution=dist.name if dist is not None else None,
        version=dist.version if dist is not None else None,
        loads=True,
        default=name == default,
    )
    try:
        entry_point.load()
    except Exception as exc:  # any import failure is the answer, not a crash
        return status.model_copy(
            update={"loads": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        )
    return status


def providers(session: Session) -> None:
    """List installed providers (entry points) and whether each loads."""
    try:
        default: str | None = session.provider_name
    except SandboxError as exc:  # a broken config should not hide the list
        session.out.note(f"settings not loaded ({exc.message}); default unknown")
        default = session.opts.provider
    found = available_providers()
    report = ProvidersReport(
        default=default,
        providers=[provider_status(name, ep, default) for name, ep in sorted(found.items())],
    )
    if session.out.json_mode:
        session.out.json(report)
        return
    rows = [
        [
            Text(("* " if p.default else "  ") + p.name),
            Text("ok", style="green") if p.loads else Text(f"failed: {p.error}", style="red"),
            Text(f"{p.distribution or '?'} {p.version or ''}".strip()),
            Text(p.target),
        ]
        for p in report.providers
    ]
    render.print_table(
        session.out.out,
        "Installed providers (* = default)",
        ["name", "loads", "package", "entry point"],
        rows,
    )
    if default is not None and default not in found:
        session.out.note(f"the configured default {default!r} is not installed")
