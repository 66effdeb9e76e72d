"""The tools offered follow what the sandbox allows; one marker on a cut line; MCP threads.

Issue 13: no bash tools (bash, bash_output, bash_input, bash_kill) where commands
cannot run, on every surface (SandboxTools, MCP, LangChain, deepagents), and
`include`/`exclude`; a line cut short says so once, with its true length and a way
on through the tools the model has; an MCP server started with --thread keeps one
thread across HTTP sessions and every result names its thread.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from deepagents.middleware.filesystem import supports_execution
from mcp import Client
from mcp.shared.exceptions import MCPError

from sandkit import SandboxKey
from sandkit.errors import SandboxError
from sandkit.integrations.deepagents import (
    SandkitBackend,
    SandkitFilesBackend,
    sandkit_backend,
    sandkit_thread_backend,
)
from sandkit.integrations.langchain import sandkit_tools
from sandkit.local import LocalProvider
from sandkit.tools import INSTRUCTIONS, SandboxTools
from sandkit.tools.mcp_server import THREAD_META_KEY, create_server
from sandkit.tools.specs import EXECUTE_TOOLS, TOOL_NAMES, instructions
from tests.test_mcp import free_port, http_client, server_argv, server_env, text

FILE_TOOLS = [n for n in TOOL_NAMES if n not in EXECUTE_TOOLS]
BASH_TOOLS = {"bash", "bash_output", "bash_input", "bash_kill"}


def test_the_bash_tools_are_the_four_process_tools() -> None:
    assert EXECUTE_TOOLS == BASH_TOOLS


@pytest.fixture
def local(make_local: Callable[..., LocalProvider]) -> Callable[[bool], LocalProvider]:
    return lambda execute: make_local(execute_enabled=execute)


@pytest.mark.parametrize("execute", [False, True])
def test_every_surface_offers_bash_only_where_commands_run(
    local: Callable[[bool], LocalProvider], execute: bool
) -> None:
    provider = local(execute)
    box = provider.acquire(SandboxKey("u", "t"))
    expected = list(TOOL_NAMES) if execute else FILE_TOOLS
    assert [d["name"] for d in SandboxTools(box).definitions()] == expected
    assert [t.name for t in sandkit_tools(provider)] == expected
    backend = sandkit_backend(box)
    assert supports_execution(backend) is execute
    assert isinstance(backend, SandkitBackend if execute else SandkitFilesBackend)
    thread_backend = sandkit_thread_backend(provider, thread_id="t")
    assert supports_execution(thread_backend) is execute

    async def listed() -> tuple[list[str], str | None]:
        async with Client(create_server(provider, user_id="u")) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            return tools, client.instructions

    names, said = anyio.run(listed)
    assert names == expected
    assert said == instructions(expected)
    if execute:
        assert said == INSTRUCTIONS
    else:
        assert said is not None and "shell" in said and "no shell" in said
        assert "bash" not in said


def test_a_withheld_bash_tool_still_says_execute_disabled(
    local: Callable[[bool], LocalProvider],
) -> None:
    tools = SandboxTools(local(False).acquire(SandboxKey("u", "t")))
    out = tools.run("bash_output", {"handle": "p-1"})
    assert out.error_code == "EXECUTE_DISABLED"


def test_include_and_exclude(local: Callable[[bool], LocalProvider]) -> None:
    provider = local(True)
    box = provider.acquire(SandboxKey("u", "t"))
    tools = SandboxTools(box, include=["read_file", "grep", "bash"], exclude=["bash"])
    assert [d["name"] for d in tools.definitions()] == ["grep", "read_file"]
    refused = tools.run("write_file", {"path": "x", "content": "y"})
    assert (
        refused.error_code == "INVALID_ARGUMENT" and "the tools are grep, read_file" in refused.text
    )
    assert [t.name for t in sandkit_tools(provider, exclude=["bash_kill", "ls"])] == [
        n for n in TOOL_NAMES if n not in ("bash_kill", "ls")
    ]
    with pytest.raises(SandboxError, match="unknown tool 'cat'"):
        sandkit_tools(provider, include=["cat"])

    async def scenario() -> None:
        server = create_server(provider, user_id="u", include=["ls", "glob"])
        async with Client(server) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["glob", "ls"]
            with pytest.raises(MCPError, match="unknown tool: read_file"):
                await client.call_tool("read_file", {"path": "x"})

    anyio.run(scenario)


def test_sandkit_mcp_takes_tool_and_no_tool(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sandkit.cli import app

    result = CliRunner().invoke(app, ["--data-root", str(tmp_path), "mcp", "--tool", "cat"])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error [INVALID_ARGUMENT]: unknown tool 'cat'")


# -- one marker on a cut line ------------------------------------------------------------


@pytest.mark.parametrize("execute", [False, True])
def test_a_five_megabyte_line_gets_one_true_marker(
    local: Callable[[bool], LocalProvider], execute: bool
) -> None:
    box = local(execute).acquire(SandboxKey("u", "t"))
    box.write_bytes("one-line.txt", b"x" * 5_000_000)
    out = SandboxTools(box).read_file("one-line.txt")
    first = out.splitlines()[0]
    assert first.count("[") == 1 and "line cut" in first
    assert "first 2000 characters shown of 5000000 bytes" in first
    assert "read_bytes" not in out and "262144" not in out
    assert "grep" in first
    assert ("bash" in first) is execute  # a way on only through tools it has
    # deepagents: its own way on (execute), the true size, no sandkit API named
    read = SandkitBackend(box).read(f"{'/mnt/user-data/workspace'}/one-line.txt")
    assert read.file_data is not None
    content = read.file_data["content"]
    assert "5000000 bytes" in content and "read_bytes" not in content
    # the CLI names its own option
    from sandkit.cli import render as cli_render

    [line] = cli_render.numbered_lines(box.read_file("one-line.txt"))
    assert "--raw" in line and "read_bytes" not in line and "5000000 bytes" in line


# -- MCP over HTTP: which thread -----------------------------------------------------------


@contextlib.contextmanager
def http_server(data_root: Path, *extra: str, log_file: Path | None = None) -> Iterator[str]:
    """`sandkit mcp --http` in a subprocess, its stderr into `log_file`."""
    port = free_port()
    argv = [sys.executable, *server_argv(data_root, "--http", "--port", str(port), *extra)]
    log_path = log_file or data_root.parent / f"mcp-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, env=server_env(), stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.monotonic() + 30
            while True:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", port), 0.2),
                ):
                    break
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"sandkit mcp --http did not start: {log_path.read_text()}"
                    )
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_mcp_http_default_thread_from_the_command_line(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def write_then_read(url: str) -> tuple[str, str, str | None]:
        async with http_client(url) as first:
            wrote = await first.call_tool("write_file", {"path": "kept.txt", "content": "kept\n"})
        async with http_client(url) as second:  # a reconnect: a new MCP session
            read = await second.call_tool("read_file", {"path": "kept.txt"})
        return text(read), str((wrote.meta or {}).get(THREAD_META_KEY)), None

    with http_server(data, "--thread", "shared") as url:
        read, thread, _ = anyio.run(write_then_read, url)
    assert read == "     1\tkept"
    assert thread == "shared"


def test_mcp_http_session_threads_are_named_in_results_and_logged(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def scenario(url: str) -> list[str]:
        threads = []
        for _ in range(2):
            async with http_client(url) as client:
                result = await client.call_tool("ls", {})
                threads.append(str((result.meta or {})[THREAD_META_KEY]))
        return threads

    log = tmp_path / "server.log"
    with http_server(data, log_file=log) as url:
        threads = anyio.run(scenario, url)
    assert len(set(threads)) == 2 and all(t.startswith("mcp-") for t in threads)
    said = log.read_text()
    for thread in threads:
        assert f"works on thread {thread}, new and empty for each session" in said
    assert "--thread" in said
    assert json.dumps(threads)  # the ids are plain strings a client can show
