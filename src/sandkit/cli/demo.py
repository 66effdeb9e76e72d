"""`sandkit demo`: the main job end to end, in about a second.

It is the README's first command, so it has to work on a fresh machine: no
network, no Docker, no execute permission (it shows that execute is off,
and why, instead). Each step prints the CLI command that does the same, so
the tour doubles as a tutorial.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rich.text import Text

from ..errors import SandboxError
from ..provider import SandboxKey, create_provider
from ..runtime.pathmap import UPLOADS, WORKSPACE
from ..sandbox import Sandbox
from . import render
from .output import error_text
from .session import GlobalOptions, Session, load_settings

OPS = '''"""Arithmetic for the sandkit demo."""


def add(a: int, b: int) -> int:
    return a + b


def mul(a: int, b: int) -> int:
    # TODO: implement multiplication
    raise NotImplementedError
'''

PROJECT: dict[str, str] = {
    "calc/README.md": "# calc\n\nA tiny calculator that the sandkit demo edits.\n",
    "calc/calc/__init__.py": 'from .ops import add, mul\n\n__all__ = ["add", "mul"]\n',
    "calc/calc/ops.py": OPS,
    "calc/tests/test_ops.py": (
        "from calc.ops import add, mul\n\n\n"
        "def test_add() -> None:\n    assert add(2, 3) == 5\n\n\n"
        "def test_mul() -> None:\n    assert mul(6, 7) == 42  # TODO: negative numbers\n"
    ),
    # Inside a virtualenv: written like any file, but skipped by ls, glob and grep.
    "calc/.venv/lib/vendored.py": "# TODO: this line is never found: .venv is ignored\n",
}
EDIT_OLD = "    # TODO: implement multiplication\n    raise NotImplementedError\n"
EDIT_NEW = "    return a * b\n"
RUN = "cd calc && python3 -c 'from calc.ops import mul; print(mul(6, 7))'"


class DemoStep(BaseModel):
    title: str
    command: str
    summary: str
    error_code: str | None = None


class DemoReport(BaseModel):
    provider: str
    user_id: str
    thread_id: str
    data_root: str | None = None  # set only when the data root is kept
    steps: list[DemoStep]
    elapsed_ms: float


@dataclasses.dataclass
class _Tour:
    session: Session
    sandbox: Sandbox
    steps: list[DemoStep] = dataclasses.field(default_factory=list)

    @property
    def quiet(self) -> bool:
        return self.session.out.json_mode

    def heading(self, title: str, command: str) -> None:
        if not self.quiet:
            console = self.session.out.out
            console.print()
            console.print(
                Text.assemble((f"{len(self.steps) + 1}. {title}", "bold"), "   ", (command, "cyan"))
            )

    def show(self, renderable: Any) -> None:
        if not self.quiet:
            self.session.out.out.print(renderable)

    def done(self, title: str, command: str, summary: str, code: str | None = None) -> None:
        self.steps.append(DemoStep(title=title, command=command, summary=summary, error_code=code))
        if not self.quiet:
            self.session.out.out.print(Text(f"   -> {summary}", style="dim"))

    def expect_error(self, title: str, command: str, action: Callable[[], object]) -> None:
        """Run an operation that the contract refuses, and show the refusal."""
        self.heading(title, command)
        try:
            result = action()
        except SandboxError as exc:
            self.show(error_text(exc))
            self.done(title, command, f"refused with {exc.code.value}", exc.code.value)
            return
        if isinstance(result, BaseModel) and hasattr(result, "stdout"):
            self.show(Text(str(getattr(result, "stdout", "")).rstrip()))
        self.done(title, command, "allowed here")


def run_demo(session: Session, keep: bool = False) -> int:
    """The tour; on the local provider unless --provider names another one."""
    opts = session.opts
    temporary = opts.data_root is None
    root = Path(tempfile.mkdtemp(prefix="sandkit-demo-")) if temporary else opts.data_root
    assert root is not None
    thread = opts.thread or ("demo" if temporary else time.strftime("demo-%Y%m%d-%H%M%S"))
    key = SandboxKey(opts.user or "demo", thread)
    demo_opts = dataclasses.replace(opts, data_root=root, provider=opts.provider or "local")
    settings = load_settings(demo_opts)
    started = time.perf_counter()
    try:
        with create_provider(demo_opts.provider or "local", settings) as provider:
            tour = _Tour(session, provider.acquire(key))
            if not tour.quiet:
                session.out.out.print(
                    Text.assemble(
                        ("sandkit demo", "bold"),
                        f": provider {provider.name}, user {key.user_id}, thread {key.thread_id}",
                    )
                )
            _steps(tour)
            report = DemoReport(
                provider=provider.name,
                user_id=key.user_id,
                thread_id=key.thread_id,
                data_root=str(root) if keep or not temporary else None,
                steps=tour.steps,
                elapsed_ms=round((time.perf_counter() - started) * 1000, 1),
            )
    finally:
        if temporary and not keep:
            shutil.rmtree(root, ignore_errors=True)
    _finish(session, report, demo_opts, key)
    return 0


def _steps(tour: _Tour) -> None:
    box = tour.sandbox
    ws = WORKSPACE

    tour.heading("Write a small Python project", "sandkit write calc/calc/ops.py CONTENT")
    written = [box.write_file(path, text) for path, text in PROJECT.items()]
    tour.show("\n".join(f"   {w.path}  ({w.bytes_written} bytes)" for w in written))
    tour.done(
        "write",
        "sandkit write PATH CONTENT",
        f"{len(written)} files; relative paths land in {ws}",
    )

    tour.heading("List the workspace", "sandkit ls --depth 3")
    listing = box.list_dir(ws, max_depth=3)
    tour.show(render.dir_tree(listing))
    tour.done("ls", "sandkit ls --depth 3", f"{len(listing.entries)} entries; .venv is ignored")

    tour.heading("Find the Python files", "sandkit glob '**/*.py'")
    found = box.glob("**/*.py")
    tour.show("\n".join(found.paths))
    tour.done("glob", "sandkit glob '**/*.py'", render.glob_summary(found))

    tour.heading("Search with context (case-insensitive by default)", "sandkit grep todo -C 1")
    hits = box.grep("todo", before=1, after=1)
    for line in render.grep_lines(hits, render.highlighter("todo", False, False, False)):
        tour.show(line)
    tour.done("grep", "sandkit grep todo -C 1", render.grep_summary(hits))

    ops = f"{ws}/calc/calc/ops.py"
    tour.heading("Read a file with line numbers", "sandkit read calc/calc/ops.py")
    before = box.read_file(ops)
    tour.show("\n".join(render.numbered_lines(before)))
    tour.done("read", "sandkit read calc/calc/ops.py", f"{before.total_lines} lines")

    edit_cmd = "sandkit edit calc/calc/ops.py OLD NEW"
    tour.heading("Edit: replace the TODO with an implementation", edit_cmd)
    edited = box.edit_file(ops, EDIT_OLD, EDIT_NEW)
    first = OPS.splitlines().index("def mul(a: int, b: int) -> int:") + 1
    after = box.read_file(ops, start_line=first)
    tour.show("\n".join(render.numbered_lines(after)))
    left = box.grep("todo", output_mode="count")
    remaining = sum(c.count for c in left.counts)
    tour.done(
        "edit",
        edit_cmd,
        f"{edited.replacements} replacement; {remaining} TODO left in the project",
    )

    tour.expect_error(
        "The jail: paths outside the mounts are refused",
        "sandkit read /etc/passwd",
        lambda: box.read_file("/etc/passwd"),
    )
    tour.expect_error(
        "Uploads are read-only",
        f"sandkit write {UPLOADS}/x.txt hi",
        lambda: box.write_file(f"{UPLOADS}/x.txt", "hi"),
    )
    tour.expect_error(
        "Execute (off on the local provider, where it would run on the host)",
        f'sandkit exec "{RUN}"',
        lambda: box.execute(RUN, timeout=30),
    )


def _finish(session: Session, report: DemoReport, opts: GlobalOptions, key: SandboxKey) -> None:
    out = session.out
    if out.json_mode:
        out.json(report)
        return
    out.out.print()
    out.out.print(
        Text(f"Done: {len(report.steps)} steps in {report.elapsed_ms:.0f} ms.", style="bold green")
    )
    codes = [s.error_code for s in report.steps if s.error_code]
    if codes:
        out.out.print(
            Text(
                "Refusals carry a stable code (" + ", ".join(codes) + ") that callers branch on.",
                style="dim",
            )
        )
    if "EXECUTE_DISABLED" in codes:
        out.out.print(Text("Allow host commands with: sandkit --allow-execute demo", style="dim"))
    if report.data_root is not None:
        out.out.print(
            Text(
                f"Thread data kept in {report.data_root}; explore it with:\n"
                f"  sandkit --data-root {report.data_root} --user {key.user_id} "
                f"--thread {key.thread_id} ls --depth 3",
                style="dim",
            )
        )
    out.out.print(Text("More: sandkit --help, docs/cli.md", style="dim"))
