"""RemoteSandbox over the HTTP carrier: a real `agent.pyz --http` on 127.0.0.1."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit import ErrorCode, SandboxError
from sandkit.agent.build import agent_zipapp
from sandkit.remote import RemoteSandbox
from sandkit.runtime.limits import MIB
from sandkit.transports.http import HttpTransport

from .remote_support import (
    SECRET,
    HttpAgent,
    comparable,
    local_sandbox,
    make_context,
    make_mapping,
    start_http_agent,
)

W = "/mnt/user-data/workspace"


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[HttpAgent]:
    running = start_http_agent(make_context(make_mapping(tmp_path / "remote")), tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def remote(agent: HttpAgent) -> Iterator[RemoteSandbox]:
    sandbox = RemoteSandbox(HttpTransport(agent.url, agent.token), "sk-http")
    try:
        yield sandbox
    finally:
        sandbox.close()


def raw_post(
    conn: http.client.HTTPConnection, body: bytes, token: str | None, path: str = "/rpc"
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    conn.request("POST", path, body, headers)
    response = conn.getresponse()
    data = response.read()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, data


def connect(agent: HttpAgent) -> http.client.HTTPConnection:
    host, port = agent.url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=10)


def test_operations_match_the_in_process_runtime(tmp_path: Path, remote: RemoteSandbox) -> None:
    local = local_sandbox(make_context(make_mapping(tmp_path / "local")))
    calls = [
        lambda s: s.write_file("d/a.txt", "one\ntwo\nthree\n"),
        lambda s: s.read_file("d/a.txt", start_line=2),
        lambda s: s.edit_file("d/a.txt", "two", "2"),
        lambda s: s.write_bytes("d/b.bin", b"\x00\xff" * 100),
        lambda s: s.read_bytes("d/b.bin"),
        lambda s: s.list_dir(W),
        lambda s: s.execute(f"echo {SECRET}; pwd"),
        lambda s: s.read_file("missing"),
        lambda s: s.write_file("/mnt/user-data/uploads/x", "x"),
        lambda s: s.read_file("/etc/passwd"),
    ]
    for call in calls:
        outcomes = []
        for sandbox in (local, remote):
            try:
                outcomes.append(comparable(call(sandbox)))
            except SandboxError as exc:
                outcomes.append((exc.code, exc.message))
        assert outcomes[0] == outcomes[1]


def test_async_calls_are_native_and_concurrent(remote: RemoteSandbox) -> None:
    async def scenario() -> list[str]:
        await asyncio.gather(*(remote.awrite_file(f"a/{i}", f"{i}\n") for i in range(50)))
        results = await asyncio.gather(*(remote.aread_file(f"a/{i}") for i in range(50)))
        with pytest.raises(SandboxError) as info:
            await remote.aread_file("missing")
        assert info.value.code is ErrorCode.NOT_FOUND
        return [r.content for r in results]

    assert asyncio.run(scenario()) == [f"{i}\n" for i in range(50)]


def test_fifty_threads(remote: RemoteSandbox) -> None:
    remote.write_file("shared.txt", "shared\n")
    results: list[str] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(remote.read_file("shared.txt").content)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert results == ["shared\n"] * 50


def test_eight_mib_each_way(remote: RemoteSandbox) -> None:
    data = os.urandom(8 * MIB)
    remote.write_bytes("big.bin", data)
    assert remote.read_bytes("big.bin") == data

    async def scenario() -> bytes:
        await remote.awrite_bytes("big2.bin", data[::-1])
        return await remote.aread_bytes("big2.bin")

    assert asyncio.run(scenario()) == data[::-1]


# -- auth ------------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789", ""])
def test_missing_or_wrong_token_is_401(agent: HttpAgent, token: str | None) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    status, message = raw_post(connect(agent), body, token)
    assert status == 401
    assert message["error"]["data"]["code"] == "ACCESS_DENIED"


def test_a_wrong_token_is_access_denied_for_the_client(agent: HttpAgent) -> None:
    remote = RemoteSandbox(HttpTransport(agent.url, agent.token + "x"), "sk-http")
    for call in (lambda: remote.read_file("a"), lambda: asyncio.run(remote.aread_file("a"))):
        with pytest.raises(SandboxError) as info:
            call()
        assert info.value.code is ErrorCode.ACCESS_DENIED
        assert "401" in info.value.message


def test_healthz_needs_no_token_and_says_nothing_else(agent: HttpAgent) -> None:
    conn = connect(agent)
    conn.request("GET", "/healthz")
    response = conn.getresponse()
    assert (response.status, response.read()) == (200, b"ok\n")
    conn.request("GET", "/rpc")
    response = conn.getresponse()
    response.read()
    assert response.status == 404


def run_agent(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-I", str(agent_zipapp()), *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)


def test_no_token_no_service(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text("{}")
    env = {k: v for k, v in os.environ.items() if k != "SANDKIT_AGENT_TOKEN"}
    result = run_agent(["--http", "127.0.0.1:0", "--config", str(config)], env)
    assert result.returncode == 4
    assert "no token, no service" in result.stderr
    result = run_agent(
        ["--http", "127.0.0.1:0", "--config", str(config)], {**env, "SANDKIT_AGENT_TOKEN": "short"}
    )
    assert result.returncode == 4
    assert "at least 16" in result.stderr
    good = {**env, "SANDKIT_AGENT_TOKEN": "t" * 32}
    result = run_agent(["--http", "127.0.0.1:0", "--config", str(config)], good)
    assert result.returncode == 4
    assert "invalid --config" in result.stderr
    assert not config.exists()  # read once, then deleted, even when refused


def test_secret_files_are_deleted_after_start_unless_kept(tmp_path: Path) -> None:
    context = make_context(make_mapping(tmp_path / "t"))
    gone = start_http_agent(context, tmp_path, via_file=True)
    try:
        assert not gone.config_path.exists()
        assert gone.token_path is not None and not gone.token_path.exists()
        remote = RemoteSandbox(HttpTransport(gone.url, gone.token), "sk-http")
        assert remote.list_dir().path == W
    finally:
        gone.stop()
    kept = start_http_agent(context, tmp_path, via_file=True, extra=("--keep-files",))
    try:
        assert kept.config_path.exists()
        assert kept.token_path is not None and kept.token_path.exists()
    finally:
        kept.stop()


def test_the_token_is_not_passed_to_commands(remote: RemoteSandbox, agent: HttpAgent) -> None:
    result = remote.execute("env")
    assert agent.token not in result.stdout
    assert "SANDKIT_AGENT_TOKEN" not in result.stdout


# -- protocol robustness -----------------------------------------------------------


def test_a_malformed_body_is_a_parse_error_and_the_connection_stays(agent: HttpAgent) -> None:
    conn = connect(agent)
    status, message = raw_post(conn, b"{not json", agent.token)
    assert status == 200
    assert message["error"]["code"] == -32700
    assert message["error"]["data"]["code"] == "INVALID_ARGUMENT"
    status, message = raw_post(conn, b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', agent.token)
    assert message["error"]["code"] == -32600
    status, message = raw_post(
        conn, b'{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}', agent.token
    )
    assert message["error"]["data"]["code"] == "INVALID_ARGUMENT"
    status, message = raw_post(conn, b'{"jsonrpc":"2.0","id":3,"method":"ping"}', agent.token)
    assert (status, message["id"], message["result"]) == (200, 3, {"pong": True})


def test_a_body_over_the_frame_limit_is_refused_unread(agent: HttpAgent) -> None:
    sock = socket.create_connection(("127.0.0.1", int(agent.url.rsplit(":", 1)[1])), timeout=10)
    head = (
        f"POST /rpc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {agent.token}\r\n"
        f"Content-Length: {10**12}\r\n\r\n"
    )
    sock.sendall(head.encode())
    chunks = []
    while chunk := sock.recv(65536):  # the agent closes the connection after this
        chunks.append(chunk)
    sock.close()
    reply = b"".join(chunks).decode()
    assert reply.startswith("HTTP/1.1 413")
    assert "TOO_LARGE" in reply


def test_a_stopped_agent_is_unavailable(agent: HttpAgent) -> None:
    remote = RemoteSandbox(HttpTransport(agent.url, agent.token), "sk-http")
    assert remote.ping() < 5
    agent.stop()
    for call in (lambda: remote.read_file("a"), lambda: asyncio.run(remote.aread_file("a"))):
        with pytest.raises(SandboxError) as info:
            call()
        assert info.value.code is ErrorCode.UNAVAILABLE


def test_nothing_listening_is_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    remote = RemoteSandbox(HttpTransport(f"http://127.0.0.1:{port}", "t" * 32), "sk-none")
    with pytest.raises(SandboxError) as info:
        remote.list_dir()
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "refused" in info.value.message


def test_async_calls_work_across_event_loops(remote: RemoteSandbox) -> None:
    remote.write_file("loops.txt", "x\n")
    transport = remote.transport
    assert isinstance(transport, HttpTransport)
    for _ in range(3):  # each asyncio.run is a new loop; pooled streams must not leak over
        assert asyncio.run(remote.aread_file("loops.txt")).content == "x\n"
    assert len(transport._aidle) == 1
