"""Idle cost and density (issue 14): what an idle Docker box costs the host against a bare
container, with its agent awake and asleep, the first call after a sleep, and N boxes on
one machine with the bounds a user would set.

    python3 bench/density_bench.py [--boxes 20] [--bare 20] [--parallel 8] [--mem-limit 256m]
        [--pids-limit 128] [--cpus 0.5] [--tmp-size 64m] [--settle-s 15] [--floor-gib 4]
        [--wake-sample 30] [--awake N] [--agent-sleep dormant|exit] [--json]

One run, one provider (`max_running` = --boxes, the bounds printed at the start):

1. baseline: --bare bare containers of the same image with the box's hardening and bounds
   (`sleep infinity`): host memory per container, removed again. Memory is read three
   ways: the drop of MemAvailable (everything, but other jobs move it by hundreds of MiB),
   the containers' memory cgroups (median) and the growth of the engine's Pss (dockerd,
   containerd, the shims: what a box costs outside its cgroup);
2. fill: --boxes acquires, --parallel at a time, each box then used once (a write and a
   grep, like a box after a turn); acquire p50/p95 overall and per tenth of the fill.
   MemAvailable is read after every box and the fill stops, and says where, below
   --floor-gib (the machine is shared);
3. awake: --settle-s after the first --awake boxes (default: all), the three readings per
   box (against before the fill); the rest of the fill then puts agents idle for 5 s to
   sleep every 50 boxes (what makes 1,000 fit here);
4. asleep: `provider.sleep_idle_agents()` on every box; --settle-s later, the same;
5. the first call after the sleep: `read_file` on --wake-sample boxes one after the other
   (each wakes its agent), then the same call again (awake); then one round of `read_file`
   on every box, --parallel at a time, idle agents put back to sleep every 50 calls, and
   stopped at the floor;
6. `shutdown()`: its time, what it raised, the owner's boxes left (listed from the engine).

Targets (issue 14), exit code 1 if one is missed: an idle box <= 6 MiB of host memory
(cgroup + engine, the lower of awake and asleep); the first call after a sleep p50
<= 100 ms; every box started and every call answered; 0 boxes left after shutdown. The
owner's containers, volumes and the data root are removed at the end whatever happens
(also on SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hostmem import MIB, container_memory_bytes, engine_pss_mib, mem_available_mib
from start_bench import docker_provider, hardened  # first: it puts the repo on sys.path
from timing import loadavg, percentiles

from sandkit import SandboxKey
from sandkit.boxkit import AGENT_PATH

WORKSPACE = "/mnt/user-data/workspace"
SMALL = "".join(f"line {i} of a small file\n" for i in range(20))
BENCH_LABEL = "sandkit.bench"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message} (load {loadavg()})", file=sys.stderr)


def host_tasks() -> int:
    """Processes + threads on the host (the 4th field of /proc/loadavg)."""
    return int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])


def cgroup_mib(container_ids: list[str]) -> float | None:
    """Median memory cgroup of the containers (RSS + kernel, no page cache), MiB."""
    got = [m for m in map(container_memory_bytes, container_ids) if m is not None]
    return statistics.median(got) / MIB if got else None


def bare_baseline(provider: Any, args: argparse.Namespace, run: str) -> dict[str, Any]:
    """Host memory per bare container of the same image, hardening and bounds."""
    client = provider.client
    before, engine_before = mem_available_mib(), engine_pss_mib()
    made = []
    try:
        for _ in range(args.bare):
            c = client.containers.create(
                args.image,
                ["sleep", "infinity"],
                labels={BENCH_LABEL: run},
                **hardened(provider.options),
            )
            c.start()
            made.append(c)
        time.sleep(args.settle_s)
        loaded, engine = mem_available_mib(), engine_pss_mib()
        cgroup = cgroup_mib([c.id for c in made])
    finally:
        with ThreadPoolExecutor(8) as workers:
            list(workers.map(lambda c: c.remove(force=True, v=True), made))
    time.sleep(args.settle_s)
    after = mem_available_mib()
    return {
        "n": len(made),
        "mib_per_box": ((before + after) / 2 - loaded) / len(made),
        "drift_mib": after - before,
        "cgroup_mib": cgroup,
        "engine_mib": (engine - engine_before) / len(made),
    }


def fill(
    provider: Any, keys: list[SandboxKey], args: argparse.Namespace, sleeping: bool
) -> tuple[dict[str, Any], list[Any]]:
    """Acquire the keys, --parallel at a time, each used once; stop at the floor. With
    `sleeping`, agents idle for 5 s are put to sleep every 50 boxes."""
    stop = threading.Event()
    lock = threading.Lock()
    got: dict[int, tuple[float, Any]] = {}
    errors: list[str] = []
    progress: list[tuple[int, float, float]] = []  # boxes, seconds, MemAvailable GiB
    started = time.perf_counter()

    def one(i: int) -> None:
        if stop.is_set():
            return
        t0 = time.perf_counter()
        try:
            box = provider.acquire(keys[i])
            took = time.perf_counter() - t0
            box.write_file(f"{WORKSPACE}/small.txt", SMALL)
            box.grep("small", WORKSPACE, output_mode="count")
        except Exception as exc:
            with lock:
                errors.append(f"{keys[i].thread_id}: {exc}"[:300])
            return
        available = mem_available_mib(samples=1) / 1024
        with lock:
            got[i] = (took, box)
            done = len(got)
        if available < args.floor_gib and not stop.is_set():
            stop.set()
            log(f"MemAvailable {available:.1f} GiB < {args.floor_gib} GiB: the fill stops")
        if done % 50 == 0:
            progress.append((done, time.perf_counter() - started, available))
            log(f"{done} boxes, MemAvailable {available:.1f} GiB, {host_tasks()} tasks")
            if sleeping:
                provider.sleep_idle_agents(5.0)

    with ThreadPoolExecutor(args.parallel) as workers:
        list(workers.map(one, range(len(keys))))
    out = {
        "seconds": time.perf_counter() - started,
        "acquire_s": [got[i][0] for i in sorted(got)],
        "errors": errors,
        "stopped_at_floor": stop.is_set(),
        "progress": progress,
    }
    return out, [got[i][1] for i in sorted(got)]


def fill_summary(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The fill's parts as one: acquire p50/p95 overall and per tenth, in fill order."""
    ordered = [t for part in parts for t in part["acquire_s"]]
    errors = [e for part in parts for e in part["errors"]]
    tenth = max(1, len(ordered) // 10)
    return {
        "seconds": sum(part["seconds"] for part in parts),
        "acquire": percentiles(ordered),
        "acquire_p50_per_tenth_ms": [
            round(1000 * statistics.median(ordered[i : i + tenth]))
            for i in range(0, len(ordered), tenth)
        ],
        "errors": len(errors),
        "error_samples": errors[:5],
        "stopped_at_floor": any(part["stopped_at_floor"] for part in parts),
        "progress": [p for part in parts for p in part["progress"]],
    }


def memory_now(
    provider: Any, boxes: list[Any], before: tuple[float, float], args: argparse.Namespace
) -> dict[str, Any]:
    """--settle-s later, per box: host memory since before the fill (MemAvailable), the
    cgroups' median, the engine's growth (`before`: MemAvailable and engine Pss then)."""
    time.sleep(args.settle_s)
    available, engine = mem_available_mib(), engine_pss_mib()
    ids = [
        c.id for c in provider.client.containers.list(filters={"name": provider.owner}, sparse=True)
    ]
    return {
        "mem_available_gib": available / 1024,
        "mib_per_box": (before[0] - available) / max(1, len(boxes)),
        "cgroup_mib": cgroup_mib(ids[:50]),
        "engine_mib": (engine - before[1]) / max(1, len(boxes)),
        "host_tasks": host_tasks(),
    }


def read_round(
    provider: Any, boxes: list[Any], parallel: int, floor_gib: float = 0.0
) -> dict[str, Any]:
    """`read_file` of the small file on every box; latency per call, total, failures.
    With a floor, agents idle for 5 s go back to sleep every 50 calls (each call wakes
    one) and the round stops below the floor."""
    failures: list[str] = []
    done = [0]
    lock = threading.Lock()
    stop = threading.Event()

    def one(box: Any) -> float | None:
        if stop.is_set():
            return None
        if floor_gib:
            with lock:
                done[0] += 1
                tick = done[0] % 50 == 0
            if tick:
                provider.sleep_idle_agents(5.0)
                if mem_available_mib(samples=1) / 1024 < floor_gib:
                    stop.set()
        t0 = time.perf_counter()
        try:
            assert box.read_file(f"{WORKSPACE}/small.txt").content == SMALL
        except Exception as exc:
            failures.append(f"{type(exc).__name__}: {exc}"[:200])
            return None
        return time.perf_counter() - t0

    start = time.perf_counter()
    with ThreadPoolExecutor(parallel) as workers:
        took = [t for t in workers.map(one, boxes) if t is not None]
    return {
        "parallel": parallel,
        "stopped_at_floor": stop.is_set(),
        "total_s": time.perf_counter() - start,
        "latency": percentiles(took),
        "failures": len(failures),
        "failure_samples": failures[:3],
    }


def wake_cost(box: Any, python: str) -> dict[str, float]:
    """Where a wake goes, in the box: a bare interpreter vs. one that imports the agent."""
    agent = f"import sys; sys.path.insert(0, '{AGENT_PATH}'); "
    agent += "import sandkit.runtime.service, sandkit.agent.server"
    out = {}
    for name, code in (("python_start", "pass"), ("python_start_and_agent_imports", agent)):
        took = []
        for _ in range(5):
            result = box.execute(f'{python} -I -S -c "{code}"')
            assert result.exit_code == 0, result.stderr
            took.append(result.duration_ms)
        out[name] = statistics.median(took)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--image", default=os.environ.get("SANDKIT_TEST_IMAGE") or "sandkit/base:debian12"
    )
    parser.add_argument("--boxes", type=int, default=20, help="idle boxes to start")
    parser.add_argument("--bare", type=int, default=20, help="bare containers (baseline)")
    parser.add_argument("--parallel", type=int, default=8, help="acquires/calls at a time")
    parser.add_argument("--mem-limit", default="256m", help="each box's memory limit")
    parser.add_argument("--pids-limit", type=int, default=128, help="each box's pids limit")
    parser.add_argument("--cpus", type=float, default=0.5, help="each box's CPU quota")
    parser.add_argument("--tmp-size", default="64m", help="each box's /tmp tmpfs")
    parser.add_argument("--settle-s", type=float, default=15.0, help="idle before a reading")
    parser.add_argument("--floor-gib", type=float, default=4.0, help="stop below this free")
    parser.add_argument("--wake-sample", type=int, default=30, help="first calls, one by one")
    parser.add_argument(
        "--awake", type=int, help="boxes filled awake (default all); the rest sleep as they go"
    )
    parser.add_argument(
        "--agent-sleep", choices=("dormant", "exit"), default="dormant", help="how agents sleep"
    )
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the clean-up below runs
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile[1], nofile[1]))  # a socket per box
    run = uuid.uuid4().hex[:6]
    bounds = {
        "max_running": args.boxes,
        "mem_limit": args.mem_limit,
        "pids_limit": args.pids_limit,
        "cpus": args.cpus,
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={args.tmp_size},mode=1777"},
        "agent_sleep_s": 0,  # the benchmark says when agents sleep
        "agent_sleep": args.agent_sleep,
    }
    r: dict[str, Any] = {
        "run": run,
        "started": time.strftime("%F %T"),
        "bounds": bounds,
        "parallel": args.parallel,
        "load_start": loadavg(),
        "mem_available_start_gib": mem_available_mib() / 1024,
    }
    root = Path(tempfile.mkdtemp(prefix=f"sk14-density-{run}-"))
    provider = docker_provider(root, args.image, f"sk14-density-{run}", **bounds)
    log(f"owner {provider.owner}, bounds {bounds}, RLIMIT_NOFILE {nofile} -> {nofile[1]}")
    boxes: list[Any] = []
    try:
        warm = SandboxKey("bench", "warm-up")  # the payload is made before any reading
        provider.acquire(warm).execute("true")
        provider.destroy(warm)
        if args.bare:
            log(f"{args.bare} bare containers")
            r["bare"] = bare_baseline(provider, args, run)
        before = mem_available_mib(), engine_pss_mib()
        r["mem_available_before_fill_gib"] = before[0] / 1024
        keys = [SandboxKey("bench", f"d{run}-{i}") for i in range(args.boxes)]
        awake = min(args.awake if args.awake is not None else args.boxes, args.boxes)
        log(f"filling {awake} boxes awake, {args.parallel} at a time")
        part, boxes = fill(provider, keys[:awake], args, sleeping=False)
        parts = [part]
        r["awake"] = memory_now(provider, boxes, before, args)
        r["awake"]["boxes"] = len(boxes)
        if awake < args.boxes and not part["stopped_at_floor"]:
            log(f"filling {args.boxes - awake} more, idle agents put to sleep as it goes")
            provider.sleep_idle_agents(1e-3)
            part, more = fill(provider, keys[awake:], args, sleeping=True)
            parts.append(part)
            boxes += more
        r["fill"] = fill_summary(parts)
        r["boxes"] = len(boxes)
        r["load_full"] = loadavg()
        time.sleep(1.0)  # every box idle for a moment at least
        start = time.perf_counter()
        slept = provider.sleep_idle_agents(1e-3)
        r["sleep_s"], r["slept"] = time.perf_counter() - start, slept
        log(f"asleep: {slept} agents went to sleep in {r['sleep_s']:.1f} s")
        r["asleep"] = memory_now(provider, boxes, before, args)
        sample = boxes[: args.wake_sample]
        r["first_call_after_sleep"] = read_round(provider, sample, 1)
        r["second_call"] = read_round(provider, sample, 1)
        r["wake_cost_ms"] = wake_cost(sample[0], provider.options.python)
        log("a round on every box")
        r["round"] = read_round(provider, boxes, args.parallel, args.floor_gib)
    except SystemExit:  # SIGTERM: clean up and say what was measured
        r["interrupted"] = True
    finally:
        log("shutdown")
        start = time.perf_counter()
        try:
            provider.shutdown()
        except Exception as exc:
            r["shutdown_error"] = f"{type(exc).__name__}: {exc}"[:1000]
        r["shutdown_s"] = time.perf_counter() - start
        client = provider.client
        left = client.containers.list(all=True, filters={"name": provider.owner})
        r["left_after_shutdown"] = len(left)
        left += client.containers.list(all=True, filters={"label": f"{BENCH_LABEL}={run}"})
        for c in left:  # the machine is shared: nothing of ours stays
            with contextlib.suppress(Exception):
                c.remove(force=True, v=True)
        with contextlib.suppress(Exception):
            client.volumes.prune(filters={"label": f"sandkit.owner={provider.owner}"})
        shutil.rmtree(root, ignore_errors=True)
        r["load_end"] = loadavg()
        time.sleep(min(args.settle_s, 10))
        r["mem_available_end_gib"] = mem_available_mib() / 1024
    r["targets"] = targets(r, args)
    print(json.dumps(r, indent=2)) if args.json else report(r)
    return 0 if all(ok for _, _, ok in r["targets"]) else 1


