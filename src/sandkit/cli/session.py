"""Global options, and turning them into settings, a provider and a sandbox.

Every global option is accepted both before the command (`sandkit --json ls`)
and after it (`sandkit ls --json`); `sandbox_command` adds them to each
command's signature so typer shows them under one help panel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from ..config import CONFIG_ENV, ConfigSource, Settings, config_source
from ..errors import ErrorCode, SandboxError
from ..provider import SandboxKey, SandboxProvider, create_provider
from ..sandbox import Sandbox
from .output import EXIT_ERROR, Output

PANEL = "Global options"

DEFAULT_USER = "cli"
DEFAULT_THREAD = "default"


@dataclasses.dataclass(frozen=True)
class GlobalOptions:
    """What `--provider/--user/...` said; None means "not given here"."""

    provider: str | None = None
    user: str | None = None
    thread: str | None = None
    config: Path | None = None
    data_root: Path | None = None
    allow_execute: bool = False
    json: bool = False
    verbose: bool = False

    def merged(self, later: GlobalOptions) -> GlobalOptions:
        """Options given after the command override those given before it."""
        return GlobalOptions(
            provider=later.provider or self.provider,
            user=later.user or self.user,
            thread=later.thread or self.thread,
            config=later.config or self.config,
            data_root=later.data_root or self.data_root,
            allow_execute=later.allow_execute or self.allow_execute,
            json=later.json or self.json,
            verbose=later.verbose or self.verbose,
        )


ProviderOpt = Annotated[
    str | None,
    typer.Option(
        "--provider",
        help="Provider name (env: SANDKIT_PROVIDER; default: the settings file's "
        "provider, else local).",
        rich_help_panel=PANEL,
        show_default=False,
    ),
]
UserOpt = Annotated[
    str | None,
    typer.Option(
        "--user",
        envvar="SANDKIT_USER",
        help=f"User id of the sandbox (default: {DEFAULT_USER}).",
        rich_help_panel=PANEL,
        show_default=False,
    ),
]
ThreadOpt = Annotated[
    str | None,
    typer.Option(
        "--thread",
        envvar="SANDKIT_THREAD",
        help=f"Thread id of the sandbox (default: {DEFAULT_THREAD}).",
        rich_help_panel=PANEL,
        show_default=False,
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        exists=True,
        dir_okay=False,
        help="YAML settings file (env: SANDKIT_CONFIG; default: the first sandkit.yaml "
        "from here up to the project root, else $XDG_CONFIG_HOME/sandkit/sandkit.yaml).",
        rich_help_panel=PANEL,
        show_default=False,
    ),
]
DataRootOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-root",
        file_okay=False,
        help="Host directory that holds thread data (env: SANDKIT_DATA_ROOT; default: "
        "the settings file's data_root, else $XDG_DATA_HOME/sandkit).",
        rich_help_panel=PANEL,
        show_default=False,
    ),
]
AllowExecuteOpt = Annotated[
    bool,
    typer.Option(
        "--allow-execute",
        help="Local provider: allow `exec` to run commands on this host "
        "(env: SANDKIT_EXECUTE_ENABLED=true).",
        rich_help_panel=PANEL,
    ),
]
JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Machine output: the result model as JSON.", rich_help_panel=PANEL),
]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="Say on stderr which settings file, data root and provider are in use.",
        rich_help_panel=PANEL,
    ),
]

_GLOBAL_ANNOTATIONS: dict[str, Any] = {
    "provider": ProviderOpt,
    "user": UserOpt,
    "thread": ThreadOpt,
    "config": ConfigOpt,
    "data_root": DataRootOpt,
    "allow_execute": AllowExecuteOpt,
    "json": JsonOpt,
    "verbose": VerboseOpt,
}
_GLOBAL_DEFAULTS = dataclasses.asdict(GlobalOptions())


def root_options(ctx: typer.Context) -> GlobalOptions:
    """Options given before the command (stored by the app callback)."""
    obj = ctx.find_root().obj
    return obj if isinstance(obj, GlobalOptions) else GlobalOptions()


@contextlib.contextmanager
def _config_env(config: Path | None) -> Iterator[None]:
    """Point SANDKIT_CONFIG at `config` while settings load, then restore it."""
    if config is None:
        yield
        return
    previous = os.environ.get(CONFIG_ENV)
    os.environ[CONFIG_ENV] = str(config)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(CONFIG_ENV, None)
        else:
            os.environ[CONFIG_ENV] = previous


def load_settings(opts: GlobalOptions) -> Settings:
    """Settings from file and environment, with the command-line overrides on top."""
    overrides: dict[str, Any] = {}
    if opts.data_root is not None:
        overrides["data_root"] = opts.data_root
    if opts.allow_execute:
        overrides["execute_enabled"] = True
    with _config_env(opts.config):
        source = config_source()
        try:
            return Settings(**overrides)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
                for err in exc.errors()
            )
            where = f" (settings file: {source.path})" if source.path is not None else ""
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT, f"invalid configuration: {problems}{where}"
            ) from None


def settings_source(opts: GlobalOptions) -> ConfigSource:
    """Which settings file these options load (see `sandkit.config.config_source`)."""
    with _config_env(opts.config):
        return config_source()


class Session:
    """One invocation: its output, settings, and (lazily) provider and sandbox."""

    def __init__(self, opts: GlobalOptions) -> None:
        self.opts = opts
        self.out = Output(json_mode=opts.json)
        self._settings: Settings | None = None
        self._provider: SandboxProvider | None = None
        self._sandbox: Sandbox | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.opts)
        return self._settings

    @property
    def config(self) -> ConfigSource:
        return settings_source(self.opts)

    def describe(self) -> str:
        """The settings file, data root and provider in use (for --verbose)."""
        root = self.settings.data_root.expanduser().absolute()
        return (
            f"settings: {self.config.describe()}; data root: {root}; provider: {self.provider_name}"
        )

    @property
    def provider_name(self) -> str:
        return self.opts.provider or self.settings.provider

    @property
    def key(self) -> SandboxKey:
        return SandboxKey(self.opts.user or DEFAULT_USER, self.opts.thread or DEFAULT_THREAD)

    @property
    def provider(self) -> SandboxProvider:
        if self._provider is None:
            self._provider = create_provider(self.provider_name, self.settings)
        return self._provider

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            key = self.key  # validate ids before starting anything
            self._sandbox = self.provider.acquire(key)
        return self._sandbox

    def close(self) -> None:
        """Drop the client side; the box stays up for the next command (remote providers)."""
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
        if self._provider is not None and self._provider.name == "local":
            # Nothing of the local provider outlives the process anyway.
            self._provider.shutdown()
        self._provider = None


def run_in_session(opts: GlobalOptions, body: Callable[[Session], int | None]) -> None:
    """Run `body`, render a SandboxError as `Error [CODE]` and exit with its code."""
    session = Session(opts)
    try:
        if opts.verbose:
            session.out.note(session.describe())
        code = body(session)
    except SandboxError as exc:
        session.out.error(exc)
        raise typer.Exit(EXIT_ERROR) from None
    finally:
        session.close()
    if code:
        raise typer.Exit(code)


def sandbox_command(fn: Callable[..., int | None]) -> Callable[..., None]:
    """Adapt `fn(session, **args)` into a typer command that takes the global options."""
    signature = inspect.signature(fn, eval_str=True)
    own = list(signature.parameters.values())[1:]
    extra = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=_GLOBAL_DEFAULTS[name],
            annotation=annotation,
        )
        for name, annotation in _GLOBAL_ANNOTATIONS.items()
    ]
    context = inspect.Parameter("_ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
    params = [context, *(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own), *extra]

    @functools.wraps(fn)
    def command(_ctx: typer.Context, **kwargs: Any) -> None:
        given = GlobalOptions(**{name: kwargs.pop(name) for name in _GLOBAL_ANNOTATIONS})
        opts = root_options(_ctx).merged(given)
        run_in_session(opts, lambda session: fn(session, **kwargs))

    del command.__wrapped__  # typer must see the new signature, not fn's
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command
