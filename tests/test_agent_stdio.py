"""The agent's stdio carrier spoken to raw: what any client may send, and what comes back."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit.agent import protocol as p
from sandkit.agent.server import AgentCore
from sandkit.runtime.limits import MIB
from sandkit.transports.local_process import SubprocessStream, agent_command

from .remote_support import config_of, make_context, make_mapping


class Raw:
    """A bare connection to `agent.pyz --stdio`."""

    def __init__(self) -> None:
        self.stream = SubprocessStream(agent_command())
        self.reader = p.FrameReader(self.stream.read, 64 * MIB)

    def send(self, data: bytes) -> None:
        self.stream.write(data)

    def request(self, request_id: Any, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(json.dumps(message).encode() + b"\n")

    def receive(self) -> dict[str, Any]:
        frame = self.reader.next()
        assert isinstance(frame, bytes), frame
        message: dict[str, Any] = json.loads(frame)
        return message

    def ask(self, request_id: Any, method: str, params: Any = None) -> dict[str, Any]:
        self.request(request_id, method, params)
        return self.receive()


@pytest.fixture
def raw() -> Iterator[Raw]:
    connection = Raw()
    try:
        yield connection
    finally:
        connection.stream.close()


@pytest.fixture
def config(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "workspace").mkdir(exist_ok=True)
    (tmp_path / "workspace" / "a.txt").write_text("alpha\n")
    return config_of(make_context(make_mapping(tmp_path)))


def code_of(message: dict[str, Any]) -> tuple[int, str]:
    return message["error"]["code"], message["error"]["data"]["code"]


def test_garbage_gets_errors_and_the_connection_survives(raw: Raw, config: Any) -> None:
    raw.send(b"{this is not json\n")
    reply = raw.receive()
    assert reply["id"] is None and code_of(reply) == (-32700, "INVALID_ARGUMENT")
    raw.send(b'{"jsonrpc":"2.0","id":5,"method":"ping"\n')  # truncated, id recoverable
    assert raw.receive()["id"] == 5
    raw.send(b"[1, 2]\n")
    assert code_of(raw.receive()) == (-32600, "INVALID_ARGUMENT")
    raw.send(b'"just a string"\n')
    assert code_of(raw.receive()) == (-32600, "INVALID_ARGUMENT")
    raw.send(b'{"jsonrpc":"1.0","id":6,"method":"ping"}\n')
    assert code_of(raw.receive()) == (-32600, "INVALID_ARGUMENT")
    raw.send(b'{"jsonrpc":"2.0","id":true,"method":"ping"}\n')
    assert code_of(raw.receive()) == (-32600, "INVALID_ARGUMENT")
    raw.send(b"\xff\xfe\n\n   \n")
    assert code_of(raw.receive()) == (-32700, "INVALID_ARGUMENT")
    assert raw.ask(7, "ping") == {"jsonrpc": "2.0", "id": 7, "result": {"pong": True}}
    assert "result" in raw.ask(8, "initialize", config)
    assert raw.ask("s", "read_file", {"path": "a.txt"})["result"]["content"] == "alpha\n"


def test_operations_before_initialize_are_refused(raw: Raw, config: Any) -> None:
    reply = raw.ask(1, "read_file", {"path": "a.txt"})
    assert code_of(reply) == (-32002, "INVALID_ARGUMENT")
    info = raw.ask(2, "info")["result"]
    assert info["initialized"] is False
    assert raw.ask(3, "initialize", config)["result"]["protocol_version"] == 1
    assert code_of(raw.ask(4, "initialize", config)) == (-32000, "INVALID_ARGUMENT")
    assert raw.ask(5, "info")["result"]["initialized"] is True


def test_method_and_params_errors(raw: Raw, config: Any) -> None:
    raw.ask(1, "initialize", config)
    assert code_of(raw.ask(2, "frobnicate", {})) == (-32601, "INVALID_ARGUMENT")
    assert code_of(raw.ask(3, "read_file", [1, 2])) == (-32602, "INVALID_ARGUMENT")
    assert code_of(raw.ask(4, "read_file", {"path": "nope"})) == (-32000, "NOT_FOUND")
    assert code_of(raw.ask(5, "write_bytes", {"path": "x", "data": {"$b64": "!!"}})) == (
        -32000,
        "INVALID_ARGUMENT",
    )


def test_bad_initialize_config_is_invalid_argument(raw: Raw) -> None:
    assert code_of(raw.ask(1, "initialize", {"mapping": 3})) == (-32000, "INVALID_ARGUMENT")
    assert raw.ask(2, "info")["result"]["initialized"] is False


def test_an_oversized_frame_is_refused_with_its_id(raw: Raw, config: Any) -> None:
    # Before initialize the limit is 4 MiB.
    big = b'{"jsonrpc":"2.0","id":42,"method":"write_file","params":{"content":"'
    raw.send(big + b"x" * (5 * MIB) + b'"}}\n')
    reply = raw.receive()
    assert reply["id"] == 42
    assert code_of(reply) == (-32600, "TOO_LARGE")
    assert raw.ask(43, "ping")["result"] == {"pong": True}


def test_notifications_run_nothing_and_get_no_answer(raw: Raw, config: Any, tmp_path: Path) -> None:
    raw.ask(1, "initialize", config)
    note = {"jsonrpc": "2.0", "method": "write_file", "params": {"path": "n.txt", "content": "x"}}
    raw.send(json.dumps(note).encode() + b"\n")
    assert raw.ask(2, "ping")["id"] == 2  # the next frame is the ping's answer
    assert not (tmp_path / "workspace" / "n.txt").exists()


class ExplodingRuntime:
    """Stands in for a runtime bug: raises what no operation should."""

    def __init__(self, _context: Any) -> None:
        pass

    def call(self, method: str, params: dict[str, Any]) -> Any:
        if method == "read_file":
            raise KeyError("/srv/host-secret/data/users/u/threads/t")
        return {"not json": object()}


def test_unexpected_failures_are_masked_internal_errors(config: Any) -> None:
    core = AgentCore(
        p.context_from_config(config),
        runtime_factory=ExplodingRuntime,
        operations=frozenset({"read_file", "list_dir"}),
    )
    for request_id, method in ((1, "read_file"), (2, "list_dir")):
        request = core.parse({"jsonrpc": "2.0", "id": request_id, "method": method})
        response = core.handle(request)
        assert response is not None
        reply = json.loads(core.encode(request, response))
        assert reply["id"] == request_id
        assert code_of(reply) == (-32603, "INTERNAL")
        message = reply["error"]["data"]["message"]
        assert method in message
        assert "host-secret" not in message and "Traceback" not in message


class HeldRuntime:
    """Every call waits until the test lets it go."""

    def __init__(self, _context: Any) -> None:
        self.started = threading.Event()
        self.go = threading.Event()

    def call(self, method: str, params: dict[str, Any]) -> Any:
        self.started.set()
        self.go.wait(30)
        return {}


def test_the_warm_up_steps_aside_while_an_operation_runs(config: Any) -> None:
    """The agent's warm-up thread waits for quiet between its steps (wait_quiet): an
    operation a caller waits on counts, a command or a long poll does not (those wait on
    a process, and would hold the warm-up back for minutes)."""
    runtimes: list[HeldRuntime] = []

    def factory(context: Any) -> HeldRuntime:
        runtimes.append(HeldRuntime(context))
        return runtimes[-1]

    core = AgentCore(p.context_from_config(config), runtime_factory=factory)
    (runtime,) = runtimes
    for method, counted in (("read_file", True), ("execute", False)):
        runtime.started.clear()
        runtime.go.clear()
        request = core.parse({"jsonrpc": "2.0", "id": 1, "method": method})
        worker = threading.Thread(target=core.handle, args=(request,))
        worker.start()
        assert runtime.started.wait(30)
        assert core.activity.wait_quiet(timeout=0.2) is not counted, method
        runtime.go.set()
        worker.join(30)
        assert core.activity.wait_quiet(timeout=30), method


def test_commands_cannot_read_the_protocol_stream(raw: Raw, config: Any) -> None:
    config["execute_enabled"] = True
    raw.ask(1, "initialize", config)
    # fd 0 of a command is /dev/null, not the agent's request pipe: `cat`
    # ends at once and the next request still reaches the agent.
    reply = raw.ask(2, "execute", {"command": "cat /dev/stdin; echo done", "timeout": 10})
    assert reply["result"]["stdout"] == "done\n"
    reply = raw.ask(3, "execute", {"command": "echo to-fd1 >&1; echo to-fd2 >&2"})
    assert reply["result"]["stdout"] == "to-fd1\n"
    assert raw.ask(4, "ping")["result"] == {"pong": True}


def test_end_of_input_ends_the_agent(raw: Raw, config: Any) -> None:
    raw.ask(1, "initialize", config)
    raw.stream.process.stdin.close()  # type: ignore[union-attr]
    assert raw.stream.process.wait(10) == 0


def test_an_agent_ended_mid_warm_up_stops_it_first(config: Any, tmp_path: Path) -> None:
    """A channel closed right after `initialize` (a probe, a client that changed its mind)
    ends the agent while its warm-up runs. The step in progress is finished and the rest
    skipped: cut off by the interpreter's shutdown instead, the warm-up left its grep
    sample in the box's temp directory, and one cut off mid-import crashed the agent
    (SIGSEGV in sem_wait, about 1 in 1,000 such channels)."""
    import os
    import time

    temp = tmp_path / "tmp"
    temp.mkdir()
    started = tmp_path / "rg-started"
    slow_rg = tmp_path / "slow-rg"  # the warm-up's grep is in ripgrep for a second
    real_rg = config["rg_path"]
    slow_rg.write_text(f"#!/bin/sh\ntouch '{started}'\nsleep 1\nexec '{real_rg}' \"$@\"\n")
    slow_rg.chmod(0o755)
    config["rg_path"] = str(slow_rg)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": str(temp)}
    stream = SubprocessStream(agent_command(), env=env)
    try:
        reader = p.FrameReader(stream.read, 64 * MIB)
        stream.write(p.frame(p.request(1, "initialize", config)))
        assert b'"result"' in (reader.next() or b"")
        deadline = time.monotonic() + 120
        while not started.exists():
            assert time.monotonic() < deadline, "the warm-up never ran its grep"
            time.sleep(0.01)
        assert [name for name in os.listdir(temp) if name.startswith("sandkit-warm-")]
        stream.process.stdin.close()  # type: ignore[union-attr]
        assert stream.process.wait(60) == 0, stream.stderr_tail()
    finally:
        stream.close()
    assert os.listdir(temp) == []


FIRST_CALLS = """
import json, sys, threading
sys.path.insert(0, sys.argv[1])
from sandkit.agent import protocol as p
from sandkit.agent.server import AgentCore
from sandkit.agent.stdio_carrier import StdioServer