def accounted(m: dict[str, Any]) -> float:
    """What a box is charged on the host: its memory cgroup plus the engine's growth."""
    return float(m["cgroup_mib"] + m["engine_mib"])


def targets(r: dict[str, Any], args: argparse.Namespace) -> list[tuple[str, str, bool]]:
    """(target, measured, met) of every target this run measured."""
    got = []
    idle = [accounted(r[s]) for s in ("awake", "asleep") if s in r]
    if idle:
        got.append(("idle box <= 6 MiB (cgroup + engine)", f"{min(idle):.2f} MiB", min(idle) <= 6))
    if "first_call_after_sleep" in r:
        p50 = r["first_call_after_sleep"]["latency"]["p50"] * 1000
        got.append(("first call after a sleep p50 <= 100 ms", f"{p50:.0f} ms", p50 <= 100))
    n = r.get("boxes", 0)
    got.append((f"{args.boxes} boxes started", str(n), n == args.boxes))
    if "round" in r:
        answered, failed = r["round"]["latency"]["n"], r["round"]["failures"]
        ok = failed == 0 and answered == n
        got.append(("a round on every box answered", f"{answered} of {n}, {failed} failed", ok))
    left = r.get("left_after_shutdown")
    got.append(("0 boxes left after shutdown", str(left), left == 0))
    return got


