"""The HTTP carrier against a real container: the agent zipapp in a throwaway box.

A testcontainers fixture starts the local base image (no provider involved),
copies the agent in, starts `agent.pyz --http` in it as the unprivileged user
and publishes the port; the tests talk to it from the host through the
published port, as a client outside the box would.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import json
import os
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from sandkit import ErrorCode, SandboxError
from sandkit.agent.build import agent_zipapp
from sandkit.agent.protocol import agent_config
from sandkit.remote import RemoteSandbox
from sandkit.runtime.limits import MIB, Limits
from sandkit.runtime.pathmap import OUTPUTS, UPLOADS, WORKSPACE, Mount, PathMapping
from sandkit.transports.http import HttpTransport

from .docker_support import default_base_image, require_docker, require_image

pytestmark = pytest.mark.docker

PORT = 8765
USER = "1000:1000"
AGENT = "/opt/sandkit/agent.pyz"
RUN = "/opt/sandkit/run"
SECRET = "sk-test-3e8b0c1d5a7f-never-print"
TOKEN = "container-token-" + "7f3a9c2e" * 4


@dataclass
class AgentBox:
    container: Any  # testcontainers DockerContainer
    url: str
    host: str
    port: int

    def exec(self, argv: list[str], **kwargs: Any) -> Any:
        return self.container.get_wrapped_container().exec_run(argv, **kwargs)


def _tar(entries: list[tuple[str, bytes | None, int, int]]) -> bytes:
    """(path, data or None for a directory, mode, uid) -> a tar archive rooted at /."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, data, mode, uid in entries:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.mode, info.uid, info.gid = mode, uid, uid
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _box_config() -> dict[str, Any]:
    mapping = PathMapping(
        [Mount(WORKSPACE, WORKSPACE), Mount(UPLOADS, UPLOADS, True), Mount(OUTPUTS, OUTPUTS)],
        WORKSPACE,
    )
    return agent_config(mapping, Limits(), execute_enabled=True, secrets=(SECRET,), rg_path=None)


