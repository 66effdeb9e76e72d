"""Byte pipes inside a box (stdlib, asyncio), started by the provider as the box's user.

- `relay_out`: the box's HTTP_PROXY, 127.0.0.1:<port>, to the egress proxy's socket in
  the box's read-only egress directory. The relay decides nothing: the proxy on the
  other side knows the box by that socket and enforces its policy. Killing the relay
  only takes the box's own way out away.
- `relay_in`: an exposed port: a socket in the box's ingress directory (which the
  provider's gateway connects to from the host) to the server listening on that port in
  the box.

Both exit at once, successfully, when one is already running (the provider starts them
again whenever in doubt).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import select
import socket
import sys
import time
from typing import Callable, Optional

CHUNK = 64 * 1024
BACKLOG = 1024  # a burst of connections waits in the kernel, not refused
UPSTREAM_CONNECT_S = 10.0  # a busy proxy has this long to take a new connection


def _unreachable_response() -> bytes:
    body = b"sandkit egress: the egress proxy is not reachable\n"
    return (
        b"HTTP/1.1 503 sandkit egress: the egress proxy is not reachable\r\n"
        b"Content-Type: text/plain\r\nConnection: close\r\nX-Sandkit-Egress: error\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError, RuntimeError):
        pass


async def splice(
    a_reader: asyncio.StreamReader,
    a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader,
    b_writer: asyncio.StreamWriter,
) -> None:
    """Both directions until both are done (half-closes passed on), then close."""
    try:
        await asyncio.gather(pump(a_reader, b_writer), pump(b_reader, a_writer))
    finally:
        for writer in (a_writer, b_writer):
            with contextlib.suppress(Exception):
                writer.close()


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def open_unix(
    path: str, within_s: float = UPSTREAM_CONNECT_S
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the unix socket `path`, waiting while its listen queue is full.

    asyncio takes a unix connect refused with EAGAIN (the listener's queue is full) for a
    success and hands back an unconnected socket, so a burst past the queue of a busy
    listener was dropped without a word; here it waits for room, up to `within_s`.
    """
    loop = asyncio.get_running_loop()
    deadline, pause = loop.time() + within_s, 0.005
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)
        except (BlockingIOError, InterruptedError):
            sock.close()
            if loop.time() + pause > deadline:
                raise OSError(errno.EAGAIN, "the listener's queue stayed full") from None
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.1)
            continue
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_unix_connection(sock=sock)


async def _relay_out(host: str, port: int, path: str, ready: Optional[int] = None) -> int:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _nodelay(writer)
        try:
            up_reader, up_writer = await open_unix(path)
        except OSError:
            with contextlib.suppress(Exception):
                writer.write(_unreachable_response())
                await writer.drain()
                writer.close()
            return
        await splice(reader, writer, up_reader, up_writer)

    try:
        server = await asyncio.start_server(handle, host, port, reuse_address=True, backlog=BACKLOG)
    except OSError as exc:
        _ready(ready, b"up" if exc.errno == errno.EADDRINUSE else str(exc).encode()[:60])
        if exc.errno == errno.EADDRINUSE:
            return 0  # a relay runs already
        raise
    _ready(ready, b"up")
    async with server:
        await server.serve_forever()
    return 0


async def _relay_in(path: str, port: int, ready: Optional[int] = None) -> int:
    if _answers(path):
        _ready(ready, b"up")
        return 0  # a relay runs already
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for host in ("127.0.0.1", "::1"):
            try:
                up_reader, up_writer = await asyncio.open_connection(host, port)
            except OSError:
                continue
            _nodelay(up_writer)
            await splice(reader, writer, up_reader, up_writer)
            return
        with contextlib.suppress(Exception):
            writer.close()

    server = await asyncio.start_unix_server(handle, path, backlog=BACKLOG)
    os.chmod(path, 0o666)
    _ready(ready, b"up")
    async with server:
        await server.serve_forever()
    return 0


def _answers(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _ready(fd: Optional[int], word: bytes) -> None:
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.write(fd, word)
        os.close(fd)


def run_out(listen: str, path: str, ready: Optional[int] = None) -> int:
    host, _, port = listen.rpartition(":")
    return asyncio.run(_relay_out(host.strip("[]") or "127.0.0.1", int(port), path, ready))


def run_in(path: str, port: int, ready: Optional[int] = None) -> int:
    return asyncio.run(_relay_in(path, port, ready))


def daemon(start: Callable[[Optional[int]], int], timeout: float = 20.0) -> int:
    """Run `start` in a detached child and return once it listens (exit 0) or failed:
    the provider's exec then ends exactly when the relay is ready for the box's commands."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the relay
        os.close(read)
        with contextlib.suppress(OSError):
            os.setsid()
        if os.fork():  # not a child of the exec's process any more
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        try:
            code = start(write)
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write)
    os.waitpid(pid, 0)
    word = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([read], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            break
        chunk = os.read(read, 64)
        if not chunk:
            break
        word += chunk
    os.close(read)
    if word == b"up":
        return 0
    sys.stderr.write("sandkit relay: did not start (%s)\n" % (word.decode() or "no word"))
    return 1
