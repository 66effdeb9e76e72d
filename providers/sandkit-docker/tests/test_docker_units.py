"""Parts that need no engine: options, the container spec, the exec-stream demultiplexer."""

from __future__ import annotations

import ast
import io
import socket
import struct
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandkit_docker.options import DockerOptions
from sandkit_docker.spec import create_kwargs
from sandkit_docker.stream import DockerExecStream

from sandkit import ErrorCode, SandboxError, SandboxKey, Settings
from sandkit.boxkit.http_agent import LAUNCH, agent_files, make_token
from sandkit.paths import ThreadLayout


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", kind, len(payload)) + payload


@pytest.fixture
def pair() -> Iterator[tuple[DockerExecStream, socket.socket]]:
    ours, engine = socket.socketpair()
    stream = DockerExecStream(ours)
    yield stream, engine
    stream.close()
    engine.close()


def test_stdout_is_demultiplexed_and_stderr_kept(
    pair: tuple[DockerExecStream, socket.socket],
) -> None:
    stream, engine = pair
    engine.sendall(frame(1, b"hel") + frame(2, b"oops\n") + frame(1, b"lo\n") + frame(1, b""))
    engine.shutdown(socket.SHUT_WR)
    data = b""
    while chunk := stream.read():
        data += chunk
    assert data == b"hello\n"
    assert stream.stderr_tail() == "oops\n"
    assert stream.at_eof


def test_headers_and_payloads_split_anywhere(
    pair: tuple[DockerExecStream, socket.socket],
) -> None:
    stream, engine = pair
    wire = frame(1, b"a" * 1000) + frame(2, b"e") + frame(1, b"b" * 70000)

    def dribble() -> None:
        for i in range(0, len(wire), 7):
            engine.sendall(wire[i : i + 7])
        engine.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=dribble)
    sender.start()
    data = b""
    while chunk := stream.read(4096):
        assert len(chunk) <= 4096
        data += chunk
    sender.join()
    assert data == b"a" * 1000 + b"b" * 70000


def test_write_reaches_the_peer_and_close_half_closes(
    pair: tuple[DockerExecStream, socket.socket],
) -> None:
    stream, engine = pair
    stream.write(b"request\n")
    assert engine.recv(100) == b"request\n"
    stream.close()
    assert engine.recv(100) == b""  # the engine sees EOF: the agent's stdin closes
    with pytest.raises(EOFError):
        stream.write(b"more")
    assert stream.read() == b""


def test_close_unblocks_a_waiting_reader(pair: tuple[DockerExecStream, socket.socket]) -> None:
    stream, _engine = pair
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(stream.read()))
    reader.start()
    stream.close()
    reader.join(5)
    assert got == [b""]


def test_an_ended_exec_wakes_a_writer_the_engine_no_longer_reads(
    pair: tuple[DockerExecStream, socket.socket],
) -> None:
    """The engine keeps the connection of a dead agent open, unread (deaths.py): after
    the grace the stream ends, the blocked sender fails and the reader sees the end."""
    stream, engine = pair
    engine.sendall(frame(1, b"in flight\n"))
    outcome: list[BaseException | None] = []

    def send() -> None:
        try:
            stream.write(b"x" * (64 << 20))  # far more than the socket buffers
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc)

    writer = threading.Thread(target=send, daemon=True)
    writer.start()
    time.sleep(0.2)
    assert writer.is_alive()  # blocked: nobody reads
    stream.end_unless_ended(0.1)
    writer.join(10)
    assert not writer.is_alive() and isinstance(outcome[0], OSError)
    data = b""
    while chunk := stream.read():
        data += chunk
    assert stream.at_eof


def test_engine_events_are_routed_by_kind() -> None:
    from sandkit_docker.deaths import DeathWatch

    died: list[str] = []
    ended: list[tuple[str, str]] = []
    watch = DeathWatch(
        lambda: None, "sandkit.owner=x", died.append, lambda c, e: ended.append((c, e))
    )  # type: ignore[arg-type,return-value]
    watch._dispatch({"id": "c1", "Action": "die", "Actor": {"ID": "c1"}})
    watch._dispatch({"id": "c2", "Action": "exec_die", "Actor": {"Attributes": {"execID": "e2"}}})
    for junk in (None, "x", {}, {"id": ""}, {"id": "c3", "Action": "exec_die"}):
        watch._dispatch(junk)
    assert died == ["c1"] and ended == [("c2", "e2")]


def test_stderr_tail_is_bounded(pair: tuple[DockerExecStream, socket.socket]) -> None:
    stream, engine = pair
    sender = threading.Thread(
        target=lambda: (
            engine.sendall(frame(2, b"x" * 200_000) + frame(2, b"END")),
            engine.shutdown(socket.SHUT_WR),
        )
    )
    sender.start()
    assert stream.read() == b""
    sender.join()
    tail = stream.stderr_tail()
    assert tail.endswith("END") and len(tail) <= 64 * 1024


# -- options -------------------------------------------------------------------------


def test_defaults_are_hardened() -> None:
    options = DockerOptions()
    assert options.image == "python:3.12-slim"
    assert (options.uid, options.gid) == (1000, 1000)
    assert options.network_mode == "none"
    assert options.read_only_rootfs and options.init
    assert options.cap_drop == ["ALL"]
    assert options.security_opt == ["no-new-privileges"]
    assert options.pids_limit > 0 and options.cpus > 0


