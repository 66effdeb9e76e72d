"""The operation table: every operation declared once (stdlib only).

An entry names the runtime function that answers it (whose signature, minus
the context, *is* the operation's parameter list), the result model, and
the two facts the wire needs: whether the operation changes nothing (safe
to resend after a dropped channel) and which field travels as bytes.

Everything else derives from here: the runtime's dispatch, the agent
protocol's tables, the client-side `Sandbox`, and a test that holds every
public signature (Sandbox, async twins, tools, CLI, integrations) to it.
Adding an operation is an entry here plus its runtime function.
"""

from __future__ import annotations

import importlib

from .values import Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    import inspect
    from typing import Any, Callable, Dict, Optional, Tuple


class Operation(Value):
    name: str
    # "module.function" of this package, imported on first use: an agent that starts
    # (or wakes) for one call loads that call's module only, not every operation's.
    target: str
    # Name of the result model in `sandkit.models`, or "bytes" for raw bytes.
    result: str
    read_only: bool
    # The parameter that carries bytes (base64-tagged on the wire), if any.
    bytes_param: Optional[str]
    # Sends output events while it runs (the function takes `emit` and `cancel`).
    streaming: bool

    def __init__(
        self,
        name: str,
        target: str,
        result: str,
        read_only: bool = False,
        bytes_param: Optional[str] = None,
        streaming: bool = False,
    ) -> None:
        self._init(locals())

    @property
    def bytes_result(self) -> bool:
        return self.result == "bytes"

    @property
    def function(self) -> Callable[..., Any]:
        module, _, name = self.target.partition(".")
        found: Callable[..., Any] = getattr(
            importlib.import_module("." + module, __package__), name
        )
        return found

    @property
    def parameters(self) -> Tuple["inspect.Parameter", ...]:
        """The operation's parameters: the runtime function's, without the context (and
        without the keyword-only plumbing of a streaming operation)."""
        import inspect  # host side only (signatures); the agent needs just the names

        found = tuple(inspect.signature(self.function).parameters.values())[1:]
        return tuple(p for p in found if p.kind is not inspect.Parameter.KEYWORD_ONLY)

    @property
    def parameter_names(self) -> Tuple[str, ...]:
        """The parameters' names, from the code object (what `parameters` lists)."""
        code = self.function.__code__
        return tuple(code.co_varnames[1 : code.co_argcount])

    def default(self, name: str) -> Any:
        """The default of parameter `name` (KeyError when it has none)."""
        import inspect

        for parameter in self.parameters:
            if parameter.name == name:
                if parameter.default is inspect.Parameter.empty:
                    raise KeyError("%s.%s is required" % (self.name, name))
                return parameter.default
        raise KeyError("%s has no parameter %s" % (self.name, name))


OPERATIONS: Dict[str, Operation] = {
    op.name: op
    for op in (
        Operation("read_file", "fileops.read_file", "ReadFileResult", read_only=True),
        Operation("write_file", "fileops.write_file", "WriteResult"),
        Operation("edit_file", "fileops.edit_file", "EditResult"),
        Operation("read_bytes", "fileops.read_bytes", "bytes", read_only=True),
        Operation("write_bytes", "fileops.write_bytes", "WriteResult", bytes_param="data"),
        Operation("list_dir", "fileops.list_dir", "ListDirResult", read_only=True),
        Operation("glob", "search.glob", "GlobResult", read_only=True),
        Operation("grep", "search.grep", "GrepResult", read_only=True),
        Operation("execute", "process.execute", "ExecuteResult"),
        Operation("execute_stream", "process.execute_stream", "ExecuteResult", streaming=True),
        Operation("spawn", "processes.spawn", "ProcessInfo"),
        Operation("process_output", "processes.process_output", "ProcessOutput", read_only=True),
        Operation("write_stdin", "processes.write_stdin", "ProcessInfo"),
        Operation("signal_process", "processes.signal_process", "ProcessInfo"),
        Operation("wait_process", "processes.wait_process", "ProcessInfo", read_only=True),
        Operation("list_processes", "processes.list_processes", "ProcessList", read_only=True),
        Operation("end_processes", "processes.end_processes", "ProcessList"),
    )
}


def default(operation: str, parameter: str) -> Any:
    """Shorthand for `OPERATIONS[operation].default(parameter)` (CLI and tool defaults)."""
    return OPERATIONS[operation].default(parameter)
