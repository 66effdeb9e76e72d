"""Parts that need neither Docker nor E2B: options, errors, the stdin carrier, sync safety."""

from __future__ import annotations

import io
import os
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import e2b
import pytest
from sandkit_e2b.errors import service_error
from sandkit_e2b.options import E2BOptions
from sandkit_e2b.stream import CommandStream
from sandkit_e2b.sync import apply_archive, build_seed

from sandkit import ErrorCode, SandboxError, Settings
from sandkit.paths import Mount

# -- options ---------------------------------------------------------------------------


def test_defaults_are_safe_and_sdk_backed() -> None:
    options = E2BOptions()
    assert options.sdk_class == "e2b:Sandbox"
    assert options.load_sdk_class() is e2b.Sandbox
    assert options.allow_internet_access is False
    assert options.release == "pause" and options.on_timeout == "pause"


@pytest.mark.parametrize(
    "bad",
    [
        {"owner": "no spaces"},
        {"user": "root; rm"},
        {"metadata": {"sandkit.owner": "x"}},
        {"timeout_s": 60, "maintenance_interval_s": 30},
        {"carrier": "ssh"},
        {"unknown": 1},
    ],
)
def test_bad_options_are_invalid_argument(bad: dict[str, Any]) -> None:
    with pytest.raises(SandboxError) as info:
        E2BOptions.from_settings(Settings(providers={"e2b": bad}))
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_api_key_from_config_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("E2B_API_KEY", "from-env")
    assert E2BOptions().resolved_api_key() == "from-env"
    assert E2BOptions(api_key="from-config").resolved_api_key() == "from-config"  # type: ignore[arg-type]
    assert "from-config" not in repr(E2BOptions(api_key="from-config"))  # type: ignore[arg-type]
    monkeypatch.delenv("E2B_API_KEY")
    assert E2BOptions().resolved_api_key() is None


# -- the service's failures ------------------------------------------------------------------


def _status(exc: Exception, status: int) -> Exception:
    exc.status_code = status  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (e2b.RateLimitException("429: Rate limit exceeded"), ErrorCode.CAPACITY),
        (
            _status(
                e2b.SandboxException(
                    "429: You have reached the maximum number of concurrent E2B sandboxes"
                ),
                429,
            ),
            ErrorCode.CAPACITY,
        ),
        (e2b.ServiceBusyException("503: Service temporarily unavailable"), ErrorCode.CAPACITY),
        (e2b.NotEnoughSpaceException("no space left"), ErrorCode.CAPACITY),
        (e2b.AuthenticationException("401: Unauthorized"), ErrorCode.UNAVAILABLE),
        (e2b.SandboxNotFoundException("Sandbox x not found"), ErrorCode.UNAVAILABLE),
        (e2b.SandboxNotRunningException("was not found"), ErrorCode.UNAVAILABLE),
        (e2b.SandboxUnreachableException("port is not open"), ErrorCode.UNAVAILABLE),
        (e2b.TimeoutException("Request timed out"), ErrorCode.UNAVAILABLE),
        (_status(e2b.SandboxException("404: template 'x' not found"), 404), ErrorCode.UNAVAILABLE),
        (e2b.TemplateException("old envd"), ErrorCode.UNAVAILABLE),
        (ConnectionRefusedError("refused"), ErrorCode.UNAVAILABLE),
        (RuntimeError("a bug"), ErrorCode.INTERNAL),
    ],
)
def test_service_errors_have_stable_codes(exc: Exception, code: ErrorCode) -> None:
    mapped = service_error(exc, "creating")
    assert mapped.code is code
    assert mapped.message.startswith("creating")


def test_sandbox_errors_pass_through() -> None:
    original = SandboxError(ErrorCode.TOO_LARGE, "big")
    assert service_error(original, "x") is original


# -- the stdin/stdout carrier ------------------------------------------------------------------


