"""Agent start (issue 14): process start -> first JSON-RPC answer, against a bare interpreter.

    python3 bench/agent_start_bench.py [--n 40] [--agent AGENT.pyz] [--python python3]

Three lines, interleaved (the order rotates each round), --n runs each after 3 warm-up
rounds:

- bare: `python3 -I -S -c pass`, start -> exit;
- ping: `python3 -I -S agent.pyz --stdio`, start -> the answer to a `ping` written at once;
- initialize: the same, the first frame an `initialize` as a box's client sends it
  (`agent_config`: three mounts, a secret, execute enabled, so the agent builds its
  process supervisor's client as in a box) -> its answer.

p50/p95 of each and the ratio agent/bare of the p50s; then the sum of the `-X importtime`
self times of the 15 slowest modules of the start path (`--stdio` with stdin at EOF; each
module's least self time of 9 runs), and those modules. Without --agent the zipapp of this
checkout is built (`sandkit.agent.build.agent_zipapp()`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from timing import loadavg, percentiles  # noqa: E402

from sandkit.agent import protocol as p  # noqa: E402
from sandkit.runtime.limits import Limits  # noqa: E402
from sandkit.runtime.pathmap import OUTPUTS, UPLOADS, WORKSPACE, Mount, PathMapping  # noqa: E402

WARMUP = 3
TOP = 15
PROFILE_RUNS = 9


def config(root: Path) -> dict[str, object]:
    mounts = []
    for virtual in (WORKSPACE, UPLOADS, OUTPUTS):
        real = root / virtual.rsplit("/", 1)[-1]
        real.mkdir(parents=True, exist_ok=True)
        mounts.append(Mount(virtual, str(real)))
    return p.agent_config(
        PathMapping(mounts),
        Limits(),
        execute_enabled=True,
        secrets=["bench-secret-value"],
        env={"HTTP_PROXY": "http://127.0.0.1:3128"},
    )


def bare(python: str) -> float:
    start = time.perf_counter()
    subprocess.run([python, "-I", "-S", "-c", "pass"], check=True)
    return time.perf_counter() - start


def first_answer(python: str, agent: str, frame: bytes) -> float:
    """Seconds from starting the agent to the first line it answers `frame` with."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-I", "-S", agent, "--stdio"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(frame)
    proc.stdin.flush()
    line = proc.stdout.readline()
    took = time.perf_counter() - start
    proc.stdin.close()
    proc.wait()
    proc.stdout.close()
    answer = json.loads(line)
    if "result" not in answer:
        raise SystemExit(f"the agent answered {answer!r}")
    return took


def import_profile(python: str, agent: str) -> tuple[float, list[tuple[int, str]]]:
    """Sum of the self times (s) of the TOP slowest modules: each module's least self time
    over PROFILE_RUNS runs (a busy machine only ever adds to an import's time)."""
    least: dict[str, int] = {}
    for _ in range(PROFILE_RUNS):
        done = subprocess.run(
            [python, "-I", "-S", "-X", "importtime", agent, "--stdio"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=True,
        )
        for line in done.stderr.splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            own, _, name = line[len("import time:") :].split("|")
            name = name.strip()
            least[name] = min(int(own), least.get(name, int(own)))
    top = sorted(((us, name) for name, us in least.items()), reverse=True)[:TOP]
    return sum(us for us, _ in top) / 1e6, top


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=40, help="runs of each line (40)")
    parser.add_argument("--agent", help="the agent zipapp (default: built from this checkout)")
    parser.add_argument("--python", default="python3", help="the interpreter (python3)")
    args = parser.parse_args()
    # The interpreter itself, not a wrapper (a pyenv shim is a shell script).
    args.python = subprocess.run(
        [shutil.which(args.python) or args.python, "-c", "import sys; print(sys.executable)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if args.agent:
        agent = str(Path(args.agent).resolve())
    else:
        from sandkit.agent.build import agent_zipapp

        agent = str(agent_zipapp())
    with tempfile.TemporaryDirectory(prefix="agent-start-bench-") as tmp:
        ping = p.frame(p.request(1, "ping", {}))
        initialize = p.frame(p.request(1, "initialize", config(Path(tmp))))
        lines = {
            "bare python3 -I -S -c pass": lambda: bare(args.python),
            "agent start -> ping answered": lambda: first_answer(args.python, agent, ping),
            "agent start -> initialize answered": lambda: first_answer(
                args.python, agent, initialize
            ),
        }
        names = list(lines)
        samples: dict[str, list[float]] = {name: [] for name in names}
        load_before = loadavg()
        for round_ in range(WARMUP + args.n):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                took = lines[name]()
                if round_ >= WARMUP:
                    samples[name].append(took)
        load_after = loadavg()
    profile_sum, top = import_profile(args.python, agent)
    version = subprocess.run(
        [args.python, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(f"agent {agent}")
    print(
        f"python {args.python} {version}, {os.cpu_count()} cpus, n={args.n},"
        f" load {load_before} -> {load_after}"
    )
    bare_p50 = percentiles(samples[names[0]])["p50"]
    print("| line | p50 | p95 | p50 / bare |")
    print("|---|---:|---:|---:|")
    for name in names:
        stats = percentiles(samples[name])
        print(
            f"| {name} | {stats['p50'] * 1000:.1f} ms | {stats['p95'] * 1000:.1f} ms"
            f" | {stats['p50'] / bare_p50:.2f}x |"
        )
    print(
        f"\nimporttime (--stdio, stdin at EOF): top {TOP} self times sum to"
        f" {profile_sum * 1000:.1f} ms (each module's least of {PROFILE_RUNS} runs)"
    )
    print("  " + ", ".join(f"{name} {us / 1000:.1f}" for us, name in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
