"""A provider in a process of its own, for the fault tests to SIGKILL; and the file set they check.

    python -m tests.hardening.provider_process '{"kind": "docker", "data_root": "...", ...}'

The child builds `BUILDERS[kind]().make(data_root)` (the settings `make_provider`
uses; SANDKIT_HARDENING_SESSION makes it the same session, so the same owner)
and reports on stdout, one line each, flushed:

- `SEEDED`: every key in `seed` was acquired and got its `seed_files` set;
- `STARTED <op>`: `busy` mode is about to run `op` (execute, write, grep, or stream:
  `execute_stream` of the spec's `command`);
- `WROTE <n>`: `rewrite` mode finished writing version n of `rewrite_path`.

`limits` in the spec (a dict) changes the hardening limits the provider runs with.

Then it keeps going (busy: the op; rewrite: the next version) until killed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from sandkit import ErrorCode, SandboxError, SandboxKey
from sandkit.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = "/mnt/user-data/workspace"
OUTPUTS = "/mnt/user-data/outputs"
TEMP_PREFIX = ".sandkit-"  # safefs's temp files: never visible after a write
SLOW_GREP = r"^(a+)+\1b"  # backtracks past any time limit over SLOW_LINE
SLOW_LINE = "a" * 30 + "!b\n"  # holds the literal b, so no prefilter skips it
BIG_BYTES = 8 * 1024 * 1024  # under write_max_bytes (10 MiB)


def blob(tag: str, size: int) -> bytes:
    """Deterministic bytes, distinct for every tag, so a mix of two versions is detectable."""
    return hashlib.shake_256(tag.encode()).digest(size)


def version(tag: str, n: int, size: int = BIG_BYTES) -> str:
    """Version n of a big text file: every line names n, so a torn file shows two numbers."""
    line = f"{tag} version {n:06d} " + blob(f"{tag}/{n}", 24).hex() + "\n"
    return line * (size // len(line))


def expected_seed(tag: str) -> dict[str, bytes]:
    """Virtual path -> the exact bytes `seed_files(box, tag)` leaves."""
    base = f"{WORKSPACE}/{tag}"
    return {
        f"{base}/notes.txt": (f"notes of {tag}\n" * 40).encode(),
        f"{base}/deep/a/b/c.txt": f"deep file of {tag}\n".encode(),
        f"{base}/blob.bin": blob(tag, 256 * 1024),
        f"{base}/log.txt": f"first\nsecond of {tag}\n".encode(),
        f"{base}/edit.py": f"x = {len(tag)}\ny = 2\n".encode(),
        f"{OUTPUTS}/{tag}-report.md": f"# report {tag}\n".encode(),
    }


def seed_files(box: Sandbox, tag: str) -> dict[str, bytes]:
    """Write the set of `expected_seed(tag)` the ways a user does; returns it.

    Plain writes, a binary upload, an append, an edit, a file in outputs.
    """
    expected = expected_seed(tag)
    base = f"{WORKSPACE}/{tag}"
    for name in ("notes.txt", "deep/a/b/c.txt"):
        box.write_file(f"{base}/{name}", expected[f"{base}/{name}"].decode())
    box.write_bytes(f"{base}/blob.bin", expected[f"{base}/blob.bin"])
    box.write_file(f"{base}/log.txt", "first\n")
    box.write_file(f"{base}/log.txt", f"second of {tag}\n", append=True)
    box.write_file(f"{base}/edit.py", "x = 1\ny = 2\n")
    box.edit_file(f"{base}/edit.py", "x = 1", f"x = {len(tag)}")
    report = f"{OUTPUTS}/{tag}-report.md"
    box.write_file(report, expected[report].decode())
    return expected


def lost_files(box: Sandbox, expected: dict[str, bytes]) -> list[str]:
    """Paths whose content is missing or differs (lost or torn)."""
    lost = []
    for path, data in expected.items():
        try:
            if box.read_bytes(path) != data:
                lost.append(path)
        except SandboxError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:
                raise
            lost.append(path)
    return lost


def stray_temp_files(box: Sandbox) -> list[str]:
    """Temp files of an interrupted write that list_dir or glob would show the agent."""
    found = set()
    for root in (WORKSPACE, OUTPUTS):
        for entry in box.list_dir(root, max_depth=10).entries:
            if entry.name.startswith(TEMP_PREFIX):
                found.add(entry.path)
        found.update(p for p in box.glob("**/*", root).paths if f"/{TEMP_PREFIX}" in p)
    return sorted(found)


# Counts processes whose argv has --stdio or --http as a word (the agent's, run from
# agent.pyz or, on Kubernetes, a memfd); its own argv holds them only inside the code.
_COUNT_AGENTS = (
    "import os\n"
    "n = 0\n"
    "for p in os.listdir('/proc'):\n"
    "    try:\n"
    "        argv = open('/proc/%s/cmdline' % p, 'rb').read().split(b'\\0')\n"
    "    except OSError:\n"
    "        continue\n"
    "    n += b'--stdio' in argv or b'--http' in argv\n"
    "print(n)\n"
)


def agents_in_box(box: Sandbox) -> int:
    """sandkit agents running in the box (seen from a command in it): stale ones leak."""
    found = box.execute("python3 -c " + shlex.quote(_COUNT_AGENTS))
    assert found.exit_code == 0, found
    return int(found.stdout.strip())


# -- the child ----------------------------------------------------------------------------


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _busy(box: Sandbox, op: str, path: str, command: str | None = None) -> None:
    """Run one long operation (the parent kills us during it)."""
    _say(f"STARTED {op}")
    if op == "stream":  # execute_stream of `command`, its events read until killed
        for _ in box.execute_stream(command or "sleep 60", timeout=600):
            pass
    elif op == "execute":
        # The pid file lets the parent clean up the command, which outlives us.
        box.execute(f"echo $$ > {path}; exec sleep 60", timeout=90)
    elif op == "write":
        box.write_bytes(path, blob("busy-new", 48 * 1024 * 1024))
    elif op == "grep":
        box.grep(SLOW_GREP, path)
    else:
        raise ValueError(op)


def main(spec: dict[str, Any]) -> None:
    from .targets import BUILDERS, LIMITS

    target = BUILDERS[spec["kind"]]()
    settings: dict[str, Any] = dict(spec.get("settings", {}))
    if "limits" in spec:  # changes to the hardening limits, e.g. a longer search timeout
        settings["limits"] = LIMITS.model_copy(update=spec["limits"])
    provider = target.make(Path(spec["data_root"]), **settings)
    boxes = {}
    for user, thread, tag in spec.get("seed", []):
        boxes[tag] = box = provider.acquire(SandboxKey(user, thread))
        seed_files(box, tag)
    _say("SEEDED")
    user, thread = spec.get("key") or spec["seed"][0][:2]
    box = provider.acquire(SandboxKey(user, thread))
    if spec["mode"] == "busy":
        _busy(box, spec["op"], spec["path"], spec.get("command"))
        _say("DONE")
    elif spec["mode"] == "rewrite":
        n = 0
        while True:
            n += 1
            box.write_file(spec["path"], version(spec["tag"], n))
            _say(f"WROTE {n}")
    elif spec["mode"] == "hold":
        pass
    while True:  # hold the boxes until killed
        time.sleep(60)


# -- the parent's handle on a child -------------------------------------------------------


class ProviderProcess:
    """A child running `main(spec)`; its stdout lines are collected by a thread."""

    def __init__(self, spec: dict[str, Any]) -> None:
        env = dict(os.environ)
        from .targets import SESSION

        env["SANDKIT_HARDENING_SESSION"] = SESSION
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.hardening.provider_process", json.dumps(spec)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.stderr = ""
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read_out, args=(self.proc.stdout,), daemon=True),
            threading.Thread(target=self._read_err, args=(self.proc.stderr,), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_out(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line.strip())
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _read_err(self, stream: IO[str]) -> None:
        self.stderr = stream.read()

    def wait_for(self, prefix: str, timeout: float = 120.0) -> str:
        """The first line starting with `prefix`; fails (with the child's stderr) if it dies."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    if line.startswith(prefix):
                        return line
                left = deadline - time.monotonic()
                if self.proc.poll() is not None or left <= 0:
                    break
                self._changed.wait(min(left, 0.5))
        self.kill()
        raise AssertionError(
            f"provider process never said {prefix!r} (exit {self.proc.returncode}); "
            f"stdout {self.lines[-5:]}; stderr tail:\n{self.stderr[-3000:]}"
        )

    def kill(self) -> None:
        """SIGKILL, then wait for the process and for every line it wrote before dying."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait(30)
        for reader in self._readers:
            reader.join(10)

    def last(self, prefix: str) -> str | None:
        found = [line for line in self.lines if line.startswith(prefix)]
        return found[-1] if found else None


@contextlib.contextmanager
def provider_process(spec: dict[str, Any]) -> Iterator[ProviderProcess]:
    child = ProviderProcess(spec)
    try:
        yield child
    finally:
        child.kill()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
