"""Builds the agent zipapp: sandkit/runtime + agent + net, runnable by any python3 >= 3.9.

Byte-for-byte reproducible: entries sorted, fixed timestamps and
permissions, no compression (zlib builds differ in their output; the file is
small). Cached under `$XDG_CACHE_HOME/sandkit/` (default `~/.cache/sandkit/`)
by a hash of its content, so it is built once per sandkit version.

    python -m sandkit.agent.build OUT      # write it somewhere (Dockerfiles)
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

# Bump when the layout below changes, so cached files are not reused.
FORMAT = "sandkit-agent-zipapp/3"
SHEBANG = b"#!/usr/bin/env python3\n"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
FILE_MODE = 0o644

# The real sandkit/__init__.py imports pydantic; the box gets this instead.
STUB_INIT = b'"""sandkit, as shipped inside a sandbox: the runtime and the agent only."""\n'
MAIN = b"""import sys

from sandkit.agent.__main__ import main

sys.exit(main())
"""
# Host-side modules of the agent package that the box does not need.
EXCLUDED = frozenset({"build.py"})


def _package_dir() -> Path:
    return Path(__file__).resolve().parent.parent


def zipapp_members() -> List[Tuple[str, bytes]]:
    """(archive name, content) of every file in the zipapp, sorted by name."""
    root = _package_dir()
    members: Dict[str, bytes] = {
        "__main__.py": MAIN,
        "sandkit/__init__.py": STUB_INIT,
    }
    for sub in ("runtime", "agent", "net"):
        for path in sorted((root / sub).glob("*.py")):
            if path.name in EXCLUDED:
                continue
            members["sandkit/%s/%s" % (sub, path.name)] = path.read_bytes()
    return sorted(members.items())


def content_hash(members: Optional[List[Tuple[str, bytes]]] = None) -> str:
    """What names a zipapp: its source members and (for the generated Unicode tables)
    the Python and Unicode versions of the interpreter that builds it."""
    from ..runtime.rxinfo import tables_key

    digest = hashlib.sha256(FORMAT.encode() + b"\0" + tables_key().encode())
    for name, data in members if members is not None else zipapp_members():
        digest.update(b"\0%s\0%d\0" % (name.encode(), len(data)))
        digest.update(data)
    return digest.hexdigest()


def write_zipapp(out: Path, members: Optional[List[Tuple[str, bytes]]] = None) -> Path:
    """Write the zipapp to `out` atomically (temp file in the same dir, then rename)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".agent-", suffix=".pyz.tmp", dir=str(out.parent))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(SHEBANG)
            with zipfile.ZipFile(handle, "w", zipfile.ZIP_STORED) as archive:
                for name, data in members if members is not None else with_tables(zipapp_members()):
                    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
                    info.compress_type = zipfile.ZIP_STORED
                    info.create_system = 3  # unix, whatever builds it
                    info.external_attr = (0o100000 | FILE_MODE) << 16
                    archive.writestr(info, data)
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return out


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sandkit"


def with_tables(members: List[Tuple[str, bytes]]) -> List[Tuple[str, bytes]]:
    """The members plus what this interpreter can compute ahead for a box with the same
    Python version: the Unicode character sets of runtime/rxinfo.py (a fresh agent's first
    grep then costs what a warm one does) and bytecode for every module (an agent start
    does not compile ~12k lines first; another Python ignores it and compiles as before)."""
    from ..runtime import rxinfo

    tables = json.dumps(rxinfo.build_tables(), sort_keys=True, separators=(",", ":")).encode()
    extra = [("sandkit/runtime/%s" % rxinfo.TABLES_FILE, tables)]
    sources = [(name, data) for name, data in members if name.endswith(".py")]
    pycs = _bytecode(sources)
    extra += [(name[:-3] + ".pyc", pyc) for (name, _), pyc in zip(sources, pycs, strict=True)]
    return sorted([*members, *extra])


def _bytecode(sources: List[Tuple[str, bytes]]) -> List[bytes]:
    """Unchecked hash-based .pycs (PEP 552: valid without an mtime, which zipimport would
    compare with the zip entry's fixed date), compiled by a fresh interpreter: marshal's
    output depends on the state of the process that writes it, and a build must give the
    same bytes every time."""
    request = json.dumps([[n, base64.b64encode(d).decode()] for n, d in sources]).encode()
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _COMPILER],
        input=request,
        capture_output=True,
        check=True,
    )
    return [base64.b64decode(item) for item in json.loads(done.stdout)]


# Reads [[name, base64 source], ...] on stdin; writes [base64 pyc, ...] on stdout.
_COMPILER = """
import base64, importlib.util, json, marshal, sys
header = importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little")
out = []
for name, text in json.loads(sys.stdin.buffer.read()):
    source = base64.b64decode(text)
    code = compile(source, name, "exec", dont_inherit=True)
    pyc = header + importlib.util.source_hash(source) + marshal.dumps(code)
    out.append(base64.b64encode(pyc).decode())
sys.stdout.write(json.dumps(out))
"""


def agent_zipapp() -> Path:
    """Path of the agent zipapp for this sandkit, building it on first use."""
    members = zipapp_members()
    name = "agent-%s.pyz" % content_hash(members)[:20]
    for directory in (cache_dir(), _private_temp_dir()):
        if directory is None:
            continue
        path = directory / name
        if path.is_file():
            return path
        try:
            return write_zipapp(path, with_tables(members))
        except OSError:
            continue  # cache not writable: fall back to a private temp dir
    raise OSError("cannot write the agent zipapp to %s or a temp dir" % cache_dir())


def _private_temp_dir() -> Optional[Path]:
    """A temp dir only this user can write to (others could plant a zipapp)."""
    path = Path(tempfile.gettempdir()) / ("sandkit-%d" % os.getuid())
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = path.lstat()
    except OSError:
        return None
    if not path.is_dir() or path.is_symlink() or info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    return path


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        sys.stderr.write("usage: python -m sandkit.agent.build OUT.pyz\n")
        return 2
    out = write_zipapp(Path(args[0]))
    sys.stdout.write("%s\n" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
