"""The local provider: host layout, execute switch, path mapping on the host, lifecycle."""

from __future__ import annotations

import concurrent.futures
import importlib.metadata
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from sandkit import ErrorCode, SandboxError, SandboxKey, Settings
from sandkit.config import MountSpec
from sandkit.local import LocalProvider, LocalSandbox
from sandkit.provider import available_providers, create_provider

MakeLocal = Callable[..., LocalProvider]
WS = "/mnt/user-data/workspace"


def user_data(data_root: Path, user: str, thread: str) -> Path:
    return data_root / "users" / user / "threads" / thread / "user-data"


def code(call: Callable[[], object]) -> ErrorCode:
    with pytest.raises(SandboxError) as info:
        call()
    return info.value.code


def test_acquire_creates_the_host_layout(make_local: MakeLocal, data_root: Path) -> None:
    provider = make_local()
    base = user_data(data_root, "alice", "t1")
    assert not base.exists()
    provider.acquire(SandboxKey("alice", "t1"))
    assert sorted(p.name for p in base.iterdir()) == ["outputs", "uploads", "workspace"]
    assert all((base / name).is_dir() for name in ("workspace", "uploads", "outputs"))


def test_files_land_in_the_thread_directories(make_local: MakeLocal, data_root: Path) -> None:
    box = make_local().acquire(SandboxKey("alice", "t1"))
    base = user_data(data_root, "alice", "t1")
    box.write_file("notes/a.txt", "ws")
    box.write_file("/mnt/user-data/outputs/report.md", "out")
    assert (base / "workspace" / "notes" / "a.txt").read_text() == "ws"
    assert (base / "outputs" / "report.md").read_text() == "out"
    (base / "uploads" / "in.csv").write_text("a,b\n")
    assert box.read_file("/mnt/user-data/uploads/in.csv").content == "a,b\n"
    assert code(lambda: box.write_file("/mnt/user-data/uploads/in.csv", "x")) is (
        ErrorCode.READ_ONLY
    )


def test_uploads_can_be_made_writable(make_local: MakeLocal, data_root: Path) -> None:
    box = make_local(uploads_read_only=False).acquire(SandboxKey("alice", "t1"))
    box.write_file("/mnt/user-data/uploads/x.txt", "x")
    assert (user_data(data_root, "alice", "t1") / "uploads" / "x.txt").read_text() == "x"


def test_execute_is_disabled_by_default(make_local: MakeLocal, data_root: Path) -> None:
    box = make_local().acquire(SandboxKey("alice", "t1"))
    assert code(lambda: box.execute(f"touch {WS}/ran")) is ErrorCode.EXECUTE_DISABLED
    assert not (user_data(data_root, "alice", "t1") / "workspace" / "ran").exists()
    # Everything else still works.
    box.write_file("a.txt", "a")
    assert box.read_file("a.txt").content == "a"


