"""Startup check that the interpreter has the standard library the agent needs.

Imports nothing beyond builtins at module level: it must run (and explain)
on a python3 that lacks `json`, such as Debian's python3-minimal.
"""

from __future__ import annotations

import sys

# What the agent and the runtime import from the standard library; the HTTP
# carrier's modules are only needed (and only checked) with --http.
REQUIRED = (
    "_queue",
    "argparse",
    "atexit",
    "base64",
    "binascii",
    "codecs",
    "collections",
    "contextlib",
    "dataclasses",
    "enum",
    "errno",
    "fcntl",
    "fnmatch",
    "functools",
    "hashlib",
    "hmac",
    "importlib",
    "inspect",
    "io",
    "json",
    "math",
    "os",
    "pkgutil",
    "posixpath",
    "re",
    "secrets",
    "select",
    "selectors",
    "shutil",
    "signal",
    "socket",
    "stat",
    "subprocess",
    "sysconfig",
    "tempfile",
    "threading",
    "time",
    "traceback",
    "types",
    "typing",
    "unicodedata",
    "weakref",
)
REQUIRED_HTTP = ("http.server", "socketserver")
# Used when present, never a reason not to start.
OPTIONAL = ("ctypes", "resource")
MIN_PYTHON = (3, 9)


def problem(http: bool = False) -> str | None:
    """A sentence saying what is missing, or None when all is there.

    Modules are located (find_spec), not imported: the check costs almost
    nothing on a healthy interpreter.
    """
    if sys.version_info < MIN_PYTHON:
        return "the sandkit agent needs python3 >= %d.%d; %s is %s" % (
            MIN_PYTHON[0],
            MIN_PYTHON[1],
            sys.executable or "python3",
            sys.version.split()[0],
        )
    import importlib.util

    for name in REQUIRED + (REQUIRED_HTTP if http else ()):
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:  # a missing parent package (e.g. no `http`)
            found = False
        if not found:
            return missing_module(name)
    return None


def missing_module(name: str) -> str:
    return (
        "the sandkit agent needs the standard-library module %r, which %s (python %s) lacks;"
        " install the full python3 package (Debian's python3-minimal has no json)"
        % (name, sys.executable or "python3", sys.version.split()[0])
    )


def error_frame(message: str) -> bytes:
    """A JSON-RPC error frame built without the json module."""
    text = "".join(
        c if (" " <= c < "\x7f" and c not in '"\\') else "\\u%04x" % ord(c) for c in message
    )
    return (
        '{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"%s",'
        '"data":{"code":"UNAVAILABLE","message":"%s"}}}\n' % (text, text)
    ).encode("ascii")
