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
    from typing import NoReturn

EXIT_MISSING_STDLIB = 3
EXIT_BAD_CONFIG = 4
TOKEN_ENV = "SANDKIT_AGENT_TOKEN"
# Where a provider's launcher names the config and token files: the environment, which
# a non-dumpable process keeps from the box's commands, not argv (/proc/PID/cmdline is
# readable by every process in the box for the agent's whole life).
CONFIG_FILE_ENV = "SANDKIT_AGENT_CONFIG_FILE"
TOKEN_FILE_ENV = "SANDKIT_AGENT_TOKEN_FILE"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["--net"]:
        # The network programs (egress proxy, in-box relays): sandkit/net/cli.py.
        from ..net.cli import main as net_main

        return net_main(args[1:])
    # First of all: the channel may carry the secrets at any moment (agent/private.py).
    from .private import keep_memory_private

    keep_memory_private()
    if args[:1] == ["--dormant"]:
        # A sleeping agent (agent/dormant.py): nothing else may load before it waits.
        from .dormant import wait_then_wake

        return wait_then_wake(args[1:])
    from .preflight import error_frame, missing_module, problem

    trouble = problem(http="--http" in args)
    if trouble is None:
        try:
            # The import check of the agent itself; the runtime's modules load when first
            # needed (the preflight found every stdlib module they import).
            from . import server  # noqa: F401
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


class _Options:
    """The parsed command line (the names argparse gives the options)."""

    def __init__(self) -> None:
        self.stdio = False
        self.http: str | None = None
        self.procd: str | None = None
        self.config: str | None = None
        self.token_file: str | None = None
        self.keep_files = False
        self.workers = 8
        self.tag: str | None = None


# The options, and whether each takes a value (see _parser, which documents them).
_FLAGS = {
    "--stdio": False,
    "--http": True,
    "--procd": True,
    "--config": True,
    "--token-file": True,
    "--keep-files": False,
    "--workers": True,
    "--tag": True,
}
_CARRIERS = ("--stdio", "--http", "--procd")


def _quick_parse(args: list[str]) -> _Options | None:
    """The command line as argparse reads it, for the plain forms a provider writes (each
    option once, spelt out, `--name value` or `--name=value`); None for anything else,
    which argparse then reads (and answers: errors, --help, --version, abbreviations).
    Not argparse itself: building its parser costs more than the rest of a start."""
    values: dict[str, str] = {}
    rest = iter(args)
    for arg in rest:
        name, equals, value = arg.partition("=")
        takes_value = _FLAGS.get(name)
        if takes_value is None or name in values:
            return None
        if not takes_value:
            if equals:
                return None
        elif not equals:
            value = next(rest, "")
        if takes_value and (not value or value.startswith("-")):
            return None  # argparse has its own rules for these
        values[name] = value
    if sum(name in values for name in _CARRIERS) != 1:
        return None
    options = _Options()
    options.stdio = "--stdio" in values
    options.http = values.get("--http")
    options.procd = values.get("--procd")
    options.config = values.get("--config")
    options.token_file = values.get("--token-file")
    options.keep_files = "--keep-files" in values
    options.tag = values.get("--tag")
    if "--workers" in values:
        try:
            options.workers = int(values["--workers"])
        except ValueError:
            return None
    return options


def _parser() -> argparse.ArgumentParser:
    import argparse

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
    parser.add_argument(
        "--config", metavar="PATH", help="HTTP: JSON config (default: $%s)" % CONFIG_FILE_ENV
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help="HTTP: bearer token (default: the file $%s names, or $%s)"
        % (TOKEN_FILE_ENV, TOKEN_ENV),
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
    return parser


def _parse(args: list[str]) -> _Options:
    quick = _quick_parse(args)
    if quick is not None:
        return quick
    parsed = _parser().parse_args(args)
    options = _Options()
    for name in vars(options):
        setattr(options, name, getattr(parsed, name))
    return options


def _usage_error(message: str) -> NoReturn:
    """Exit 2 with the usage and `message`, as argparse does."""
    _parser().error(message)


def _run(args: list[str]) -> int:
    options = _parse(args)
    if options.workers < 1:
        _usage_error("--workers must be >= 1")
    if options.procd:
        from ..runtime.procd import serve

        return serve(options.procd)
    if options.stdio:
        if options.config or options.token_file:
            _usage_error("--config and --token-file are for --http; stdio gets initialize")
        from .stdio_carrier import serve_stdio

        return serve_stdio(options.workers, _this_agent())
    return _serve_http(options)


def _this_agent() -> list[str]:
    """The argv that runs this agent program again (for its process supervisor)."""
    from .dormant import agent_argv

    return agent_argv()


def _serve_http(options: _Options) -> int:
    from .http_carrier import MIN_TOKEN_CHARS, serve_http
    from .server import AgentCore, log

    host, _, port_text = (options.http or "").rpartition(":")
    host = host.strip("[]")
    if not host or not port_text.isdigit():
        _usage_error("--http takes HOST:PORT, e.g. 0.0.0.0:8765")
    # Taken out of the environment before any command can inherit them.
    token = os.environ.pop(TOKEN_ENV, "")
    config_file = os.environ.pop(CONFIG_FILE_ENV, "") or options.config
    token_file = os.environ.pop(TOKEN_FILE_ENV, "") or options.token_file
    if not config_file:
        _usage_error("--http needs --config PATH (or $%s)" % CONFIG_FILE_ENV)
    try:
        if token_file:
            token = _read_file(token_file, options.keep_files).strip()
        if not token:
            log("no token, no service: set $%s or pass --token-file" % TOKEN_ENV)
            return EXIT_BAD_CONFIG
        if len(token) < MIN_TOKEN_CHARS:
            log("the bearer token must have at least %d characters" % MIN_TOKEN_CHARS)
            return EXIT_BAD_CONFIG
        import json

        from .protocol import context_from_config

        config = json.loads(_read_file(config_file, options.keep_files))
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
