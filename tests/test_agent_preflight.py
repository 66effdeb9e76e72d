"""The agent's start-up check names every stdlib module the shipped code imports.

If a module is missing from the list, an image without it fails later with
an ImportError traceback instead of the clear "install python3" message.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from sandkit.agent.preflight import OPTIONAL, REQUIRED, REQUIRED_HTTP

SHIPPED = Path(__file__).resolve().parent.parent / "src" / "sandkit"
ALWAYS_THERE = {"__future__", "sys", "builtins"}


def _imported_top_level(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_stdlib_import_of_the_zipapp_is_checked_at_start() -> None:
    imported: set[str] = set()
    for package in ("runtime", "agent"):
        for path in (SHIPPED / package).glob("*.py"):
            if path.name != "build.py":  # runs on the host, not in the box
                imported |= _imported_top_level(path)
    stdlib = {name for name in imported if name in sys.stdlib_module_names}
    checked = {name.split(".")[0] for name in REQUIRED + REQUIRED_HTTP + OPTIONAL}
    assert stdlib - checked - ALWAYS_THERE == set()
