"""Async twins: same results and errors as the sync operations."""

from __future__ import annotations

import asyncio

from sandkit import ErrorCode, SandboxError
from sandkit.sandbox import Sandbox

from .suite import ConformanceBase


class AsyncTests(ConformanceBase):
    def test_file_operations(self, sb: Sandbox, ws: str) -> None:
        async def scenario() -> None:
            created = await sb.awrite_file(f"{ws}/a.txt", "one\ntwo\n")
            assert created.created is True
            appended = await sb.awrite_file(f"{ws}/a.txt", "three\n", append=True)
            assert appended.created is False
            edited = await sb.aedit_file(f"{ws}/a.txt", "two", "TWO")
            assert edited.replacements == 1
            read = await sb.aread_file(f"{ws}/a.txt", 2, 3)
            assert read.content == "TWO\nthree\n"
            assert read == sb.read_file(f"{ws}/a.txt", start_line=2, end_line=3)
            await sb.awrite_bytes(f"{ws}/b.bin", bytes(range(256)))
            assert await sb.aread_bytes(f"{ws}/b.bin") == bytes(range(256))

        asyncio.run(scenario())

    def test_listing_and_search(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/src/a.py", "import os\n")
        sb.write_file(f"{ws}/src/b.py", "import sys\n")

        async def scenario() -> None:
            listing, found, grep = await asyncio.gather(
                sb.alist_dir(ws),
                sb.aglob("**/*.py", ws),
                sb.agrep("import", ws, output_mode="files_with_matches"),
            )
            assert listing == sb.list_dir(ws)
            assert found.paths == [f"{ws}/src/a.py", f"{ws}/src/b.py"]
            assert grep.files == found.paths

        asyncio.run(scenario())

    def test_execute(self, sb: Sandbox) -> None:
        async def scenario() -> None:
            results = await asyncio.gather(*(sb.aexecute(f"echo {i}") for i in range(5)))
            assert [r.stdout for r in results] == [f"{i}\n" for i in range(5)]
            slow = await sb.aexecute("sleep 10", timeout=0.5)
            assert slow.timed_out is True

        asyncio.run(scenario())

    def test_errors_have_the_same_codes(self, sb: Sandbox, ws: str) -> None:
        async def code_of(coro: object) -> ErrorCode:
            try:
                await coro  # type: ignore[misc]
            except SandboxError as exc:
                return exc.code
            raise AssertionError("no error")

        async def scenario() -> None:
            assert await code_of(sb.aread_file(f"{ws}/missing")) is ErrorCode.NOT_FOUND
            assert await code_of(sb.aread_file("/etc/passwd")) is ErrorCode.ACCESS_DENIED
            assert (
                await code_of(sb.awrite_file("/mnt/user-data/uploads/x", "x"))
                is ErrorCode.READ_ONLY
            )
            assert await code_of(sb.agrep("(", ws)) is ErrorCode.INVALID_PATTERN
            assert await code_of(sb.aexecute("")) is ErrorCode.INVALID_ARGUMENT

        asyncio.run(scenario())

    def test_concurrent_writers_and_readers(self, sb: Sandbox, ws: str) -> None:
        async def scenario() -> None:
            await asyncio.gather(
                *(sb.awrite_file(f"{ws}/f{i}.txt", f"file {i}\n") for i in range(20))
            )
            reads = await asyncio.gather(*(sb.aread_file(f"{ws}/f{i}.txt") for i in range(20)))
            assert [r.content for r in reads] == [f"file {i}\n" for i in range(20)]
            # Many writers on one file: the result is one whole version, never a mix.
            await asyncio.gather(
                *(sb.awrite_file(f"{ws}/same.txt", str(i) * 5000) for i in range(10))
            )
            content = (await sb.aread_file(f"{ws}/same.txt")).content
            assert content in {str(i) * 5000 for i in range(10)}

        asyncio.run(scenario())
