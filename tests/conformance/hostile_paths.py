"""The hostile-path corpus: (path, operation, expected code or documented safe result).

Every case runs against a fresh copy of the tree built by `hostile_tree`
(a file, a directory and a set of symlinks, several of them pointing out of
the sandbox). `{ws}` in a path is that tree's virtual directory and `{name}`
its last component. `OK` means the documented safe result: the call
succeeds and whatever it returns stays inside the virtual layout. Paths are
resolved lexically first (`..` cancels the segment before it, symlink or
not), then symlinks are resolved and must stay inside the matched mount.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sandkit import ErrorCode, ExecuteResult, SandboxError
from sandkit.sandbox import Sandbox

from .suite import (
    OUTPUTS,
    UPLOADS,
    WORKSPACE,
    ConformanceBase,
    in_layout,
    q,
    sh,
)

OK = "ok"

ACCESS_DENIED = ErrorCode.ACCESS_DENIED
INVALID_ARGUMENT = ErrorCode.INVALID_ARGUMENT
NOT_FOUND = ErrorCode.NOT_FOUND
READ_ONLY = ErrorCode.READ_ONLY
IS_A_DIRECTORY = ErrorCode.IS_A_DIRECTORY
NOT_A_DIRECTORY = ErrorCode.NOT_A_DIRECTORY

READS = ("read_file", "read_bytes")
WRITES = ("write_file", "write_bytes", "append", "edit_file")
DIRS = ("list_dir", "glob", "grep", "cwd")

# name -> target; `{ws}` in a target is the tree's own virtual directory.
LINKS = {
    "etc": "/etc",
    "passwd": "/etc/passwd",
    "slash": "/",
    "proc": "/proc/self/root",
    "cwdlink": "/proc/self/cwd",
    "up1": "..",  # the workspace root: still inside the workspace mount
    "up2": "../..",  # /mnt/user-data: outside every mount
    "uploads_link": "../../uploads",
    "outputs_link": OUTPUTS,
    "loop": "loop",
    "dangling": "/nonexistent/target",
    "chain1": "chain2",
    "chain2": "/etc",
    "in_rel": "f.txt",
    "in_dir": "d",
    "in_abs": "{ws}/f.txt",
    "in_dangling": "missing-inside.txt",
}


@dataclasses.dataclass(frozen=True)
class HostileCase:
    path: Any  # usually a str with {ws}/{name} placeholders; sometimes not a str at all
    op: str
    expect: ErrorCode | str
    why: str = ""

    def render(self, ws: str) -> Any:
        if not isinstance(self.path, str):
            return self.path
        return self.path.replace("{ws}", ws).replace("{name}", ws.rsplit("/", 1)[1])

    @property
    def id(self) -> str:
        shown = ascii(self.path)
        if len(shown) > 48:
            shown = shown[:40] + f"..({len(shown)})"
        expect = self.expect.value if isinstance(self.expect, ErrorCode) else self.expect
        return f"{self.op}:{shown}->{expect}"


def _cases(
    path: Any, expect: ErrorCode | str, ops: tuple[str, ...], why: str = ""
) -> list[HostileCase]:
    return [HostileCase(path, op, expect, why) for op in ops]


HOSTILE_PATHS: list[HostileCase] = [
    # -- absolute paths outside every mount ----------------------------------------------
    *_cases("/etc/passwd", ACCESS_DENIED, (*READS, *WRITES, "grep"), "unmapped host file"),
    *_cases("/etc", ACCESS_DENIED, DIRS, "unmapped host directory"),
    *_cases("/", ACCESS_DENIED, DIRS, "the host root"),
    *_cases("/proc/self/root/etc/passwd", ACCESS_DENIED, ("read_file", "write_file")),
    *_cases("/proc/self/environ", ACCESS_DENIED, ("read_file",), "the runtime's environment"),
    *_cases("/proc/self/cwd", ACCESS_DENIED, ("list_dir",)),
    *_cases("/proc/1/root", ACCESS_DENIED, ("list_dir",)),
    *_cases("/dev/zero", ACCESS_DENIED, ("read_bytes",)),
    *_cases("/dev/null", ACCESS_DENIED, ("write_file",)),
    *_cases("/tmp/sandkit-hostile", ACCESS_DENIED, ("write_file", "cwd")),
    *_cases("/root/.ssh/authorized_keys", ACCESS_DENIED, ("append",)),
    *_cases("/var/run/docker.sock", ACCESS_DENIED, ("read_file",)),
    *_cases("/mnt", ACCESS_DENIED, ("list_dir",), "parent of the mounts"),
    *_cases("/mnt/user-data", ACCESS_DENIED, ("list_dir", "glob", "cwd"), "not a mount"),
    *_cases("/mnt/user-data/x", ACCESS_DENIED, ("write_file",), "between the mounts"),
    *_cases(
        "/mnt/user-data/workspace2/x",
        ACCESS_DENIED,
        ("read_file", "write_file"),
        "prefix match on a segment boundary only",
    ),
    *_cases("/mnt/user-data/workspace.bak", ACCESS_DENIED, ("list_dir",)),
    *_cases("/mnt/user-data/Workspace/x", ACCESS_DENIED, ("write_file",), "case matters"),
    *_cases("/mnt/user-dataworkspace", ACCESS_DENIED, ("read_file",)),
    *_cases("//etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases("///etc///passwd", ACCESS_DENIED, ("read_file",)),
    *_cases("/./etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases("/../etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases("/../../../../etc/shadow", ACCESS_DENIED, ("read_file",)),
    # -- traversal out of a mount ------------------------------------------------------
    *_cases("../../../etc/passwd", ACCESS_DENIED, ("read_file", "write_file", "list_dir")),
    *_cases("..", ACCESS_DENIED, ("list_dir", "cwd"), "relative to the workspace"),
    *_cases("../..", ACCESS_DENIED, ("glob",)),
    *_cases("./../../etc", ACCESS_DENIED, ("list_dir",)),
    *_cases("{ws}/../../../etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases("{ws}/" + "../" * 20 + "etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases("{ws}/d/../../../../etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(WORKSPACE + "/..", ACCESS_DENIED, ("list_dir",)),
    *_cases(WORKSPACE + "/../..", ACCESS_DENIED, ("list_dir",)),
    *_cases(WORKSPACE + "/../uploads/../../x", ACCESS_DENIED, ("write_file",)),
    *_cases(WORKSPACE + "/../../../../proc/self/root/etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(UPLOADS + "/../../../etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(OUTPUTS + "/../../../../tmp/x", ACCESS_DENIED, ("write_file",)),
    # -- read-only mount ------------------------------------------------------------------
    *_cases("../uploads/{name}.txt", READ_ONLY, ("write_file", "write_bytes", "append")),
    *_cases(WORKSPACE + "/../uploads/{name}", READ_ONLY, ("write_file",)),
    *_cases(UPLOADS, READ_ONLY, ("write_file",), "read-only is decided before the kind"),
    *_cases(UPLOADS + "/{name}/deep.txt", READ_ONLY, ("write_file",)),
    *_cases(UPLOADS + "/{name}-missing.txt", READ_ONLY, ("edit_file",)),
    # -- lexical normalisation: documented safe results -------------------------------------
    *_cases(WORKSPACE + "/./../outputs/{name}.txt", OK, ("write_file",)),
    *_cases("{ws}/etc/../f.txt", OK, ("read_file",), "`..` cancels the link lexically"),
    *_cases("{ws}/f.txt/", OK, ("read_file",), "a trailing slash is normalised away"),
    *_cases("{ws}/./d/./g.txt", OK, ("read_file",)),
    *_cases("{ws}//d//g.txt", OK, ("read_file",)),
    *_cases("/mnt/skills/../user-data/workspace/{name}/f.txt", OK, ("read_file",)),
    *_cases("/etc/../mnt/user-data/workspace/{name}/f.txt", OK, ("read_file",)),
    # -- symlinks that stay inside: documented safe results --------------------------------
    *_cases("{ws}/up1/{name}/f.txt", OK, ("read_file",), "link to the workspace root"),
    *_cases("{ws}/in_rel", OK, ("read_file", "write_file", "edit_file")),
    *_cases("{ws}/in_dir", OK, DIRS),
    *_cases("{ws}/in_dir/g.txt", OK, ("read_bytes",)),
    *_cases("{ws}/in_abs", OK, ("read_file",), "absolute virtual target"),
    *_cases("{ws}/in_dangling", OK, ("write_file",), "creates the in-mount target"),
    *_cases("{ws}/in_dangling", NOT_FOUND, ("read_file",)),
    # -- symlink escapes ---------------------------------------------------------------------
    *_cases("{ws}/etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases("{ws}/etc", ACCESS_DENIED, DIRS),
    *_cases("{ws}/passwd", ACCESS_DENIED, (*READS, *WRITES)),
    *_cases("{ws}/slash/etc/shadow", ACCESS_DENIED, ("read_file",)),
    *_cases("{ws}/slash", ACCESS_DENIED, ("list_dir", "cwd")),
    *_cases("{ws}/proc/etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases("{ws}/cwdlink", ACCESS_DENIED, ("list_dir",)),
    *_cases("{ws}/up2", ACCESS_DENIED, ("list_dir",)),
    *_cases("{ws}/up2/outputs/x", ACCESS_DENIED, ("write_file",)),
    *_cases("{ws}/uploads_link", ACCESS_DENIED, ("list_dir",), "each mount is its own jail"),
    *_cases("{ws}/outputs_link/x", ACCESS_DENIED, ("write_file",)),
    *_cases("{ws}/loop", ACCESS_DENIED, ("read_file", "write_file", "list_dir")),
    *_cases("{ws}/loop/x", ACCESS_DENIED, ("read_file",)),
    *_cases("{ws}/dangling", ACCESS_DENIED, ("read_file", "write_file")),
    *_cases("{ws}/chain1", ACCESS_DENIED, ("read_file", "list_dir")),
    *_cases("{ws}/up1/{name}/passwd", ACCESS_DENIED, ("read_file",)),
    # -- malformed -----------------------------------------------------------------------
    *_cases("", INVALID_ARGUMENT, ("read_file", "write_file", *DIRS)),
    *_cases("f\x00.txt", INVALID_ARGUMENT, ("read_file",)),
    *_cases("{ws}/f.txt\x00.png", INVALID_ARGUMENT, ("write_file",)),
    *_cases("\x00", INVALID_ARGUMENT, ("list_dir",)),
    *_cases("/etc/passwd\x00", INVALID_ARGUMENT, ("read_file",)),
    *_cases("{ws}/\x00/../f.txt", INVALID_ARGUMENT, ("read_file",)),
    *_cases("a" * 4097, INVALID_ARGUMENT, ("read_file",)),
    *_cases("/" * 5000, INVALID_ARGUMENT, ("list_dir",)),
    *_cases("{ws}/" + "x" * 256, INVALID_ARGUMENT, ("write_file",)),
    *_cases("{ws}/" + "é" * 128, INVALID_ARGUMENT, ("write_file",)),
    *_cases("{ws}/" + "🌍" * 64, INVALID_ARGUMENT, ("write_file",)),
    *_cases("{ws}/\ud800", INVALID_ARGUMENT, ("write_file",), "a lone surrogate is not text"),
    *_cases(None, INVALID_ARGUMENT, ("read_file",)),
    *_cases(42, INVALID_ARGUMENT, ("write_file",)),
    *_cases(b"/etc/passwd", INVALID_ARGUMENT, ("read_file",)),
    *_cases([WORKSPACE], INVALID_ARGUMENT, ("list_dir",)),
    # -- spellings that are just names ----------------------------------------------------
    *_cases("{ws}/%2e%2e/%2e%2e/etc/passwd", NOT_FOUND, ("read_file",)),
    *_cases("{ws}/..%2f..%2fetc%2fpasswd", NOT_FOUND, ("read_file",)),
    *_cases("{ws}/..\\..\\etc\\passwd", NOT_FOUND, ("read_file",)),
    *_cases("{ws}/\u2025/etc/passwd", NOT_FOUND, ("read_file",), "two dot leader"),
    *_cases("{ws}/\uff0e\uff0e/\uff0e\uff0e/etc/passwd", NOT_FOUND, ("read_file",)),
    *_cases("{ws}/.../etc", NOT_FOUND, ("list_dir",)),
    *_cases("{ws}/.. /etc", NOT_FOUND, ("list_dir",)),
    *_cases("~/.ssh/id_rsa", NOT_FOUND, ("read_file",), "no tilde expansion"),
    *_cases("~root/.bashrc", NOT_FOUND, ("read_file",)),
    *_cases("$HOME/.bashrc", NOT_FOUND, ("read_file",), "no variable expansion"),
    *_cases("file:///etc/passwd", NOT_FOUND, ("read_file",), "not a URL"),
    *_cases("\\\\server\\share\\x", NOT_FOUND, ("read_file",)),
    *_cases("C:\\Windows\\win.ini", NOT_FOUND, ("read_file",)),
    *_cases("{ws}/*", NOT_FOUND, ("glob", "list_dir"), "no wildcard expansion in paths"),
    # -- wrong kind -------------------------------------------------------------------------
    *_cases("{ws}/f.txt/x", NOT_A_DIRECTORY, ("read_file", "write_file")),
    *_cases("{ws}/d", IS_A_DIRECTORY, ("read_file", "write_file", "read_bytes")),
    *_cases("{ws}/f.txt", NOT_A_DIRECTORY, ("list_dir", "glob", "cwd")),
    *_cases("{ws}/missing", NOT_FOUND, DIRS),
    # -- names that look like commands: created literally -------------------------------
    *_cases("{ws}/$(touch pwned)", OK, ("write_file",)),
    *_cases("{ws}/`touch pwned`", OK, ("write_file",)),
    *_cases("{ws}/;touch pwned;", OK, ("write_file",)),
    *_cases("{ws}/|touch pwned", OK, ("write_file",)),
    *_cases("{ws}/&& touch pwned", OK, ("write_file",)),
    *_cases("{ws}/-rf", OK, ("write_file",)),
    *_cases("{ws}/--help", OK, ("write_file",)),
    *_cases("{ws}/a\nb", OK, ("write_file",)),
    *_cases("{ws}/\x1b[31mred", OK, ("write_file",)),
    *_cases("{ws}/{a,b}", OK, ("write_file",)),
    *_cases("{ws}/.sandkit-0123456789abcdef.tmp", OK, ("write_file",), "our temp-file prefix"),
    *_cases("{ws}/%s%n%x", OK, ("write_file",)),
    *_cases("{ws}/" + "x" * 255, OK, ("write_file",), "the longest allowed name"),
]


def run_op(sb: Sandbox, op: str, path: Any) -> Any:
    if op == "read_file":
        return sb.read_file(path)
    if op == "read_bytes":
        return sb.read_bytes(path)
    if op == "write_file":
        return sb.write_file(path, "hostile\n")
    if op == "append":
        return sb.write_file(path, "hostile\n", append=True)
    if op == "write_bytes":
        return sb.write_bytes(path, b"hostile\n")
    if op == "edit_file":
        return sb.edit_file(path, "root", "toor")
    if op == "list_dir":
        return sb.list_dir(path)
    if op == "glob":
        return sb.glob("*", path=path)
    if op == "grep":
        return sb.grep("root", path=path)
    if op == "cwd":
        return sb.execute("pwd", cwd=path)
    raise AssertionError(f"unknown operation {op}")


def result_paths(result: Any) -> list[str]:
    if isinstance(result, bytes):
        return []
    if isinstance(result, ExecuteResult):
        assert result.exit_code == 0, result.stderr
        return [result.stdout.strip()]
    found = [result.path]
    for attr in ("entries", "matches", "counts"):
        found += [item.path for item in getattr(result, attr, [])]
    found += list(getattr(result, "paths", [])) + list(getattr(result, "files", []))
    return found


class HostilePathTests(ConformanceBase):
    @pytest.fixture
    def hostile_tree(self, sb: Sandbox, ws: str) -> str:
        sb.write_file(f"{ws}/f.txt", "root: hostile fixture\n")
        sb.write_file(f"{ws}/d/g.txt", "root in a subdirectory\n")
        links = " && ".join(
            f"ln -s {q(target.replace('{ws}', ws))} {name}" for name, target in LINKS.items()
        )
        sh(sb, links, cwd=ws)
        return ws

    def test_corpus_is_large_and_unique(self) -> None:
        assert len(HOSTILE_PATHS) >= 100
        keys = [(repr(c.path), c.op) for c in HOSTILE_PATHS]
        assert len(keys) == len(set(keys)), "duplicate cases"

    @pytest.mark.parametrize("case", HOSTILE_PATHS, ids=lambda c: c.id)
    def test_hostile_path(self, sb: Sandbox, hostile_tree: str, case: HostileCase) -> None:
        path = case.render(hostile_tree)
        if case.expect == OK:
            result = run_op(sb, case.op, path)
            paths = result_paths(result)
            assert all(in_layout(p) for p in paths), paths
        else:
            with pytest.raises(SandboxError) as info:
                run_op(sb, case.op, path)
            assert info.value.code is case.expect, f"{case.why}: got {info.value!r}"
        # Nothing a path said was ever run.
        for where in (hostile_tree, WORKSPACE):
            names = {e.name for e in sb.list_dir(where, max_depth=1).entries}
            assert "pwned" not in names
