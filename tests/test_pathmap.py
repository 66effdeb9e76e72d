"""PathMapping: the jail (resolve) and masking, as units on a real directory tree."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandkit import ErrorCode, SandboxError
from sandkit.runtime.pathmap import (
    HIDDEN_ROOT_MARKER,
    OUTPUTS,
    UPLOADS,
    WORKSPACE,
    Mount,
    PathMapping,
    is_within,
)


def build(root: Path) -> PathMapping:
    """A thread layout under `root`, plus a nested custom mount pair."""
    user_data = root / "data" / "users" / "u" / "threads" / "t" / "user-data"
    for name in ("workspace", "uploads", "outputs"):
        (user_data / name).mkdir(parents=True, exist_ok=True)
    (root / "ref" / "inner").mkdir(parents=True, exist_ok=True)
    (root / "inner-real").mkdir(exist_ok=True)
    return PathMapping(
        [
            Mount(WORKSPACE, str(user_data / "workspace")),
            Mount(UPLOADS, str(user_data / "uploads"), read_only=True),
            Mount(OUTPUTS, str(user_data / "outputs")),
            Mount("/ref", str(root / "ref"), read_only=True),
            Mount("/ref/inner", str(root / "inner-real")),
        ],
        WORKSPACE,
        hidden_roots=(str(root / "data"),),
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def mapping(root: Path) -> PathMapping:
    return build(root)


@pytest.fixture
def ws(root: Path) -> Path:
    return root / "data" / "users" / "u" / "threads" / "t" / "user-data" / "workspace"


def code_of(mapping: PathMapping, path: object, for_write: bool = False) -> ErrorCode:
    with pytest.raises(SandboxError) as info:
        mapping.resolve(path, for_write=for_write)
    return info.value.code


# -- resolution -------------------------------------------------------------------


def test_relative_paths_hang_off_the_workspace(mapping: PathMapping, ws: Path) -> None:
    resolved = mapping.resolve("src/a.py")
    assert resolved.virtual == WORKSPACE + "/src/a.py"
    assert resolved.real == str(ws / "src" / "a.py")
    assert resolved.mount.virtual == WORKSPACE


def test_mount_root_resolves_to_its_real_root(mapping: PathMapping, ws: Path) -> None:
    assert mapping.resolve(WORKSPACE).real == str(ws)
    assert mapping.resolve(WORKSPACE + "/").real == str(ws)
    assert mapping.resolve("//mnt//user-data///workspace/./").real == str(ws)


def test_longest_prefix_wins(mapping: PathMapping, root: Path) -> None:
    inner = mapping.resolve("/ref/inner/x")
    assert inner.mount.virtual == "/ref/inner"
    assert inner.real == str(root / "inner-real" / "x")
    outer = mapping.resolve("/ref/innerx")
    assert outer.mount.virtual == "/ref"
    assert outer.real == str(root / "ref" / "innerx")
    # The nested mount is writable although its parent is read-only.
    assert mapping.resolve("/ref/inner/x", for_write=True).mount.read_only is False
    assert code_of(mapping, "/ref/y", for_write=True) is ErrorCode.READ_ONLY


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/mnt",
        "/mnt/user-data",
        "/mnt/user-data/workspace2",
        "/mnt/user-data/workspace-old/x",
        "/mnt/user-data/uploadsx",
        "/mnt/skills",
        "/etc/passwd",
        "/proc/self/root/etc/passwd",
        "/refx",
        "../../../etc/passwd",
        "..",
        "/mnt/user-data/workspace/../../..",
        "/mnt/user-data/workspace/../../../etc/shadow",
        "/mnt/user-data/uploads/../../../../etc",
    ],
)
def test_unmapped_paths_are_access_denied(mapping: PathMapping, path: str) -> None:
    assert code_of(mapping, path) is ErrorCode.ACCESS_DENIED
    assert code_of(mapping, path, for_write=True) is ErrorCode.ACCESS_DENIED


def test_dotdot_between_mounts_is_normalised_first(mapping: PathMapping, root: Path) -> None:
    resolved = mapping.resolve("/mnt/user-data/workspace/../outputs/o.txt")
    assert resolved.virtual == OUTPUTS + "/o.txt"
    assert code_of(mapping, "../uploads/x", for_write=True) is ErrorCode.READ_ONLY


@pytest.mark.parametrize(
    "path",
    [
        "",
        "a\x00b",
        "\x00",
        WORKSPACE + "/x\x00/../y",
        "a" * 4097,
        "d/" * 2049,
        "x" * 256,
        "é" * 128,
        "a/" + "b" * 256 + "/c",
        "a/" + "b" * 256 + "/../c",
        "/etc/" + "é" * 128 + "/../../mnt/user-data/workspace/x",
    ],
    ids=[
        "empty",
        "nul",
        "only-nul",
        "nul-hidden-by-dotdot",
        "too-long",
        "too-long-dirs",
        "name-256",
        "name-256-bytes-utf8",
        "middle-name-256",
        "name-256-cancelled-by-dotdot",
        "name-256-bytes-outside-then-back-in",
    ],
)
def test_malformed_paths_are_invalid_argument(mapping: PathMapping, path: str) -> None:
    assert code_of(mapping, path) is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize("path", [None, 1, b"/mnt/user-data/workspace", ["a"], {"p": 1}])
def test_non_string_paths_are_invalid_argument(mapping: PathMapping, path: object) -> None:
    assert code_of(mapping, path) is ErrorCode.INVALID_ARGUMENT


def test_names_at_the_limit_are_fine(mapping: PathMapping) -> None:
    assert mapping.resolve("x" * 255).virtual.endswith("/" + "x" * 255)
    assert mapping.resolve("é" * 127 + "a").virtual.endswith("a")


def test_read_only_mount_refuses_writes_only(mapping: PathMapping) -> None:
    assert mapping.resolve(UPLOADS + "/f.txt").mount.read_only
    assert code_of(mapping, UPLOADS + "/f.txt", for_write=True) is ErrorCode.READ_ONLY
    assert code_of(mapping, UPLOADS, for_write=True) is ErrorCode.READ_ONLY


def test_symlink_inside_the_mount_is_resolved(mapping: PathMapping, ws: Path) -> None:
    (ws / "target.txt").write_text("x")
    (ws / "link").symlink_to("target.txt")
    (ws / "dirlink").symlink_to(ws)
    resolved = mapping.resolve("link")
    assert resolved.real == str(ws / "target.txt")
    assert resolved.virtual == WORKSPACE + "/link"
    assert mapping.resolve("dirlink/dirlink/target.txt").real == str(ws / "target.txt")


@pytest.mark.parametrize(
    "target",
    ["/etc/passwd", "/", "..", "../outputs", "../../../../..", "/proc/self/root", "/nonexistent"],
)
def test_symlink_escapes_are_access_denied(mapping: PathMapping, ws: Path, target: str) -> None:
    (ws / "esc").symlink_to(target)
    assert code_of(mapping, "esc") is ErrorCode.ACCESS_DENIED
    assert code_of(mapping, "esc/x", for_write=True) is ErrorCode.ACCESS_DENIED


def test_symlink_from_one_mount_into_another_is_refused(mapping: PathMapping, ws: Path) -> None:
    outputs = ws.parent / "outputs"
    (outputs / "o.txt").write_text("o")
    (ws / "to-outputs").symlink_to(outputs / "o.txt")
    assert code_of(mapping, "to-outputs") is ErrorCode.ACCESS_DENIED


def test_symlink_loop_stays_inside_or_is_refused(mapping: PathMapping, ws: Path) -> None:
    (ws / "loop").symlink_to("loop")
    try:
        resolved = mapping.resolve("loop/x")
    except SandboxError as exc:
        assert exc.code is ErrorCode.ACCESS_DENIED
    else:
        assert is_within(resolved.real, str(ws))


def test_symlinked_real_root_is_followed_once(root: Path, ws: Path) -> None:
    (root / "alias").symlink_to(ws)
    mapping = PathMapping([Mount(WORKSPACE, str(root / "alias"))])
    assert mapping.resolve("a").real == str(ws / "a")
    assert mapping.to_virtual(str(ws / "a")) == WORKSPACE + "/a"
    assert mapping.mask(f"{root}/alias/a and {ws}/b") == f"{WORKSPACE}/a and {WORKSPACE}/b"


@pytest.mark.parametrize(
    "virtual", ["relative", "/", "", "."], ids=["relative", "root", "empty", "dot"]
)
def test_bad_mount_points_are_rejected(root: Path, virtual: str) -> None:
    with pytest.raises(SandboxError) as info:
        PathMapping([Mount(virtual, str(root))])
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_duplicate_mount_points_are_rejected(root: Path) -> None:
    with pytest.raises(SandboxError) as info:
        PathMapping([Mount("/a", str(root)), Mount("/a/", str(root / "x"))])
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


# -- virtual <-> real -----------------------------------------------------------------


def test_to_virtual(mapping: PathMapping, ws: Path, root: Path) -> None:
    assert mapping.to_virtual(str(ws)) == WORKSPACE
    assert mapping.to_virtual(str(ws / "a" / "b.txt")) == WORKSPACE + "/a/b.txt"
    assert mapping.to_virtual(str(root / "inner-real" / "z")) == "/ref/inner/z"
    assert mapping.to_virtual(str(root / "ref" / "inner")) == "/ref/inner"
    # Outside every mount: masked, never the host path.
    outside = mapping.to_virtual(str(root / "data" / "users"))
    assert str(root / "data") not in outside


def test_mask_replaces_real_roots_on_segment_boundaries(mapping: PathMapping, ws: Path) -> None:
    text = f"cat: {ws}/a.txt: No such file\n{ws}\n'{ws}/x y'"
    assert mapping.mask(text) == (
        f"cat: {WORKSPACE}/a.txt: No such file\n{WORKSPACE}\n'{WORKSPACE}/x y'"
    )
    # A sibling whose name merely starts with the root's name is another directory;
    # it still must not leak the data root, which is hidden wholesale.
    sibling = mapping.mask(f"{ws}2/file")
    assert not sibling.startswith(WORKSPACE)
    assert sibling.startswith(HIDDEN_ROOT_MARKER)


def test_mask_hides_the_data_root_anywhere(mapping: PathMapping, root: Path) -> None:
    data = str(root / "data")
    masked = mapping.mask(f"{data}/users/u/threads and {data}x and {data}")
    assert data not in masked
    assert masked.count(HIDDEN_ROOT_MARKER) == 3
    assert mapping.mask("") == ""
    assert mapping.mask("nothing to see") == "nothing to see"


def test_unmask_turns_virtual_paths_into_real_ones(mapping: PathMapping, ws: Path) -> None:
    command = f"cd {WORKSPACE} && cat '{WORKSPACE}/a b.txt' {OUTPUTS}/o >{WORKSPACE}/log"
    real = mapping.unmask(command)
    assert real == f"cd {ws} && cat '{ws}/a b.txt' {ws.parent}/outputs/o >{ws}/log"
    assert mapping.mask(real) == command


@pytest.mark.parametrize(
    "text",
    [
        "/mnt/user-data/workspace2/x",
        "x/mnt/user-data/workspace",
        "/home/me/mnt/user-data/workspace",
        "/mnt/user-data/workspace.bak",
        "/mnt/user-data/workspace-old",
        "/mnt/user-data",
        "echo hello",
    ],
)
def test_unmask_respects_segment_boundaries(mapping: PathMapping, text: str) -> None:
    assert mapping.unmask(text) == text


def test_identity_mapping_is_a_no_op() -> None:
    mapping = PathMapping([Mount(WORKSPACE, WORKSPACE), Mount(UPLOADS, UPLOADS, True)])
    assert mapping.is_identity
    text = f"{WORKSPACE}/a and {UPLOADS}/b"
    assert mapping.mask(text) == text
    assert mapping.unmask(text) == text


def test_round_trips_through_a_dict(mapping: PathMapping, ws: Path, root: Path) -> None:
    again = PathMapping.from_dict(mapping.to_dict())
    assert again.resolve("x").real == mapping.resolve("x").real
    assert again.mask(str(root / "data")) == HIDDEN_ROOT_MARKER
    assert [m.virtual for m in again.mounts] == [m.virtual for m in mapping.mounts]


# -- properties ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, PathMapping]]:
    root = tmp_path_factory.mktemp("pathmap")
    mapping = build(root)
    ws = root / "data" / "users" / "u" / "threads" / "t" / "user-data" / "workspace"
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("f")
    (ws / "in").symlink_to("d")
    (ws / "out").symlink_to("/etc")
    (ws / "up").symlink_to("..")
    (ws / "loop").symlink_to("loop")
    yield root, mapping


# The tree is module-scoped and never changed by the properties.
SHARED_FIXTURE = [HealthCheck.function_scoped_fixture]

SEGMENTS = st.sampled_from(
    [
        "..",
        ".",
        "",
        "/",
        "mnt",
        "user-data",
        "workspace",
        "uploads",
        "outputs",
        "ref",
        "inner",
        "d",
        "f.txt",
        "in",
        "out",
        "up",
        "loop",
        "etc",
        "passwd",
        "proc",
        "self",
        "root",
        "~",
        "é",
        "\x00",
        "a b",
        "\\..",
        "..\\",
        "%2e%2e",
        "..%2f",
        "\uff0e\uff0e",  # fullwidth full stops
        "\uff0f",  # fullwidth solidus
        "\u2024",  # one dot leader
        "\u2025",  # two dot leader
        "\u2215",  # division slash
        ".\u200b.",
        "\ud800",  # a lone surrogate
        "x" * 255,
        "y" * 256,
        "é" * 128,
        "z" * 4096,
    ]
)
PATHS = st.one_of(
    st.text(alphabet=st.sampled_from("/.\\~ax\x00é\uff0f\u2024"), max_size=40),
    st.lists(SEGMENTS, max_size=16).map("/".join),
    st.lists(SEGMENTS, max_size=16).map(lambda parts: "/" + "/".join(parts)),
    st.tuples(
        st.sampled_from([WORKSPACE, UPLOADS, OUTPUTS, "/ref", "/ref/inner"]),
        st.lists(SEGMENTS, max_size=16),
    ).map(lambda mount_parts: mount_parts[0] + "/" + "/".join(mount_parts[1])),
    st.lists(st.sampled_from(["x" * 255, "..", "."]), min_size=14, max_size=18).map(
        lambda parts: "/mnt/user-data/workspace/" + "/".join(parts)
    ),  # around the 4096-character limit
    st.text(max_size=60),
)
# What resolve may raise: the codes docs/contract.md documents for the jail.
JAIL_CODES = {ErrorCode.ACCESS_DENIED, ErrorCode.INVALID_ARGUMENT, ErrorCode.READ_ONLY}


@settings(max_examples=2000, deadline=None, suppress_health_check=SHARED_FIXTURE)
@given(path=PATHS, for_write=st.booleans())
def test_any_path_resolves_inside_a_mount_root_or_raises(
    shared: tuple[Path, PathMapping], path: str, for_write: bool
) -> None:
    """Whatever the string: a symlink-free real path inside one mount, or a jail code."""
    _, mapping = shared
    try:
        resolved = mapping.resolve(path, for_write=for_write)
    except SandboxError as exc:
        assert exc.code in JAIL_CODES, exc
        return
    real_root = os.path.realpath(resolved.mount.real)
    assert is_within(resolved.real, real_root)
    assert os.path.realpath(resolved.real) == resolved.real
    assert is_within(resolved.virtual, resolved.mount.virtual)
    assert len(resolved.virtual) <= len(WORKSPACE) + 1 + len(path)
    # Whatever was asked for, the answer is the longest mount that contains it.
    assert mapping.match(resolved.virtual) == resolved.mount
    assert not (for_write and resolved.mount.read_only)
    # The canonical virtual path round-trips to the same real path and mount.
    canonical = mapping.to_virtual(resolved.real)
    assert is_within(canonical, resolved.mount.virtual)
    again = mapping.resolve(canonical, for_write=for_write)
    assert (again.real, again.mount) == (resolved.real, resolved.mount)
    assert mapping.to_virtual(again.real) == canonical


@settings(max_examples=300, deadline=None)
@given(
    path=st.one_of(
        st.none(),
        st.integers(),
        st.binary(max_size=20),
        st.lists(st.text(max_size=5), max_size=3),
        st.floats(allow_nan=True),
    )
)
def test_anything_but_a_string_is_invalid_argument(path: object) -> None:
    mapping = PathMapping([Mount(WORKSPACE, "/nonexistent-ws")])
    with pytest.raises(SandboxError) as info:
        mapping.resolve(path)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


@settings(max_examples=300, deadline=None, suppress_health_check=SHARED_FIXTURE)
@given(data=st.data())
def test_mask_never_leaves_the_data_root(
    shared: tuple[Path, PathMapping], data: st.DataObject
) -> None:
    root, mapping = shared
    data_root = str(root / "data")
    pieces = st.sampled_from(
        [
            data_root,
            data_root + "/users/u/threads/t/user-data/workspace",
            "/",
            "x",
            "2",
            " ",
            "\n",
            data_root[:-1],
            "/users",
            "-",
            ".",
            "workspace",
        ]
    )
    text = "".join(data.draw(st.lists(pieces, max_size=10)))
    assert data_root not in mapping.mask(text)
