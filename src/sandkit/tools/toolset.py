"""`SandboxTools`: the agent tools as plain Python methods bound to one sandbox.

For agent loops written by hand: each method takes plain arguments and
returns the text a model reads. `run`/`arun` return the full `ToolOutput`
(text, structured result, error flag) for JSON tool calls.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..models import GrepMode
from ..runtime.pathmap import WORKSPACE
from ..sandbox import Sandbox
from .dispatch import ToolOutput, arun_tool, run_tool
from .specs import ToolSpec, description, input_schema, select_specs


class SandboxTools:
    """The tools over one sandbox. `definitions()` offers what the sandbox allows (no
    bash tools where commands cannot run), narrowed by `include`/`exclude`."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        include: Collection[str] | None = None,
        exclude: Collection[str] | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.specs: tuple[ToolSpec, ...] = select_specs(sandbox.execute_enabled, include, exclude)
        self.names = frozenset(spec.name for spec in self.specs)

    def definitions(self) -> list[dict[str, Any]]:
        """Name, description and JSON schema of every tool offered (function-calling format)."""
        return [
            {
                "name": spec.name,
                "description": description(spec, self.sandbox.limits),
                "parameters": input_schema(spec, self.sandbox.limits),
            }
            for spec in self.specs
        ]

    def run(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolOutput:
        return run_tool(self.sandbox, name, arguments, tools=self.names)

    async def arun(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolOutput:
        return await arun_tool(self.sandbox, name, arguments, tools=self.names)

    def _text(self, name: str, **arguments: Any) -> str:
        # Unset optional arguments are left out, so the argument model's defaults apply.
        return self.run(name, {k: v for k, v in arguments.items() if v is not None}).text

    def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> str:
        return self._text("read_file", path=path, start_line=start_line, end_line=end_line)

    def write_file(self, path: str, content: str, append: bool = False) -> str:
        return self._text("write_file", path=path, content=content, append=append)

    def edit_file(
        self, path: str, old_string: str, new_string: str, replace_all: bool = False
    ) -> str:
        return self._text(
            "edit_file",
            path=path,
            old_string=old_string,
            new_string=new_string,
            replace_all=replace_all,
        )

    def ls(self, path: str = WORKSPACE, max_depth: int = 2) -> str:
        return self._text("ls", path=path, max_depth=max_depth)

    def glob(
        self,
        pattern: str,
        path: str = WORKSPACE,
        include_dirs: bool = False,
        max_results: int | None = None,
        offset: int = 0,
    ) -> str:
        return self._text(
            "glob",
            pattern=pattern,
            path=path,
            include_dirs=include_dirs,
            max_results=max_results,
            offset=offset,
        )

    def grep(
        self,
        pattern: str,
        path: str = WORKSPACE,
        glob: str | None = None,
        literal: bool = False,
        case_sensitive: bool = False,
        output_mode: GrepMode = "content",
        before: int = 0,
        after: int = 0,
        multiline: bool = False,
        max_results: int | None = None,
        offset: int = 0,
    ) -> str:
        return self._text(
            "grep",
            pattern=pattern,
            path=path,
            glob=glob,
            literal=literal,
            case_sensitive=case_sensitive,
            output_mode=output_mode,
            before=before,
            after=after,
            multiline=multiline,
            max_results=max_results,
            offset=offset,
        )

    def bash(
        self,
        command: str,
        timeout: float | None = None,
        cwd: str | None = None,
        run_in_background: bool = False,
    ) -> str:
        return self._text(
            "bash",
            command=command,
            timeout=timeout,
            cwd=cwd,
            run_in_background=run_in_background,
        )

    def bash_output(self, handle: str, since: int = 0, wait_s: float = 0.0) -> str:
        return self._text("bash_output", handle=handle, since=since, wait_s=wait_s)

    def bash_input(self, handle: str, text: str, eof: bool = False) -> str:
        return self._text("bash_input", handle=handle, text=text, eof=eof)

    def bash_kill(self, handle: str, signal: str = "TERM") -> str:
        return self._text("bash_kill", handle=handle, signal=signal)
