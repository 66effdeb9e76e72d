"""deepagents' SandboxBackendProtocol over sandkit, on the local and the Docker provider.

The backend is driven directly and through deepagents' own FilesystemMiddleware
tools (the code a deepagents agent runs for its tool calls); no model is involved.
The Docker cases need an engine and the local base image: they skip without
one, and fail under CI=true.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from deepagents.backends.protocol import ReadResult
from deepagents.backends.utils import EMPTY_CONTENT_WARNING
from deepagents.middleware.filesystem import FilesystemMiddleware
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolRuntime

from sandkit import SandboxKey, SandboxProvider, Settings
from sandkit.integrations.deepagents import SandkitBackend, SandkitThreadBackend
from sandkit.local import LocalProvider
from sandkit.sandbox import Sandbox
from tests.docker_support import default_base_image, require_docker, require_image

ROOT = Path(__file__).resolve().parent.parent
WS = "/mnt/user-data/workspace"
# Read at import: the session fixture in conftest.py clears SANDKIT_* variables later.
DOCKER_IMAGE = os.environ.get("SANDKIT_TEST_IMAGE") or default_base_image()


def docker_provider(data_root: Path) -> SandboxProvider:
    require_docker()
    require_image(DOCKER_IMAGE)
    if importlib.util.find_spec("sandkit_docker") is None:  # not installed: use the tree
        sys.path.insert(0, str(ROOT / "providers" / "sandkit-docker" / "src"))
    from sandkit_docker.provider import DockerProvider

    run = uuid.uuid4().hex[:10]
    options = {
        "image": DOCKER_IMAGE,
        "pull": "never",
        "owner": f"sandkit-test-{run}",
        "labels": {"sandkit.test-session": run},
        "reap_interval_s": 0,
    }
    return DockerProvider(Settings(data_root=data_root, providers={"docker": options}))


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def sandbox(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sandbox]:
    """One sandbox per provider for the module; each test works in its own directory."""
    data_root = tmp_path_factory.mktemp(f"{request.param}-data")
    provider: SandboxProvider
    if request.param == "local":
        provider = LocalProvider(Settings(data_root=data_root, execute_enabled=True))
    else:
        provider = docker_provider(data_root)
    try:
        yield provider.acquire(SandboxKey("agent", "deep"))
    finally:
        provider.shutdown()


@pytest.fixture
def backend(sandbox: Sandbox) -> SandkitBackend:
    return SandkitBackend(sandbox)


@pytest.fixture
def base(backend: SandkitBackend) -> str:
    """A fresh directory of the shared sandbox for one test."""
    path = f"{WS}/t-{uuid.uuid4().hex[:8]}"
    assert backend.write(f"{path}/.keep", "").error is None
    return path


def content(result: ReadResult) -> str:
    assert result.error is None and result.file_data is not None, result.error
    return result.file_data["content"]


# -- read / write / edit ---------------------------------------------------------------------


def test_write_then_read_pages_with_offset_and_limit(backend: SandkitBackend, base: str) -> None:
    path = f"{base}/notes.txt"
    assert backend.write(path, "".join(f"line {n}\r\n" for n in range(1, 6))).path == path
    whole = backend.read(path)
    assert content(whole) == "line 1\nline 2\nline 3\nline 4\nline 5"
    assert (whole.start_line, whole.end_line, whole.total_lines, whole.next_offset) == (
        1,
        5,
        5,
        None,
    )
    page = backend.read(path, offset=1, limit=2)
    assert content(page) == "line 2\nline 3"
    assert (page.start_line, page.end_line, page.total_lines, page.next_offset) == (2, 3, 5, 3)
    rest = backend.read(path, offset=page.next_offset or 0)
    assert content(rest) == "line 4\nline 5" and rest.next_offset is None
    assert backend.write(path, "replaced\n").error is None  # write overwrites
    assert content(backend.read(path)) == "replaced"


def test_read_degenerate_windows_and_empty_files(backend: SandkitBackend, base: str) -> None:
    path = f"{base}/a.txt"
    backend.write(path, "one\ntwo\n")
    assert content(backend.read(path, offset=-5, limit=1)) == "one"
    zero = backend.read(path, limit=0)
    assert zero.no_lines_requested and content(zero) == ""
    past = backend.read(path, offset=10)
    assert past.error == "invalid_argument: line offset 10 exceeds file length (2 lines)"
    backend.write(f"{base}/empty.txt", "")
    for offset in (0, 3):
        empty = backend.read(f"{base}/empty.txt", offset=offset)
        # deepagents' own reminder, as its BaseSandbox answers
        assert content(empty) == EMPTY_CONTENT_WARNING and empty.start_line is None


def test_read_errors_carry_the_code(backend: SandkitBackend, base: str) -> None:
    assert backend.read(f"{base}/missing").error == f"not_found: {base}/missing does not exist"
    assert (backend.read(base).error or "").startswith("is_a_directory: ")
    assert (backend.read("/etc/passwd").error or "").startswith("access_denied: ")


def test_binary_files_read_as_base64(backend: SandkitBackend, base: str) -> None:
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
    (upload,) = backend.upload_files([(f"{base}/logo.png", png)])
    assert upload.error is None
    result = backend.read(f"{base}/logo.png")
    assert result.file_data is not None and result.file_data["encoding"] == "base64"
    assert base64.b64decode(result.file_data["content"]) == png


def test_edit_replaces_exact_text(backend: SandkitBackend, base: str) -> None:
    path = f"{base}/app.py"
    backend.write(path, "a = 1\nb = 1\n")
    done = backend.edit(path, "a = 1", "a = 2")
    assert (done.path, done.occurrences, done.error) == (path, 1, None)
    ambiguous = backend.edit(path, " = ", " == ")
    assert (ambiguous.error or "").startswith("invalid_argument: old text occurs 2 times")
    assert (backend.edit(path, "zzz", "y").error or "").startswith(
        "invalid_argument: old text not found"
    )
    assert backend.edit(path, " = ", " == ", replace_all=True).occurrences == 2
    assert content(backend.read(path)) == "a == 2\nb == 1"
    assert (backend.write("/mnt/user-data/uploads/x", "").error or "").startswith("read_only: ")


# -- ls / glob / grep --------------------------------------------------------------------------


def test_ls_lists_direct_children(backend: SandkitBackend, base: str) -> None:
    backend.write(f"{base}/src/app.py", "12345")
    backend.write(f"{base}/README.md", "")
    listing = backend.ls(base)
    assert listing.error is None
    assert listing.entries == [
        {"path": f"{base}/.keep", "is_dir": False, "size": 0},
        {"path": f"{base}/README.md", "is_dir": False, "size": 0},
        {"path": f"{base}/src", "is_dir": True},
    ]
    assert (backend.ls(f"{base}/README.md").error or "").startswith("not_a_directory: ")
    assert (backend.ls(f"{base}/nope").error or "").startswith("not_found: ")


def test_glob_follows_the_protocol_rules(backend: SandkitBackend, base: str) -> None:
    for name in ("top.py", "src/app/main.py", ".github/ci.yml", ".env", "src/conf.yml"):
        backend.write(f"{base}/{name}", "")

    def paths(pattern: str) -> list[str]:
        result = backend.glob(pattern, path=base)
        assert result.error is None and result.matches is not None
        assert all(m.get("is_dir") is False for m in result.matches)
        return [m["path"].removeprefix(base + "/") for m in result.matches]

    assert paths("*.py") == ["src/app/main.py", "top.py"]  # a name at any depth
    assert paths("/*.py") == ["top.py"]  # a leading / anchors at the root
    assert paths("src/**/*.py") == ["src/app/main.py"]
    assert paths("*.yml") == [".github/ci.yml", "src/conf.yml"]  # bare: dot dirs included
    assert paths("**/*.yml") == ["src/conf.yml"]  # ** does not enter dot dirs
    assert paths(".env") == [".env"] and ".env" not in paths("*")
    assert (backend.glob("[", path=base).error or "").startswith("invalid_pattern: ")


def test_grep_is_a_literal_case_sensitive_search(backend: SandkitBackend, base: str) -> None:
    backend.write(f"{base}/a.py", "x = a.c\nX = abc\n")
    backend.write(f"{base}/b.txt", "a.c here\n")
    result = backend.grep("a.c", path=base)
    assert result.error is None and not result.truncated
    assert result.matches == [
        {"path": f"{base}/a.py", "line": 1, "text": "x = a.c"},
        {"path": f"{base}/b.txt", "line": 1, "text": "a.c here"},
    ]
    assert [m["path"] for m in backend.grep("a.c", path=base, glob="*.py").matches or []] == [
        f"{base}/a.py"
    ]
    assert backend.grep("x = A.C", path=base).matches == []
    assert backend.grep("(", path=base).matches == []  # literal: not a regex error
    assert (backend.grep("x", path=f"{base}/nope").error or "").startswith("not_found: ")


def test_grep_max_count_caps_and_flags_truncation(backend: SandkitBackend, base: str) -> None:
    backend.write(f"{base}/many.txt", "hit\n" * 7)
    capped = backend.grep("hit", path=base, max_count=3)
    assert len(capped.matches or []) == 3 and capped.truncated
    exact = backend.grep("hit", path=base, max_count=7)
    assert len(exact.matches or []) == 7 and not exact.truncated
    assert len(backend.grep("hit", path=base).matches or []) == 7


# -- execute / files ---------------------------------------------------------------------------


def test_execute_returns_output_and_exit_code(backend: SandkitBackend, base: str) -> None:
    done = backend.execute(f"cd {base} && echo out && echo err >&2 && exit 3")
    assert (done.output, done.exit_code, done.truncated) == ("out\nerr\n", 3, False)
    assert backend.execute("pwd").output == f"{WS}\n"
    slow = backend.execute("echo started; sleep 10", timeout=1)
    assert slow.exit_code is None
    assert slow.output.startswith("started\n[timed out after ")


def test_execute_disabled_is_reported_in_the_output(
    make_local: Callable[..., LocalProvider],
) -> None:
    backend = SandkitBackend(make_local().acquire(SandboxKey("agent", "off")))
    result = backend.execute("echo hi")
    assert result.output.startswith("execute_disabled: ") and result.exit_code is None


def test_upload_and_download_files(backend: SandkitBackend, base: str) -> None:
    data = bytes(range(256)) * 4
    uploads = backend.upload_files(
        [(f"{base}/bin/blob", data), ("/etc/evil", b"x"), ("/mnt/user-data/uploads/u", b"x")]
    )
    assert [u.error for u in uploads] == [None, "permission_denied", "permission_denied"]
    downloads = backend.download_files([f"{base}/bin/blob", f"{base}/none", base])
    assert downloads[0].content == data and downloads[0].error is None
    assert [d.error for d in downloads[1:]] == ["file_not_found", "is_directory"]
    assert backend.id == backend.sandbox.sandbox_id and backend.id.startswith("sk-")


def test_async_variants_match_the_sync_ones(backend: SandkitBackend, base: str) -> None:
    async def scenario() -> list[Any]:
        return [
            await backend.awrite(f"{base}/a.txt", "alpha\nbeta\n"),
            await backend.aread(f"{base}/a.txt", offset=1, limit=1),
            await backend.aedit(f"{base}/a.txt", "beta", "gamma"),
            await backend.als(base),
            await backend.aglob("*.txt", path=base),
            await backend.agrep("gamma", path=base),
            await backend.aexecute(f"cat {base}/a.txt"),
            await backend.aupload_files([(f"{base}/b.bin", b"\x00\x01")]),
            await backend.adownload_files([f"{base}/b.bin"]),
            await backend.aread(f"{base}/missing"),
        ]

    results = asyncio.run(scenario())
    assert results[0].path == f"{base}/a.txt"
    assert content(results[1]) == "beta"
    assert results[2].occurrences == 1
    assert [e["path"] for e in results[3].entries] == [f"{base}/.keep", f"{base}/a.txt"]
    assert [m["path"] for m in results[4].matches] == [f"{base}/a.txt"]
    assert results[5].matches == [{"path": f"{base}/a.txt", "line": 2, "text": "gamma"}]
    assert results[6].output == "alpha\ngamma\n" and results[6].exit_code == 0
    assert results[7][0].error is None and results[8][0].content == b"\x00\x01"
    assert results[9].error == backend.read(f"{base}/missing").error


# -- the deepagents agent's own tools ----------------------------------------------------------


def middleware_tools(backend: SandkitBackend) -> dict[str, Any]:
    return {tool.name: tool for tool in FilesystemMiddleware(backend=backend).tools}


def call(
    tools: dict[str, Any], name: str, config: dict[str, Any] | None = None, **arguments: Any
) -> ToolMessage:
    """Run one of deepagents' tools the way its ToolNode does (runtime injected)."""
    runtime = ToolRuntime(
        state={"messages": []},
        context=None,
        config=config or {},
        stream_writer=lambda _: None,
        tool_call_id=f"call-{name}",
        store=None,
    )
    message = tools[name].invoke({**arguments, "runtime": runtime}, config=config)
    assert isinstance(message, ToolMessage)
    return message


