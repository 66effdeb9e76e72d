"""`sandkit doctor`: can sandkit run here, and what will it use?

Checks only what this machine decides (settings, data root, search engine,
installed providers); it starts no sandbox and writes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel
from rich.text import Text

from ..errors import SandboxError
from ..provider import available_providers
from . import render
from .output import EXIT_OK, EXIT_PROBLEMS
from .providers import provider_status
from .session import Session

Status = Literal["ok", "warn", "fail"]
STYLES = {"ok": "green", "warn": "yellow", "fail": "red"}


class Check(BaseModel):
    name: str
    status: Status
    detail: str


class DoctorReport(BaseModel):
    ok: bool
    checks: list[Check]
    config_file: str | None = None  # the settings file in use (None: none)
    config_found_by: str = "none"  # SANDKIT_CONFIG, project, user or none
    data_root: str | None = None  # the data root in use
    provider: str | None = None


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_data_root(root: Path) -> Check:
    root = root.expanduser()
    if root.is_dir():
        if os.access(root, os.W_OK | os.X_OK):
            return Check(name="data root", status="ok", detail=f"{root} (writable)")
        return Check(name="data root", status="fail", detail=f"{root} is not writable")
    if root.exists():
        return Check(name="data root", status="fail", detail=f"{root} is not a directory")
    base = _nearest_existing(root)
    if os.access(base, os.W_OK | os.X_OK):
        return Check(name="data root", status="ok", detail=f"{root} (created on first use)")
    return Check(name="data root", status="fail", detail=f"{root} cannot be created in {base}")


def check_ripgrep(find: Callable[[], str | None]) -> Check:
    try:
        path = find()
    except Exception as exc:  # a broken search module is a finding, not a crash
        return Check(name="ripgrep", status="fail", detail=f"{type(exc).__name__}: {exc}")
    if path is None:
        return Check(name="ripgrep", status="warn", detail="not found: grep uses the Python engine")
    return Check(name="ripgrep", status="ok", detail=path)


def run_checks(session: Session) -> DoctorReport:
    source = session.config
    report = DoctorReport(
        ok=False,
        checks=[],
        config_file=None if source.path is None else str(source.path),
        config_found_by=source.found_by,
    )
    checks = report.checks
    try:
        settings = session.settings
    except SandboxError as exc:
        checks.append(Check(name="settings", status="fail", detail=exc.message))
        return report
    checks.append(Check(name="settings", status="ok", detail=source.describe()))
    report.data_root = str(settings.data_root.expanduser().absolute())
    report.provider = session.provider_name
    checks.append(check_data_root(settings.data_root))

    def find() -> str | None:
        from ..runtime.search import find_rg

        return find_rg()

    checks.append(check_ripgrep(find))
    installed = available_providers()
    default = session.provider_name
    for name, entry_point in sorted(installed.items()):
        status = provider_status(name, entry_point, default)
        mark = " (default)" if status.default else ""
        if status.loads:
            detail = f"{status.distribution or '?'} {status.version or ''}".strip() + mark
            checks.append(Check(name=f"provider {name}", status="ok", detail=detail))
        else:
            checks.append(
                Check(name=f"provider {name}", status="fail", detail=f"{status.error}{mark}")
            )
    if default not in installed:
        checks.append(
            Check(name="default provider", status="fail", detail=f"{default!r} is not installed")
        )
    if default == "local":
        checks.append(
            Check(
                name="local execute",
                status="ok",
                detail="enabled: commands run on this host"
                if settings.execute_enabled
                else "disabled (enable with --allow-execute or execute_enabled: true)",
            )
        )
    report.ok = all(c.status != "fail" for c in checks)
    return report


def doctor(session: Session) -> int:
    """Check settings, data root, search engine and providers; exits 1 on a failure."""
    report = run_checks(session)
    if session.out.json_mode:
        session.out.json(report)
    else:
        rows = [
            [Text(c.status, style=STYLES[c.status]), Text(c.name), Text(c.detail)]
            for c in report.checks
        ]
        render.print_table(session.out.out, "sandkit doctor", ["", "check", "detail"], rows)
    return EXIT_OK if report.ok else EXIT_PROBLEMS
