"""Sockets in a directory a box can write, reached without following what the box put there.

An exposed port's socket on Docker is made by the box's relay in the box's ingress
directory, which the box can write: it can replace `<port>.sock` with a symlink to any
socket on the host (the engine's included), a FIFO or a directory. A host-side connect()
follows such a link. So host code never connects to that path: it opens the last
component with O_PATH|O_NOFOLLOW relative to the directory, checks that it is a socket,
and connects through `/proc/self/fd/N` — the inode it checked, whatever the name points
to later (stdlib: the CLI and the conformance suite use it too).
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

_O_PATH = getattr(os, "O_PATH", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class NotASocket(OSError):
    """The name is missing, or is something else than a socket (link, FIFO, file, dir)."""


def pin_socket(path: str) -> int:
    """An O_PATH descriptor of the socket `path` names, its last component not followed.

    The directory is opened without following its last component either. Raises
    `NotASocket` for anything but a socket (a missing name included)."""
    directory, name = os.path.split(path)
    if not name or name in (".", ".."):
        raise NotASocket(f"not a socket name: {name!r}")
    try:
        dir_fd = os.open(directory or ".", os.O_DIRECTORY | os.O_NOFOLLOW | _O_PATH | _O_CLOEXEC)
    except OSError as exc:
        raise NotASocket(f"no socket directory ({exc.strerror})") from None
    try:
        fd = os.open(name, _O_PATH | os.O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        raise NotASocket(f"no socket ({exc.strerror})") from None
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISSOCK(info.st_mode):
        os.close(fd)
        raise NotASocket("not a socket")
    return fd


def fd_path(fd: int) -> str:
    """The path connect() takes to reach the inode `fd` holds (short enough for AF_UNIX)."""
    return "/proc/self/fd/%d" % fd


def is_socket(path: str) -> bool:
    """Whether `path` names a socket itself (not a link to one)."""
    try:
        os.close(pin_socket(path))
    except OSError:
        return False
    return True


def connect_box_socket(path: str, timeout: Optional[float] = None) -> socket.socket:
    """A connected stream socket to the socket `path` names (see the module doc)."""
    fd = pin_socket(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(fd_path(fd))
    except BaseException:
        sock.close()
        raise
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return sock