class FakeHandle:
    """A background command whose output the test feeds (the SDK's CommandHandle surface)."""

    pid = 7

    def __init__(self) -> None:
        self.events: list[tuple[str, str] | None] = []
        self.cond = threading.Condition()

    def emit(self, kind: str, text: str) -> None:
        with self.cond:
            self.events.append((kind, text))
            self.cond.notify_all()

    def end(self) -> None:
        with self.cond:
            self.events.append(None)
            self.cond.notify_all()

    def wait(
        self,
        on_stdout: Callable[[str], None] | None = None,
        on_stderr: Callable[[str], None] | None = None,
        **_: Any,
    ) -> Any:
        while True:
            with self.cond:
                while not self.events:
                    self.cond.wait()
                event = self.events.pop(0)
            if event is None:
                raise e2b.CommandExitException(stderr="", stdout="", exit_code=3, error=None)
            kind, text = event
            (on_stdout if kind == "out" else on_stderr)(text)  # type: ignore[misc]

    def disconnect(self) -> None:
        pass


class FakeCommands:
    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.sent: list[bytes] = []
        self.delay = delay
        self.fail = fail
        self.killed: list[int] = []

    def send_stdin(self, pid: int, data: bytes, request_timeout: float | None = None) -> None:
        time.sleep(self.delay)  # a round trip
        if self.fail:
            raise e2b.SandboxNotRunningException("was not found")
        self.sent.append(data)

    def kill(self, pid: int, request_timeout: float | None = None) -> bool:
        self.killed.append(pid)
        return True


def test_writes_are_coalesced_in_order() -> None:
    commands = FakeCommands(delay=0.05)
    stream = CommandStream(commands, FakeHandle())
    frames = [b"%d\n" % i for i in range(200)]
    for frame in frames:
        stream.write(frame)
    deadline = time.monotonic() + 10
    while b"".join(commands.sent) != b"".join(frames) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert b"".join(commands.sent) == b"".join(frames)
    assert len(commands.sent) < 20  # one round trip carries what queued meanwhile
    stream.close()


def test_output_is_read_as_bytes_and_the_end_explained() -> None:
    handle = FakeHandle()
    stream = CommandStream(FakeCommands(), handle)
    handle.emit("out", '{"id":1}\n{"id"')
    handle.emit("err", "Traceback...\nModuleNotFoundError: No module named 'json'\n")
    handle.emit("out", ":2}\n")
    handle.end()
    data = b""
    while chunk := stream.read(5):
        assert len(chunk) <= 5
        data += chunk
    assert data == b'{"id":1}\n{"id":2}\n'
    assert stream.exit_detail() == "agent exit code 3; ModuleNotFoundError: No module named 'json'"


def test_a_failed_send_ends_the_stream() -> None:
    stream = CommandStream(FakeCommands(fail=True), FakeHandle())
    stream.write(b"request\n")
    assert stream.read() == b""  # the reader sees the end: in-flight requests fail
    with pytest.raises(EOFError):
        stream.write(b"more\n")
    assert "sending to the agent failed" in stream.exit_detail()


def test_close_never_blocks_and_kills_the_agent() -> None:
    commands = FakeCommands()
    stream = CommandStream(commands, FakeHandle())
    started = time.monotonic()
    stream.close()
    assert time.monotonic() - started < 0.5
    assert stream.read() == b""
    deadline = time.monotonic() + 5
    while not commands.killed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert commands.killed == [7]


# -- thread data sync -----------------------------------------------------------------------------


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info


