"""The agent-facing layer: tool schemas, LLM text rendering, and the tool runner.

Nothing here imports an agent framework; the MCP server lives in
`sandkit.tools.mcp_server` (extra `sandkit[mcp]`) and the LangChain and
deepagents adapters in `sandkit.integrations`.
"""

from .dispatch import ToolOutput, arun_tool, run_tool
from .specs import INSTRUCTIONS, SPECS, TOOL_NAMES, ToolSpec, description, input_schema
from .toolset import SandboxTools

__all__ = [
    "INSTRUCTIONS",
    "SPECS",
    "TOOL_NAMES",
    "SandboxTools",
    "ToolOutput",
    "ToolSpec",
    "arun_tool",
    "description",
    "input_schema",
    "run_tool",
]
