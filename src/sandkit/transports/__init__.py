"""How requests reach an agent: a byte stream (stdio carrier) or HTTP."""

from .base import Transport
from .http import HttpTransport
from .local_process import SubprocessStream, agent_command, agent_opener
from .stdio import StdioTransport

__all__ = [
    "HttpTransport",
    "StdioTransport",
    "SubprocessStream",
    "Transport",
    "agent_command",
    "agent_opener",
]