def test_a_hostile_archive_cannot_write_outside_or_plant_devices(tmp_path: Path) -> None:
    data_root = tmp_path / "data"
    workspace = data_root / "users/u/threads/t/user-data/workspace"
    workspace.mkdir(parents=True)
    (workspace / "old.txt").write_text("replaced by the sandbox's copy")
    victim = tmp_path / "victim.txt"
    archive = _tar(
        [
            (_info("mnt/user-data/workspace/ok.txt"), b"fine"),
            (_info("mnt/user-data/workspace/../../../../../../victim.txt"), b"escaped"),
            (_info("/etc/abs.txt"), b"absolute"),
            (_info("mnt/user-data/workspace/out", tarfile.SYMTYPE, str(tmp_path)), None),
            (_info("mnt/user-data/workspace/out/victim.txt"), b"through a link"),
            (_info("mnt/user-data/workspace/dev", tarfile.CHRTYPE), None),
            (_info("mnt/user-data/workspace/hard", tarfile.LNKTYPE, "/etc/passwd"), None),
        ]
    )
    mount = Mount("/mnt/user-data/workspace", str(workspace), False)
    apply_archive([archive[:1000], archive[1000:]], data_root, [mount])
    assert not victim.exists()
    assert sorted(os.listdir(workspace)) == ["ok.txt", "out"]
    assert (workspace / "ok.txt").read_text() == "fine"
    assert (workspace / "out").is_symlink()  # kept as a link, never followed
    assert [p.name for p in data_root.iterdir()] == ["users"]  # no staging left behind


def test_seed_skips_special_files_and_empty_threads(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    mount = Mount("/mnt/user-data/workspace", str(workspace), False)
    assert build_seed([mount]) is None
    os.mkfifo(workspace / "fifo")
    assert build_seed([mount]) is None
    (workspace / "a.txt").write_text("a")
    (workspace / "link").symlink_to("/mnt/user-data/workspace/a.txt")
    seed = build_seed([mount])
    assert seed is not None
    with seed, tarfile.open(fileobj=seed) as tar:
        names = {m.name: m for m in tar.getmembers()}
    assert set(names) == {"mnt/user-data/workspace/a.txt", "mnt/user-data/workspace/link"}
    assert names["mnt/user-data/workspace/link"].linkname == "/mnt/user-data/workspace/a.txt"


# -- the stand-in itself ---------------------------------------------------------------------------


def test_the_stand_in_refuses_calls_the_real_sdk_would_refuse() -> None:
    from e2b_standin import StandinCommands, StandinFiles, StandinSandbox

    with pytest.raises(TypeError):
        StandinSandbox.connect("i123", 60, None, "one too many")
    with pytest.raises(TypeError):
        StandinSandbox.kill()  # the real one needs a sandbox id
    with pytest.raises(TypeError):
        StandinCommands.run(object(), "true", background_mode=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        StandinFiles.write(object(), "/p")  # type: ignore[arg-type]


def test_files_deeper_than_path_max_on_the_host_go_back_and_forth(tmp_path: Path) -> None:
    """A box may create a file 4 KiB below its mount; on the host its path is longer than
    PATH_MAX. Copying it back (release, shutdown) and seeding a new box from it must work,
    or one such file fails every later shutdown of the owner."""
    data_root = tmp_path / "data"
    workspace = data_root / "users/u/threads/t/user-data/workspace"
    workspace.mkdir(parents=True)
    deep = "/".join(["d" * 250] * 16) + "/file.txt"  # 4,025 characters below the mount
    assert len(str(workspace / deep)) > os.pathconf("/", "PC_PATH_MAX")
    archive = _tar(
        [
            (_info("mnt/user-data/workspace/top.txt"), b"top"),
            (_info(f"mnt/user-data/workspace/{deep}"), b"deep down"),
        ]
    )
    mount = Mount("/mnt/user-data/workspace", str(workspace), False)
    apply_archive([archive], data_root, [mount])
    assert (workspace / "top.txt").read_text() == "top"
    seed = build_seed([mount])
    assert seed is not None
    with seed, tarfile.open(fileobj=seed) as tar:
        files = {m.name: tar.extractfile(m) for m in tar.getmembers() if m.isreg()}
        contents = {name: f.read() for name, f in files.items() if f is not None}
    assert contents == {
        "mnt/user-data/workspace/top.txt": b"top",
        f"mnt/user-data/workspace/{deep}": b"deep down",
    }
    assert [p.name for p in data_root.iterdir()] == ["users"]  # the staging went, deep and all
