"""LangChain tools bound to a provider: the thread comes from the LangGraph run config.

Driven the way LangGraph drives them (a compiled graph whose ToolNode executes
an AIMessage's tool calls), without a model: there is no LLM here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode

from sandkit import SandboxKey
from sandkit.integrations.langchain import sandkit_tools
from sandkit.local import LocalProvider
from sandkit.tools import TOOL_NAMES

WS = "/mnt/user-data/workspace"


def workspace(data_root: Path, user: str, thread: str) -> Path:
    return data_root / "users" / user / "threads" / thread / "user-data" / "workspace"


def graph(tools: list[BaseTool]) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    return builder.compile()


def calls(*tool_calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    message = AIMessage(
        "",
        tool_calls=[
            {"id": f"call-{n}", "name": name, "args": args}
            for n, (name, args) in enumerate(tool_calls)
        ],
    )
    return {"messages": [message]}


def replies(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def thread(name: str, user: str | None = None) -> dict[str, Any]:
    configurable = {"thread_id": name} | ({"user_id": user} if user else {})
    return {"configurable": configurable}


@pytest.fixture
def provider(make_local: Callable[..., LocalProvider]) -> LocalProvider:
    return make_local(execute_enabled=True)


def test_one_tool_set_with_the_documented_schemas(provider: LocalProvider) -> None:
    tools = sandkit_tools(provider)
    assert tuple(t.name for t in tools) == TOOL_NAMES
    grep = next(t for t in tools if t.name == "grep")
    assert "read_file" in grep.description
    schema = grep.tool_call_schema
    assert isinstance(schema, dict) and schema["required"] == ["pattern"]
    assert [t.name for t in sandkit_tools(provider, include=("read_file", "ls"))] == [
        "read_file",
        "ls",
    ]


def test_two_thread_ids_touch_two_sandboxes(provider: LocalProvider, data_root: Path) -> None:
    app = graph(sandkit_tools(provider))
    app.invoke(calls(("write_file", {"path": "note.md", "content": "thread A"})), thread("a"))
    app.invoke(calls(("write_file", {"path": "note.md", "content": "thread B"})), thread("b"))

    (read_a,) = replies(app.invoke(calls(("read_file", {"path": "note.md"})), thread("a")))
    (read_b,) = replies(app.invoke(calls(("read_file", {"path": "note.md"})), thread("b")))
    assert read_a.content == "     1\tthread A"
    assert read_b.content == "     1\tthread B"
    assert (workspace(data_root, "default", "a") / "note.md").read_text() == "thread A"
    assert (workspace(data_root, "default", "b") / "note.md").read_text() == "thread B"
    box_a, box_b = (
        provider.get(SandboxKey("default", "a")),
        provider.get(SandboxKey("default", "b")),
    )
    assert box_a is not None and box_b is not None
    assert box_a.sandbox_id != box_b.sandbox_id


def test_user_id_comes_from_the_config_too(provider: LocalProvider, data_root: Path) -> None:
    app = graph(sandkit_tools(provider))
    app.invoke(calls(("write_file", {"path": "x.txt", "content": "bob"})), thread("t", "bob"))
    (other,) = replies(app.invoke(calls(("read_file", {"path": "x.txt"})), thread("t", "eve")))
    assert other.status == "error" and other.content.startswith("Error [NOT_FOUND]")
    assert (workspace(data_root, "bob", "t") / "x.txt").exists()


def test_results_carry_text_and_structured_artifact(provider: LocalProvider) -> None:
    app = graph(sandkit_tools(provider))
    write = calls(("write_file", {"path": "src/a.py", "content": "x = 1\n"}))
    (wrote,) = replies(app.invoke(write, thread("t")))
    # One message's tool calls run concurrently: these two only read.
    read = calls(("grep", {"pattern": "x ="}), ("bash", {"command": "python3 src/a.py && echo ok"}))
    grep, bash = replies(app.invoke(read, thread("t")))
    assert wrote.content == f"Created {WS}/src/a.py (6 bytes)"
    assert wrote.artifact == {"path": f"{WS}/src/a.py", "bytes_written": 6, "created": True}
    assert grep.content == f"Found 1 match under {WS}\n{WS}/src/a.py:1: x = 1"
    assert grep.artifact["matches"][0]["line_number"] == 1
    assert bash.content == "ok\n[exit code 0]" and bash.artifact["exit_code"] == 0
    assert all(m.status == "success" for m in (wrote, grep, bash))


def test_failures_are_error_tool_messages_with_the_code(provider: LocalProvider) -> None:
    app = graph(sandkit_tools(provider))
    state = app.invoke(
        calls(
            ("read_file", {"path": "/etc/passwd"}),
            ("grep", {"pattern": "("}),
            ("glob", {"pattern": "*", "bogus": 1}),
        ),
        thread("t"),
    )
    codes = [m.content.split("]")[0] for m in replies(state)]
    assert codes == ["Error [ACCESS_DENIED", "Error [INVALID_PATTERN", "Error [INVALID_ARGUMENT"]
    assert all(m.status == "error" for m in replies(state))


def test_a_run_without_a_thread_id_is_refused_unless_a_default_is_given(
    provider: LocalProvider, data_root: Path
) -> None:
    ls = sandkit_tools(provider, include=("ls",))[0]
    refused = ls.invoke({})
    assert refused.startswith("Error [INVALID_ARGUMENT]: no thread_id for the sandbox")
    fallback = sandkit_tools(provider, user_id="u", thread_id="main", include=("ls",))[0]
    assert fallback.invoke({}) == f"{WS} is empty"
    assert workspace(data_root, "u", "main").is_dir()
    bad = ls.invoke({}, config=thread("../up"))
    assert bad.startswith("Error [INVALID_ARGUMENT]: thread_id must match")


def test_async_invocation_through_the_graph(provider: LocalProvider, data_root: Path) -> None:
    app = graph(sandkit_tools(provider))

    async def scenario() -> list[ToolMessage]:
        await app.ainvoke(calls(("write_file", {"path": "a.txt", "content": "1"})), thread("x"))
        results = await asyncio.gather(
            app.ainvoke(calls(("read_file", {"path": "a.txt"})), thread("x")),
            app.ainvoke(calls(("read_file", {"path": "a.txt"})), thread("y")),
        )
        return [replies(state)[0] for state in results]

    in_x, in_y = asyncio.run(scenario())
    assert in_x.content == "     1\t1"
    assert in_y.status == "error" and in_y.content.startswith("Error [NOT_FOUND]")