core = AgentCore(p.context_from_config(json.loads(sys.argv[2])))
for thread in threading.enumerate():
    if thread.name == "sandkit-agent-warm":
        thread.join(120)
assert sys.getswitchinterval() == 0.005, "the warm-up gives the interpreter's own back"
before = set(sys.modules)
server = StdioServer(core, None, None)  # its worker pools, as the first operation makes them
for slow in (True, False):
    ran = threading.Event()
    server._pool(slow).submit(ran.set)
    assert ran.wait(60)
calls = [
    ("execute", {"command": "echo hi"}),
    ("read_file", {"path": "a.txt"}),
    ("write_file", {"path": "b.txt", "content": "beta"}),
    ("edit_file", {"path": "b.txt", "old": "beta", "new": "gamma"}),
    ("list_dir", {"path": "."}),
    ("glob", {"pattern": "*.txt"}),
    ("grep", {"pattern": "alpha"}),
]
for method, params in calls:
    request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer = core.handle(core.parse(request))
    assert "result" in answer, answer
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_after_the_warm_up_a_first_operation_loads_no_module(config: Any) -> None:
    """Every module a box's first operations need is loaded by the agent's warm-up, also
    the carrier's worker pools: a new thread's first command does not pay for imports."""
    import subprocess
    import sys

    from sandkit.agent.build import agent_zipapp

    config["execute_enabled"] = True
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", FIRST_CALLS, str(agent_zipapp()), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