def test_virtual_paths_in_commands_reach_the_host_dirs(
    make_local: MakeLocal, data_root: Path
) -> None:
    box = make_local(execute_enabled=True).acquire(SandboxKey("alice", "t1"))
    base = user_data(data_root, "alice", "t1")
    box.write_file("in.txt", "payload\n")
    result = box.execute(
        f"cat {WS}/in.txt > /mnt/user-data/outputs/copy.txt && cd {WS} && pwd && ls"
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"{WS}\nin.txt\n"
    assert (base / "outputs" / "copy.txt").read_text() == "payload\n"


def test_command_output_is_masked_back(make_local: MakeLocal, data_root: Path) -> None:
    box = make_local(execute_enabled=True).acquire(SandboxKey("alice", "t1"))
    base = user_data(data_root, "alice", "t1")
    result = box.execute(
        f"echo {base}/workspace/x; echo {base}/outputs; echo {data_root}/users; pwd -P; "
        f"echo {data_root}/users >&2"
    )
    assert result.stdout.splitlines() == [
        f"{WS}/x",
        "/mnt/user-data/outputs",
        "[hidden]/users",
        WS,
    ]
    assert result.stderr == "[hidden]/users\n"
    assert str(data_root) not in result.stdout + result.stderr


def test_a_symlinked_data_root_is_masked_in_both_spellings(tmp_path: Path) -> None:
    real = tmp_path / "real-data"
    real.mkdir()
    alias = tmp_path / "alias-data"
    alias.symlink_to(real)
    provider = LocalProvider(Settings(data_root=alias, execute_enabled=True))
    try:
        box = provider.acquire(SandboxKey("alice", "t1"))
        result = box.execute("pwd; pwd -P; cd .. && pwd -P")
        text = result.stdout + result.stderr
        assert str(real) not in text and str(alias) not in text
        assert result.stdout.splitlines()[:2] == [WS, WS]
    finally:
        provider.shutdown()


def test_scrubbed_and_unrelated_host_variables_do_not_reach_commands(
    make_local: MakeLocal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_host_token")
    monkeypatch.setenv("SOME_HOST_SETTING", "host-only")
    box = make_local(execute_enabled=True).acquire(SandboxKey("alice", "t1"))
    shown = box.execute('echo "${GITHUB_TOKEN:-unset} ${SOME_HOST_SETTING:-unset}"').stdout
    assert shown == "unset unset\n"
    explicit = box.execute('echo "$GITHUB_TOKEN"', env={"GITHUB_TOKEN": "given"}).stdout
    assert explicit == "given\n"


def test_secrets_are_redacted(make_local: MakeLocal) -> None:
    box = make_local(execute_enabled=True, secrets=["s3cr3t-value"]).acquire(
        SandboxKey("alice", "t1")
    )
    result = box.execute("echo s3cr3t-value; echo s3cr3t-value >&2")
    assert result.stdout == result.stderr == "[REDACTED]\n"


def test_release_stales_the_handle_and_keeps_the_files(
    make_local: MakeLocal, data_root: Path
) -> None:
    provider = make_local()
    key = SandboxKey("alice", "t1")
    box = provider.acquire(key)
    box.write_file("keep.txt", "kept")
    provider.release(key)
    assert provider.get(key) is None
    assert code(lambda: box.read_file("keep.txt")) is ErrorCode.UNAVAILABLE
    assert code(lambda: box.write_file("x.txt", "x")) is ErrorCode.UNAVAILABLE
    assert (user_data(data_root, "alice", "t1") / "workspace" / "keep.txt").exists()
    again = provider.acquire(key)
    assert again is not box
    assert again.read_file("keep.txt").content == "kept"


def test_destroy_and_shutdown_keep_the_files(make_local: MakeLocal, data_root: Path) -> None:
    provider = make_local()
    a, b = SandboxKey("alice", "t1"), SandboxKey("bob", "t1")
    provider.acquire(a).write_file("a.txt", "a")
    box_b = provider.acquire(b)
    box_b.write_file("b.txt", "b")
    provider.destroy(a)
    assert provider.get(a) is None
    provider.shutdown()
    assert provider.get(b) is None
    assert code(lambda: box_b.list_dir()) is ErrorCode.UNAVAILABLE
    assert (user_data(data_root, "alice", "t1") / "workspace" / "a.txt").read_text() == "a"
    assert (user_data(data_root, "bob", "t1") / "workspace" / "b.txt").read_text() == "b"


def test_same_thread_id_for_two_users_never_shares(make_local: MakeLocal, data_root: Path) -> None:
    provider = make_local(execute_enabled=True)
    alice = provider.acquire(SandboxKey("alice", "shared"))
    bob = provider.acquire(SandboxKey("bob", "shared"))
    assert alice.sandbox_id != bob.sandbox_id
    alice.write_file("private.txt", "alice")
    assert code(lambda: bob.read_file("private.txt")) is ErrorCode.NOT_FOUND
    assert bob.list_dir().entries == []
    assert user_data(data_root, "alice", "shared") != user_data(data_root, "bob", "shared")
    # Even knowing the host path, bob's jail does not reach alice's files.
    alice_file = user_data(data_root, "alice", "shared") / "workspace" / "private.txt"
    bob.execute(f"ln -s {alice_file} {WS}/peek")
    assert code(lambda: bob.read_file("peek")) is ErrorCode.ACCESS_DENIED
    assert code(lambda: bob.read_file(str(alice_file))) is ErrorCode.ACCESS_DENIED


def test_acquire_is_idempotent_under_20_threads(make_local: MakeLocal, data_root: Path) -> None:
    provider = make_local()
    key = SandboxKey("alice", "busy")
    barrier = threading.Barrier(20)

    def acquire(_: int) -> LocalSandbox:
        barrier.wait()
        return provider.acquire(key)

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        boxes = list(pool.map(acquire, range(20)))
    assert all(box is boxes[0] for box in boxes)
    assert provider.get(key) is boxes[0]
    assert (user_data(data_root, "alice", "busy") / "workspace").is_dir()


def test_many_keys_in_parallel(make_local: MakeLocal) -> None:
    provider = make_local()

    def work(i: int) -> str:
        box = provider.acquire(SandboxKey(f"user{i % 4}", f"thread{i}"))
        box.write_file("id.txt", str(i))
        return box.read_file("id.txt").content

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        assert list(pool.map(work, range(40))) == [str(i) for i in range(40)]


def test_skills_mount_is_read_only_and_shared(make_local: MakeLocal, tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    (skills / "pdf").mkdir(parents=True)
    (skills / "pdf" / "SKILL.md").write_text("# PDF skill\nuse pypdf\n")
    provider = make_local(skills_dir=skills, execute_enabled=True)
    one = provider.acquire(SandboxKey("alice", "t1"))
    two = provider.acquire(SandboxKey("bob", "t9"))
    for box in (one, two):
        assert box.read_file("/mnt/skills/pdf/SKILL.md").total_lines == 2
        assert [e.path for e in box.list_dir("/mnt/skills").entries] == [
            "/mnt/skills/pdf",
            "/mnt/skills/pdf/SKILL.md",
        ]
        assert box.execute("cat /mnt/skills/pdf/SKILL.md").stdout.startswith("# PDF skill")
    assert code(lambda: one.write_file("/mnt/skills/pdf/SKILL.md", "x")) is ErrorCode.READ_ONLY
    assert code(lambda: one.write_file("/mnt/skills/new.md", "x")) is ErrorCode.READ_ONLY
    assert code(lambda: one.edit_file("/mnt/skills/pdf/SKILL.md", "pypdf", "x")) is (
        ErrorCode.READ_ONLY
    )
    assert (skills / "pdf" / "SKILL.md").read_text() == "# PDF skill\nuse pypdf\n"


def test_without_skills_the_prefix_is_unmapped(make_local: MakeLocal) -> None:
    box = make_local().acquire(SandboxKey("alice", "t1"))
    assert code(lambda: box.list_dir("/mnt/skills")) is ErrorCode.ACCESS_DENIED


def test_custom_mounts(make_local: MakeLocal, tmp_path: Path) -> None:
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    (datasets / "iris.csv").write_text("a,b\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    provider = make_local(
        execute_enabled=True,
        mounts=[
            MountSpec(virtual="/mnt/datasets", host=datasets),
            MountSpec(virtual="/scratch", host=scratch, read_only=False),
        ],
    )
    box = provider.acquire(SandboxKey("alice", "t1"))
    assert box.read_file("/mnt/datasets/iris.csv").content == "a,b\n"
    assert code(lambda: box.write_file("/mnt/datasets/new.csv", "x")) is ErrorCode.READ_ONLY
    box.write_file("/scratch/out/result.txt", "ok")
    assert (scratch / "out" / "result.txt").read_text() == "ok"
    assert box.execute("cat /scratch/out/result.txt; pwd", cwd="/scratch").stdout == (
        "ok/scratch\n"
    )
    assert box.glob("**/*", path="/scratch").paths == ["/scratch/out/result.txt"]
    assert code(lambda: box.read_file("/scratchy/x")) is ErrorCode.ACCESS_DENIED
    # Masked like the thread's own mounts.
    assert str(tmp_path) not in box.execute("pwd -P; ls -la /scratch", cwd="/scratch").stdout


@pytest.mark.parametrize(
    "virtual",
    [
        "/mnt/user-data",
        "/mnt/user-data/extra",
        "/mnt/user-data/workspace",
        "/mnt",
        "/mnt/skills",
        "/mnt/skills/more",
        "/",
        "relative/path",
        "",
        "/mnt/user-data/../skills/x",
    ],
)
def test_custom_mounts_may_not_overlap_reserved_prefixes(tmp_path: Path, virtual: str) -> None:
    with pytest.raises(ValidationError):
        Settings(data_root=tmp_path, mounts=[{"virtual": virtual, "host": str(tmp_path)}])


def test_custom_mounts_may_not_overlap_each_other(tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        Settings(
            data_root=tmp_path,
            mounts=[
                {"virtual": "/data", "host": str(tmp_path / "a")},
                {"virtual": "/data/inner", "host": str(tmp_path / "b")},
            ],
        )


@pytest.mark.parametrize("virtual", ["/mnt/user-data2", "/mnt/other", "/data", "/opt/ref"])
def test_custom_mounts_next_to_reserved_prefixes_are_fine(tmp_path: Path, virtual: str) -> None:
    settings = Settings(data_root=tmp_path, mounts=[{"virtual": virtual, "host": str(tmp_path)}])
    assert settings.mounts[0].virtual == virtual
    assert settings.mounts[0].read_only is True


def test_reap_idle(make_local: MakeLocal) -> None:
    provider = make_local()
    old, fresh = SandboxKey("alice", "old"), SandboxKey("alice", "fresh")
    stale_box = provider.acquire(old)
    provider.acquire(fresh)
    assert provider.reap_idle(3600) == []
    time.sleep(1.5)
    provider.acquire(fresh).write_file("touch.txt", "x")  # use refreshes the clock
    assert provider.reap_idle(1.0) == [old]
    assert provider.get(old) is None
    assert provider.get(fresh) is not None
    assert code(lambda: stale_box.list_dir()) is ErrorCode.UNAVAILABLE


def test_local_provider_is_registered() -> None:
    try:
        importlib.metadata.distribution("sandkit")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("sandkit is not installed (entry points need an installed distribution)")
    assert "local" in available_providers()
    provider = create_provider("local", Settings(data_root="/nonexistent-unused"))
    assert isinstance(provider, LocalProvider)
    with pytest.raises(SandboxError) as info:
        create_provider("no-such-provider")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_a_host_with_descriptors_above_1023_still_greps_and_executes(
    make_local: MakeLocal,
) -> None:
    """The local provider runs in the host's process, whose descriptors a server may have
    numbered past select()'s 1023: a command's or ripgrep's pipes get such numbers then."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"the hard limit on open files ({hard}) is below {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    held: list[int] = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        sandbox = make_local(execute_enabled=True).acquire(SandboxKey("u", "fds"))
        sandbox.write_file(f"{WS}/a.txt", "needle\n")
        assert sandbox.grep("needle").matches[0].path == f"{WS}/a.txt"
        # The second and later run in a shell started ahead (readyshell.py), handed over
        # through pipes with such numbers too.
        for word in ("one", "two", "three"):
            assert sandbox.execute(f"echo {word}").stdout == f"{word}\n"
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
