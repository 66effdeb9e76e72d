"""LangChain's standard sandbox suite for `SandkitBackend`, beside deepagents' own reference.

`langchain_tests.integration_tests.SandboxIntegrationTests` is the ecosystem's
conformance suite for deepagents sandbox backends. Each provider's test module
subclasses `SandkitStandard` and `ReferenceStandard` below and supplies one
fixture, `standard_box`: a running sandkit sandbox (class scope) plus the
directory the suite works under.

- `SandkitStandard` runs the suite on `SandkitBackend(box)`.
- `ReferenceStandard` runs it on `ReferenceSandbox(box)`: deepagents' own
  `BaseSandbox`, whose ls/read/write/edit/grep/glob are deepagents' scripts run
  through the box's shell, over the three primitives a `BaseSandbox` needs
  (`execute`, `upload_files`, `download_files`). Same box, deepagents' semantics.

A suite test that the reference fails as well is listed in
`REFERENCE_FAILURES` (and in docs/integrations.md, with the reason); both
classes mark it xfail(strict), so the run fails if either backend starts
passing it or if sandkit fails anything the reference passes.
`tests/test_deepagents_reference.py` shows that on those tests sandkit answers
what the reference answers.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from deepagents.backends.protocol import (
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
)
from deepagents.backends.sandbox import BaseSandbox
from langchain_tests.integration_tests import SandboxIntegrationTests

from sandkit.errors import ErrorCode, SandboxError
from sandkit.integrations.deepagents import SandkitBackend
from sandkit.models import ExecuteResult
from sandkit.runtime.pathmap import WORKSPACE
from sandkit.sandbox import Sandbox

# Suite tests that deepagents' own BaseSandbox (0.7.x) fails in a sandkit box, and why.
# The reasons are repeated in docs/integrations.md ("LangChain's standard suite").
REFERENCE_FAILURES: dict[str, str] = {
    "test_glob": "BaseSandbox returns glob matches as absolute paths; the suite expects "
    "paths relative to the search root",
    "test_glob_basic_pattern": "absolute glob paths (as test_glob)",
    "test_glob_with_character_class": "absolute glob paths (as test_glob)",
    "test_glob_with_question_mark": "absolute glob paths (as test_glob)",
    "test_glob_hidden_files_explicitly": "absolute glob paths (as test_glob)",
    "test_glob_with_directories": "BaseSandbox's glob lists regular files only; the suite "
    "expects directories with is_dir",
    "test_write_existing_file_fails": "BaseSandbox's write creates or overwrites (its "
    "documented contract); the suite expects 'already exists'",
}
# Where the box has no `python` command (only python3, as in the Debian-based images):
# the suite runs `python -c ...`.
NO_PYTHON_ALIAS: dict[str, str] = {
    "test_execute_large_stdout_payload": "the image has python3 but no `python` command",
    "test_aexecute_large_stdout_payload": "the image has python3 but no `python` command",
}


def _mark_async_tests() -> None:
    """The suite's coroutine tests run under pytest-asyncio (strict mode: marked here)."""
    for name, member in vars(SandboxIntegrationTests).items():
        marked = any(m.name == "asyncio" for m in getattr(member, "pytestmark", []))
        if name.startswith("test_") and inspect.iscoroutinefunction(member) and not marked:
            pytest.mark.asyncio(member)


_mark_async_tests()


@dataclass(frozen=True)
class StandardBox:
    """A running sandbox for the suite and the directory it works under."""

    sandbox: Sandbox
    root: str = f"{WORKSPACE}/test_sandbox_ops/"
    has_python_alias: bool = False


def suite_test_names() -> list[str]:
    return sorted(n for n in vars(SandboxIntegrationTests) if n.startswith("test_"))