def _wait_healthy(host: str, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = http.client.HTTPConnection(host, port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except (OSError, http.client.HTTPException):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"the agent at {host}:{port} did not become healthy")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def box() -> Iterator[AgentBox]:
    require_docker()  # before testcontainers: it disables Ryuk when Ryuk cannot be had
    tag = os.environ.get("SANDKIT_TEST_IMAGE") or default_base_image()
    require_image(tag)
    from testcontainers.core.container import DockerContainer

    container = (
        DockerContainer(tag)
        .with_command(["sleep", "infinity"])
        .with_exposed_ports(PORT)
        .with_kwargs(
            user=USER,
            init=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            labels={"sandkit.test": "agent-http-container"},
        )
    )
    container.start()
    try:
        uid = int(USER.split(":")[0])
        files = [
            ("/opt/sandkit", None, 0o755, 0),
            (AGENT, agent_zipapp().read_bytes(), 0o644, 0),
            # As the provider does it: a root-owned, unlistable drop box for the
            # secret files, which the agent (their owner) deletes after reading.
            (RUN, None, 0o1733, 0),
            (f"{RUN}/config.json", json.dumps(_box_config()).encode(), 0o400, uid),
            (f"{RUN}/token", TOKEN.encode(), 0o400, uid),
        ]
        files += [(path, None, 0o755, uid) for path in ("/mnt/user-data", WORKSPACE, OUTPUTS)]
        files.append((UPLOADS, None, 0o555, uid))
        wrapped = container.get_wrapped_container()
        assert wrapped.put_archive("/", _tar(files))
        argv = ["python3", "-I", "-S", AGENT, "--http", f"0.0.0.0:{PORT}"]
        argv += ["--config", f"{RUN}/config.json", "--token-file", f"{RUN}/token"]
        wrapped.exec_run(argv, user=USER, workdir="/", detach=True)
        host = container.get_container_host_ip()
        port = int(container.get_exposed_port(PORT))
        _wait_healthy(host, port)
        yield AgentBox(container, f"http://{host}:{port}", host, port)
    finally:
        container.stop()


@pytest.fixture
def remote(box: AgentBox) -> Iterator[RemoteSandbox]:
    sandbox = RemoteSandbox(HttpTransport(box.url, TOKEN), "sk-container-http")
    try:
        yield sandbox
    finally:
        sandbox.close()


def post_ping(box: AgentBox, authorization: str | None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(box.host, box.port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    conn.request("POST", "/rpc", body, headers)
    response = conn.getresponse()
    return response.status, json.loads(response.read())


# -- auth ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer ", f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", TOKEN, f"Basic {TOKEN}"],
    ids=["none", "empty", "bearer-empty", "truncated", "extended", "no-scheme", "basic"],
)
def test_no_or_wrong_token_is_401_access_denied(box: AgentBox, authorization: str | None) -> None:
    status, message = post_ping(box, authorization)
    assert status == 401
    assert message["error"]["data"]["code"] == "ACCESS_DENIED"


def test_the_client_sees_access_denied_for_a_wrong_token(box: AgentBox) -> None:
    wrong = RemoteSandbox(HttpTransport(box.url, "not-" + TOKEN), "sk-wrong")
    try:
        with pytest.raises(SandboxError) as info:
            wrong.read_file("a.txt")
        assert info.value.code is ErrorCode.ACCESS_DENIED
        with pytest.raises(SandboxError) as info:
            asyncio.run(wrong.aread_file("a.txt"))
        assert info.value.code is ErrorCode.ACCESS_DENIED
    finally:
        wrong.close()


def test_the_right_token_works(box: AgentBox, remote: RemoteSandbox) -> None:
    assert post_ping(box, f"Bearer {TOKEN}") == (
        200,
        {"jsonrpc": "2.0", "id": 1, "result": {"pong": True}},
    )
    remote.write_file("hello.txt", "hello from the host\n")
    assert remote.read_file("hello.txt").content == "hello from the host\n"
    result = remote.execute(f"id -u; cat hello.txt; echo {SECRET}")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[:2] == ["1000", "hello from the host"]
    assert SECRET not in result.stdout  # the config's secrets reached the agent


def test_healthz_needs_no_token_and_tells_nothing(box: AgentBox) -> None:
    conn = http.client.HTTPConnection(box.host, box.port, timeout=10)
    conn.request("GET", "/healthz")
    response = conn.getresponse()
    assert (response.status, response.read()) == (200, b"ok\n")
    conn.request("GET", "/rpc")
    response = conn.getresponse()
    response.read()
    assert response.status == 404


def test_the_secret_files_are_gone_and_the_token_is_nowhere_in_the_box(
    box: AgentBox, remote: RemoteSandbox
) -> None:
    listing = box.exec(["ls", "-A", RUN], user="0:0")  # root may list the drop box
    assert listing.exit_code == 0 and listing.output == b""
    pid = remote.info()["pid"]
    shown = box.exec(["cat", f"/proc/{pid}/cmdline"], user=USER)
    assert shown.exit_code == 0 and TOKEN.encode() not in shown.output
    # The agent is non-dumpable: its environ (and memory) are not the box user's to read.
    hidden = box.exec(["cat", f"/proc/{pid}/environ"], user=USER)
    assert hidden.exit_code != 0 and b"Permission denied" in hidden.output
    env = remote.execute("env").stdout
    assert TOKEN not in env


@pytest.mark.parametrize(
    ("env", "says"),
    [({}, "no token, no service"), ({"SANDKIT_AGENT_TOKEN": "short"}, "at least 16")],
    ids=["no-token", "short-token"],
)
def test_the_agent_refuses_to_start_without_a_token(
    box: AgentBox, env: dict[str, str], says: str
) -> None:
    argv = ["python3", "-I", "-S", AGENT, "--http", "0.0.0.0:8766", "--config", "/dev/null"]
    result = box.exec(argv, user=USER, workdir="/", environment=env)
    assert result.exit_code == 4
    assert says in result.output.decode()


# -- payloads and concurrency ------------------------------------------------------------


def test_eight_mib_each_way(remote: RemoteSandbox) -> None:
    data = os.urandom(8 * MIB)
    remote.write_bytes("big.bin", data)
    assert remote.read_bytes("big.bin") == data
    assert remote.execute("stat -c %s big.bin").stdout.strip() == str(8 * MIB)

    async def scenario() -> bytes:
        await remote.awrite_bytes("big2.bin", data[::-1])
        return await remote.aread_bytes("big2.bin")

    assert asyncio.run(scenario()) == data[::-1]


def test_fifty_concurrent_threads(remote: RemoteSandbox) -> None:
    errors: list[BaseException] = []
    results: dict[int, str] = {}
    barrier = threading.Barrier(50)

    def worker(i: int) -> None:
        try:
            barrier.wait()
            remote.write_file(f"threads/{i}.txt", f"thread {i}\n")
            results[i] = remote.read_file(f"threads/{i}.txt").content
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert results == {i: f"thread {i}\n" for i in range(50)}


def test_fifty_concurrent_coroutines(remote: RemoteSandbox) -> None:
    async def scenario() -> list[str]:
        await asyncio.gather(*(remote.awrite_file(f"tasks/{i}", f"{i}\n") for i in range(50)))
        # Commands that overlap in time: all 50 in flight at once.
        runs = await asyncio.gather(
            *(remote.aexecute(f"sleep 0.2; cat tasks/{i}") for i in range(50))
        )
        return [r.stdout for r in runs]

    started = time.monotonic()
    assert asyncio.run(scenario()) == [f"{i}\n" for i in range(50)]
    # 50 x 0.2 s one after the other would take 10 s; the agent runs them side by side.
    assert time.monotonic() - started < 8
