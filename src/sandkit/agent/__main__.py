"""Command line of the agent.

    python3 agent.pyz --stdio
    python3 agent.pyz --http HOST:PORT --config PATH [--token-file PATH] [--keep-files]
    python3 agent.pyz --net proxy|relay-out|relay-in|ctl|policy ...   (sandkit/net/cli.py)

Exit codes: 0 done, 2 bad usage, 3 the interpreter lacks a needed
standard-library module (or is older than 3.9), 4 bad config or no token.
"""

from __future__ import annotations

import os
import sys

# Not `typing.TYPE_CHECKING`: nothing but builtins may load before the check.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

EXIT_MISSING_STDLIB = 3
EXIT_BAD_CONFIG = 4
TOKEN_ENV = "SANDKIT_AGENT_TOKEN"


PR_SET_DUMPABLE = 4  # linux/prctl.h


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["--dormant"]:
        # A sleeping agent (agent/dormant.py): nothing else may load before it waits.
        from .dormant import wait_then_wake

        return wait_then_wake(args[1:])
    if args[:1] == ["--net"]:
        # The network programs (egress proxy, in-box relays): sandkit/net/cli.py.
        from ..net.cli import main as net_main

        return net_main(args[1:])
    from .preflight import error_frame, missing_module, problem

    trouble = problem(http="--http" in args)
    if trouble is None:
        try:
            from ..runtime import service  # noqa: F401
            from . import server  # noqa: F401 - import check of the agent itself
        except ImportError as exc:
            if not getattr(exc, "name", None):
                raise
            trouble = missing_module(str(exc.name))
    if trouble is not None:
        sys.stderr.write("sandkit-agent: %s\n" % trouble)
        sys.stderr.flush()
        if "--stdio" in args:
            # Said on the protocol channel too: with only stdout reaching the
            # client, this is how the reason shows up in its UNAVAILABLE error.
            os.write(1, error_frame(trouble))
        return EXIT_MISSING_STDLIB
    return _run(args)


def _keep_memory_private() -> None:
    """Commands run as the agent's user: without this they could read its memory.

    /proc/<agent>/mem and environ would hand a hostile command the configured
    secrets and the HTTP token. A non-dumpable process's /proc files belong to
    root; commands get a dumpable process again at their own execve.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (ImportError, OSError, AttributeError):  # no ctypes, no libc, no prctl
        pass


def _run(args: list[str]) -> int:
    import argparse

    _keep_memory_private()

    from . import AGENT_VERSION

    parser = argparse.ArgumentParser(prog="agent.pyz", description="sandkit in-sandbox agent")
    carrier = parser.add_mutually_exclusive_group(required=True)
    carrier.add_argument("--stdio", action="store_true", help="serve JSON-RPC on stdin/stdout")
    carrier.add_argument("--http", metavar="HOST:PORT", help="serve JSON-RPC on POST /rpc")
    carrier.add_argument(
        "--procd",
        metavar="DIR",
        help="run the box's process supervisor on DIR/sock (started by an agent; config on stdin)",
    )
    carrier.add_argument("--version", action="version", version=AGENT_VERSION)
    parser.add_argument("--config", metavar="PATH", help="HTTP: JSON config (agent_config)")
    parser.add_argument(
        "--token-file", metavar="PATH", help="HTTP: bearer token (default: $%s)" % TOKEN_ENV
    )
    parser.add_argument(
        "--keep-files",
        action="store_true",
        help="HTTP: do not delete --config and --token-file after reading them",
    )
    parser.add_argument("--workers", type=int, default=8, help="concurrent operations (8)")
    parser.add_argument(
        "--tag",
        metavar="LABEL",
        help="an opaque label a provider finds this agent by in /proc/<pid>/cmdline (the "
        "agent is non-dumpable, so its environ is not readable to the box user)",
    )
    options = parser.parse_args(args)
    if options.workers < 1:
        parser.error("--workers must be >= 1")
    if options.procd:
        from ..runtime.procd import serve

        return serve(options.procd)
    if options.stdio:
        if options.config or options.token_file:
            parser.error("--config and --token-file are for --http; stdio gets initialize")
        from .stdio_carrier import serve_stdio

        return serve_stdio(options.workers, _this_agent())
    return _serve_http(parser, options)


def _this_agent() -> list[str]:
    """The argv that runs this agent program again (for its process supervisor)."""
    from .dormant import agent_argv

    return agent_argv()


def _serve_http(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from .http_carrier import MIN_TOKEN_CHARS, serve_http
    from .server import AgentCore, log

    host, _, port_text = options.http.rpartition(":")
    host = host.strip("[]")
    if not host or not port_text.isdigit():
        parser.error("--http takes HOST:PORT, e.g. 0.0.0.0:8765")
    if not options.config:
        parser.error("--http needs --config PATH")
    # Taken out of the environment before any command can inherit it.
    token = os.environ.pop(TOKEN_ENV, "")
    try:
        if options.token_file:
            token = _read_file(options.token_file, options.keep_files).strip()
        if not token:
            log("no token, no service: set $%s or pass --token-file" % TOKEN_ENV)
            return EXIT_BAD_CONFIG
        if len(token) < MIN_TOKEN_CHARS:
            log("the bearer token must have at least %d characters" % MIN_TOKEN_CHARS)
            return EXIT_BAD_CONFIG
        import json

        from .protocol import context_from_config

        config = json.loads(_read_file(options.config, options.keep_files))
        core = AgentCore(
            context_from_config(config),
            allow_initialize=False,
            config=config,
            supervisor=_this_agent(),
        )
        return serve_http(core, host, int(port_text), token, options.workers)
    except (OSError, ValueError) as exc:
        log("cannot start: %s" % exc)
        return EXIT_BAD_CONFIG
    except Exception as exc:  # SandboxError from a bad config
        if type(exc).__name__ != "SandboxError":
            raise
        log("invalid --config: %s" % exc)
        return EXIT_BAD_CONFIG


def _read_file(path: str, keep: bool) -> str:
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if not keep:
        # Read once, then gone: commands in the box run as the same user
        # and could otherwise read the token and the secrets.
        try:
            os.unlink(path)
        except OSError as exc:
            sys.stderr.write("sandkit-agent: could not delete %s: %s\n" % (path, exc))
    return text


if __name__ == "__main__":
    sys.exit(main())