def test_deepagents_filesystem_tools_run_on_the_backend(backend: SandkitBackend, base: str) -> None:
    """The tools a deepagents agent calls (FilesystemMiddleware), executed as its graph would."""
    tools = middleware_tools(backend)
    path = f"{base}/app.py"
    wrote = call(tools, "write_file", file_path=path, content="def f():\n    return 1\n")
    assert wrote.status != "error"
    read = call(tools, "read_file", file_path=path)
    assert "def f():" in read.text and "return 1" in read.text and read.status != "error"
    edited = call(tools, "edit_file", file_path=path, old_string="return 1", new_string="return 2")
    assert edited.status != "error"
    assert path in call(tools, "ls", path=base).text
    assert path in call(tools, "glob", pattern="**/*.py", path=base).text
    assert (
        "return 2" in call(tools, "grep", pattern="return", path=base, output_mode="content").text
    )
    script = f"import runpy; print(runpy.run_path({path!r})['f']())"
    ran = call(tools, "execute", command=f'python3 -c "{script}"')
    assert ran.text.startswith("2\n") and "exit code 0" in ran.text
    missing = call(tools, "read_file", file_path=f"{base}/missing.py")
    assert missing.status == "error" and "not_found" in missing.text


def test_thread_backend_takes_the_sandbox_from_the_run_config(
    make_local: Callable[..., LocalProvider], data_root: Path
) -> None:
    backend = SandkitThreadBackend(make_local(), user_id="alice")
    tools = middleware_tools(backend)
    path = f"{WS}/note.md"
    for thread in ("a", "b"):
        config = {"configurable": {"thread_id": thread}}
        assert call(tools, "write_file", config, file_path=path, content=thread).status != "error"
    for thread in ("a", "b"):
        config = {"configurable": {"thread_id": thread}}
        assert call(tools, "read_file", config, file_path=path).text.endswith(thread)
    threads = data_root / "users" / "alice" / "threads"
    assert (threads / "a/user-data/workspace/note.md").read_text() == "a"
    assert (threads / "b/user-data/workspace/note.md").read_text() == "b"
    outside = backend.write(path, "x")  # not in a run, no fallback thread
    assert (outside.error or "").startswith("invalid_argument: no thread_id")
    assert backend.id == "sandkit-local"
