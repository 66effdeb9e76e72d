"""What every runtime operation needs: the jail, the bounds, the tools found."""

from __future__ import annotations

import dataclasses
from typing import Callable, List, Optional, Protocol, Tuple

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
    # Host limits for commands (set by the local provider). None in a box, whose
    # own limits bound what its commands use.
    bounds: Optional[CommandBounds] = None
