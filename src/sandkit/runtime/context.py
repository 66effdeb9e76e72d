"""What every runtime operation needs: the jail, the bounds, the tools found."""

from __future__ import annotations

from .cancel import Calls
from .limits import Limits
from .values import Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

    from .pathmap import PathMapping

    class CommandBounds(Protocol):
        """Host limits a command runs under (the local provider's `sandkit.local.hostlimits`)."""

        def launch(self, argv: List[str]) -> Tuple[List[str], Optional[Callable[[], None]]]:
            """The argv to start instead, and a step for the child between fork and exec.

            The step (system calls only, no locks) is None when the argv alone
            applies the bounds: without one, the child is started with vfork,
            which stays cheap in a process with many threads.
            """
            ...

    class ProcessHost(Protocol):
        """Where a sandbox's background processes live: in this process (the local
        provider's `processes.ProcessTable`) or the box's supervisor (`procd.ProcdClient`)."""

        def spawn(self, command: Any, env: Any, cwd: Any) -> Dict[str, Any]: ...

        def output(self, handle: Any, since: Any, wait_s: Any) -> Dict[str, Any]: ...

        def write_stdin(self, handle: Any, data: Any, eof: Any) -> Dict[str, Any]: ...

        def signal(self, handle: Any, sig: Any) -> Dict[str, Any]: ...

        def wait(self, handle: Any, timeout: Any) -> Dict[str, Any]: ...

        def list(self) -> Dict[str, Any]: ...

        def end_all(self) -> Dict[str, Any]: ...


# What a launcher writes to stderr (exit status 126) when it cannot apply the bounds.
BOUNDS_FAILED = "sandkit: the sandbox's process limits could not be applied"


class Context(Value):
    """An immutable record (`runtime/values.py`); `replace` makes a changed copy.

    `CommandBounds` and `ProcessHost` (the types of `bounds` and `processes`) exist for
    the type checker only: the agent does not load `typing`.
    """

    mapping: PathMapping
    limits: Limits
    # Path to a ripgrep binary, or None to use the pure-Python engine only.
    rg_path: Optional[str]
    execute_enabled: bool
    # Values replaced by "[REDACTED]" in command output.
    secrets: Tuple[str, ...]
    # Environment variable names never passed to commands unless asked for.
    scrubbed_env: Tuple[str, ...]
    # Variables every command gets (a box provider's proxy settings), before the caller's.
    env: Tuple[Tuple[str, str], ...]
    # Host limits for commands (set by the local provider). None in a box, whose
    # own limits bound what its commands use.
    bounds: Optional[CommandBounds]
    # Background processes (spawn and friends); None: this sandbox runs none.
    processes: Optional[ProcessHost]
    # The commands of calls in flight, which `end_processes` ends too.
    calls: Calls

    def __init__(
        self,
        mapping: PathMapping,
        limits: Optional[Limits] = None,
        rg_path: Optional[str] = None,
        execute_enabled: bool = False,
        secrets: Tuple[str, ...] = (),
        scrubbed_env: Tuple[str, ...] = (),
        env: Tuple[Tuple[str, str], ...] = (),
        bounds: Optional[CommandBounds] = None,
        processes: Optional[ProcessHost] = None,
        calls: Optional[Calls] = None,
    ) -> None:
        # A new Limits and Calls each when not given (a dataclass's default_factory).
        if limits is None:
            limits = Limits()
        if calls is None:
            calls = Calls()
        self._init(locals())
