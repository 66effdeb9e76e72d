"""The offline base image and the sandbox Dockerfile give the providers what they rely on."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
import uuid
import zipapp
from collections.abc import Iterator
from pathlib import Path

import pytest
from testcontainers.core.container import DockerContainer, ExecConfig

from tests.docker_support import (
    BUILD_BASE_IMAGE,
    DOCKERD_SH,
    ROOT,
    default_base_image,
    require_docker,
    require_image,
)

pytestmark = pytest.mark.docker

DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
AGENT_MARKER = "dummy-agent-ok"
AGENT_IMPORTS = "json, zipfile, subprocess, ssl"
MAX_BASE_IMAGE_BYTES = 200_000_000


def _run(container: DockerContainer, cmd: list[str], user: str = "") -> tuple[int, str]:
    code, output = container.exec(ExecConfig(command=cmd, user=user or None))
    return code, output.decode(errors="replace").strip()


def _idle_container(image: str) -> DockerContainer:
    return DockerContainer(image).with_command(["sleep", "infinity"]).with_kwargs(init=True)


@pytest.fixture(scope="module")
def base_container() -> Iterator[DockerContainer]:
    tag = default_base_image()
    require_image(tag)
    with _idle_container(tag) as container:
        yield container


def test_base_image_python_has_what_the_agent_imports(base_container: DockerContainer) -> None:
    code, out = _run(
        base_container,
        ["python3", "-c", f"import {AGENT_IMPORTS}, sys; print(sys.version_info >= (3, 9))"],
        user="1000",
    )
    assert (code, out) == (0, "True")


def test_base_image_has_a_sandbox_user_with_uid_1000(base_container: DockerContainer) -> None:
    assert _run(base_container, ["id", "-un"], user="1000") == (0, "sandbox")
    code, entry = _run(base_container, ["getent", "passwd", "1000"])
    assert code == 0
    name, _, uid, gid, _, home, _ = entry.split(":")
    assert (name, uid, gid, home) == ("sandbox", "1000", "1000", "/home/sandbox")
    assert _run(base_container, ["touch", "/home/sandbox/probe"], user="1000")[0] == 0


def test_base_image_stays_small() -> None:
    image = require_image()
    assert image.attrs["Size"] < MAX_BASE_IMAGE_BYTES


def _static_rg() -> Path | None:
    scripts = Path(sysconfig.get_path("scripts"))
    for candidate in (scripts / "rg", Path(sys.prefix) / "bin" / "rg"):
        if candidate.is_file():
            return candidate
    found = shutil.which("rg")
    return Path(found) if found else None


@pytest.fixture(scope="module")
def sandbox_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Dockerfile built FROM the base image with a stand-in agent zipapp."""
    import docker.errors

    base = default_base_image()
    require_image(base)
    client = require_docker()
    ctx = tmp_path_factory.mktemp("sandbox-image")
    src = tmp_path_factory.mktemp("agent-src")
    (src / "__main__.py").write_text(f"print({AGENT_MARKER!r})\n")
    zipapp.create_archive(src, ctx / "sandkit-agent.pyz")
    rg = _static_rg()
    if rg is not None:
        shutil.copy(rg, ctx / "rg")
    else:  # the image only needs an executable at that path
        (ctx / "rg").write_text("#!/bin/sh\necho 'ripgrep stand-in'\n")
    shutil.copy(DOCKERFILE, ctx / "Dockerfile")
    tag = f"sandkit/sandbox-test:{uuid.uuid4().hex[:12]}"
    try:
        client.images.build(
            path=str(ctx), tag=tag, buildargs={"BASE": base}, rm=True, forcerm=True, pull=False
        )
    except docker.errors.BuildError as exc:
        log = "".join(str(chunk.get("stream", chunk)) for chunk in exc.build_log)
        pytest.fail(f"deploy/docker/Dockerfile does not build FROM {base}:\n{log}")
    try:
        yield tag
    finally:
        client.images.remove(tag, force=True)


@pytest.fixture(scope="module")
def sandbox_container(sandbox_image: str) -> Iterator[DockerContainer]:
    with _idle_container(sandbox_image) as container:
        yield container


def test_sandbox_image_runs_as_1000_in_the_workspace(sandbox_container: DockerContainer) -> None:
    assert _run(sandbox_container, ["id", "-u"]) == (0, "1000")
    assert _run(sandbox_container, ["pwd"]) == (0, "/mnt/user-data/workspace")


def test_sandbox_image_has_the_agent_and_rg_baked_in(sandbox_container: DockerContainer) -> None:
    assert _run(sandbox_container, ["python3", "/opt/sandkit/agent.pyz"]) == (0, AGENT_MARKER)
    code, out = _run(sandbox_container, ["sh", "-c", "command -v rg && rg --version"])
    assert code == 0, out
    assert out.splitlines()[0] == "/opt/sandkit/bin/rg"


@pytest.mark.parametrize("area", ["workspace", "uploads", "outputs"])
def test_sandbox_image_user_data_dirs_are_writable_by_1000(
    sandbox_container: DockerContainer, area: str
) -> None:
    assert _run(sandbox_container, ["touch", f"/mnt/user-data/{area}/probe"]) == (0, "")


def _standard_socket_engine() -> None:
    require_docker()
    host = os.environ.get("DOCKER_HOST", "")
    if host not in ("", "unix:///var/run/docker.sock"):
        pytest.skip(f"dockerd.sh manages the engine on /var/run/docker.sock, not {host}")


def test_dockerd_up_is_a_fast_no_op_when_an_engine_runs() -> None:
    _standard_socket_engine()
    pid_file = Path(os.environ.get("SANDKIT_DOCKERD_PIDFILE", "/run/sandkit-dockerd.pid"))
    pid_before = pid_file.read_text() if pid_file.exists() else None
    started = time.monotonic()
    up = subprocess.run([str(DOCKERD_SH), "up"], capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stderr
    assert time.monotonic() - started < 5
    assert "already running" in up.stderr
    assert (pid_file.read_text() if pid_file.exists() else None) == pid_before
    status = subprocess.run([str(DOCKERD_SH), "status"], capture_output=True, text=True)
    assert status.returncode == 0, status.stderr


def test_build_script_skips_an_existing_image_and_prints_its_tag() -> None:
    tag = default_base_image()
    require_image(tag)
    if os.geteuid() != 0:
        pytest.skip("build-base-image.sh needs root")
    started = time.monotonic()
    result = subprocess.run(
        [str(BUILD_BASE_IMAGE), "--tag", tag], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == tag
    assert time.monotonic() - started < 10