class _Standard(SandboxIntegrationTests):
    """The suite on one backend over `standard_box`, with the expected failures marked."""

    box: StandardBox  # set by the `sandbox` fixture (class scope)

    @pytest.fixture(scope="class")
    def standard_box(self) -> Iterator[StandardBox]:  # pragma: no cover - overridden
        raise NotImplementedError

    def make_backend(self, sandbox: Sandbox) -> BaseSandbox | SandkitBackend:
        raise NotImplementedError

    @pytest.fixture(scope="class")
    def sandbox(self, standard_box: StandardBox) -> Iterator[BaseSandbox | SandkitBackend]:
        type(self).box = standard_box
        yield self.make_backend(standard_box.sandbox)

    @property
    def sandbox_root_dir(self) -> str:
        return type(self).box.root

    @pytest.fixture(autouse=True)
    def sandbox_test_root(self, request: pytest.FixtureRequest, standard_box: StandardBox) -> str:
        type(self).box = standard_box
        node_name = request.node.name.replace("/", "_").replace(" ", "_")
        return self.sandbox_path(node_name)

    @pytest.fixture(autouse=True)
    def _expected_failures(self, request: pytest.FixtureRequest, standard_box: StandardBox) -> None:
        name = request.node.originalname
        expected = dict(REFERENCE_FAILURES)
        if not standard_box.has_python_alias:
            expected.update(NO_PYTHON_ALIAS)
        if name in expected:
            request.applymarker(pytest.mark.xfail(strict=True, reason=expected[name]))


class SandkitStandard(_Standard):
    def make_backend(self, sandbox: Sandbox) -> SandkitBackend:
        return SandkitBackend(sandbox)


class ReferenceStandard(_Standard):
    def make_backend(self, sandbox: Sandbox) -> BaseSandbox:
        return ReferenceSandbox(sandbox)


# -- the reference ------------------------------------------------------------------------

_TRANSFER_ERRORS = {
    ErrorCode.NOT_FOUND: "file_not_found",
    ErrorCode.ACCESS_DENIED: "permission_denied",
    ErrorCode.READ_ONLY: "permission_denied",
    ErrorCode.IS_A_DIRECTORY: "is_directory",
}


def _transfer_error(exc: SandboxError) -> str:
    return _TRANSFER_ERRORS.get(exc.code, "invalid_path")


class ReferenceSandbox(BaseSandbox):
    """deepagents' `BaseSandbox` over a sandkit sandbox: only the three primitives are ours.

    `execute` returns the command's whole output (stdout then stderr, collected
    from the stream so that deepagents' scripts are not cut at execute's cap);
    uploads and downloads are sandkit's byte transfers, with deepagents' error
    names. Everything else is deepagents' code.
    """

    def __init__(self, sandbox: Sandbox) -> None:
        self._box = sandbox

    @property
    def id(self) -> str:
        return self._box.sandbox_id

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        stdout: list[str] = []
        stderr: list[str] = []
        result: ExecuteResult | None = None
        for item in self._box.execute_stream(command, timeout=float(timeout) if timeout else None):
            if isinstance(item, ExecuteResult):
                result = item
            else:
                (stdout if item.stream == "stdout" else stderr).append(item.text)
        assert result is not None
        return ExecuteResponse(
            output="".join(stdout) + "".join(stderr),
            exit_code=None if result.timed_out else result.exit_code,
            truncated=False,
        )

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        responses = []
        for path, data in files:
            if not path.startswith("/"):
                responses.append(FileUploadResponse(path=path, error="invalid_path"))
                continue
            try:
                self._box.write_bytes(path, data)
            except SandboxError as exc:
                responses.append(FileUploadResponse(path=path, error=_transfer_error(exc)))
                continue
            responses.append(FileUploadResponse(path=path))
        return responses

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        responses = []
        for path in paths:
            if not path.startswith("/"):
                responses.append(FileDownloadResponse(path=path, error="invalid_path"))
                continue
            try:
                data = self._box.read_bytes(path)
            except SandboxError as exc:
                responses.append(FileDownloadResponse(path=path, error=_transfer_error(exc)))
                continue
            responses.append(FileDownloadResponse(path=path, content=data))
        return responses
