"""Helpers for the agent / RemoteSandbox tests: real agent processes on tmp dirs."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandkit.agent.build import agent_zipapp
from sandkit.agent.protocol import agent_config
from sandkit.boxkit import ByteStream
from sandkit.local import LocalSandbox
from sandkit.provider import SandboxKey
from sandkit.remote import RemoteSandbox
from sandkit.runtime.context import Context
from sandkit.runtime.limits import Limits
from sandkit.runtime.pathmap import OUTPUTS, UPLOADS, WORKSPACE, Mount, PathMapping
from sandkit.runtime.service import Runtime
from sandkit.transports.local_process import SubprocessStream, agent_command
from sandkit.transports.stdio import StdioTransport

SECRET = "sk-test-secret-0123456789"


def find_rg() -> str | None:
    try:
        from sandkit.runtime.search import find_rg as locate
    except ImportError:
        return None
    return locate()


def make_mapping(root: Path) -> PathMapping:
    """Host mapping of a fresh thread under `root` (workspace, read-only uploads, outputs)."""
    for name in ("workspace", "uploads", "outputs"):
        (root / name).mkdir(parents=True, exist_ok=True)
    return PathMapping(
        [
            Mount(WORKSPACE, str(root / "workspace")),
            Mount(UPLOADS, str(root / "uploads"), read_only=True),
            Mount(OUTPUTS, str(root / "outputs")),
        ],
        WORKSPACE,
        hidden_roots=(str(root),),
    )


def make_context(
    mapping: PathMapping, limits: Limits | None = None, execute_enabled: bool = True
) -> Context:
    return Context(
        mapping=mapping,
        limits=limits or Limits(),
        rg_path=find_rg(),
        execute_enabled=execute_enabled,
        secrets=(SECRET,),
        scrubbed_env=("SANDKIT_TEST_SCRUBBED",),
    )


def config_of(context: Context) -> dict[str, Any]:
    return agent_config(
        context.mapping,
        context.limits,
        execute_enabled=context.execute_enabled,
        secrets=context.secrets,
        scrubbed_env=context.scrubbed_env,
        rg_path=context.rg_path,
    )


def local_sandbox(context: Context) -> LocalSandbox:
    """The in-process reference the remote results are compared with."""
    return LocalSandbox(SandboxKey("user", "thread"), Runtime(context))


@dataclass
class CountingOpener:
    """Starts a local `agent.pyz --stdio` per channel and remembers each stream."""

    argv: list[str] = field(default_factory=lambda: agent_command())
    streams: list[SubprocessStream] = field(default_factory=list)

    def __call__(self) -> ByteStream:
        stream = SubprocessStream(self.argv)
        self.streams.append(stream)
        return stream

    @property
    def opens(self) -> int:
        return len(self.streams)

    @property
    def current(self) -> SubprocessStream:
        return self.streams[-1]

    def kill_all(self) -> None:
        for stream in self.streams:
            with contextlib.suppress(ProcessLookupError):
                stream.process.kill()
            stream.process.wait()


def stdio_sandbox(
    context: Context, opener: CountingOpener | None = None, **kwargs: Any
) -> tuple[RemoteSandbox, CountingOpener]:
    opener = opener or CountingOpener()
    transport_kwargs = {k: kwargs.pop(k) for k in ("probe_timeout", "open_timeout") if k in kwargs}
    transport = StdioTransport(opener, config_of(context), **transport_kwargs)
    return RemoteSandbox(transport, "sk-test", limits=context.limits, **kwargs), opener


@dataclass
class HttpAgent:
    process: subprocess.Popen[bytes]
    url: str
    token: str
    config_path: Path
    token_path: Path | None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def write_private(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return path


def start_http_agent(
    context: Context,
    workdir: Path,
    token: str | None = None,
    via_file: bool = False,
    extra: tuple[str, ...] = (),
) -> HttpAgent:
    """Start `agent.pyz --http 127.0.0.1:0` and wait for the port it prints."""
    token = token if token is not None else secrets.token_urlsafe(32)
    config_path = write_private(
        workdir / f"config-{secrets.token_hex(4)}.json", json.dumps(config_of(context))
    )
    env = {k: v for k, v in os.environ.items() if k != "SANDKIT_AGENT_TOKEN"}
    argv = [
        sys.executable,
        "-I",
        "-S",
        str(agent_zipapp()),
        "--http",
        "127.0.0.1:0",
        "--config",
        str(config_path),
        *extra,
    ]
    token_path = None
    if via_file:
        token_path = write_private(workdir / f"token-{secrets.token_hex(4)}", token)
        argv += ["--token-file", str(token_path)]
    elif token:
        env["SANDKIT_AGENT_TOKEN"] = token
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert process.stdout is not None
    line = _readline_with_timeout(process, 20.0)
    if not line:
        process.wait(10)
        stderr = process.stderr.read().decode() if process.stderr else ""
        raise RuntimeError(f"agent exited with {process.returncode}: {stderr}")
    port = json.loads(line)["listening"]["port"]
    return HttpAgent(process, f"http://127.0.0.1:{port}", token, config_path, token_path)


def _readline_with_timeout(process: subprocess.Popen[bytes], timeout: float) -> bytes:
    result: list[bytes] = []
    assert process.stdout is not None
    stdout = process.stdout
    reader = threading.Thread(target=lambda: result.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        process.kill()
        raise RuntimeError("agent did not report its port in time")
    return result[0]


@contextlib.contextmanager
def http_agent(context: Context, workdir: Path, **kwargs: Any) -> Iterator[HttpAgent]:
    agent = start_http_agent(context, workdir, **kwargs)
    try:
        yield agent
    finally:
        agent.stop()


def comparable(result: Any) -> Any:
    """A result as a plain value, without fields that legitimately differ (timings)."""
    if hasattr(result, "model_dump"):
        data = result.model_dump()
        data.pop("duration_ms", None)
        return data
    return result
