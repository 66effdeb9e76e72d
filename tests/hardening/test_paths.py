"""Hostile paths against every provider kind (issue 7, item 1).

Three attacks, each on one fresh box per provider, each reporting every
mismatch at once (with case ids) instead of stopping at the first:

- the corpus of `hostile_corpus.py` (traversal in every spelling, absolute
  host paths, /proc/self/root, symlinks out, NUL bytes, 4 KiB names,
  unicode look-alikes, other threads' and users' data, read-only mounts);
- hard links made inside the workspace (by `execute`) to files outside;
- a directory swapped for a symlink (to /etc, to a directory outside the
  mounts, to another thread's data) between the check and the use, while
  other threads hammer file operations through it.

Every case must give the documented code or the documented safe result; no
content from outside the thread's mappings may come back (markers planted
there are looked for in every result and error); nothing outside may change
(snapshots before and after, in the box and on the host); the real data root
appears in no output or error. Figures per provider: `paths_tried`,
`escapes` (outside content returned, outside file changed, or a refused
access that succeeded) and `leaks` (the data root in a result or error).

Where another thread's data lives: for local, Docker and Kubernetes in the
host data root (seeded there directly, as the platform would); for the E2B
stand-in it lives in that thread's own box, so a second box is acquired and
the marker written into it (the host copy is seeded too, and must stay out
of reach just the same).
"""

from __future__ import annotations

import base64
import collections
import contextlib
import dataclasses
import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sandkit import ErrorCode, ExecuteResult, SandboxError, SandboxKey
from sandkit.provider import SandboxProvider
from sandkit.sandbox import Sandbox
from sandkit.testing.conformance.suite import CheckedSandbox, in_layout, q, sh, strings_in, unique

from .figures import Figures
from .hostile_corpus import (
    CATEGORIES,
    HOSTILE_PATHS,
    LINKS,
    MUTATING,
    NESTED_LINKS,
    OK,
    OPS,
    SAFE,
    UPLOADS,
    WORKSPACE,
    HostileCase,
    render,
)
from .targets import Target, forbidden_for

# Kinds whose thread data lives in the box, not in the host data root.
DATA_IN_BOX = frozenset({"e2b"})
# What the box may not change outside its mappings (box paths; on local, the host's).
BOX_WATCH = [
    "/etc/passwd",
    "/etc/shadow",
    "/etc/hosts",
    "/etc/new.txt",
    "/bin/sh",
    "/tmp/sandkit-hostile",
    "/tmp/x",
    "/dev/shm/sandkit-hostile",
    "/root/.ssh/authorized_keys",
    "/mnt/user-data/x",
    "/mnt/user-data/workspace2",
    "/mnt/user-data/Workspace",
    "/mnt/skillsx",
]
LINK_NAMES = frozenset(LINKS) | frozenset(NESTED_LINKS)

# Prints {key: fingerprint} for the paths in argv[1] (base64 JSON: [flat, recursive]).
# Keys are indexes (plus the relative path below a recursive one), never the
# paths themselves: a host path echoed back would read as a leak.
SNAPSHOT_SCRIPT = r"""
import base64, hashlib, json, os, stat, sys
flat, deep = json.loads(base64.b64decode(sys.argv[1]))
out = {}
def one(key, p, recurse):
    try:
        st = os.lstat(p)
    except OSError as e:
        out[key] = "missing" if e.errno == 2 else "errno %d" % e.errno
        return
    if stat.S_ISLNK(st.st_mode):
        out[key] = "link %d" % len(os.readlink(p))
    elif stat.S_ISDIR(st.st_mode):
        out[key] = "dir"
        if recurse:
            for name in sorted(os.listdir(p)):
                one(key + "/" + name, os.path.join(p, name), True)
    elif stat.S_ISREG(st.st_mode):
        try:
            with open(p, "rb") as f:
                digest = hashlib.sha256(f.read(1 << 20)).hexdigest()[:16]
        except OSError as e:
            digest = "errno %d" % e.errno
        out[key] = "file %d %s" % (st.st_size, digest)
    else:
        out[key] = "other"
for i, p in enumerate(flat):
    one("f%d" % i, p, False)
for i, p in enumerate(deep):
    one("d%d" % i, p, True)
print(json.dumps(out, sort_keys=True))
"""


