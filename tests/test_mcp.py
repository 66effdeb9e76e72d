"""`sandkit mcp` over stdio and streamable HTTP, driven by the MCP SDK's own client.

The server runs as a real `sandkit mcp` process on the local provider; the
client lists the tools, calls each one, and checks the text, the structured
results (which the SDK validates against each tool's output schema) and the
error results (`isError` with the code).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult

from sandkit.tools import TOOL_NAMES

ROOT = Path(__file__).resolve().parent.parent
WS = "/mnt/user-data/workspace"
USER = "alice"


def server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDKIT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["SANDKIT_CONFIG"] = os.devnull  # no developer's sandkit.yaml
    return env


def server_argv(data_root: Path, *extra: str) -> list[str]:
    return [
        "-c",
        "from sandkit.cli import app; app()",
        "--data-root",
        str(data_root),
        "--user",
        USER,
        "--allow-execute",
        "mcp",
        *extra,
    ]


def workspace(data_root: Path, thread: str) -> Path:
    return data_root / "users" / USER / "threads" / thread / "user-data" / "workspace"


def text(result: CallToolResult) -> str:
    (block,) = result.content
    assert block.type == "text"
    return block.text


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    anyio.run(scenario)


# -- servers ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def http_server(data_root: Path, *extra: str) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, *server_argv(data_root, "--http", "--port", str(port), *extra)]
    # The log is a file, not a pipe: a chatty server can never block on a full pipe.
    with tempfile.TemporaryFile() as log:
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
                    log.seek(0)
                    raise AssertionError(f"sandkit mcp --http did not start: {log.read()!r}")
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def http_data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("http-data")


@pytest.fixture(scope="module")
def http_url(http_data_root: Path) -> Iterator[str]:
    with http_server(http_data_root) as url:
        yield url


def http_client(url: str, mode: str = "legacy", headers: dict[str, str] | None = None) -> Client:
    transport = streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers or {}))
    return Client(transport, mode=mode)


def stdio_client(data_root: Path, *extra: str) -> Client:
    params = StdioServerParameters(
        command=sys.executable, args=server_argv(data_root, *extra), env=server_env()
    )
    return Client(params)


@pytest.fixture(params=["stdio", "http"])
def connect(request: pytest.FixtureRequest, tmp_path: Path, http_url: str) -> Callable[[], Client]:
    """A client factory for one transport, each call a new MCP session on a fresh thread."""
    if request.param == "stdio":
        return lambda: stdio_client(tmp_path / "data", "--thread", "stdio-thread")
    return lambda: http_client(http_url)


# -- every tool, both transports ---------------------------------------------------------------


def test_lists_every_tool_with_schemas_and_hints(connect: Callable[[], Client]) -> None:
    async def scenario() -> None:
        async with connect() as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tuple(tools) == TOOL_NAMES
        for tool in tools.values():
            assert tool.description and tool.input_schema["type"] == "object"
            assert tool.output_schema is not None and tool.output_schema["type"] == "object"
            assert tool.annotations is not None
        assert tools["grep"].annotations.read_only_hint is True  # type: ignore[union-attr]
        assert tools["bash"].annotations.destructive_hint is True  # type: ignore[union-attr]
        assert "pattern" in tools["grep"].input_schema["required"]

    run(scenario)


def test_calls_each_tool_with_text_and_structured_results(connect: Callable[[], Client]) -> None:
    async def scenario() -> None:
        async with connect() as client:

            async def call(name: str, **arguments: Any) -> CallToolResult:
                result = await client.call_tool(name, arguments)
                assert not result.is_error, text(result)
                return result

            wrote = await call("write_file", path="src/app.py", content="def f():\n    return 1\n")
            assert text(wrote) == f"Created {WS}/src/app.py (22 bytes)"
            assert wrote.structured_content == {
                "path": f"{WS}/src/app.py",
                "bytes_written": 22,
                "created": True,
            }

            found = await call("glob", pattern="**/*.py")
            assert text(found) == f"Found 1 path under {WS}\n{WS}/src/app.py"
            assert found.structured_content["paths"] == [f"{WS}/src/app.py"]  # type: ignore[index]

            hits = await call("grep", pattern="return")
            assert text(hits) == f"Found 1 match under {WS}\n{WS}/src/app.py:2:     return 1"
            match = hits.structured_content["matches"][0]  # type: ignore[index]
            assert (match["path"], match["line_number"]) == (f"{WS}/src/app.py", 2)

            read = await call("read_file", path="src/app.py")
            assert text(read) == "     1\tdef f():\n     2\t    return 1"
            assert read.structured_content["total_lines"] == 2  # type: ignore[index]

            edited = await call("edit_file", path="src/app.py", old_string="1", new_string="2")
            assert text(edited) == f"Edited {WS}/src/app.py: 1 replacement"
            assert edited.structured_content["replacements"] == 1  # type: ignore[index]

            listing = await call("ls")
            assert text(listing) == f"{WS}/\n  src/\n    app.py (22 bytes)"

            ran = await call("bash", command="python3 src/app.py; cat src/app.py | tail -1")
            assert text(ran) == "    return 2\n[exit code 0]"
            assert ran.structured_content["exit_code"] == 0  # type: ignore[index]

            nothing = await call("grep", pattern="absent")
            assert text(nothing) == f"No matches found under {WS}"

    run(scenario)


def test_undecodable_file_names_arrive_as_escapes(connect: Callable[[], Client]) -> None:
    """A name that is not UTF-8 would be an encoding error in the frame: shown as \\xNN."""

    async def scenario() -> None:
        async with connect() as client:
            made = await client.call_tool("bash", {"command": "printf 'hit\\n' > $'bad\\xff.txt'"})
            assert not made.is_error, text(made)
            for name, arguments in (
                ("ls", {}),
                ("glob", {"pattern": "*.txt"}),
                ("grep", {"pattern": "hit", "output_mode": "files_with_matches"}),
            ):
                result = await client.call_tool(name, arguments)
                assert not result.is_error, text(result)
                assert "bad\\xff.txt" in text(result), (name, text(result))
                shown = json.dumps(result.structured_content, ensure_ascii=False)
                assert json.dumps("bad\\xff.txt")[1:-1] in shown

    run(scenario)


@pytest.mark.parametrize(
    ("name", "arguments", "code"),
    [
        ("read_file", {"path": "missing.txt"}, "NOT_FOUND"),
        ("read_file", {"path": "/etc/passwd"}, "ACCESS_DENIED"),
        ("write_file", {"path": "/mnt/user-data/uploads/x", "content": ""}, "READ_ONLY"),
        ("edit_file", {"path": "a.txt", "old_string": "zz", "new_string": "y"}, "INVALID_ARGUMENT"),
        ("grep", {"pattern": "(unclosed"}, "INVALID_PATTERN"),
        ("glob", {"pattern": "*", "path": "a.txt"}, "NOT_A_DIRECTORY"),
        ("ls", {"max_depth": 0}, "INVALID_ARGUMENT"),
        ("bash", {"command": "true", "timeout": 10**9}, "INVALID_ARGUMENT"),
    ],
)
def test_errors_are_is_error_with_the_code(
    connect: Callable[[], Client], name: str, arguments: dict[str, Any], code: str
) -> None:
    async def scenario() -> None:
        async with connect() as client:
            await client.call_tool("write_file", {"path": "a.txt", "content": "abc"})
            result = await client.call_tool(name, arguments)
        assert result.is_error
        assert text(result).startswith(f"Error [{code}]: ")
        assert result.structured_content["error"]["code"] == code  # type: ignore[index]

    run(scenario)


def test_unknown_tool_is_a_protocol_error(connect: Callable[[], Client]) -> None:
    async def scenario() -> None:
        async with connect() as client:
            with pytest.raises(MCPError, match="unknown tool: cat"):
                await client.call_tool("cat", {"path": "a.txt"})

    run(scenario)


# -- which sandbox a call touches ----------------------------------------------------------------


def test_stdio_works_on_the_configured_user_and_thread(tmp_path: Path) -> None:
    data_root = tmp_path / "data"

    async def scenario() -> None:
        async with stdio_client(data_root, "--thread", "t-42") as client:
            await client.call_tool("write_file", {"path": "note.txt", "content": "hi"})
            named = await client.call_tool(
                "write_file",
                {"path": "other.txt", "content": ""},
                meta={"sandkit/thread_id": "t-7"},
            )
            assert not named.is_error

    run(scenario)
    assert (workspace(data_root, "t-42") / "note.txt").read_text() == "hi"
    assert (workspace(data_root, "t-7") / "other.txt").exists()


def test_http_gives_each_session_its_own_thread(http_url: str, http_data_root: Path) -> None:
    async def scenario() -> None:
        async with http_client(http_url) as first, http_client(http_url) as second:
            await first.call_tool("write_file", {"path": "mine.txt", "content": "first"})
            mine = await first.call_tool("read_file", {"path": "mine.txt"})
            assert text(mine) == "     1\tfirst"
            theirs = await second.call_tool("read_file", {"path": "mine.txt"})
            assert theirs.is_error and text(theirs).startswith("Error [NOT_FOUND]")

    run(scenario)
    owners = list((http_data_root / "users" / USER / "threads").glob("mcp-*/user-data/workspace"))
    assert [p for p in owners if (p / "mine.txt").exists()], "the session thread is mcp-<id>"


def test_http_client_can_name_its_thread_by_header_or_meta(
    http_url: str, http_data_root: Path
) -> None:
    async def scenario() -> None:
        headers = {"X-Sandkit-Thread": "shared-1"}
        async with http_client(http_url, headers=headers) as writer:
            await writer.call_tool("write_file", {"path": "plan.md", "content": "# plan"})
        async with http_client(http_url, headers=headers) as reader:
            assert (
                text(await reader.call_tool("read_file", {"path": "plan.md"})) == "     1\t# plan"
            )
        async with http_client(http_url) as other:
            by_meta = await other.call_tool(
                "read_file", {"path": "plan.md"}, meta={"sandkit/thread_id": "shared-1"}
            )
            assert text(by_meta) == "     1\t# plan"
            bad = await other.call_tool("ls", {}, meta={"sandkit/thread_id": "../escape"})
            assert bad.is_error and text(bad).startswith("Error [INVALID_ARGUMENT]: thread_id")

    run(scenario)
    assert (workspace(http_data_root, "shared-1") / "plan.md").exists()


def test_http_sessionless_clients_use_the_default_thread(tmp_path: Path) -> None:
    """2026-07-28 clients send self-contained requests: no session, so --thread applies."""
    data_root = tmp_path / "data"

    async def scenario(url: str) -> None:
        async with http_client(url, mode="auto") as client:
            result = await client.call_tool("write_file", {"path": "x.txt", "content": "x"})
            assert not result.is_error

    with http_server(data_root, "--thread", "fallback") as url:
        anyio.run(scenario, url)
    assert (workspace(data_root, "fallback") / "x.txt").exists()
