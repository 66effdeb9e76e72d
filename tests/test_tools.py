"""The agent tools (sandkit.tools): the text a model reads, the structured results,
errors as `Error [CODE]`, clamping, and the JSON schemas, on the local provider."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandkit import SandboxKey
from sandkit.local import LocalProvider
from sandkit.tools import SPECS, TOOL_NAMES, SandboxTools, arun_tool, run_tool
from sandkit.tools.specs import input_schema

WS = "/mnt/user-data/workspace"


@pytest.fixture
def make_tools(make_local: Callable[..., LocalProvider]) -> Callable[..., SandboxTools]:
    def make(**settings: Any) -> SandboxTools:
        provider = make_local(**settings)
        return SandboxTools(provider.acquire(SandboxKey("alice", "t1")))

    return make


@pytest.fixture
def tools(make_tools: Callable[..., SandboxTools]) -> SandboxTools:
    return make_tools(execute_enabled=True)


# -- read_file -------------------------------------------------------------------------


def test_read_file_is_cat_n_numbered(tools: SandboxTools) -> None:
    tools.write_file("a.py", "import os\n\tindented\r\nlast")
    assert tools.read_file("a.py") == "     1\timport os\n     2\t\tindented\n     3\tlast"


def test_read_file_window_ends_with_the_continuation_hint(
    make_tools: Callable[..., SandboxTools],
) -> None:
    tools = make_tools(limits={"read_max_lines": 3})
    tools.write_file("big.txt", "".join(f"line {n}\n" for n in range(1, 11)))
    first = tools.read_file("big.txt")
    assert first.splitlines() == [
        "     1\tline 1",
        "     2\tline 2",
        "     3\tline 3",
        "(showing lines 1-3 of 10; call again with start_line=4 to continue)",
    ]
    last = tools.read_file("big.txt", start_line=9)
    assert last == "     9\tline 9\n    10\tline 10"  # the end: no hint


def test_read_file_cuts_long_lines_with_a_marker(tools: SandboxTools) -> None:
    tools.write_file("min.js", "x" * 5000 + "\nok\n")
    first, second = tools.read_file("min.js").splitlines()
    # one marker, the true length, and a way on with the tools the model has
    assert first.startswith("     1\t" + "x" * 2000 + "… [line cut: 2000 of 5000 characters shown;")
    assert second == "     2\tok"


def test_read_file_of_an_empty_file_says_so(tools: SandboxTools) -> None:
    tools.write_file("empty.txt", "")
    assert tools.read_file("empty.txt") == f"{WS}/empty.txt is empty (0 lines)"


def test_failures_render_as_error_with_code_and_structured_error(tools: SandboxTools) -> None:
    out = tools.run("read_file", {"path": "missing.txt"})
    assert out.is_error
    assert out.text == f"Error [NOT_FOUND]: {WS}/missing.txt does not exist"
    assert out.structured == {
        "error": {"code": "NOT_FOUND", "message": f"{WS}/missing.txt does not exist"}
    }
    assert out.error_code == "NOT_FOUND"
    assert tools.read_file("/etc/passwd").startswith("Error [ACCESS_DENIED]: ")


def test_success_carries_the_result_model_as_structured_output(tools: SandboxTools) -> None:
    tools.write_file("a.txt", "one\ntwo\n")
    out = tools.run("read_file", {"path": "a.txt", "start_line": 2})
    assert not out.is_error and out.error_code is None
    assert out.structured == {
        "path": f"{WS}/a.txt",
        "content": "two\n",
        "start_line": 2,
        "end_line": 2,
        "total_lines": 2,
        "truncated": False,
        "next_start_line": None,
    }


# -- write_file / edit_file ---------------------------------------------------------------


def test_write_file_says_created_replaced_appended(tools: SandboxTools) -> None:
    assert tools.write_file("n/a.txt", "hi") == f"Created {WS}/n/a.txt (2 bytes)"
    assert tools.write_file("n/a.txt", "hello") == f"Replaced {WS}/n/a.txt (5 bytes)"
    assert tools.write_file("n/a.txt", "!", append=True) == f"Appended {WS}/n/a.txt (1 byte)"
    assert tools.read_file("n/a.txt") == "     1\thello!"


def test_edit_file_replaces_once_and_explains_failures(tools: SandboxTools) -> None:
    tools.write_file("c.py", "a = 1\nb = 1\n")
    assert tools.edit_file("c.py", "a = 1", "a = 2") == f"Edited {WS}/c.py: 1 replacement"
    ambiguous = tools.edit_file("c.py", "= ", "== ")
    assert ambiguous.startswith("Error [INVALID_ARGUMENT]: ") and "occurs 2 times" in ambiguous
    missing = tools.edit_file("c.py", "zzz", "y")
    assert missing == f"Error [INVALID_ARGUMENT]: old text not found in {WS}/c.py"
    everywhere = tools.edit_file("c.py", "= ", "== ", replace_all=True)
    assert everywhere == f"Edited {WS}/c.py: 2 replacements"


# -- ls ------------------------------------------------------------------------------------


def test_ls_is_an_indented_tree(tools: SandboxTools) -> None:
    tools.write_file("src/app.py", "x" * 12)
    tools.write_file("README.md", "")
    assert tools.ls() == "\n".join(
        [f"{WS}/", "  README.md (0 bytes)", "  src/", "    app.py (12 bytes)"]
    )
    tools.write_file("empty/.keep", "")
    assert tools.ls("empty", max_depth=1) == f"{WS}/empty/\n  .keep (0 bytes)"


def test_ls_of_an_empty_directory_and_of_a_file(tools: SandboxTools) -> None:
    assert tools.ls() == f"{WS} is empty"
    tools.write_file("f.txt", "")
    assert tools.ls("f.txt").startswith("Error [NOT_A_DIRECTORY]: ")


# -- glob ----------------------------------------------------------------------------------


def test_glob_lists_paths_under_a_found_summary(tools: SandboxTools) -> None:
    for name in ("b.py", "a.py", "sub/c.py", "d.txt"):
        tools.write_file(name, "")
    assert tools.glob("**/*.py") == "\n".join(
        [f"Found 3 paths under {WS}", f"{WS}/a.py", f"{WS}/b.py", f"{WS}/sub/c.py"]
    )
    assert tools.glob("*.txt").splitlines()[0] == f"Found 1 path under {WS}"


def test_glob_truncated_says_showing_first_and_to_narrow(tools: SandboxTools) -> None:
    for n in range(5):
        tools.write_file(f"f{n}.py", "")
    out = tools.glob("*.py", max_results=2).splitlines()
    assert out[0] == (
        f"Found 2 paths under {WS} (showing first 2; more exist: call again with offset=2, "
        "or narrow the path or pattern)"
    )
    assert out[1:] == [f"{WS}/f0.py", f"{WS}/f1.py"]
    page = tools.glob("*.py", max_results=2, offset=4).splitlines()
    assert page == [f"Found 1 path under {WS} (from offset 4)", f"{WS}/f4.py"]
    assert tools.glob("*.py", offset=5) == f"No files matched under {WS} past offset 5"


def test_glob_no_match_only_for_a_real_empty_result(tools: SandboxTools) -> None:
    assert tools.glob("*.rs") == f"No files matched under {WS}"
    # A failure is never "no files": a missing directory, a bad pattern.
    assert tools.glob("*.rs", path="nowhere").startswith("Error [NOT_FOUND]: ")
    assert tools.glob("[a-").startswith("Error [INVALID_PATTERN]: ")


# -- grep ----------------------------------------------------------------------------------


def test_grep_content_mode_lines(tools: SandboxTools) -> None:
    tools.write_file("a.py", "def f():\n    return 1\n")
    tools.write_file("b.py", "x = 1\n")
    assert tools.grep(r"\b1\b") == "\n".join(
        [
            f"Found 2 matches under {WS}",
            f"{WS}/a.py:2:     return 1",
            f"{WS}/b.py:1: x = 1",
        ]
    )


def test_grep_context_lines_and_group_separators(tools: SandboxTools) -> None:
    tools.write_file("a.txt", "one\nhit\nthree\nfour\nfive\nhit\n")
    assert tools.grep("hit", before=1).splitlines()[1:] == [
        f"{WS}/a.txt-1- one",
        f"{WS}/a.txt:2: hit",
        "--",
        f"{WS}/a.txt-5- five",
        f"{WS}/a.txt:6: hit",
    ]


def test_grep_files_and_count_modes(tools: SandboxTools) -> None:
    tools.write_file("a.txt", "x\nx\n")
    tools.write_file("b.txt", "x\n")
    assert tools.grep("x", output_mode="files_with_matches") == "\n".join(
        [f"Found 2 files under {WS}", f"{WS}/a.txt", f"{WS}/b.txt"]
    )
    assert tools.grep("x", output_mode="count").splitlines()[1:] == [
        f"{WS}/a.txt:2",
        f"{WS}/b.txt:1",
    ]


def test_grep_truncated_names_the_next_page(tools: SandboxTools) -> None:
    tools.write_file("a.txt", "hit\n" * 5)
    first = tools.grep("hit", max_results=2).splitlines()
    assert first[0] == (
        f"Found 2 matches under {WS} (showing first 2; more exist: call again with "
        "offset=2, or narrow the path or pattern)"
    )
    last = tools.grep("hit", max_results=2, offset=4).splitlines()
    assert last == [f"Found 1 match under {WS} (from offset 4)", f"{WS}/a.txt:5: hit"]


def test_grep_no_matches_only_for_a_real_empty_result(tools: SandboxTools) -> None:
    tools.write_file("a.txt", "text\n")
    assert tools.grep("absent") == f"No matches found under {WS}"
    assert tools.grep("(unclosed").startswith("Error [INVALID_PATTERN]: ")
    assert tools.grep("x", path="nowhere").startswith("Error [NOT_FOUND]: ")


# -- max_results clamping ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "served"), [(None, 2), (0, 2), (-1, 2), (3, 3), (100, 4), (1, 1)]
)
def test_glob_and_grep_serve_min_of_request_and_configured_ceiling(
    make_tools: Callable[..., SandboxTools], requested: int | None, served: int
) -> None:
    tools = make_tools(
        limits={
            "glob_default_results": 2,
            "glob_max_results": 4,
            "grep_default_results": 2,
            "grep_max_results": 4,
        }
    )
    for n in range(6):
        tools.write_file(f"f{n}.txt", "hit\n")
    globbed = tools.run("glob", {"pattern": "*.txt", "max_results": requested}).structured
    assert len(globbed["paths"]) == served and globbed["truncated"]
    grepped = tools.run("grep", {"pattern": "hit", "max_results": requested}).structured
    assert len(grepped["matches"]) == served and grepped["truncated"]


# -- bash ----------------------------------------------------------------------------------


def test_bash_shows_stdout_stderr_and_exit_code(tools: SandboxTools) -> None:
    assert tools.bash("echo out; echo err >&2; exit 3") == "out\n[stderr]\nerr\n[exit code 3]"
    assert tools.bash("true") == "(no output)\n[exit code 0]"
    assert tools.bash("pwd") == f"{WS}\n[exit code 0]"


def test_bash_timeout_is_a_result_not_an_error(tools: SandboxTools) -> None:
    out = tools.run("bash", {"command": "echo started; sleep 10", "timeout": 0.5})
    assert not out.is_error and out.structured["timed_out"]
    lines = out.text.splitlines()
    assert lines[0] == "started"
    assert lines[1].startswith("[timed out after ") and lines[1].endswith(
        "and killed; output so far is shown]"
    )


def test_bash_when_execution_is_disabled(make_tools: Callable[..., SandboxTools]) -> None:
    out = make_tools().run("bash", {"command": "echo hi"})
    assert out.is_error and out.error_code == "EXECUTE_DISABLED"
    assert out.text.startswith("Error [EXECUTE_DISABLED]: ")


# -- arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "problem"),
    [
        ("grep", {}, "pattern: Field required"),
        ("grep", {"pattern": "x", "output_mode": "lines"}, "output_mode: Input should be"),
        ("grep", {"pattern": "x", "regex": True}, "regex: Extra inputs are not permitted"),
        ("read_file", {"path": "a", "start_line": 0}, "start_line: Input should be greater"),
        ("bash", {"command": "true", "timeout": -1}, "timeout: Input should be greater"),
        ("ls", {"max_depth": "deep"}, "max_depth: Input should be a valid integer"),
    ],
)
def test_bad_arguments_are_invalid_argument_naming_the_field(
    tools: SandboxTools, name: str, arguments: dict[str, Any], problem: str
) -> None:
    out = tools.run(name, arguments)
    assert out.is_error and out.error_code == "INVALID_ARGUMENT"
    assert out.text.startswith(f"Error [INVALID_ARGUMENT]: invalid arguments for {name}: ")
    assert problem in out.text


def test_unknown_tool_and_non_object_arguments(tools: SandboxTools) -> None:
    out = tools.run("cat", {})
    assert out.error_code == "INVALID_ARGUMENT" and "the tools are glob, grep" in out.text
    assert tools.run("ls", ["path"]).error_code == "INVALID_ARGUMENT"  # type: ignore[arg-type]


def test_async_runner_matches_the_sync_one(tools: SandboxTools) -> None:
    tools.write_file("a.txt", "alpha\nbeta\n")
    for name, arguments in [
        ("read_file", {"path": "a.txt"}),
        ("grep", {"pattern": "a$"}),
        ("glob", {"pattern": "*"}),
        ("ls", {}),
        ("read_file", {"path": "zz"}),
    ]:
        sync = run_tool(tools.sandbox, name, arguments)
        async_ = asyncio.run(arun_tool(tools.sandbox, name, arguments))
        assert async_ == sync


def test_an_unexpected_exception_is_internal_without_its_message(tools: SandboxTools) -> None:
    class Broken:
        def list_dir(self, path: str, max_depth: int) -> None:
            raise RuntimeError("/srv/secret/host/path exploded")

    out = run_tool(Broken(), "ls", {})  # type: ignore[arg-type]
    assert out.error_code == "INTERNAL"
    assert "RuntimeError" in out.text and "/srv/secret" not in out.text


# -- schemas -------------------------------------------------------------------------------


def test_every_tool_has_a_schema_from_its_argument_model(tools: SandboxTools) -> None:
    definitions = {d["name"]: d for d in tools.definitions()}
    assert tuple(definitions) == TOOL_NAMES
    assert set(TOOL_NAMES) == {
        "read_file",
        "write_file",
        "edit_file",
        "ls",
        "glob",
        "grep",
        "bash",
        "bash_output",
        "bash_input",
        "bash_kill",
    }
    for spec in SPECS:
        schema = definitions[spec.name]["parameters"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(schema["properties"]) == set(spec.args.model_fields)
        for name, prop in schema["properties"].items():
            assert prop.get("description"), f"{spec.name}.{name} has no description"
        text = json.dumps(definitions[spec.name])
        assert "$" not in text.replace("$ref", ""), f"unfilled placeholder in {spec.name}"
    assert definitions["grep"]["parameters"]["required"] == ["pattern"]
    assert definitions["edit_file"]["parameters"]["required"] == [
        "path",
        "old_string",
        "new_string",
    ]


def test_descriptions_teach_the_workflow_and_state_the_configured_bounds(
    make_tools: Callable[..., SandboxTools],
) -> None:
    tools = make_tools(limits={"grep_max_results": 300, "read_max_lines": 1500})
    definitions = {d["name"]: d for d in tools.definitions()}
    glob_text = definitions["glob"]["description"]
    assert all(step in glob_text for step in ("grep", "read_file", "edit_file"))
    assert "1500 lines" in definitions["read_file"]["description"]
    max_results = definitions["grep"]["parameters"]["properties"]["max_results"]
    assert "default 100, at most 300" in max_results["description"]
    assert "10 MiB" in definitions["grep"]["description"]
    # The bound is described, not enforced by the schema: larger requests are clamped.
    assert "maximum" not in max_results
    assert input_schema(SPECS[0], tools.sandbox.limits) == definitions["glob"]["parameters"]


def test_the_core_and_the_cli_import_no_agent_framework() -> None:
    """`import sandkit` stays light: MCP, LangChain and deepagents load only on use."""
    frameworks = {"mcp", "uvicorn", "langchain_core", "langgraph", "deepagents"}
    code = (
        "import sys, sandkit, sandkit.tools, sandkit.cli; "
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
    }
    loaded = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert frameworks.isdisjoint(loaded), sorted(frameworks & set(loaded))
