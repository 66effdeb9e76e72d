"""The in-sandbox agent: the runtime's operations served as JSON-RPC 2.0.

Stdlib only, python3 >= 3.9. This module imports nothing on purpose: the
agent checks its standard-library imports at start (a python3-minimal image
lacks `json`) and must be able to say so before anything else fails.
"""

AGENT_VERSION = "0.1.0"
# Bumped when a message changes incompatibly; the client checks it on initialize.
PROTOCOL_VERSION = 1
