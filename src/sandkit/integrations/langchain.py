"""The sandkit tools as LangChain `BaseTool`s, one set serving many threads.

The sandbox of each call comes from the LangGraph run config:
`config["configurable"]["thread_id"]` (LangGraph's own thread id) and
`config["configurable"]["user_id"]`, falling back to the ids given to
`sandkit_tools`. The model reads the rendered text; the structured result
is the `ToolMessage` artifact. Failures are `ToolMessage`s with
`status="error"` and the text `Error [CODE]: message`.

Needs the `langchain` extra: `pip install 'sandkit[langchain]'`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any, Literal

from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from pydantic import ConfigDict

from ..errors import ErrorCode, SandboxError
from ..models import OutputChunk
from ..provider import SandboxKey, SandboxProvider
from ..sandbox import Sandbox
from ..tools.dispatch import ToolOutput, arun_tool, failure, run_tool
from ..tools.specs import ToolSpec, description, input_schema, select_specs

__all__ = ["OUTPUT_EVENT", "SandkitTool", "key_from_config", "sandkit_tools"]

# The custom event (astream_events) that carries a running bash command's output.
OUTPUT_EVENT = "sandkit_output"


def key_from_config(
    config: RunnableConfig | None,
    user_id: str | None,
    thread_id: str | None,
    *,
    fallback: str = "sandkit_tools",
) -> SandboxKey:
    """The sandbox key of a run: configurable ids first, then the fallbacks.

    `fallback` names what took the fallback ids, for the hint when one is missing.
    """
    configurable = (config or {}).get("configurable") or {}
    user = configurable.get("user_id") or user_id
    thread = configurable.get("thread_id") or thread_id
    if user is None or thread is None:
        missing = "thread_id" if thread is None else "user_id"
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT,
            f"no {missing} for the sandbox: run with config={{'configurable': "
            f"{{'{missing}': ...}}}} or pass {missing}= to {fallback}()",
        )
    return SandboxKey(str(user), str(thread))


class SandkitTool(BaseTool):
    """One sandkit tool; the sandbox is looked up per call from the run config."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    provider: SandboxProvider
    user_id: str | None = None
    thread_id: str | None = None
    offered: frozenset[str] | None = None  # the tool set it belongs to (its texts say so)
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    handle_tool_error: bool = True

    def _sandbox(self, config: RunnableConfig) -> Sandbox:
        return self.provider.acquire(key_from_config(config, self.user_id, self.thread_id))

    @staticmethod
    def _answer(output: ToolOutput) -> tuple[str, dict[str, Any]]:
        if output.is_error:
            raise ToolException(output.text)  # LangChain turns it into status="error"
        return output.text, output.structured

    def _run(self, run_config: RunnableConfig, **arguments: Any) -> tuple[str, dict[str, Any]]:
        try:
            sandbox = self._sandbox(run_config)
        except Exception as exc:
            return self._answer(failure(exc, self.name))

        def progress(chunk: OutputChunk, _count: int) -> None:
            dispatch_custom_event(OUTPUT_EVENT, chunk.model_dump(), config=run_config)

        return self._answer(run_tool(sandbox, self.name, arguments, progress, self.offered))

    async def _arun(
        self, run_config: RunnableConfig, **arguments: Any
    ) -> tuple[str, dict[str, Any]]:
        try:
            # acquire may start a container or a pod: keep it off the event loop.
            sandbox = await asyncio.to_thread(self._sandbox, run_config)
        except Exception as exc:
            return self._answer(failure(exc, self.name))

        async def progress(chunk: OutputChunk, _count: int) -> None:
            await adispatch_custom_event(OUTPUT_EVENT, chunk.model_dump(), config=run_config)

        output = await arun_tool(sandbox, self.name, arguments, progress, self.offered)
        return self._answer(output)


def _tool(
    spec: ToolSpec,
    provider: SandboxProvider,
    user_id: str | None,
    thread_id: str | None,
    names: frozenset[str],
) -> SandkitTool:
    limits = provider.limits  # what its sandboxes run with
    return SandkitTool(
        name=spec.name,
        description=description(spec, limits),
        args_schema=input_schema(spec, limits),
        provider=provider,
        user_id=user_id,
        thread_id=thread_id,
        offered=names,
    )


def sandkit_tools(
    provider: SandboxProvider,
    *,
    user_id: str | None = "default",
    thread_id: str | None = None,
    include: Collection[str] | None = None,
    exclude: Collection[str] | None = None,
) -> list[BaseTool]:
    """LangChain tools over `provider`: glob, grep, read_file, edit_file, write_file, ls,
    and bash with bash_output, bash_input and bash_kill where commands may run.

    `user_id`/`thread_id` are fallbacks for runs whose config does not name
    them; leave `thread_id` None to require LangGraph's thread id. The
    descriptions state the provider's limits; `include` picks a subset and
    `exclude` drops tools (an unknown name is INVALID_ARGUMENT).
    """
    specs = select_specs(provider.execute_enabled, include, exclude)
    names = frozenset(spec.name for spec in specs)
    return [_tool(spec, provider, user_id, thread_id, names) for spec in specs]
