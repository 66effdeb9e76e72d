"""`sandkit uploads put|ls|rm`: a thread's uploads, as the host application puts them there.

The provider's upload calls (docs/operations.md#uploads), not sandbox operations:
no box is started for them, and the agent still cannot change an upload.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from ..errors import ErrorCode, SandboxError
from ..runtime.pathmap import UPLOADS
from ..tools.render import counted
from .session import Session, sandbox_command

app = typer.Typer(
    name="uploads",
    help=f"A thread's uploads ({UPLOADS}: read-only to the agent), put there by the host.",
    no_args_is_help=True,
)

UploadPath = Annotated[
    str, typer.Argument(help=f"Path in the uploads: relative to {UPLOADS}, or below it.")
]


def put(
    session: Session,
    source: Annotated[
        str, typer.Argument(help="Local file to upload, or - for stdin.", show_default=False)
    ],
    path: Annotated[
        str | None,
        typer.Argument(
            help=f"Where in the uploads (relative to {UPLOADS}; default: SOURCE's file name).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Upload a local file (or stdin) into the thread's uploads; replaces one of that name."""
    if path is None:
        if source == "-":
            raise SandboxError(ErrorCode.INVALID_ARGUMENT, "stdin needs a PATH to upload to")
        path = Path(source).name
    limit = session.provider.limits.transfer_max_bytes
    data = _read(source, limit)
    result = session.provider.upload(session.key, path, data)
    if session.out.json_mode:
        session.out.json(result)
        return
    verb = "Uploaded" if result.created else "Replaced"
    session.out.success(f"{verb} {result.path} ({counted(result.bytes_written, 'byte', 'bytes')})")


def ls(session: Session) -> None:
    """List the thread's uploaded files: one path per line, sorted (--json: with sizes)."""
    listing = session.provider.list_uploads(session.key)
    if session.out.json_mode:
        session.out.json(listing)
        return
    for entry in listing.files:
        session.out.data(entry.path)
    total = sum(f.size for f in listing.files)
    if not listing.files:
        session.out.note(f"No uploads in {UPLOADS}")
        return
    more = " (showing the first ones; more exist)" if listing.truncated else ""
    files = counted(len(listing.files), "file", "files")
    session.out.note(f"{files}, {counted(total, 'byte', 'bytes')}{more}")


def rm(session: Session, path: UploadPath) -> None:
    """Delete a file of the thread's uploads (and the directories it leaves empty)."""
    removed = session.provider.remove_upload(session.key, path)
    if session.out.json_mode:
        session.out.json(removed)
        return
    session.out.success(f"Removed {removed.path} ({counted(removed.size, 'byte', 'bytes')})")


def _read(source: str, limit: int) -> bytes:
    """The bytes to upload, never more than one past `limit` read into memory (the provider
    then refuses with TOO_LARGE)."""
    if source == "-":
        return _bounded(sys.stdin.buffer, limit)
    local = Path(source)
    try:
        with local.open("rb") as stream:
            return _bounded(stream, limit)
    except FileNotFoundError:
        raise SandboxError(ErrorCode.NOT_FOUND, f"{source}: no such local file") from None
    except IsADirectoryError:
        raise SandboxError(ErrorCode.IS_A_DIRECTORY, f"{source} is a directory") from None
    except PermissionError:
        raise SandboxError(ErrorCode.ACCESS_DENIED, f"{source}: permission denied") from None


def _bounded(stream: BinaryIO, limit: int) -> bytes:
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise SandboxError(
            ErrorCode.TOO_LARGE,
            f"the upload is over the limit of {limit} bytes (limits.transfer_max_bytes)",
        )
    return data


app.command("put")(sandbox_command(put))
app.command("ls")(sandbox_command(ls))
app.command("rm")(sandbox_command(rm))
