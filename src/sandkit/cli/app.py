"""The `sandkit` command: typer app, global options, command registration."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperOption

from . import commands, processes, uploads
from .doctor import doctor
from .mcp_command import mcp
from .net_commands import egress, expose, gateway, unexpose
from .providers import providers
from .session import (
    AllowExecuteOpt,
    ConfigOpt,
    DataRootOpt,
    GlobalOptions,
    JsonOpt,
    ProviderOpt,
    Session,
    ThreadOpt,
    UserOpt,
    VerboseOpt,
    sandbox_command,
)

_display_type = TyperOption.display_type_rich


def _flag_has_no_type(self: TyperOption, ctx: Any) -> str | None:
    # A plain flag takes no value: help shows no `<bool>` after it.
    return None if self.is_flag else _display_type(self, ctx)


TyperOption.display_type_rich = _flag_has_no_type  # type: ignore[method-assign]

app = typer.Typer(
    name="sandkit",
    help="Work with sandkit sandboxes from a terminal: files, search and commands "
    "on virtual paths (/mnt/user-data/...), per user and thread.",
    no_args_is_help=True,
    # --install-completion / --show-completion for bash, zsh, fish and PowerShell.
    add_completion=True,
    # Locals in tracebacks could show configured secrets.
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def version_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"sandkit {version('sandkit')}"
    except PackageNotFoundError:  # run from a tree that was never installed
        return "sandkit (not installed)"


def _version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    provider: ProviderOpt = None,
    user: UserOpt = None,
    thread: ThreadOpt = None,
    config: ConfigOpt = None,
    data_root: DataRootOpt = None,
    allow_execute: AllowExecuteOpt = False,
    json: JsonOpt = False,
    verbose: VerboseOpt = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Global options may come before the command or after it."""
    ctx.obj = GlobalOptions(
        provider=provider,
        user=user,
        thread=thread,
        config=config,
        data_root=data_root,
        allow_execute=allow_execute,
        json=json,
        verbose=verbose,
    )


app.command("ls")(sandbox_command(commands.ls))
app.command("read")(sandbox_command(commands.read))
app.command("write")(sandbox_command(commands.write))
app.command("edit")(sandbox_command(commands.edit))
app.command("glob")(sandbox_command(commands.glob))
app.command("grep")(sandbox_command(commands.grep))
app.command("exec")(sandbox_command(processes.exec_))
app.command("spawn")(sandbox_command(processes.spawn))
app.command("ps")(sandbox_command(processes.ps))
app.command("logs")(sandbox_command(processes.logs))
app.command("send")(sandbox_command(processes.send))
app.command("kill")(sandbox_command(processes.kill))
app.command("wait")(sandbox_command(processes.wait))
app.command("release")(sandbox_command(commands.release))
app.command("destroy")(sandbox_command(commands.destroy))
app.command("providers")(sandbox_command(providers))
app.command("doctor")(sandbox_command(doctor))
app.command("mcp")(sandbox_command(mcp))
app.add_typer(uploads.app, name="uploads")
app.command("egress")(sandbox_command(egress))
app.command("expose")(sandbox_command(expose))
app.command("unexpose")(sandbox_command(unexpose))
app.command("gateway")(sandbox_command(gateway))


def _demo(
    session: Session,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the temporary data root to explore it.")
    ] = False,
) -> int:
    """Run the README's tour on the local provider: write, ls, glob, grep, read, edit."""
    from .demo import run_demo  # imported on use: keeps other commands' start-up lean

    return run_demo(session, keep=keep)


app.command("demo")(sandbox_command(_demo))
