"""The host side keeps the search's Unicode tables in this machine's cache: the first
process builds them once, every later one decodes what it uses instead of computing the
1.1-million-character table on its first case-insensitive grep (~0.3 s per process, which
every `sandkit grep` of the CLI paid). Agents ship the tables in their zipapp instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# A fresh process: a local provider, one case-insensitive grep; says whether it had to
# build the full character table (rxinfo._ALL) and what it found.
GREP_ONCE = """
import sys
from sandkit import SandboxKey, Settings
from sandkit.local import LocalProvider
from sandkit.runtime import rxinfo
with LocalProvider(Settings(data_root=sys.argv[1])) as provider:
    box = provider.acquire(SandboxKey("u", "t"))
    box.write_file("a.py", "class K:\\n    def __INIT__(self): pass\\n")
    found = box.grep("def __init__", output_mode="content").matches
    print(len(found), rxinfo._ALL is not None)
"""


def grep_once(data_root: Path, cache: Path) -> tuple[int, bool]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", GREP_ONCE, str(data_root)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    count, built = done.stdout.split()
    return int(count), built == "True"


def test_the_tables_are_built_once_per_machine(tmp_path: Path) -> None:
    from sandkit.runtime import rxinfo

    cache = tmp_path / "cache"
    assert grep_once(tmp_path / "one", cache) == (1, True)  # the first process builds them
    (written,) = (cache / "sandkit").glob("unicode-tables-*.json")
    assert json.loads(written.read_text())["key"] == rxinfo.tables_key()
    assert grep_once(tmp_path / "two", cache) == (1, False)  # the next one reads them


def test_an_unwritable_cache_still_searches(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "sandkit").write_text("a file where the directory would be")
    assert grep_once(tmp_path / "root", cache) == (1, True)


# In a fresh interpreter: warm up as an agent's warm-up thread does, then say whether the
# case-insensitive ASCII table is decoded and whether anything was computed instead.
WARM = """
import sys
sys.path.insert(0, sys.argv[1])
from sandkit.runtime import rxinfo
rxinfo.warm()
print(rxinfo.ICASE in rxinfo._ASCII_TABLES, rxinfo._ALL is not None, "pkgutil" in sys.modules)
"""


def fresh_python(script: str, path: str, cache: Path, *flags: str) -> list[str]:
    """`script` in a fresh interpreter with `path` (a zipapp or a source tree) as its
    argv[1], an empty cache and no other environment; the words it printed."""
    env = {"PATH": os.environ.get("PATH", ""), "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run(
        [sys.executable, *flags, "-c", script, path],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_an_agent_decodes_the_shipped_tables_before_its_first_grep(tmp_path: Path) -> None:
    from sandkit.agent.build import agent_zipapp

    def warm(path: str, *flags: str) -> list[str]:
        return fresh_python(WARM, path, tmp_path, *flags)

    # From the zipapp: the shipped tables, decoded; nothing computed, no pkgutil (typing).
    assert warm(str(agent_zipapp()), "-I", "-S") == ["True", "False", "False"]
    # Without shipped tables (the source tree, no cache): nothing is computed ahead; the
    # ~0.3 s is left to a search that needs it.
    source = str(Path(__file__).resolve().parent.parent / "src")
    assert warm(source)[:2] == ["False", "False"]


# In a fresh interpreter from the zipapp: one thread loads the shipped tables (held up
# while it reads them), another translates a pattern meanwhile, as a first grep meets the
# agent's warm-up thread; says whether anything was computed from all of Unicode.
RACE = """
import sys, threading, time
sys.path.insert(0, sys.argv[1])
from sandkit.runtime import rxinfo
reading = threading.Event()
real = rxinfo._shipped_file
def slow():
    reading.set()
    time.sleep(0.3)
    return real()
rxinfo._shipped_file = slow
loader = threading.Thread(target=rxinfo.warm)
loader.start()
reading.wait()
rxinfo.pattern_info(r"def \\w+\\(self", False, True, False).translate()
loader.join()
print(rxinfo._ALL is not None)
"""


def test_a_grep_that_meets_the_tables_loading_waits_for_them(tmp_path: Path) -> None:
    """A grep that came while the agent's warm-up thread was still reading the shipped
    tables found none yet and computed its set from all of Unicode (~0.1 s in a box: the
    slowest first greps of the start bench)."""
    from sandkit.agent.build import agent_zipapp

    assert fresh_python(RACE, str(agent_zipapp()), tmp_path, "-I", "-S") == ["False"]