def report(r: dict[str, Any]) -> None:
    def ms(s: dict[str, Any]) -> str:
        return f"{s['p50'] * 1000:.1f} ms | {s['p95'] * 1000:.1f} ms | {s['n']}"

    if r.get("interrupted"):
        print("INTERRUPTED (SIGTERM): what was measured until then")
    print(f"run {r['run']}, {r['started']}; bounds {r['bounds']}, {r['parallel']} at a time")
    print(f"load average {r['load_start']} -> full {r.get('load_full')} -> {r['load_end']}")
    print(
        f"MemAvailable: start {r['mem_available_start_gib']:.1f} GiB, before the fill "
        f"{r.get('mem_available_before_fill_gib', 0):.1f} GiB, end {r['mem_available_end_gib']:.1f}"
    )
    fill = r.get("fill")
    if fill:
        print(
            f"fill: {r['boxes']} boxes in {fill['seconds']:.0f} s, {fill['errors']} errors"
            f"{', stopped at the MemAvailable floor' if fill['stopped_at_floor'] else ''}; "
            f"acquire p50 per tenth (ms): {fill['acquire_p50_per_tenth_ms']}"
        )
        for e in fill["error_samples"]:
            print(f"  error: {e}")
    print("\n| MiB per idle box | MemAvailable drop | memory cgroup | engine | cgroup + engine |")
    print("|---|---:|---:|---:|---:|")
    for label, name in (("bare container", "bare"), ("agent awake", "awake"), ("asleep", "asleep")):
        if name in r:
            m = r[name]
            label += f" ({m.get('n') or m.get('boxes') or r.get('boxes')})"
            cells = [m["mib_per_box"], m["cgroup_mib"], m["engine_mib"], accounted(m)]
            print(f"| {label} | " + " | ".join(f"{v:.2f}" for v in cells) + " |")
    print("\n| call | p50 | p95 | n |\n|---|---:|---:|---:|")
    if fill:
        print(f"| acquire while the host fills | {ms(fill['acquire'])} |")
    if "first_call_after_sleep" in r:
        wake = r["first_call_after_sleep"]["latency"]
        print(f"| first read_file after a sleep (wakes the agent) | {ms(wake)} |")
        print(f"| the next read_file | {ms(r['second_call']['latency'])} |")
    if "round" in r:
        x = r["round"]
        print(f"| read_file on every box, {x['parallel']} at a time | {ms(x['latency'])} |")
        stopped = ", stopped at the MemAvailable floor" if x["stopped_at_floor"] else ""
        print(f"\nround on every box: {x['total_s']:.1f} s, {x['failures']} failed{stopped}")
    if "slept" in r:
        print(f"sleep_idle_agents: {r['slept']} agents in {r['sleep_s']:.1f} s")
    if "wake_cost_ms" in r:
        print(f"in the box, p50 of 5 (ms): {r['wake_cost_ms']}")
    print(
        f"shutdown: {r['shutdown_s']:.1f} s, {r['left_after_shutdown']} left, "
        f"error {r.get('shutdown_error')}"
    )
    print("\n| target | measured | |\n|---|---|---|")
    for name, value, ok in r["targets"]:
        print(f"| {name} | {value} | {'pass' if ok else 'MISS'} |")


if __name__ == "__main__":
    sys.exit(main())
