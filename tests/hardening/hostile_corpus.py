"""The hostile-path corpus: (category, path, operation, documented code or safe result).

Every case runs against one tree built by `tests/hardening/test_paths.py` in
a fresh box: a file `f.txt`, a directory `d/`, the symlinks of `LINKS` (most
of them pointing out of the sandbox), a seeded upload, a skills mount, marker
files outside the thread's mappings (in the box, on the host, in another
thread's and another user's data) and a directory `deep/` for 4 KiB paths.

Placeholders, replaced literally (never `str.format`, names contain braces):

| placeholder | value |
|---|---|
| `{ws}` / `{name}` | the tree's virtual directory / its last component |
| `{up}` | a virtual directory under uploads holding `seed.txt` |
| `{out}` | a directory outside every mount, inside the box (`/tmp/...`) |
| `{data_root}` | the provider's real data root on the host |
| `{host_ws}` | the host path of `{ws}` (this thread's own data, by its real path) |
| `{host_other}` / `{host_other_user}` | host paths of another thread's / user's workspace |
| `{host_out}` | a host directory next to the data root |
| `{other_thread}` / `{other_user}` / `{other_user_thread}` | their ids |
| `{secret}` | the marker file's name in every outside directory |
| `{fill:N}` | 255-byte names and slashes that make the whole path N characters long |

Expectations: an `ErrorCode` (exactly that code), `OK` (the documented safe
result: the call succeeds and everything it returns is a virtual path inside
the layout that never passes through a symlink of the tree) or `SAFE` (OK or
`ACCESS_DENIED`, where the answer depends on what the resolving process sees,
documented in `why`). Paths are resolved lexically first (`..` cancels the
segment before it, symlink or not); symlinks are then resolved and must stay
inside the matched mount; everything else is a name, taken literally.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from sandkit import ErrorCode

OK = "ok"
SAFE = "safe"

WORKSPACE = "/mnt/user-data/workspace"
UPLOADS = "/mnt/user-data/uploads"
OUTPUTS = "/mnt/user-data/outputs"
SKILLS = "/mnt/skills"

ACCESS_DENIED = ErrorCode.ACCESS_DENIED
INVALID_ARGUMENT = ErrorCode.INVALID_ARGUMENT
NOT_FOUND = ErrorCode.NOT_FOUND
READ_ONLY = ErrorCode.READ_ONLY
IS_A_DIRECTORY = ErrorCode.IS_A_DIRECTORY
NOT_A_DIRECTORY = ErrorCode.NOT_A_DIRECTORY

READS = ("read_file", "read_bytes")
WRITES = ("write_file", "write_bytes", "append", "edit_file")
DIRS = ("list_dir", "glob", "grep", "cwd")
TREE_OPS = ("list_tree", "glob_tree", "grep_tree")
OPS = (*READS, *WRITES, *DIRS, *TREE_OPS)
MUTATING = frozenset(WRITES)

# name -> target, created with `ln -s` inside `{ws}` (placeholders allowed in targets).
LINKS: dict[str, str] = {
    "etc": "/etc",
    "passwd": "/etc/passwd",
    "slash": "/",
    "tmp": "/tmp",
    "proc": "/proc/self/root",
    "cwdlink": "/proc/self/cwd",
    "up1": "..",  # the workspace root: still inside the workspace mount
    "up2": "../..",  # /mnt/user-data: outside every mount
    "uploads_link": "../../uploads",
    "uploads_abs": "{up}/seed.txt",
    "outputs_link": OUTPUTS,
    "skills_link": SKILLS,
    "loop": "loop",
    "ping": "pong",
    "pong": "ping",
    "dangling": "/nonexistent/target",
    "chain1": "chain2",
    "chain2": "/etc",
    "out_dir": "{out}",
    "out_file": "{out}/{secret}",
    "host_out": "{host_out}/{secret}",
    "host_other": "{host_other}",
    "host_other_user": "{host_other_user}",
    "data_root_link": "{data_root}",
    # From {ws}: ../ workspace, ../../ user-data, ../../../ thread, ../../../../ threads.
    "other_thread_rel": "../../../../{other_thread}/user-data/workspace",
    "other_user_rel": "../../../../../../{other_user}/threads/{other_user_thread}/user-data",
    "deep_up": "d/../../../../../../../../etc",
    "in_rel": "f.txt",
    "in_dir": "d",
    "in_abs": "{ws}/f.txt",
    "in_dangling": "missing-inside.txt",
    "self": ".",
    "proc_own": "/proc/self/root{ws}/f.txt",
}
# Created inside the directory `d` (a link below a link that stays inside).
NESTED_LINKS: dict[str, str] = {"esc": "../../../../../../../etc", "back": "../f.txt"}


@dataclasses.dataclass(frozen=True)
class HostileCase:
    category: str
    path: Any  # usually a str with placeholders; sometimes not a str at all
    op: str
    expect: ErrorCode | str
    why: str = ""

    def render(self, scene: Mapping[str, str]) -> Any:
        return render(self.path, scene)

    @property
    def id(self) -> str:
        shown = ascii(self.path)
        if len(shown) > 56:
            shown = shown[:48] + f"..({len(shown)})"
        expect = self.expect.value if isinstance(self.expect, ErrorCode) else self.expect
        return f"{self.category}/{self.op}:{shown}->{expect}"


_FILL = re.compile(r"\{fill:(\d+)\}")


def render(path: Any, scene: Mapping[str, str]) -> Any:
    """Replace the placeholders of the module docstring; non-strings pass through."""
    if not isinstance(path, str):
        return path
    for key, value in scene.items():
        path = path.replace("{" + key + "}", value)
    fill = _FILL.search(path)
    if fill:
        total = int(fill.group(1))
        missing = total - (len(path) - len(fill.group(0)))
        path = path[: fill.start()] + _filler(missing) + path[fill.end() :]
        assert len(path) == total, (len(path), total)
    return path


def _filler(length: int) -> str:
    """`length` characters of 255-byte names joined by '/', ending in a name."""
    parts: list[str] = []
    left = length
    while left > 256:
        parts.append("n" * 255)
        left -= 256
    parts.append("n" * left)
    return "/".join(parts)


def _cases(
    category: str, path: Any, expect: ErrorCode | str, ops: tuple[str, ...], why: str = ""
) -> list[HostileCase]:
    return [HostileCase(category, path, op, expect, why) for op in ops]


# -- absolute paths outside every mount ---------------------------------------------
ABSOLUTE = "absolute"
_absolute = [
    *_cases(ABSOLUTE, "/etc/passwd", ACCESS_DENIED, (*READS, *WRITES, "grep"), "unmapped file"),
    *_cases(ABSOLUTE, "/etc", ACCESS_DENIED, DIRS, "unmapped host directory"),
    *_cases(ABSOLUTE, "/", ACCESS_DENIED, (*DIRS, "list_tree"), "the root"),
    *_cases(ABSOLUTE, "/etc/shadow", ACCESS_DENIED, ("read_file",)),
    *_cases(ABSOLUTE, "/etc/hosts", ACCESS_DENIED, ("write_file",)),
    *_cases(ABSOLUTE, "/root", ACCESS_DENIED, ("list_dir",)),
    *_cases(ABSOLUTE, "/home", ACCESS_DENIED, ("glob",)),
    *_cases(ABSOLUTE, "/var/log", ACCESS_DENIED, ("grep_tree",)),
    *_cases(ABSOLUTE, "/usr/bin/python3", ACCESS_DENIED, ("read_bytes",)),
    *_cases(ABSOLUTE, "/bin/sh", ACCESS_DENIED, ("write_bytes",)),
    *_cases(ABSOLUTE, "/sys/kernel", ACCESS_DENIED, ("list_dir",)),
    *_cases(ABSOLUTE, "/dev/zero", ACCESS_DENIED, ("read_bytes",)),
    *_cases(ABSOLUTE, "/dev/null", ACCESS_DENIED, ("write_file",)),
    *_cases(ABSOLUTE, "/dev/shm/sandkit-hostile", ACCESS_DENIED, ("write_file",)),
    *_cases(ABSOLUTE, "/tmp/sandkit-hostile", ACCESS_DENIED, ("write_file", "cwd")),
    *_cases(ABSOLUTE, "/root/.ssh/authorized_keys", ACCESS_DENIED, ("append",)),
    *_cases(ABSOLUTE, "/var/run/docker.sock", ACCESS_DENIED, ("read_file",)),
    *_cases(
        ABSOLUTE,
        "/var/run/secrets/kubernetes.io/serviceaccount/token",
        ACCESS_DENIED,
        ("read_file",),
        "a pod's service-account token",
    ),
    *_cases(ABSOLUTE, "/mnt", ACCESS_DENIED, ("list_dir",), "parent of the mounts"),
    *_cases(ABSOLUTE, "/mnt/user-data", ACCESS_DENIED, ("list_dir", "glob", "cwd"), "no mount"),
    *_cases(ABSOLUTE, "/mnt/user-data/x", ACCESS_DENIED, ("write_file",), "between mounts"),
    *_cases(
        ABSOLUTE,
        "/mnt/user-data/workspace2/x",
        ACCESS_DENIED,
        ("read_file", "write_file"),
        "prefix match on a segment boundary only",
    ),
    *_cases(ABSOLUTE, "/mnt/user-data/workspace.bak", ACCESS_DENIED, ("list_dir",)),
    *_cases(ABSOLUTE, "/mnt/user-data/Workspace/x", ACCESS_DENIED, ("write_file",), "case"),
    *_cases(ABSOLUTE, "/mnt/user-dataworkspace", ACCESS_DENIED, ("read_file",)),
    *_cases(ABSOLUTE, "/mnt/skillsx/a", ACCESS_DENIED, ("write_file",)),
    *_cases(ABSOLUTE, "//etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(ABSOLUTE, "///etc///passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(ABSOLUTE, "/./etc/passwd", ACCESS_DENIED, ("read_file",)),
    # the real data root and the thread's own directory by their host paths
    *_cases(ABSOLUTE, "{data_root}", ACCESS_DENIED, ("list_dir", "grep_tree"), "the data root"),
    *_cases(ABSOLUTE, "{host_ws}/f.txt", ACCESS_DENIED, ("read_file", "write_file"), "own file"),
    *_cases(ABSOLUTE, "{host_ws}", ACCESS_DENIED, ("cwd",), "own directory by its host path"),
    *_cases(ABSOLUTE, "{host_out}/{secret}", ACCESS_DENIED, ("read_file", "append")),
    *_cases(ABSOLUTE, "{out}/{secret}", ACCESS_DENIED, (*READS, *WRITES), "in the box"),
    *_cases(ABSOLUTE, "{out}", ACCESS_DENIED, ("list_dir", "glob_tree", "grep_tree")),
]

# -- /proc/self/root and friends --------------------------------------------------------
PROC = "proc"
_proc = [
    *_cases(PROC, "/proc/self/root/etc/passwd", ACCESS_DENIED, ("read_file", "write_file")),
    *_cases(PROC, "/proc/self/root", ACCESS_DENIED, ("list_dir", "glob_tree")),
    *_cases(PROC, "/proc/self/root/proc/self/root/etc", ACCESS_DENIED, ("list_dir",)),
    *_cases(
        PROC,
        "/proc/self/root/mnt/user-data/workspace/{name}/f.txt",
        ACCESS_DENIED,
        ("read_file", "write_file"),
        "the own file, but /proc is not a mount",
    ),
    *_cases(PROC, "/proc/self/environ", ACCESS_DENIED, ("read_file",), "the runtime's env"),
    *_cases(PROC, "/proc/self/mountinfo", ACCESS_DENIED, ("read_file",), "mount sources"),
    *_cases(PROC, "/proc/self/cwd", ACCESS_DENIED, ("list_dir",)),
    *_cases(PROC, "/proc/self/cwd/f.txt", ACCESS_DENIED, ("read_file",)),
    *_cases(PROC, "/proc/self/fd", ACCESS_DENIED, ("list_dir",)),
    *_cases(PROC, "/proc/self/fd/0", ACCESS_DENIED, ("read_file",)),
    *_cases(PROC, "/proc/self/exe", ACCESS_DENIED, ("read_bytes",)),
    *_cases(PROC, "/proc/1/root", ACCESS_DENIED, ("list_dir",)),
    *_cases(PROC, "/proc/1/environ", ACCESS_DENIED, ("read_file",)),
    *_cases(PROC, "/proc/thread-self/root/etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(PROC, "{ws}/proc/etc/passwd", ACCESS_DENIED, ("read_file",), "link to it"),
    *_cases(PROC, "{ws}/proc", ACCESS_DENIED, ("list_dir", "cwd")),
    *_cases(PROC, "{ws}/cwdlink", ACCESS_DENIED, ("list_dir",)),
    *_cases(
        PROC,
        "{ws}/proc_own",
        SAFE,
        ("read_file", "write_file"),
        "a link through /proc/self/root to the own file: the resolving process sees "
        "its own root, so this is the own file (OK) or not resolvable (ACCESS_DENIED)",
    ),
]

# -- traversal out of a mount, in every spelling that is traversal -------------------------
TRAVERSAL = "traversal"
_traversal = [
    *_cases(TRAVERSAL, "../../../etc/passwd", ACCESS_DENIED, ("read_file", "write_file")),
    *_cases(TRAVERSAL, "../../../etc", ACCESS_DENIED, ("list_dir",)),
    *_cases(TRAVERSAL, "..", ACCESS_DENIED, ("list_dir", "cwd"), "relative to the workspace"),
    *_cases(TRAVERSAL, "../..", ACCESS_DENIED, ("glob",)),
    *_cases(TRAVERSAL, "./../../etc", ACCESS_DENIED, ("list_dir",)),
    *_cases(TRAVERSAL, ".././.././../etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(TRAVERSAL, "./.././../././../etc/shadow", ACCESS_DENIED, ("read_bytes",)),
    *_cases(TRAVERSAL, "..//..//..//etc//passwd", ACCESS_DENIED, ("write_file",)),
    *_cases(TRAVERSAL, "../../../tmp/sandkit-hostile", ACCESS_DENIED, ("write_bytes",)),
    *_cases(TRAVERSAL, "../" * 64 + "etc", ACCESS_DENIED, ("list_dir",)),
    *_cases(TRAVERSAL, "../outputs/../../etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(TRAVERSAL, "/../etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(TRAVERSAL, "/../../../../etc/shadow", ACCESS_DENIED, ("read_file",)),
    *_cases(TRAVERSAL, "{ws}/../../../etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(TRAVERSAL, "{ws}/" + "../" * 20 + "etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(TRAVERSAL, "{ws}/d/../../../../etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(TRAVERSAL, "{ws}/./../.././../../etc/passwd", ACCESS_DENIED, ("edit_file",)),
    *_cases(TRAVERSAL, "{ws}/d/.//..//..//..//..//..//etc", ACCESS_DENIED, ("glob",)),
    *_cases(TRAVERSAL, "{ws}/" + "../" * 14 + "etc/shadow", ACCESS_DENIED, ("grep",)),
    *_cases(TRAVERSAL, WORKSPACE + "/..", ACCESS_DENIED, ("list_dir",)),
    *_cases(TRAVERSAL, WORKSPACE + "/../..", ACCESS_DENIED, ("list_dir",)),
    *_cases(TRAVERSAL, WORKSPACE + "/../../user-data/../../etc", ACCESS_DENIED, ("list_dir",)),
    *_cases(TRAVERSAL, WORKSPACE + "/../uploads/../../x", ACCESS_DENIED, ("write_file",)),
    *_cases(
        TRAVERSAL,
        WORKSPACE + "/../../../../proc/self/root/etc/passwd",
        ACCESS_DENIED,
        ("read_file",),
    ),
    *_cases(TRAVERSAL, UPLOADS + "/../../../etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(TRAVERSAL, OUTPUTS + "/../../../../tmp/x", ACCESS_DENIED, ("write_file",)),
    *_cases(TRAVERSAL, SKILLS + "/../../etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(TRAVERSAL, "{ws}/../../../../..{host_ws}/f.txt", ACCESS_DENIED, ("read_file",)),
    *_cases(TRAVERSAL, "{ws}/../../../..{out}/{secret}", ACCESS_DENIED, ("read_file",)),
]

# -- lexical normalisation that lands inside: documented safe results ---------------------
LEXICAL = "lexical"
_lexical = [
    *_cases(LEXICAL, WORKSPACE + "/./../outputs/{name}.txt", OK, ("write_file",)),
    *_cases(LEXICAL, "{ws}/etc/../f.txt", OK, ("read_file",), "`..` cancels the link lexically"),
    *_cases(LEXICAL, "{ws}/f.txt/", OK, ("read_file",), "a trailing slash is normalised away"),
    *_cases(LEXICAL, "{ws}/./d/./g.txt", OK, ("read_file",)),
    *_cases(LEXICAL, "{ws}//d//g.txt", OK, ("read_file",)),
    *_cases(LEXICAL, "{ws}/d/../d/../d/g.txt", OK, ("read_bytes",)),
    *_cases(LEXICAL, "/mnt/skills/../user-data/workspace/{name}/f.txt", OK, ("read_file",)),
    *_cases(LEXICAL, "/etc/../mnt/user-data/workspace/{name}/f.txt", OK, ("read_file",)),
    *_cases(LEXICAL, "/../../mnt/user-data/workspace/{name}/d", OK, ("list_dir",)),
    *_cases(LEXICAL, "{name}/./d/../f.txt", OK, ("read_file",), "relative to the workspace"),
    *_cases(LEXICAL, "{ws}/\u202etxt.exe/../f.txt", OK, ("read_file",), "RTL override name"),
]

# -- encoded-looking, backslash and other spellings that are only names ------------------
SPELLING = "spelling"
_spelling = [
    *_cases(SPELLING, "{ws}/%2e%2e/%2e%2e/etc/passwd", NOT_FOUND, ("read_file",), "no decoding"),
    *_cases(SPELLING, "%2e%2e/%2e%2e/%2e%2e/etc/passwd", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "{ws}/%2e%2e%2f%2e%2e%2fetc%2fpasswd", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "{ws}/..%2f..%2fetc%2fpasswd", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "{ws}/%252e%252e/etc", NOT_FOUND, ("list_dir",), "double-encoded"),
    *_cases(SPELLING, "{ws}/..%c0%af..%c0%afetc%c0%afpasswd", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "{ws}/%c0%ae%c0%ae/etc", NOT_FOUND, ("list_dir",), "overlong UTF-8"),
    *_cases(SPELLING, "{ws}/.%2e/.%2e/etc/passwd", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "{ws}/%2e%2e%5c%2e%2e%5cetc", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "{ws}/f.txt%00.png", NOT_FOUND, ("read_file",), "an encoded NUL"),
    *_cases(SPELLING, "{ws}/%2e%2e/{name}.txt", OK, ("write_file",), "creates a dir %2e%2e"),
    *_cases(SPELLING, "{ws}/..\\..\\etc\\passwd", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "..\\..\\..\\etc\\passwd", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "{ws}/..\\/..\\/etc", NOT_FOUND, ("list_dir",), "a name ending in \\"),
    *_cases(SPELLING, "{ws}/d\\..\\..\\f.txt", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "\\etc\\passwd", NOT_FOUND, ("read_file",), "relative: one name"),
    *_cases(SPELLING, "{ws}/..\\..\\x.txt", OK, ("write_file",), "created literally"),
    *_cases(SPELLING, "{ws}/..;/..;/etc/passwd", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "{ws}/....//....//etc/passwd", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "{ws}/..././..././etc/passwd", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "{ws}/.../etc", NOT_FOUND, ("list_dir",)),
    *_cases(SPELLING, "{ws}/.. /etc", NOT_FOUND, ("list_dir",)),
    *_cases(SPELLING, "{ws}/ ../etc", NOT_FOUND, ("list_dir",)),
    *_cases(SPELLING, "{ws}/..\t/etc", NOT_FOUND, ("list_dir",)),
    *_cases(SPELLING, "~/.ssh/id_rsa", NOT_FOUND, ("read_file",), "no tilde expansion"),
    *_cases(SPELLING, "~root/.bashrc", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "$HOME/.bashrc", NOT_FOUND, ("read_file",), "no variable expansion"),
    *_cases(SPELLING, "${PWD}/etc/passwd", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "file:///etc/passwd", NOT_FOUND, ("read_file",), "not a URL"),
    *_cases(SPELLING, "\\\\server\\share\\x", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "C:\\Windows\\win.ini", NOT_FOUND, ("read_file",)),
    *_cases(SPELLING, "{ws}/*", NOT_FOUND, ("glob", "list_dir"), "no wildcard expansion"),
    *_cases(SPELLING, "{ws}/[fd]*", NOT_FOUND, ("read_file",)),
]

# -- unicode look-alikes of `.` and `/`: names, never separators --------------------------
UNICODE = "unicode"
_unicode = [
    *_cases(UNICODE, "{ws}/\u2025/etc/passwd", NOT_FOUND, ("read_file",), "two dot leader"),
    *_cases(UNICODE, "{ws}/\u2024\u2024/\u2024\u2024/etc", NOT_FOUND, ("list_dir",), "one dot"),
    *_cases(UNICODE, "{ws}/\uff0e\uff0e/\uff0e\uff0e/etc/passwd", NOT_FOUND, ("read_file",)),
    *_cases(UNICODE, "{ws}/..\uff0f..\uff0fetc\uff0fpasswd", NOT_FOUND, ("read_file",)),
    *_cases(UNICODE, "\uff0fetc\uff0fpasswd", NOT_FOUND, ("read_file",), "fullwidth solidus"),
    *_cases(UNICODE, "{ws}/..\u2215..\u2215etc", NOT_FOUND, ("list_dir",), "division slash"),
    *_cases(UNICODE, "{ws}/..\u2044..\u2044etc", NOT_FOUND, ("glob",), "fraction slash"),
    *_cases(UNICODE, "{ws}/..\u29f8..\u29f8etc", NOT_FOUND, ("list_dir",), "big solidus"),
    *_cases(UNICODE, "{ws}/..\uff3c..\uff3cetc", NOT_FOUND, ("read_file",), "fullwidth \\"),
    *_cases(UNICODE, "{ws}/\ufe52\ufe52/etc", NOT_FOUND, ("list_dir",), "small full stop"),
    *_cases(UNICODE, "{ws}/\u3002\u3002/etc", NOT_FOUND, ("list_dir",), "ideographic stop"),
    *_cases(UNICODE, "{ws}/\uff61\uff61/etc", NOT_FOUND, ("list_dir",), "halfwidth stop"),
    *_cases(UNICODE, "{ws}/.\u0307./etc", NOT_FOUND, ("list_dir",), "combining dot above"),
    *_cases(UNICODE, "{ws}/.\u200b./etc", NOT_FOUND, ("list_dir",), "zero-width space"),
    *_cases(UNICODE, "{ws}/\u2025\u2215x.txt", OK, ("write_file",), "created literally"),
    *_cases(UNICODE, "{ws}/\uff0e\uff0e\uff0fx.bin", OK, ("write_bytes",)),
    *_cases(UNICODE, "{ws}/\u2024\u2024", OK, ("append",)),
    *_cases(UNICODE, "{ws}/e\u0301", OK, ("write_file",), "decomposed, kept as given"),
    *_cases(UNICODE, "/mnt/user-data/w\u043erkspace/x", ACCESS_DENIED, ("write_file",)),
    *_cases(UNICODE, "/mnt/user\u2010data/workspace/x", ACCESS_DENIED, ("write_file",)),
    *_cases(UNICODE, "/mnt\uff0fuser-data\uff0fworkspace", ACCESS_DENIED, ("list_dir",)),
    *_cases(UNICODE, "\u2215etc\u2215passwd", NOT_FOUND, ("read_file",)),
    *_cases(UNICODE, "/\uff45tc/passwd", ACCESS_DENIED, ("read_file",), "fullwidth e"),
]

# -- NUL bytes and malformed arguments ------------------------------------------------------
MALFORMED = "malformed"
_malformed = [
    *_cases(MALFORMED, "", INVALID_ARGUMENT, ("read_file", "write_file", *DIRS)),
    *_cases(MALFORMED, "f\x00.txt", INVALID_ARGUMENT, ("read_file",)),
    *_cases(MALFORMED, "{ws}/f.txt\x00.png", INVALID_ARGUMENT, ("write_file", "read_bytes")),
    *_cases(MALFORMED, "{ws}/f.txt\x00", INVALID_ARGUMENT, ("write_bytes", "append")),
    *_cases(MALFORMED, "\x00", INVALID_ARGUMENT, ("list_dir", "grep")),
    *_cases(MALFORMED, "/etc/passwd\x00", INVALID_ARGUMENT, ("read_file",)),
    *_cases(MALFORMED, "\x00/etc/passwd", INVALID_ARGUMENT, ("glob",)),
    *_cases(MALFORMED, "{ws}/\x00/../f.txt", INVALID_ARGUMENT, ("read_file", "edit_file")),
    *_cases(MALFORMED, "{ws}/d\x00/../../../../etc", INVALID_ARGUMENT, ("list_dir", "cwd")),
    *_cases(MALFORMED, WORKSPACE + "\x00/../../etc/passwd", INVALID_ARGUMENT, ("read_file",)),
    *_cases(MALFORMED, "{ws}/\ud800", INVALID_ARGUMENT, ("write_file",), "a lone surrogate"),
    *_cases(
        SPELLING,
        "{ws}/\udcff.txt",
        NOT_FOUND,
        ("read_file",),
        "surrogate-escaped byte 0xff: the name os.fsencode makes of it",
    ),
    *_cases(MALFORMED, None, INVALID_ARGUMENT, ("read_file",)),
    *_cases(MALFORMED, 42, INVALID_ARGUMENT, ("write_file",)),
    *_cases(MALFORMED, b"/etc/passwd", INVALID_ARGUMENT, ("read_file",)),
    *_cases(MALFORMED, [WORKSPACE], INVALID_ARGUMENT, ("list_dir",)),
]

# -- 4 KiB names and paths --------------------------------------------------------------------
LONG = "long"
_long = [
    *_cases(LONG, "a" * 4097, INVALID_ARGUMENT, ("read_file",), "path over 4096 characters"),
    *_cases(LONG, "/" * 5000, INVALID_ARGUMENT, ("list_dir",)),
    *_cases(LONG, "{ws}/{fill:4097}", INVALID_ARGUMENT, ("write_file",)),
    *_cases(LONG, "{ws}/" + "./" * 2100 + "f.txt", INVALID_ARGUMENT, ("read_file",), "raw size"),
    *_cases(LONG, "{ws}/" + "../" * 1400, INVALID_ARGUMENT, ("list_dir",), "length first"),
    *_cases(LONG, "{ws}/" + "x" * 4096, INVALID_ARGUMENT, ("write_file", "read_file")),
    *_cases(LONG, "{ws}/" + "x" * 256, INVALID_ARGUMENT, ("write_file",)),
    *_cases(LONG, "{ws}/" + "é" * 128, INVALID_ARGUMENT, ("write_file",), "256 bytes"),
    *_cases(LONG, "{ws}/" + "🌍" * 64, INVALID_ARGUMENT, ("write_file",)),
    *_cases(
        LONG,
        "{ws}/" + "x" * 256 + "/../f.txt",
        INVALID_ARGUMENT,
        ("read_file",),
        "every component counts, also one that `..` cancels",
    ),
    *_cases(LONG, "{ws}/" + "x" * 255, OK, ("write_file",), "the longest allowed name"),
    *_cases(LONG, "{ws}/" + "é" * 127 + "a", OK, ("write_bytes",), "255 bytes"),
    *_cases(
        LONG,
        "{ws}/deep/{fill:4096}",
        OK,
        ("write_file",),
        "exactly 4096 characters: created, though the real path is longer than PATH_MAX",
    ),
    *_cases(LONG, "{ws}/deep/{fill:4095}", NOT_FOUND, ("read_file",)),
    *_cases(LONG, "{ws}/deep", OK, ("list_tree", "glob_tree")),
]

# -- symlinks made inside the workspace (by execute) -----------------------------------------
SYMLINK = "symlink"
_symlink = [
    # pointing out: refused, whatever the operation
    *_cases(SYMLINK, "{ws}/etc/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(SYMLINK, "{ws}/etc", ACCESS_DENIED, DIRS),
    *_cases(SYMLINK, "{ws}/etc/new.txt", ACCESS_DENIED, ("write_file",)),
    *_cases(SYMLINK, "{ws}/passwd", ACCESS_DENIED, (*READS, *WRITES)),
    *_cases(SYMLINK, "{ws}/slash/etc/shadow", ACCESS_DENIED, ("read_file",)),
    *_cases(SYMLINK, "{ws}/slash", ACCESS_DENIED, ("list_dir", "cwd", "glob_tree")),
    *_cases(SYMLINK, "{ws}/tmp/sandkit-hostile", ACCESS_DENIED, ("write_file",)),
    *_cases(SYMLINK, "{ws}/up2", ACCESS_DENIED, ("list_dir",)),
    *_cases(SYMLINK, "{ws}/up2/outputs/x", ACCESS_DENIED, ("write_file",)),
    *_cases(SYMLINK, "{ws}/uploads_link", ACCESS_DENIED, ("list_dir",), "each mount a jail"),
    *_cases(SYMLINK, "{ws}/uploads_abs", ACCESS_DENIED, ("read_file", "write_file")),
    *_cases(SYMLINK, "{ws}/outputs_link/x", ACCESS_DENIED, ("write_file",)),
    *_cases(SYMLINK, "{ws}/skills_link", ACCESS_DENIED, ("list_dir", "grep")),
    *_cases(SYMLINK, "{ws}/skills_link/x", ACCESS_DENIED, ("write_file",)),
    *_cases(SYMLINK, "{ws}/loop", ACCESS_DENIED, ("read_file", "write_file", "list_dir")),
    *_cases(SYMLINK, "{ws}/loop/x", ACCESS_DENIED, ("read_file",)),
    *_cases(SYMLINK, "{ws}/ping", ACCESS_DENIED, ("read_file", "append")),
    *_cases(SYMLINK, "{ws}/dangling", ACCESS_DENIED, ("read_file", "write_file")),
    *_cases(SYMLINK, "{ws}/chain1", ACCESS_DENIED, ("read_file", "list_dir")),
    *_cases(SYMLINK, "{ws}/deep_up", ACCESS_DENIED, ("list_dir",)),
    *_cases(SYMLINK, "{ws}/in_dir/esc/passwd", ACCESS_DENIED, ("read_file",), "nested link"),
    *_cases(SYMLINK, "{ws}/d/esc", ACCESS_DENIED, ("grep",)),
    *_cases(SYMLINK, "{ws}/up1/{name}/passwd", ACCESS_DENIED, ("read_file",)),
    *_cases(SYMLINK, "{ws}/out_dir", ACCESS_DENIED, ("list_dir", "glob", "grep_tree")),
    *_cases(SYMLINK, "{ws}/out_dir/new.txt", ACCESS_DENIED, ("write_file",)),
    *_cases(SYMLINK, "{ws}/out_file", ACCESS_DENIED, (*READS, *WRITES)),
    *_cases(SYMLINK, "{ws}/host_out", ACCESS_DENIED, ("read_file", "write_bytes")),
    *_cases(SYMLINK, "{ws}/data_root_link", ACCESS_DENIED, ("list_dir", "grep_tree")),
    # staying inside: followed, results name the real file
    *_cases(SYMLINK, "{ws}/up1/{name}/f.txt", OK, ("read_file",), "link to the workspace root"),
    *_cases(SYMLINK, "{ws}/in_rel", OK, ("read_file", "write_file", "edit_file", "append")),
    *_cases(SYMLINK, "{ws}/in_dir", OK, DIRS),
    *_cases(SYMLINK, "{ws}/in_dir/g.txt", OK, ("read_bytes",)),
    *_cases(SYMLINK, "{ws}/in_dir/back", OK, ("read_file",), "nested link back up"),
    *_cases(SYMLINK, "{ws}/in_abs", OK, ("read_file",), "absolute virtual target"),
    *_cases(SYMLINK, "{ws}/self/self/self/f.txt", OK, ("read_file",)),
    *_cases(SYMLINK, "{ws}/in_dangling", NOT_FOUND, ("read_file",)),
    *_cases(SYMLINK, "{ws}/in_dangling", OK, ("write_file",), "creates the in-mount target"),
    # searches and listings list links, never enter them
    *_cases(SYMLINK, "{ws}", OK, TREE_OPS, "links listed, never followed"),
]

# -- another thread's and another user's data --------------------------------------------
OTHERS = "others"
_others = [
    *_cases(OTHERS, "{host_other}/{secret}", ACCESS_DENIED, ("read_file", "write_file", "append")),
    *_cases(OTHERS, "{host_other}", ACCESS_DENIED, ("list_dir", "grep_tree")),
    *_cases(OTHERS, "{host_other_user}/{secret}", ACCESS_DENIED, ("read_file", "edit_file")),
    *_cases(OTHERS, "{data_root}/users/{other_user}", ACCESS_DENIED, ("glob_tree",)),
    *_cases(OTHERS, "{ws}/host_other/{secret}", ACCESS_DENIED, ("read_file", "write_file")),
    *_cases(OTHERS, "{ws}/host_other", ACCESS_DENIED, ("list_dir",)),
    *_cases(OTHERS, "{ws}/host_other_user/{secret}", ACCESS_DENIED, ("read_bytes",)),
    *_cases(OTHERS, "{ws}/other_thread_rel/{secret}", ACCESS_DENIED, ("read_file", "append")),
    *_cases(OTHERS, "{ws}/other_thread_rel", ACCESS_DENIED, ("list_dir", "grep")),
    *_cases(OTHERS, "{ws}/other_user_rel/workspace", ACCESS_DENIED, ("list_dir",)),
    *_cases(OTHERS, "{ws}/other_user_rel/workspace/{secret}", ACCESS_DENIED, ("write_file",)),
    *_cases(
        OTHERS,
        "../../../threads/{other_thread}/user-data/workspace/{secret}",
        ACCESS_DENIED,
        ("read_file",),
    ),
    *_cases(
        OTHERS,
        WORKSPACE + "/../../../users/{other_user}/threads/{other_user_thread}",
        ACCESS_DENIED,
        ("list_dir",),
    ),
    *_cases(OTHERS, "/mnt/user-data/{other_thread}/workspace", ACCESS_DENIED, ("list_dir",)),
]

# -- read-only mounts ---------------------------------------------------------------------------
READ_ONLY_MOUNTS = "read-only"
_read_only = [
    *_cases(READ_ONLY_MOUNTS, "{up}/seed.txt", READ_ONLY, WRITES, "the seeded upload"),
    *_cases(READ_ONLY_MOUNTS, "{up}/seed.txt", OK, ("read_file",), "uploads are readable"),
    *_cases(READ_ONLY_MOUNTS, "{up}/new.txt", READ_ONLY, ("write_file", "append")),
    *_cases(READ_ONLY_MOUNTS, "{up}/deep/new.txt", READ_ONLY, ("write_bytes",)),
    *_cases(READ_ONLY_MOUNTS, UPLOADS, READ_ONLY, ("write_file",), "decided before the kind"),
    *_cases(READ_ONLY_MOUNTS, "../uploads/{name}.txt", READ_ONLY, ("write_file",)),
    *_cases(READ_ONLY_MOUNTS, WORKSPACE + "/../uploads/{name}", READ_ONLY, ("write_bytes",)),
    *_cases(READ_ONLY_MOUNTS, "{ws}/../../uploads/x", READ_ONLY, ("write_file",)),
    *_cases(READ_ONLY_MOUNTS, UPLOADS + "/{name}-missing.txt", READ_ONLY, ("edit_file",)),
    *_cases(READ_ONLY_MOUNTS, SKILLS + "/skill.md", READ_ONLY, WRITES, "shared by all threads"),
    *_cases(READ_ONLY_MOUNTS, SKILLS + "/new/x.md", READ_ONLY, ("write_file",)),
    *_cases(READ_ONLY_MOUNTS, SKILLS, READ_ONLY, ("write_bytes",)),
    *_cases(READ_ONLY_MOUNTS, SKILLS + "/../user-data/uploads/x", READ_ONLY, ("write_file",)),
    *_cases(READ_ONLY_MOUNTS, SKILLS + "/skill.md", OK, ("read_file", "grep")),
]

# -- wrong kind ----------------------------------------------------------------------------------
KINDS = "kinds"
_kinds = [
    *_cases(KINDS, "{ws}/f.txt/x", NOT_A_DIRECTORY, ("read_file", "write_file")),
    *_cases(KINDS, "{ws}/d", IS_A_DIRECTORY, ("read_file", "write_file", "read_bytes", "append")),
    *_cases(KINDS, WORKSPACE, IS_A_DIRECTORY, ("write_file",), "a mount root"),
    *_cases(KINDS, "{ws}/f.txt", NOT_A_DIRECTORY, ("list_dir", "glob", "cwd")),
    *_cases(KINDS, "{ws}/missing", NOT_FOUND, DIRS),
]

# -- names that look like commands or formats: created literally, never run ----------------
LITERAL = "literal"
_literal = [
    *_cases(LITERAL, "{ws}/$(touch pwned)", OK, ("write_file",)),
    *_cases(LITERAL, "{ws}/`touch pwned`", OK, ("write_file",)),
    *_cases(LITERAL, "{ws}/;touch pwned;", OK, ("write_file",)),
    *_cases(LITERAL, "{ws}/|touch pwned", OK, ("write_file",)),
    *_cases(LITERAL, "{ws}/&& touch pwned", OK, ("write_file",)),
    *_cases(LITERAL, "{ws}/-rf", OK, ("write_file",)),
    *_cases(LITERAL, "{ws}/--help", OK, ("write_file",)),
    *_cases(LITERAL, "{ws}/a\nb", OK, ("write_file",)),
    *_cases(LITERAL, "{ws}/\x1b[31mred", OK, ("write_file",)),
    *_cases(LITERAL, "{ws}/{a,b}", OK, ("write_file",)),
    *_cases(LITERAL, "{ws}/.sandkit-0123456789abcdef.tmp", OK, ("write_file",), "temp prefix"),
    *_cases(LITERAL, "{ws}/%s%n%x", OK, ("write_file",)),
    *_cases(LITERAL, "{ws}/{HOME}", OK, ("write_file",), "braces are only a name"),
]

HOSTILE_PATHS: list[HostileCase] = [
    *_absolute,
    *_proc,
    *_traversal,
    *_lexical,
    *_spelling,
    *_unicode,
    *_malformed,
    *_long,
    *_symlink,
    *_others,
    *_read_only,
    *_kinds,
    *_literal,
]
CATEGORIES = tuple(dict.fromkeys(case.category for case in HOSTILE_PATHS))