def box_snapshot(sb: Any, flat: list[str], deep: list[str]) -> dict[str, str]:
    """Fingerprints of paths as the box sees them (through `execute`, so inside the box)."""
    arg = base64.b64encode(json.dumps([flat, deep]).encode()).decode()
    script = base64.b64encode(SNAPSHOT_SCRIPT.encode()).decode()
    command = f'python3 -c "$(printf %s {script} | base64 -d)" {arg}'
    names = {f"f{i}": p for i, p in enumerate(flat)} | {f"d{i}": p for i, p in enumerate(deep)}
    found: dict[str, str] = {}
    for key, value in json.loads(sh(sb, command)).items():
        head, _, rest = key.partition("/")
        found[names[head] + ("/" + rest if rest else "")] = value
    return found


def host_snapshot(roots: list[Path], skip: list[Path]) -> dict[str, str]:
    """Fingerprints of every entry below `roots` on the host, except below `skip`."""
    found: dict[str, str] = {}
    skipped = {str(p) for p in skip}
    for root in roots:
        for current, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if os.path.join(current, d) not in skipped]
            found[current] = "dir"
            for name in files:
                path = os.path.join(current, name)
                if os.path.islink(path):
                    found[path] = "link " + os.readlink(path)
                else:
                    with contextlib.suppress(OSError):
                        found[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    return found


def changed(before: dict[str, str], after: dict[str, str]) -> list[tuple[str, str]]:
    """(path, what changed) for every entry that differs."""
    return sorted(
        (p, f"{before.get(p, 'absent')} -> {after.get(p, 'absent')}")
        for p in set(before) | set(after)
        if before.get(p) != after.get(p)
    )


def escapes_between(
    audit: Audit, snapshots: tuple[dict[str, str], ...], later: tuple[dict[str, str], ...]
) -> None:
    """One escape per outside path that changed (the same path seen from box and host once)."""
    for before, after in zip(snapshots, later, strict=True):
        for path, what in changed(before, after):
            audit.escape(f"outside {path}", f"changed: {what}")


def user_data(data_root: Path, key: SandboxKey) -> Path:
    return data_root / "users" / key.user_id / "threads" / key.thread_id / "user-data"


def plant(directory: Path, secret: str, listed: str, content: str) -> None:
    """A marker file (content looked for in results) and a name only a listing would show."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in (secret, listed, "f.txt", "g.txt"):
        (directory / name).write_text(content)


# -- checking results -----------------------------------------------------------------


class Audit:
    """Runs calls, classifies their outcome and scans everything they return."""

    def __init__(self, forbidden: list[str], sentinels: list[str]) -> None:
        self.forbidden = [f for f in forbidden if f]
        self.sentinels = [s for s in sentinels if s]
        self.tried = 0
        self.problems: list[str] = []
        self.escapes: set[str] = set()
        self.leaks: set[str] = set()
        self._lock = threading.Lock()

    def call(self, case_id: str, fn: Callable[[], Any], scan: bool = True) -> tuple[Any, Any]:
        """(result, None) or (None, exception); the data root and markers are looked for."""
        try:
            result = fn()
        except Exception as exc:
            texts = [str(exc), repr(exc)]
            self.scan(case_id, texts, sentinels=scan)
            return None, exc
        self.scan(case_id, result, sentinels=scan)
        return result, None

    def scan(self, case_id: str, value: Any, sentinels: bool = True) -> None:
        texts = list(strings_in(value))
        for bad in self.forbidden:
            if any(bad in text for text in texts):
                self.leak(case_id, f"the data root {bad!r} in the answer")
        for marker in self.sentinels if sentinels else []:
            if any(marker in text for text in texts):
                self.escape(case_id, f"content from outside the mappings came back: {marker!r}")

    def problem(self, case_id: str, what: str) -> None:
        with self._lock:
            self.problems.append(f"{case_id}: {what}")

    def escape(self, case_id: str, what: str) -> None:
        with self._lock:
            self.escapes.add(case_id)
        self.problem(case_id, "ESCAPE: " + what)

    def leak(self, case_id: str, what: str) -> None:
        with self._lock:
            self.leaks.add(case_id)
        self.problem(case_id, "LEAK: " + what)

    def record(self, kind: str, figures: Figures) -> None:
        figures.add(kind, "paths_tried", self.tried)
        figures.add(kind, "escapes", len(self.escapes))
        figures.add(kind, "leaks", len(self.leaks))

    def verdict(self, title: str) -> None:
        if self.problems:
            shown = "\n".join(self.problems[:120])
            more = len(self.problems) - 120
            raise AssertionError(
                f"{title}: {len(self.problems)} problem(s) in {self.tried} cases "
                f"({len(self.escapes)} escapes, {len(self.leaks)} leaks)\n{shown}"
                + (f"\n... and {more} more" if more > 0 else "")
            )


def run_op(sb: Sandbox, op: str, path: Any, token: str) -> Any:
    write = f"root: hostile write {token}\n"
    if op == "read_file":
        return sb.read_file(path)
    if op == "read_bytes":
        return sb.read_bytes(path)
    if op == "write_file":
        return sb.write_file(path, write)
    if op == "append":
        return sb.write_file(path, write, append=True)
    if op == "write_bytes":
        return sb.write_bytes(path, write.encode())
    if op == "edit_file":
        # new contains old: the file stays editable by the next case
        return sb.edit_file(path, "root", "root+", replace_all=True)
    if op == "list_dir":
        return sb.list_dir(path)
    if op == "glob":
        return sb.glob("*", path=path)
    if op == "grep":
        return sb.grep("root", path=path)
    if op == "cwd":
        return sb.execute("pwd", cwd=path)
    if op == "list_tree":
        return sb.list_dir(path, max_depth=10)
    if op == "glob_tree":
        return sb.glob("**/*", path=path, include_dirs=True)
    if op == "grep_tree":
        return sb.grep(".", path=path, max_results=500)
    raise AssertionError(f"unknown operation {op}")


def result_paths(result: Any) -> list[str]:
    if isinstance(result, bytes):
        return []
    if isinstance(result, ExecuteResult):
        return [result.stdout.strip()]
    found = [result.path]
    for attr in ("entries", "matches", "counts"):
        found += [item.path for item in getattr(result, attr, [])]
    found += list(getattr(result, "paths", [])) + list(getattr(result, "files", []))
    return found


def through_a_link(path: str, asked: Any, ws: str) -> bool:
    """True when `path` passes through one of the tree's symlinks (entered, not listed).

    The path asked for may itself be a link that stays inside (it is resolved
    first); below it, and below the tree, links are listed and never entered.
    """
    for base in (asked, ws):
        if isinstance(base, str) and path.startswith(base.rstrip("/") + "/"):
            parts = path[len(base.rstrip("/")) + 1 :].split("/")
            return any(part in LINK_NAMES for part in parts[:-1])
    return False


def check_case(audit: Audit, sb: Sandbox, case: HostileCase, values: dict[str, str]) -> None:
    audit.tried += 1
    path = case.render(values)
    result, exc = audit.call(case.id, lambda: run_op(sb, case.op, path, values["token"]))
    if exc is None and case.expect in (OK, SAFE):
        if isinstance(result, ExecuteResult) and result.exit_code != 0:
            audit.problem(case.id, f"command failed: {result.stderr[:200]!r}")
            return
        for p in result_paths(result):
            if not in_layout(p):
                audit.escape(case.id, f"returned a path outside the layout: {p!r}")
            elif through_a_link(p, path, values["ws"]):
                audit.escape(case.id, f"went through a symlink of the tree: {p!r}")
        return
    if exc is None:
        assert isinstance(case.expect, ErrorCode)
        what = f"succeeded; expected {case.expect.value}"
        if case.expect in (ErrorCode.ACCESS_DENIED, ErrorCode.READ_ONLY):
            audit.escape(case.id, what)
        else:
            audit.problem(case.id, what)
        return
    if not isinstance(exc, SandboxError):
        audit.problem(case.id, f"raised {type(exc).__name__}: {exc}")
        return
    expected = ErrorCode.ACCESS_DENIED if case.expect in (OK, SAFE) else case.expect
    if case.expect == OK or exc.code is not expected:
        want = "OK" if case.expect == OK else getattr(expected, "value", expected)
        audit.problem(case.id, f"expected {want}, got {exc!r}")
    elif not exc.message:
        audit.problem(case.id, "an error without a message")


# -- the scene: a box, a tree, markers inside and out ---------------------------------------


@dataclasses.dataclass
class Scene:
    sb: Sandbox
    checked: Sandbox  # the same box behind CheckedSandbox, for set-up and checks
    key: SandboxKey
    values: dict[str, str]
    sentinels: list[str]
    host_roots: list[Path]
    host_skip: list[Path]
    box_deep: list[str]
    other_box: Sandbox | None = None

    @property
    def ws(self) -> str:
        return self.values["ws"]

    def snapshot(self, flat: list[str]) -> tuple[dict[str, str], dict[str, str]]:
        box = box_snapshot(self.checked, flat, self.box_deep)
        return box, host_snapshot(self.host_roots, self.host_skip)

    def remove_new(self, before: dict[str, str], after: dict[str, str]) -> None:
        """Delete what an escape created outside (already counted), so nothing stays behind."""
        for path, state in after.items():
            if before.get(path, "missing") == "missing" and state != "missing":
                self.sb.execute(f"rm -rf {q(path)}")


@contextlib.contextmanager
def scene(
    target: Target,
    provider: SandboxProvider,
    data_root: Path,
    outside: Path,
    skills: Path | None = None,
) -> Iterator[Scene]:
    """A box with marker files outside its mappings in every place the corpus points at.

    `outside` is a host directory next to the data root (not below it). The
    box-side outside directory `{out}` lives in /tmp of the box (on local,
    of the host) and is removed afterwards.
    """
    token = uuid.uuid4().hex[:12]
    key = SandboxKey(unique("u"), unique("t"))
    other_thread = SandboxKey(key.user_id, unique("t"))
    other_user = SandboxKey(unique("v"), unique("t"))
    secret = f"secret-{token}.txt"
    listed = f"only-listed-{token}"
    markers = {
        "other_thread": f"OTHER-THREAD-{token}",
        "other_user": f"OTHER-USER-{token}",
        "host_out": f"HOST-OUTSIDE-{token}",
        "box_out": f"BOX-OUTSIDE-{token}",
        "data_root": f"DATA-ROOT-{token}",
    }
    host_other = user_data(data_root, other_thread) / "workspace"
    host_other_user = user_data(data_root, other_user) / "workspace"
    # "root:" in each: edit_file("root", ...) through a hard link finds its text.
    plant(host_other, secret, listed, f"root: {markers['other_thread']}\n")
    plant(host_other_user, secret, listed, f"root: {markers['other_user']}\n")
    plant(outside, secret, listed, f"root: {markers['host_out']}\n")
    (data_root / secret).write_text(f"root: {markers['data_root']}\n")

    sb = provider.acquire(key)
    checked = CheckedSandbox(sb, forbidden_for(data_root))
    other_box = None
    if target.kind in DATA_IN_BOX:
        other_box = provider.acquire(other_thread)
        other_box.write_file(f"{WORKSPACE}/{secret}", markers["other_thread"] + "\n")
        other_box.write_file(f"{WORKSPACE}/{listed}", markers["other_thread"] + "\n")

    name = unique()
    ws = f"{WORKSPACE}/{name}"
    out = f"/tmp/sk-out-{token}"
    up = f"{UPLOADS}/{unique('up')}"
    values = {
        "ws": ws,
        "name": name,
        "up": up,
        "out": out,
        "data_root": str(data_root),
        "host_ws": str(user_data(data_root, key) / "workspace" / name),
        "host_other": str(host_other),
        "host_other_user": str(host_other_user),
        "host_out": str(outside),
        "other_thread": other_thread.thread_id,
        "other_user": other_user.user_id,
        "other_user_thread": other_user.thread_id,
        "secret": secret,
        "token": token,
    }
    try:
        sh(checked, f"mkdir -p {q(out)}")
        for file_name in (secret, listed, "f.txt", "g.txt"):
            line = f"root: {markers['box_out']}"
            sh(checked, f"printf '%s\\n' {q(line)} > {q(out + '/' + file_name)}")
        passwd = checked.execute("head -n 1 /etc/passwd").stdout.strip()
        seed = f"UPLOAD-{token}\n".encode()
        rel = up[len(UPLOADS) + 1 :] + "/seed.txt"
        provider.upload(key, rel, seed)
        checked.write_file(f"{ws}/f.txt", "root: hostile fixture\n")
        checked.write_file(f"{ws}/d/g.txt", "root in a subdirectory\n")
        sh(checked, "mkdir deep", cwd=ws)
        links = " && ".join(f"ln -s {q(render(t, values))} {q(n)}" for n, t in LINKS.items())
        sh(checked, links, cwd=ws)
        nested = " && ".join(f"ln -s {q(t)} {q(n)}" for n, t in NESTED_LINKS.items())
        sh(checked, nested, cwd=f"{ws}/d")
        own = user_data(data_root, key)
        roots = [data_root, outside] + ([skills] if skills else [])
        yield Scene(
            sb=sb,
            checked=checked,
            key=key,
            values=values,
            sentinels=[*markers.values(), listed, passwd],
            host_roots=roots,
            host_skip=[own / "workspace", own / "outputs"],
            box_deep=[out],
            other_box=other_box,
        )
    finally:
        with contextlib.suppress(Exception):
            sb.execute(f"rm -rf {q(out)}")


# -- the corpus ------------------------------------------------------------------------------


def test_corpus_is_large_distinct_and_covers_every_operation() -> None:
    keys = [(repr(c.path), c.op) for c in HOSTILE_PATHS]
    assert len(keys) >= 200
    assert len(keys) == len(set(keys)), "duplicate cases"
    assert {c.op for c in HOSTILE_PATHS} == set(OPS)
    for category in CATEGORIES:
        cases = [c for c in HOSTILE_PATHS if c.category == category]
        assert len(cases) >= 10, category


def test_hostile_path_corpus(
    target: Target,
    make_provider: Callable[..., SandboxProvider],
    data_root: Path,
    tmp_path: Path,
    figures: Figures,
) -> None:
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "skill.md").write_text("a shared skill, read-only\n")
    provider = make_provider(skills_dir=skills)
    with scene(target, provider, data_root, tmp_path / "outside", skills) as sc:
        audit = Audit(forbidden_for(data_root), sc.sentinels)
        watch = [*BOX_WATCH, sc.values["host_out"], sc.values["host_other"]]
        box_before, host_before = sc.snapshot(watch)
        upload = f"{sc.values['up']}/seed.txt"
        seed = sc.checked.read_bytes(upload)
        # Reads first: a write case may create what a read case expects to be missing.
        ordered = sorted(HOSTILE_PATHS, key=lambda c: c.op in MUTATING)
        for case in ordered:
            check_case(audit, sc.sb, case, sc.values)
        box_after, host_after = sc.snapshot(watch)
        escapes_between(audit, (box_before, host_before), (box_after, host_after))
        sc.remove_new(box_before, box_after)
        if sc.checked.read_bytes(upload) != seed:
            audit.escape("uploads", f"{upload} changed")
        if sc.checked.read_file("/mnt/skills/skill.md").content != "a shared skill, read-only\n":
            audit.escape("skills", "/mnt/skills/skill.md changed")
        if sc.other_box is not None:
            other = sc.other_box.read_file(f"{WORKSPACE}/{sc.values['secret']}").content
            if sc.sentinels[0] not in other:
                audit.escape("other thread's box", f"its marker changed: {other!r}")
        for where in (sc.ws, WORKSPACE):
            names = {e.name for e in sc.checked.list_dir(where, max_depth=1).entries}
            if "pwned" in names:
                audit.escape("literal", f"a name was run as a command: pwned in {where}")
        audit.record(target.kind, figures)
        audit.verdict(f"hostile path corpus on {target.kind}")


# -- hard links --------------------------------------------------------------------------------

HARDLINK_OPS = ("read_file", "read_bytes", "write_file", "write_bytes", "append", "edit_file")


def test_hard_links_to_outside_files_never_change_them(
    target: Target,
    make_provider: Callable[..., SandboxProvider],
    data_root: Path,
    tmp_path: Path,
    figures: Figures,
) -> None:
    """Writes replace a hard-linked name, never the shared inode; reads give nothing new.

    What can be linked depends on the box. Docker and Kubernetes: the
    workspace is its own mount, so link(2) to anything else fails (EXDEV) and
    host paths are not even visible. E2B: the box is one file system, so a
    file of the box outside the mounts (its /tmp) can be linked, but never a
    host file. Local: `execute` runs on the host (no boundary) and links to
    host files work. Wherever a link exists, reading it returns exactly what
    the command itself can read (`cat`), and no write through it may change
    the file it shares an inode with.
    """
    provider = make_provider()
    with scene(target, provider, data_root, tmp_path / "outside") as sc:
        audit = Audit(forbidden_for(data_root), sc.sentinels)
        v = sc.values
        host_files = [
            f"{v['host_out']}/{v['secret']}",
            f"{v['host_other']}/{v['secret']}",
            f"{v['host_other_user']}/{v['secret']}",
        ]
        outside_files = [*host_files, f"{v['out']}/{v['secret']}"]
        if target.isolates_execute:  # never on the host's own /etc/passwd
            outside_files.append("/etc/passwd")
        box_before, host_before = sc.snapshot(outside_files)
        lines = []
        for i, source in enumerate(outside_files):
            for op in HARDLINK_OPS:
                link = f"hl-{i}-{op}"
                lines.append(f"if ln {q(source)} {link} 2>/dev/null; then echo {link}; fi")
        made_names = set(sh(sc.checked, "; ".join(lines), cwd=sc.ws).split())
        linked = []
        for i, source in enumerate(outside_files):
            readable = sc.checked.execute(f"cat {q(source)}").stdout
            for op in HARDLINK_OPS:
                link = f"hl-{i}-{op}"
                case_id = f"hardlink/{op}:{source}"
                audit.tried += 1
                path = f"{sc.ws}/{link}"
                if link not in made_names:
                    _, exc = audit.call(case_id, lambda p=path: sc.sb.read_file(p))
                    if not (isinstance(exc, SandboxError) and exc.code is ErrorCode.NOT_FOUND):
                        audit.problem(case_id, f"no link was made, expected NOT_FOUND: {exc!r}")
                    continue
                linked.append(case_id)
                if target.isolates_execute and source in host_files:
                    audit.escape(case_id, "the box made a hard link to a host file")
                result, exc = audit.call(
                    case_id, lambda p=path, o=op: run_op(sc.sb, o, p, v["token"]), scan=False
                )
                if exc is not None:
                    audit.problem(case_id, f"expected OK, got {exc!r}")
                elif op in ("read_file", "read_bytes"):
                    got = result if isinstance(result, bytes) else result.content.encode()
                    if got.decode(errors="replace") != readable:
                        audit.escape(case_id, "read more than the command itself could")
                elif result.path != path:
                    audit.problem(case_id, f"wrote {result.path}, not the link's own name")
        box_after, host_after = sc.snapshot(outside_files)
        escapes_between(audit, (box_before, host_before), (box_after, host_after))
        sc.remove_new(box_before, box_after)
        print(f"\n[{target.kind}] hard links made: {len(linked)} of {audit.tried}")
        audit.record(target.kind, figures)
        audit.verdict(f"hard links on {target.kind}")


# -- symlink swapped between check and use -------------------------------------------------

# Swaps `d` (a directory) for a symlink to each target in turn, and `d/f.txt`
# for a symlink to `<target>/f.txt`, as fast as it can for argv[1] seconds.
SWAP_SCRIPT = r"""
import base64, json, os, shutil, sys, time
targets = json.loads(base64.b64decode(sys.argv[2]))
end = time.time() + float(sys.argv[1])
swaps = 0
def settle():
    if os.path.islink("d"):
        os.unlink("d")
    if os.path.isdir("d.real"):
        if os.path.isdir("d"):  # a write made a new d meanwhile
            shutil.rmtree("d")
        os.rename("d.real", "d")
    if os.path.islink("d/f.txt"):
        os.unlink("d/f.txt")
    if os.path.exists("d/f.real"):
        os.rename("d/f.real", "d/f.txt")
while time.time() < end:
    for t in targets:
        try:
            os.rename("d", "d.real")
            os.symlink(t, "d")
            swaps += 1
            os.unlink("d")
            os.rename("d.real", "d")
            os.rename("d/f.txt", "d/f.real")
            os.symlink(t + "/f.txt", "d/f.txt")
            swaps += 1
            os.unlink("d/f.txt")
            os.rename("d/f.real", "d/f.txt")
        except OSError:
            try:
                settle()
            except OSError:
                pass
for _ in range(400):  # the calls hammering d go on: a write may remake d mid-rmtree
    try:
        settle()
        break
    except OSError:
        time.sleep(0.005)
print(swaps)
"""

RACE_SECONDS = 4.0
RACE_HAMMERS = 3
ALLOWED_RACE_CODES = {ErrorCode.ACCESS_DENIED, ErrorCode.NOT_FOUND, ErrorCode.NOT_A_DIRECTORY}


def race_ops(base: str) -> list[tuple[str, Callable[[Sandbox], Any]]]:
    d = f"{base}/d"
    return [
        (f"read_file:{d}/f.txt", lambda sb: sb.read_file(f"{d}/f.txt")),
        (f"read_bytes:{d}/g.txt", lambda sb: sb.read_bytes(f"{d}/g.txt")),
        (f"read_file:{d}/passwd", lambda sb: sb.read_file(f"{d}/passwd")),
        (f"write_file:{d}/f.txt", lambda sb: sb.write_file(f"{d}/f.txt", "inside f\n")),
        (f"write_file:{d}/new.txt", lambda sb: sb.write_file(f"{d}/new.txt", "inside\n")),
        (f"write_bytes:{d}/b.bin", lambda sb: sb.write_bytes(f"{d}/b.bin", b"inside\n")),
        (f"append:{d}/g.txt", lambda sb: sb.write_file(f"{d}/g.txt", "g\n", append=True)),
        (f"edit_file:{d}/f.txt", lambda sb: sb.edit_file(f"{d}/f.txt", "inside", "INSIDE")),
        (f"list_dir:{d}", lambda sb: sb.list_dir(d)),
        (f"list_dir:{base}", lambda sb: sb.list_dir(base, max_depth=3)),
        (f"glob:{d}", lambda sb: sb.glob("**/*", path=d)),
        (f"grep:{d}", lambda sb: sb.grep(".", path=d)),
        (f"grep:{base}", lambda sb: sb.grep(".", path=base)),
    ]


def race_label(exc: Exception | None) -> str:
    """Outcome of one hammered call; ACCESS_DENIED split by where the link was caught."""
    if exc is None:
        return "ok"
    if not isinstance(exc, SandboxError):
        return type(exc).__name__
    if exc.code is ErrorCode.ACCESS_DENIED:
        # The jail check (realpath) says "resolves outside"; the fd walk refuses the link.
        return "denied at check" if "resolves outside" in exc.message else "denied at use"
    return exc.code.value


def test_symlink_swapped_between_check_and_use(
    target: Target,
    make_provider: Callable[..., SandboxProvider],
    data_root: Path,
    tmp_path: Path,
    figures: Figures,
) -> None:
    """Nothing outside is read or written, whichever state each call catches `d` in."""
    provider = make_provider()
    with scene(target, provider, data_root, tmp_path / "outside") as sc:
        audit = Audit(forbidden_for(data_root), sc.sentinels)
        v = sc.values
        base = f"{sc.ws}/race"
        for name in ("f.txt", "g.txt", "passwd"):
            sc.checked.write_file(f"{base}/d/{name}", f"inside {name}\n")
        swap_targets = ["/etc", v["out"], v["host_other"], v["host_other_user"], v["host_out"]]
        # A write through a followed link would land here; none of them may appear.
        landing = [f"{t}/{n}" for t in ("/etc",) for n in ("f.txt", "g.txt", "new.txt", "b.bin")]
        watch = [*landing, v["host_out"], v["host_other"], v["host_other_user"]]
        box_before, host_before = sc.snapshot(watch)
        script = base64.b64encode(SWAP_SCRIPT.encode()).decode()
        targets_arg = base64.b64encode(json.dumps(swap_targets).encode()).decode()
        command = f'python3 -c "$(printf %s {script} | base64 -d)" 1.0 {targets_arg}'
        ops = race_ops(base)
        stop = threading.Event()
        swaps: list[int] = []
        outcomes: collections.Counter[str] = collections.Counter()
        counting = threading.Lock()

        def swapper() -> None:
            while not stop.is_set():
                result = sc.sb.execute(command, cwd=base, timeout=30)
                audit.scan("swapper", result)
                if result.exit_code != 0:
                    audit.problem("swapper", f"exit {result.exit_code}: {result.stderr[-300:]}")
                    return
                swaps.append(int(result.stdout.split()[-1]))

        def hammer(offset: int) -> None:
            i = offset
            while not stop.is_set():
                case_id, fn = ops[i % len(ops)]
                i += 1
                _, exc = audit.call(f"race/{case_id}", lambda fn=fn: fn(sc.sb))
                label = race_label(exc)
                with counting:
                    outcomes[label] += 1
                if exc is None:
                    continue
                allowed = set(ALLOWED_RACE_CODES)
                if case_id.startswith("edit_file"):
                    allowed.add(ErrorCode.INVALID_ARGUMENT)  # "inside" already replaced
                if not (isinstance(exc, SandboxError) and exc.code in allowed):
                    audit.problem(f"race/{case_id}", f"unexpected {exc!r}")

        workers = [threading.Thread(target=swapper, name="swapper")]
        workers += [
            threading.Thread(target=hammer, args=(k * 4,), name=f"hammer-{k}")
            for k in range(RACE_HAMMERS)
        ]
        for worker in workers:
            worker.start()
        try:
            time.sleep(RACE_SECONDS)
        finally:
            stop.set()
            for worker in workers:
                worker.join(timeout=60)
        assert not any(w.is_alive() for w in workers), "a race worker hung"
        audit.tried += len(ops)
        box_after, host_after = sc.snapshot(watch)
        escapes_between(audit, (box_before, host_before), (box_after, host_after))
        sc.remove_new(box_before, box_after)
        print(
            f"\n[{target.kind}] race: {sum(swaps)} swaps, {outcomes.total()} calls: "
            + ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items()))
        )
        audit.record(target.kind, figures)
        audit.verdict(f"symlink swap race on {target.kind}")
        assert sum(swaps) > 0, "the swapper never swapped"
        assert outcomes.get("ok", 0) > 0, "no call got through while d was in place"
