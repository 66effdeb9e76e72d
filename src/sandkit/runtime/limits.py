"""Per-call bounds the runtime enforces.

A plain immutable record (stdlib only, `runtime/values.py`) so the same numbers can be
shipped to an in-sandbox agent as JSON. The host-side settings clamp every value to its
hard ceiling before a `Limits` is built.
"""

from __future__ import annotations

from .values import Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict

KIB = 1024
MIB = 1024 * KIB


class Limits(Value):
    read_max_lines: int
    read_max_bytes: int
    write_max_bytes: int
    transfer_max_bytes: int
    list_max_entries: int
    list_max_depth: int
    glob_default_results: int
    glob_max_results: int
    grep_default_results: int
    grep_max_results: int
    grep_max_file_bytes: int
    grep_line_chars: int
    grep_max_context: int
    search_timeout_s: float
    exec_default_timeout_s: float
    exec_max_timeout_s: float
    exec_output_bytes: int
    # execute_stream: output delivered live per stream before the stream elides.
    exec_stream_bytes: int
    # Background processes (spawn): live ones per sandbox, output kept per process
    # (head and tail), and the longest a process_output/wait_process call may wait.
    process_max_live: int
    process_output_bytes: int
    process_wait_max_s: float
    # Local provider (its per-sandbox cgroup or rlimits); in a box only exec_max_processes,
    # and only under gVisor (runtime/appkernel.py); otherwise a box has its own limits.
    exec_max_processes: int
    exec_memory_bytes: int

    def __init__(
        self,
        read_max_lines: int = 2000,
        read_max_bytes: int = 256 * KIB,
        write_max_bytes: int = 10 * MIB,
        transfer_max_bytes: int = 64 * MIB,
        list_max_entries: int = 1000,
        list_max_depth: int = 10,
        glob_default_results: int = 200,
        glob_max_results: int = 1000,
        grep_default_results: int = 100,
        grep_max_results: int = 500,
        grep_max_file_bytes: int = 10 * MIB,
        grep_line_chars: int = 200,
        grep_max_context: int = 20,
        search_timeout_s: float = 30.0,
        exec_default_timeout_s: float = 120.0,
        exec_max_timeout_s: float = 3600.0,
        exec_output_bytes: int = 64 * KIB,
        exec_stream_bytes: int = 16 * MIB,
        process_max_live: int = 16,
        process_output_bytes: int = 1 * MIB,
        process_wait_max_s: float = 60.0,
        exec_max_processes: int = 256,
        exec_memory_bytes: int = 1024 * MIB,
    ) -> None:
        self._init(locals())

    def to_dict(self) -> Dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Limits:
        return cls(**{k: v for k, v in data.items() if k in cls.FIELDS})
