"""Provider lifecycle: acquire, get, release, destroy, isolation between keys.

These need the `provider` fixture; a subclass that can only supply a
`sandbox` subclasses `OperationConformance` instead (never a silent skip).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from sandkit import ErrorCode, SandboxError, SandboxKey
from sandkit.provider import SandboxProvider

from .suite import WORKSPACE, ConformanceBase, raises_code, unique

# Far above what any check needs on a loaded machine; reached only by a real failure.
BOUND_S = 30.0


class LifecycleTests(ConformanceBase):
    @pytest.fixture
    def prov(self, provider: SandboxProvider | None) -> SandboxProvider:
        if provider is None:
            pytest.fail(
                "lifecycle tests need a `provider` fixture; "
                "subclass OperationConformance for a sandbox-only run"
            )
        return provider

    @pytest.fixture
    def fresh_key(self, prov: SandboxProvider) -> Iterator[SandboxKey]:
        key = SandboxKey(unique("user"), unique("thread"))
        yield key
        prov.release(key)

    def test_acquire_is_idempotent(self, prov: SandboxProvider, fresh_key: SandboxKey) -> None:
        first = prov.acquire(fresh_key)
        first.write_file("hello.txt", "hi")
        second = prov.acquire(fresh_key)
        assert second.sandbox_id == first.sandbox_id == fresh_key.sandbox_id
        assert second.read_file("hello.txt").content == "hi"
        assert first.read_file("hello.txt").content == "hi"

    def test_concurrent_acquire_gives_one_sandbox(
        self, prov: SandboxProvider, fresh_key: SandboxKey
    ) -> None:
        barrier = threading.Barrier(8)

        def acquire(i: int) -> str:
            barrier.wait()
            box = prov.acquire(fresh_key)
            box.write_file(f"from-{i}.txt", str(i))
            return box.sandbox_id

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            ids = set(pool.map(acquire, range(8)))
        assert ids == {fresh_key.sandbox_id}
        names = {e.name for e in prov.acquire(fresh_key).list_dir(WORKSPACE).entries}
        assert names == {f"from-{i}.txt" for i in range(8)}

    def test_get_does_not_create(self, prov: SandboxProvider, fresh_key: SandboxKey) -> None:
        assert prov.get(fresh_key) is None
        prov.acquire(fresh_key)
        running = prov.get(fresh_key)
        assert running is not None and running.sandbox_id == fresh_key.sandbox_id
        prov.release(fresh_key)
        assert prov.get(fresh_key) is None

    def test_release_keeps_data_and_stales_handles(
        self, prov: SandboxProvider, fresh_key: SandboxKey
    ) -> None:
        box = prov.acquire(fresh_key)
        box.write_file("keep.txt", "kept")
        prov.release(fresh_key)
        with raises_code(ErrorCode.UNAVAILABLE):
            box.read_file("keep.txt")
        with raises_code(ErrorCode.UNAVAILABLE):
            box.execute("true")
        again = prov.acquire(fresh_key)
        assert again.read_file("keep.txt").content == "kept"

    def test_destroy_keeps_thread_data(self, prov: SandboxProvider, fresh_key: SandboxKey) -> None:
        prov.acquire(fresh_key).write_file("/mnt/user-data/outputs/result.txt", "42")
        prov.destroy(fresh_key)
        assert prov.get(fresh_key) is None
        again = prov.acquire(fresh_key)
        assert again.read_file("/mnt/user-data/outputs/result.txt").content == "42"

    def test_release_of_an_unknown_key_is_harmless(self, prov: SandboxProvider) -> None:
        key = SandboxKey(unique("user"), unique("thread"))
        prov.release(key)
        prov.destroy(key)
        assert prov.get(key) is None

    def test_same_thread_id_for_two_users_shares_nothing(self, prov: SandboxProvider) -> None:
        thread = unique("thread")
        alice, bob = SandboxKey(unique("alice"), thread), SandboxKey(unique("bob"), thread)
        try:
            a, b = prov.acquire(alice), prov.acquire(bob)
            assert a.sandbox_id != b.sandbox_id
            a.write_file("secret.txt", "alice only")
            a.write_file("/mnt/user-data/outputs/o.txt", "alice")
            with raises_code(ErrorCode.NOT_FOUND):
                b.read_file("secret.txt")
            with raises_code(ErrorCode.NOT_FOUND):
                b.read_file("/mnt/user-data/outputs/o.txt")
            assert b.grep("alice", WORKSPACE).matches == []
            assert "secret.txt" not in b.execute("ls -A").stdout
        finally:
            prov.release(alice)
            prov.release(bob)

    def test_error_from_a_released_sandbox_is_a_sandbox_error(
        self, prov: SandboxProvider, fresh_key: SandboxKey
    ) -> None:
        box = prov.acquire(fresh_key)
        prov.release(fresh_key)
        with pytest.raises(SandboxError) as info:
            box.list_dir()
        assert info.value.code is ErrorCode.UNAVAILABLE

    # -- background processes and the lifecycle ---------------------------------------

    # Do background processes outlive the provider instance that started them (a box
    # provider: they live in the box)? The local provider keeps them in its process.
    processes_outlive_provider: ClassVar[bool] = True

    def another_instance(self, provider: SandboxProvider) -> SandboxProvider:
        """A second provider instance with the same settings (another replica, or the
        same deployment after a restart); override when the constructor needs more."""
        return type(provider)(provider.settings)  # type: ignore[call-arg]

    def test_release_ends_background_processes(
        self, prov: SandboxProvider, fresh_key: SandboxKey
    ) -> None:
        box = prov.acquire(fresh_key)
        info = box.spawn("echo ready; sleep 300")
        assert box.process_output(info.handle, wait_s=BOUND_S).stdout == "ready\n"
        prov.release(fresh_key)
        again = prov.acquire(fresh_key)
        try:
            listed = {p.handle: p for p in again.list_processes().processes}
        finally:
            prov.release(fresh_key)
        assert info.handle not in listed or not listed[info.handle].running

    def test_release_ends_a_command_in_flight(
        self, prov: SandboxProvider, fresh_key: SandboxKey
    ) -> None:
        """A stream still running when its box is released ends, and so does its command,
        also where the release keeps the box (a paused VM would otherwise resume it)."""
        mark = unique("inflight")
        box = prov.acquire(fresh_key)
        stream = iter(box.execute_stream(f"echo go; exec -a {mark} sleep 300", timeout=300))
        assert next(stream).text == "go\n"  # type: ignore[union-attr]
        outcome: list[BaseException | None] = []

        def drain() -> None:
            try:
                for _ in stream:
                    pass
            except BaseException as exc:  # the stream's end, handed to the test
                outcome.append(exc)
            else:
                outcome.append(None)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        prov.release(fresh_key)
        reader.join(BOUND_S)
        assert not reader.is_alive(), f"the stream still runs {BOUND_S} s after the release"
        assert outcome[0] is None or isinstance(outcome[0], SandboxError), repr(outcome[0])
        # /proc, not ps: any image has it. The [b]racket keeps grep from matching itself.
        pattern = f"[{mark[0]}]{mark[1:]}"
        find = f"cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c '{pattern}'"
        assert prov.acquire(fresh_key).execute(find).stdout.strip() == "0"

    def test_idle_reaping_spares_a_box_whose_processes_run(
        self, prov: SandboxProvider, fresh_key: SandboxKey
    ) -> None:
        box = prov.acquire(fresh_key)
        info = box.spawn("sleep 300")
        assert fresh_key not in prov.reap_idle(0)
        assert prov.get(fresh_key) is not None
        box.signal_process(info.handle, "KILL")
        box.wait_process(info.handle, timeout=BOUND_S)
        assert fresh_key in prov.reap_idle(0)

    def test_background_processes_and_a_second_provider_instance(
        self, prov: SandboxProvider, fresh_key: SandboxKey
    ) -> None:
        box = prov.acquire(fresh_key)
        info = box.spawn("echo ready; sleep 300")
        assert box.process_output(info.handle, wait_s=BOUND_S).stdout == "ready\n"
        other = self.another_instance(prov)  # never shut down: it shares the owner
        seen = other.acquire(fresh_key)
        try:
            if self.processes_outlive_provider:  # found again, with their output
                listed = {p.handle: p for p in seen.list_processes().processes}
                assert listed[info.handle].running
                assert seen.process_output(info.handle).stdout == "ready\n"
                seen.signal_process(info.handle, "KILL")
                assert seen.wait_process(info.handle, timeout=BOUND_S).exit_code == 137
            else:  # they belong to the instance that started them, and end with it
                with raises_code(ErrorCode.NOT_FOUND):
                    seen.process_output(info.handle)
                prov.release(fresh_key)
                with raises_code(ErrorCode.NOT_FOUND):
                    prov.acquire(fresh_key).process_output(info.handle)
                assert seen.execute(f"kill -0 {info.pid} 2>/dev/null || echo gone").stdout == (
                    "gone\n"
                )
        finally:
            seen.close()
