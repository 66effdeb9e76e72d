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


class Isolation(BaseModel):
    """Where the default provider's commands run, and which kernel they share."""

    provider: str
    runtime: str  # e.g. "runc", "runsc", "RuntimeClass gvisor", "host processes", "E2B microVM"
    boundary: str  # "host kernel shared", "gVisor application kernel", "virtual machine", ...
    kernel_shared: bool | None  # True: one kernel bug reaches the host; None: not known here


class DoctorReport(BaseModel):
    ok: bool
    checks: list[Check]
    config_file: str | None = None  # the settings file in use (None: none)
    config_found_by: str = "none"  # SANDKIT_CONFIG, project, user or none
    data_root: str | None = None  # the data root in use
    provider: str | None = None
    isolation: Isolation | None = None  # the default provider's runtime (docs/security.md)


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


GVISOR = "gVisor application kernel (the host kernel is not shared)"
SHARED = "host kernel shared"


def _runtime_kind(name: str, path: str = "") -> tuple[str, bool | None]:
    """(boundary, kernel_shared) for an OCI runtime or RuntimeClass handler name."""
    text = f"{name} {os.path.basename(path)}".lower()
    if "runsc" in text or "gvisor" in text:
        return GVISOR, False
    if "kata" in text or "firecracker" in text:
        return "virtual machine (the host kernel is not shared)", False
    if "runc" in text or "crun" in text:
        return SHARED, True
    return "unknown runtime", None


def docker_runtimes(docker_host: str | None = None) -> tuple[dict[str, str], str] | None:
    """The engine's runtimes {name: path} and its default, or None when it cannot be asked."""
    try:
        import docker
    except ImportError:
        return None
    try:
        client = (
            docker.DockerClient(base_url=docker_host, timeout=3)
            if docker_host
            else docker.from_env(timeout=3)
        )
        info = client.info()
    except Exception:
        return None
    runtimes = {name: str(spec.get("path", "")) for name, spec in info.get("Runtimes", {}).items()}
    return runtimes, str(info.get("DefaultRuntime") or "runc")


def check_isolation(
    provider: str,
    options: dict[str, object],
    execute_enabled: bool,
    engine: Callable[[str | None], tuple[dict[str, str], str] | None] = docker_runtimes,
) -> tuple[Isolation, Check]:
    """Which runtime the default provider's boxes use and whether they share the host kernel.

    Docker asks the engine which runtimes it knows (so a configured runsc that the engine
    lacks is a failure); Kubernetes reports the configured RuntimeClass (the cluster is
    not asked).
    """
    if provider == "local":
        iso = Isolation(
            provider=provider, runtime="host processes", boundary=SHARED, kernel_shared=True
        )
        detail = "commands run on this host as this user" if execute_enabled else "execute off"
        return iso, Check(
            name="isolation", status="warn" if execute_enabled else "ok", detail=detail
        )
    if provider == "docker":
        wanted = str(options.get("runtime") or "")
        host = options.get("docker_host")
        found = engine(str(host) if host else None)
        if found is None:
            name = wanted or "engine default"
            boundary, shared = _runtime_kind(wanted) if wanted else ("not known", None)
            iso = Isolation(
                provider=provider, runtime=name, boundary=boundary, kernel_shared=shared
            )
            return iso, Check(
                name="isolation", status="warn", detail=f"{name}: the engine did not answer"
            )
        runtimes, default = found
        name = wanted or default
        if name not in runtimes:
            iso = Isolation(
                provider=provider, runtime=name, boundary="not known", kernel_shared=None
            )
            known = ", ".join(sorted(runtimes)) or "none"
            hint = " (deploy/docker/dockerd.sh gvisor registers runsc)" if "runsc" in name else ""
            return iso, Check(
                name="isolation",
                status="fail",
                detail=f"runtime {name!r} is not known to the engine (it has: {known}){hint}",
            )
        boundary, shared = _runtime_kind(name, runtimes[name])
        iso = Isolation(provider=provider, runtime=name, boundary=boundary, kernel_shared=shared)
        return iso, Check(
            name="isolation", status="ok", detail=f"Docker runtime {name}: {boundary}"
        )
    if provider == "kubernetes":
        cls = str(options.get("runtime_class_name") or "")
        if not cls:
            iso = Isolation(
                provider=provider,
                runtime="cluster default",
                boundary=f"{SHARED} (unless the node's default runtime is a sandbox)",
                kernel_shared=True,
            )
            return iso, Check(
                name="isolation",
                status="ok",
                detail="pods use the node's default runtime (runc: host kernel shared); set "
                "runtime_class_name: gvisor for gVisor",
            )
        boundary, shared = _runtime_kind(cls)
        iso = Isolation(
            provider=provider,
            runtime=f"RuntimeClass {cls}",
            boundary=boundary,
            kernel_shared=shared,
        )
        return iso, Check(name="isolation", status="ok", detail=f"RuntimeClass {cls}: {boundary}")
    if provider == "e2b":
        iso = Isolation(
            provider=provider,
            runtime="E2B microVM",
            boundary="virtual machine (the host kernel is not shared)",
            kernel_shared=False,
        )
        return iso, Check(name="isolation", status="ok", detail="E2B microVM: its own kernel")
    iso = Isolation(
        provider=provider, runtime="not known", boundary="not known", kernel_shared=None
    )
    return iso, Check(name="isolation", status="ok", detail=f"{provider}: not known to doctor")


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
    if default in installed:
        iso, check = check_isolation(
            default, dict(settings.providers.get(default, {})), settings.execute_enabled
        )
        report.isolation = iso
        checks.append(check)
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
