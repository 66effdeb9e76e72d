"""The base of the conformance suite: fixtures a provider supplies, and shared helpers.

A provider's test module subclasses `SandboxConformance` and supplies either
a `provider` fixture (a `SandboxProvider` with execute enabled; the suite
then acquires a fresh key per test and also runs the lifecycle tests) or a
`sandbox` fixture (one `Sandbox`; lifecycle tests skip), plus
`forbidden_strings`: host paths that must never appear in anything the API
returns. Optional fixtures: `secret_values` (configured secrets, for the
redaction tests), `limits` (when the provider is not configured with the
default caps) and `seed_upload` (how files get into the read-only uploads
mount; the default is the provider's `upload`, or without a provider
`execute`, which works where the uploads directory is writable from the
command's point of view, as on the host).

The suite only uses the public `Sandbox` API. Set-up that needs symlinks,
FIFOs or many files runs through `execute`. Every test works below its own
fresh directory (`ws`), so a provider may hand the same box to many tests.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import inspect
import shlex
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import pytest
from pydantic import BaseModel

from sandkit import ErrorCode, ExecuteResult, SandboxError, SandboxKey
from sandkit.provider import SandboxProvider
from sandkit.runtime.limits import Limits
from sandkit.sandbox import Sandbox

WORKSPACE = "/mnt/user-data/workspace"
UPLOADS = "/mnt/user-data/uploads"
OUTPUTS = "/mnt/user-data/outputs"
VIRTUAL_ROOTS = (WORKSPACE, UPLOADS, OUTPUTS, "/mnt/skills")

SeedUpload = Callable[[str, bytes], str]


def unique(prefix: str = "c") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def in_layout(path: str) -> bool:
    """True for a virtual path under one of the standard mounts."""
    return any(path == root or path.startswith(root + "/") for root in VIRTUAL_ROOTS)


def q(path: str) -> str:
    """Shell-quote a virtual path for a command."""
    return shlex.quote(path)


# -- forbidden-string checks ------------------------------------------------------


def strings_in(value: Any) -> Iterator[str]:
    """Every string inside a result (models, containers, bytes decoded as latin-1)."""
    if isinstance(value, BaseModel):
        yield from strings_in(value.model_dump())
    elif isinstance(value, str):
        yield value
    elif isinstance(value, bytes | bytearray):
        yield bytes(value).decode("latin-1")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_in(key)
            yield from strings_in(item)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from strings_in(item)


def assert_clean(value: Any, forbidden: Sequence[str], what: str = "result") -> None:
    for text in strings_in(value):
        for bad in forbidden:
            if bad and bad in text:
                index = text.index(bad)
                raise AssertionError(
                    f"{what} leaks a forbidden host string {bad!r} near "
                    f"{text[max(index - 60, 0) : index + len(bad) + 60]!r}"
                )


def assert_error_clean(exc: BaseException, forbidden: Sequence[str]) -> None:
    texts = [str(exc), repr(exc)]
    if isinstance(exc, SandboxError):
        texts.append(exc.message)
    assert_clean(texts, forbidden, f"error {type(exc).__name__}")


class CheckedSandbox:
    """A transparent proxy that checks every result and error for forbidden strings.

    Tests talk to the sandbox only through this proxy, so the masking
    guarantee ("no host path in any result, output or message") is asserted
    on every call the suite makes, not just in the masking tests.
    """

    def __init__(self, inner: Sandbox, forbidden: Sequence[str]) -> None:
        self._inner = inner
        self._forbidden = [f for f in forbidden if f]

    @property
    def inner(self) -> Sandbox:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr):
            return attr
        forbidden = self._forbidden
        if inspect.isasyncgenfunction(attr):

            @functools.wraps(attr)
            async def checked_agen(*args: Any, **kwargs: Any) -> Any:
                try:
                    async for item in attr(*args, **kwargs):
                        assert_clean(item, forbidden, f"{name}() event")
                        yield item
                except Exception as exc:
                    assert_error_clean(exc, forbidden)
                    raise

            return checked_agen
        if inspect.isgeneratorfunction(attr):

            @functools.wraps(attr)
            def checked_gen(*args: Any, **kwargs: Any) -> Any:
                try:
                    for item in attr(*args, **kwargs):
                        assert_clean(item, forbidden, f"{name}() event")
                        yield item
                except Exception as exc:
                    assert_error_clean(exc, forbidden)
                    raise

            return checked_gen
        if inspect.iscoroutinefunction(attr):

            @functools.wraps(attr)
            async def checked_async(*args: Any, **kwargs: Any) -> Any:
                try:
                    result = await attr(*args, **kwargs)
                except Exception as exc:
                    assert_error_clean(exc, forbidden)
                    raise
                assert_clean(result, forbidden, f"{name}()")
                return result

            return checked_async

        @functools.wraps(attr)
        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                result = attr(*args, **kwargs)
            except Exception as exc:
                assert_error_clean(exc, forbidden)
                raise
            assert_clean(result, forbidden, f"{name}()")
            return result

        return checked


@contextlib.contextmanager
def raises_code(code: ErrorCode) -> Iterator[pytest.ExceptionInfo[SandboxError]]:
    """Expect a SandboxError with exactly `code` (and nothing else)."""
    with pytest.raises(SandboxError) as info:
        yield info
    assert info.value.code is code, f"expected {code.value}, got {info.value!r}"
    assert info.value.message, "an error must say what went wrong"


def sh(sb: Any, command: str, cwd: str | None = None, timeout: float = 60) -> str:
    """Run a set-up command that must succeed; its stdout."""
    result: ExecuteResult = sb.execute(command, timeout=timeout, cwd=cwd)
    assert result.exit_code == 0, (
        f"set-up command failed ({result.exit_code}): {command!r}\n{result.stderr}"
    )
    return result.stdout


def make_dirs(sb: Any, *paths: str) -> None:
    sh(sb, "mkdir -p " + " ".join(q(p) for p in paths))


def symlink(sb: Any, target: str, link: str) -> None:
    """`ln -s target link`; virtual paths in either are mapped by the provider."""
    sh(sb, f"ln -s {q(target)} {q(link)}")


def write_tree(sb: Any, base: str, files: Mapping[str, str | bytes]) -> None:
    for rel, content in files.items():
        if isinstance(content, bytes):
            sb.write_bytes(f"{base}/{rel}", content)
        else:
            sb.write_file(f"{base}/{rel}", content)


class ConformanceBase:
    """Fixtures and helpers shared by every area of the suite."""

    # -- what a provider supplies ---------------------------------------------------

    @pytest.fixture
    def provider(self) -> SandboxProvider | None:
        """Override with a provider (execute enabled) to run the lifecycle tests too."""
        return None

    @pytest.fixture
    def key(self) -> SandboxKey:
        return SandboxKey(unique("user"), unique("thread"))

    @pytest.fixture
    def sandbox(self, provider: SandboxProvider | None, key: SandboxKey) -> Iterator[Sandbox]:
        if provider is None:
            pytest.fail("a conformance subclass must define a `sandbox` or `provider` fixture")
        box = provider.acquire(key)
        try:
            yield box
        finally:
            provider.release(key)

    @pytest.fixture
    def forbidden_strings(self) -> list[str]:
        pytest.fail("a conformance subclass must define `forbidden_strings` (e.g. the data root)")

    @pytest.fixture
    def secret_values(self) -> list[str]:
        """Secret values the sandbox is configured to redact; none means skip those tests."""
        return []

    @pytest.fixture
    def limits(self) -> Limits:
        """The caps the sandbox was configured with (defaults unless overridden)."""
        return Limits()

    @pytest.fixture
    def seed_upload(
        self, provider: SandboxProvider | None, key: SandboxKey, sandbox: Sandbox
    ) -> SeedUpload:
        """Put a file into uploads (read-only to the agent); returns its virtual path.

        With a provider: its `upload` (how a host application does it, into the running
        box); without one, through `execute`."""

        def seed(rel: str, data: bytes) -> str:
            if provider is not None:
                return provider.upload(key, rel, data).path
            path = f"{UPLOADS}/{rel}"
            parent = path.rsplit("/", 1)[0]
            encoded = base64.b64encode(data).decode()
            result = sandbox.execute(
                f"mkdir -p {q(parent)} && printf %s {encoded} | base64 -d > {q(path)}"
            )
            if result.exit_code != 0:
                pytest.fail(
                    "cannot seed uploads through execute here; override `seed_upload` "
                    "to write into the thread's uploads directory on the host"
                )
            return path

        return seed

    # -- what the tests use ---------------------------------------------------------

    @pytest.fixture
    def sb(self, sandbox: Sandbox, forbidden_strings: list[str]) -> Sandbox:
        """The sandbox behind a `CheckedSandbox`: every call is checked for leaks."""
        assert forbidden_strings, "forbidden_strings must not be empty"
        return cast(Sandbox, CheckedSandbox(sandbox, forbidden_strings))

    @pytest.fixture
    def ws(self) -> str:
        """This test's own directory under the workspace (created by the first write)."""
        return f"{WORKSPACE}/{unique()}"

    @pytest.fixture
    def up(self) -> str:
        """This test's own directory name below uploads."""
        return unique("up")