@pytest.mark.parametrize(
    "options",
    [
        {"user": "0:0"},
        {"user": "root"},
        {"user": "1000"},
        {"owner": "has space"},
        {"owner": "-leading-dash"},
        {"no_such_option": 1},
        {"pull": "sometimes"},
        {"command": []},
        {"carrier": "grpc"},
        {"carrier": "http", "network_mode": "host"},
        {"carrier": "http", "network_mode": "container:abc"},
        {"carrier": "http", "http_port": 80},
        # An interface for the agent is a route around the proxy (issue 32, item 5).
        {"carrier": "http", "egress": {"policy": {"mode": "allow", "allow": ["pypi.org"]}}},
    ],
    ids=repr,
)
def test_bad_options_are_invalid_argument(options: dict[str, object], tmp_path: Path) -> None:
    settings = Settings(data_root=tmp_path, providers={"docker": options})
    with pytest.raises(SandboxError) as info:
        DockerOptions.from_settings(settings)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_root_only_when_explicitly_allowed() -> None:
    assert DockerOptions(user="0:0", allow_root=True).uid == 0


def test_spec_mounts_thread_dirs_at_the_virtual_paths(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    settings = Settings(
        data_root=tmp_path / "data",
        skills_dir=skills,
        mounts=[{"virtual": "/data/ref", "host": tmp_path / "ref", "read_only": False}],
    )
    key = SandboxKey("u", "t")
    spec = create_kwargs(DockerOptions(owner="prod"), ThreadLayout.for_key(settings, key), "d1")
    mounts = {m["Target"]: (m["Source"], m["ReadOnly"]) for m in spec["mounts"]}
    user_data = tmp_path / "data/users/u/threads/t/user-data"
    assert mounts["/mnt/user-data/workspace"] == (str(user_data / "workspace"), False)
    assert mounts["/mnt/user-data/outputs"] == (str(user_data / "outputs"), False)
    assert mounts["/mnt/user-data/uploads"] == (str(user_data / "uploads"), True)
    assert mounts["/mnt/skills"] == (str(skills), True)
    assert mounts["/data/ref"] == (str(tmp_path / "ref"), False)
    assert spec["name"] == f"prod-{key.sandbox_id}"
    assert spec["labels"]["sandkit.owner"] == "prod"


def test_spec_hash_changes_with_the_settings(tmp_path: Path) -> None:
    layout = ThreadLayout.for_key(Settings(data_root=tmp_path), SandboxKey("u", "t"))
    a = create_kwargs(DockerOptions(), layout, "d1")["labels"]["sandkit.spec"]
    b = create_kwargs(DockerOptions(pids_limit=99), layout, "d1")["labels"]["sandkit.spec"]
    c = create_kwargs(DockerOptions(), layout, "d2")["labels"]["sandkit.spec"]
    assert a != b
    # The payload is a read-only bind mount of its host copy: another sandkit version
    # means another mount, so its boxes are recreated (their data is kept).
    assert a != c


# -- carrier http ------------------------------------------------------------------------


def test_carrier_http_gets_an_internal_network_instead_of_none(tmp_path: Path) -> None:
    layout = ThreadLayout.for_key(Settings(data_root=tmp_path), SandboxKey("u", "t"))
    assert DockerOptions().carrier == "stdio"
    assert create_kwargs(DockerOptions(), layout, "d")["network_mode"] == "none"
    http = DockerOptions(owner="prod", carrier="http")
    assert create_kwargs(http, layout, "d")["network_mode"] == "prod-internal"
    bridged = DockerOptions(carrier="http", network_mode="bridge")
    assert create_kwargs(bridged, layout, "d")["network_mode"] == "bridge"


def test_agent_files_are_private_to_the_box_user_in_an_unlistable_dir() -> None:
    files = agent_files({"k": "v"}, "t" * 40, 1000, 1001)
    with tarfile.open(fileobj=io.BytesIO(files.archive)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        run = members.pop("run")
        assert run.isdir() and (run.mode, run.uid) == (0o1733, 0)
        assert {f"/opt/sandkit-run/{name}" for name in members} == {
            files.config_path,
            files.token_path,
        }
        for member in members.values():
            assert (member.mode, member.uid, member.gid) == (0o400, 1000, 1001)
        token = tar.extractfile(members[files.token_path.removeprefix("/opt/sandkit-run/")])
        assert token is not None and token.read() == b"t" * 40
    # Names are random, so a command in the box cannot guess the next ones.
    assert agent_files({}, "t" * 40, 1000, 1000).token_path != files.token_path


def test_tokens_are_random_or_derived_per_container() -> None:
    assert make_token("c1", None) != make_token("c1", None)
    assert len(make_token("c1", None)) >= 32
    assert make_token("c1", "s") == make_token("c1", "s") != make_token("c2", "s")
    assert make_token("c1", "s") != make_token("c1", "other")


def test_the_launcher_runs_on_python_3_9() -> None:
    ast.parse(LAUNCH, feature_version=(3, 9))


@pytest.mark.parametrize(
    ("args", "value"),
    [
        ([], "none"),
        (["--network=sandbox"], "none"),
        (["--network=sandbox", "--host-uds=open"], "open"),
        (["--host-uds=create", "--host-uds=all"], "all"),
        (["--fsgofer-host-uds"], "all"),
        (["--fsgofer-host-uds=false"], "none"),
    ],
)
def test_the_host_uds_flag_of_a_registered_runsc(args: list[str], value: str) -> None:
    from sandkit_docker.network import _host_uds

    assert _host_uds(args) == value
