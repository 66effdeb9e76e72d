"""What every runtime operation needs: the jail, the bounds, the tools found."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

from .cancel import Calls
from .limits import Limits
from .pathmap import PathMapping

# What a launcher writes to stderr (exit status 126) when it cannot apply the bounds.
BOUNDS_FAILED = "sandkit: the sandbox's process limits could not be applied"


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


@dataclasses.dataclass(frozen=True)
class Context:
    mapping: PathMapping
    limits: Limits = dataclasses.field(default_factory=Limits)
    # Path to a ripgrep binary, or None to use the pure-Python engine only.
    rg_path: Optional[str] = None
    execute_enabled: bool = False
    # Values replaced by "[REDACTED]" in command output.
    secrets: Tuple[str, ...] = ()
    # Environment variable names never passed to commands unless asked for.
    scrubbed_env: Tuple[str, ...] = ()
    # Variables every command gets (a box provider's proxy settings), before the caller's.
    env: Tuple[Tuple[str, str], ...] = ()
    # Host limits for commands (set by the local provider). None in a box, whose
    # own limits bound what its commands use.
    bounds: Optional[CommandBounds] = None
    # Background processes (spawn and friends); None: this sandbox runs none.
    processes: Optional[ProcessHost] = None
    # The commands of calls in flight, which `end_processes` ends too.
    calls: Calls = dataclasses.field(default_factory=Calls)
