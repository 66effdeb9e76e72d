"""grep semantics, run against both engines (ripgrep accelerator and pure Python)."""

from __future__ import annotations

import os
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sandkit.runtime import scanworker
from sandkit.runtime.context import Context
from sandkit.runtime.errors import ErrorCode, SandboxError
from sandkit.runtime.limits import Limits
from sandkit.runtime.pathmap import WORKSPACE, Mount, PathMapping
from sandkit.runtime.rg import find_rg
from sandkit.runtime.search import grep

RG = find_rg()
ENGINES = ["rg", "python"]


def context(root: Path, engine: str, **limits: Any) -> Context:
    if engine == "rg" and RG is None:
        pytest.skip("ripgrep is not installed")
    return Context(
        mapping=PathMapping([Mount(WORKSPACE, str(root))]),
        limits=Limits(**limits),
        rg_path=RG if engine == "rg" else None,
    )


def write(root: Path, tree: dict[str, str | bytes]) -> None:
    for rel, data in tree.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            target.write_bytes(data.encode("utf-8"))
        else:
            target.write_bytes(data)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def lines(ctx: Context, pattern: str, **kw: Any) -> list[tuple[str, int, str]]:
    result = grep(ctx, pattern, **kw)
    return [(m["path"].rsplit("/", 1)[1], m["line_number"], m["text"]) for m in result["matches"]]


def code(ctx: Context, pattern: str, **kw: Any) -> ErrorCode:
    with pytest.raises(SandboxError) as info:
        grep(ctx, pattern, **kw)
    return info.value.code


# -- modes, order, paging -----------------------------------------------------------


def test_result_shape_and_order(ws: Path, engine: str) -> None:
    write(ws, {"b.txt": "hit\nmiss\nhit\n", "a/z.txt": "hit\n", "a.txt": "HIT\n"})
    ctx = context(ws, engine)
    result = grep(ctx, "hit")
    assert set(result) == {
        "path",
        "pattern",
        "output_mode",
        "matches",
        "files",
        "counts",
        "offset",
        "truncated",
    }
    assert result["path"] == WORKSPACE and result["pattern"] == "hit"
    assert [(m["path"], m["line_number"]) for m in result["matches"]] == [
        (f"{WORKSPACE}/a.txt", 1),
        (f"{WORKSPACE}/a/z.txt", 1),
        (f"{WORKSPACE}/b.txt", 1),
        (f"{WORKSPACE}/b.txt", 3),
    ]
    assert grep(ctx, "hit", output_mode="files_with_matches")["files"] == [
        f"{WORKSPACE}/a.txt",
        f"{WORKSPACE}/a/z.txt",
        f"{WORKSPACE}/b.txt",
    ]
    assert grep(ctx, "hit", output_mode="count")["counts"] == [
        {"path": f"{WORKSPACE}/a.txt", "count": 1},
        {"path": f"{WORKSPACE}/a/z.txt", "count": 1},
        {"path": f"{WORKSPACE}/b.txt", "count": 2},
    ]


@pytest.mark.parametrize("mode", ["content", "files_with_matches", "count"])
def test_paging_visits_every_result_once(ws: Path, engine: str, mode: str) -> None:
    write(ws, {f"f{i}.txt": "hit\n" * (i % 3 + 1) for i in range(7)})
    ctx = context(ws, engine)
    everything = grep(ctx, "hit", output_mode=mode, max_results=500)
    key = {"content": "matches", "files_with_matches": "files", "count": "counts"}[mode]
    assert everything["truncated"] is False
    pages: list[Any] = []
    offset = 0
    while True:
        page = grep(ctx, "hit", output_mode=mode, max_results=2, offset=offset)
        assert page["offset"] == offset
        pages += page[key]
        if not page["truncated"]:
            break
        assert len(page[key]) == 2
        offset += 2
    assert pages == everything[key]
    exact = grep(ctx, "hit", output_mode=mode, max_results=len(pages))
    assert exact["truncated"] is False
    past = grep(ctx, "hit", output_mode=mode, offset=len(pages))
    assert past[key] == [] and past["truncated"] is False


def test_caps_default_and_ceiling(ws: Path, engine: str) -> None:
    write(ws, {"f.txt": "hit\n" * 30})
    ctx = context(ws, engine, grep_default_results=4, grep_max_results=10)
    assert len(grep(ctx, "hit")["matches"]) == 4
    assert len(grep(ctx, "hit", max_results=0)["matches"]) == 4
    assert len(grep(ctx, "hit", max_results=-1)["matches"]) == 4
    clamped = grep(ctx, "hit", max_results=10**9)
    assert len(clamped["matches"]) == 10 and clamped["truncated"] is True


def test_count_counts_lines_not_matches(ws: Path, engine: str) -> None:
    write(ws, {"f.txt": "a a a\nb\na\n"})
    assert grep(context(ws, engine), "a", output_mode="count")["counts"][0]["count"] == 2


# -- dialect -------------------------------------------------------------------------


def test_python_dialect(ws: Path, engine: str) -> None:
    write(ws, {"f.txt": "foo123\nfoobar\nabab\nxyz\nword boundary\nnamed: 42\nprice $5\n"})
    ctx = context(ws, engine)

    def nums(pattern: str, **kw: Any) -> list[int]:
        return [n for _, n, _ in lines(ctx, pattern, **kw)]

    assert nums(r"foo(?=\d)") == [1]
    assert nums(r"foo(?!\d)") == [2]
    assert nums(r"(ab)\1") == [3]
    assert nums(r"(?<=foo)bar") == [2]
    assert nums(r"\bboundary\b") == [5]
    assert nums(r"(?P<n>\d+)$") == [1, 6, 7]
    assert nums(r"\$5") == [7]
    assert nums(r"(?-i:XYZ)") == []
    assert nums(r"XYZ") == [4]
    assert nums(r"(?x) x  y  z  # verbose") == [4]
    assert nums(r"\Aword") == [5]
    assert nums(r"\d\Z") == [1, 6, 7]


def test_unicode_classes_and_case_follow_python(ws: Path, engine: str) -> None:
    # Python and Rust disagree on these; Python's answer is the contract.
    write(ws, {"f.txt": "x²\ne\u0301\n\u212a\nİ\n\u017f\nstraße\n\x1c\n"})
    ctx = context(ws, engine)

    def nums(pattern: str, **kw: Any) -> list[int]:
        return [n for _, n, _ in lines(ctx, pattern, **kw)]

    assert nums(r"^\w+$") == [1, 3, 4, 5, 6]  # ² is a word character, U+0301 is not
    assert nums("k") == [3]  # the Kelvin sign folds to k
    assert nums("i") == [4]  # İ lowercases to i in Python's re
    assert nums("s", case_sensitive=True) == [6]
    assert nums("^s$") == [5]  # the long s (U+017F) matches s case-insensitively
    assert nums(r"^\s$") == [7]  # \x1c is whitespace for Python
    assert nums("STRASSE") == []
    assert nums("STRAẞE") == [6]


def test_literal(ws: Path, engine: str) -> None:
    write(ws, {"f.txt": "a.c\nabc\n(x+\n[y]\n"})
    ctx = context(ws, engine)
    assert [t for _, _, t in lines(ctx, "a.c")] == ["a.c", "abc"]
    assert [t for _, _, t in lines(ctx, "a.c", literal=True)] == ["a.c"]
    assert [t for _, _, t in lines(ctx, "(x+", literal=True)] == ["(x+"]
    assert [t for _, _, t in lines(ctx, "[Y]", literal=True)] == ["[y]"]
    assert lines(ctx, "[Y]", literal=True, case_sensitive=True) == []


@pytest.mark.parametrize("pattern", ["(", "[a-", "a{2,1}", "(?P<x>a)(?P<x>b)", "\\", "*a"])
def test_invalid_regex(ws: Path, engine: str, pattern: str) -> None:
    write(ws, {"f.txt": "x\n"})
    assert code(context(ws, engine), pattern) is ErrorCode.INVALID_PATTERN


def test_too_long_pattern(ws: Path, engine: str) -> None:
    write(ws, {"f.txt": "x\n"})
    assert code(context(ws, engine), "a" * 10001) is ErrorCode.INVALID_PATTERN


# -- lines, text, encodings ------------------------------------------------------------


def test_crlf_lines(ws: Path, engine: str) -> None:
    write(ws, {"f.txt": "première ligne\r\nZweite Straße\r\nlone\rcr\nend"})
    ctx = context(ws, engine)
    assert lines(ctx, "ligne$") == [("f.txt", 1, "première ligne")]
    assert lines(ctx, "straße") == [("f.txt", 2, "Zweite Straße")]
    assert lines(ctx, "lone$") == []  # a lone CR does not end a line
    assert lines(ctx, "lone\rcr$") == [("f.txt", 3, "lone\rcr")]
    assert lines(ctx, "^end$") == [("f.txt", 4, "end")]
    assert [n for _, n, _ in lines(ctx, r"e\s")] == [1, 2, 3]  # the CR is still text


def test_invalid_utf8_bytes_never_match(ws: Path, engine: str) -> None:
    write(ws, {"f.txt": b"a\xffb\nc\xe2\x82d\nok\xc3\n"})
    ctx = context(ws, engine)
    assert lines(ctx, "a.b") == []
    assert lines(ctx, r"c\Wd") == []
    assert lines(ctx, "c[^x]+d") == []
    assert lines(ctx, "^ok") == [("f.txt", 3, "ok\ufffd")]
    assert lines(ctx, r"ok\b") == [("f.txt", 3, "ok\ufffd")]
    assert lines(ctx, "b$") == [("f.txt", 1, "a\ufffdb")]


def test_case_insensitive_literal_in_a_non_ascii_file(ws: Path, engine: str) -> None:
    # Found by the differential test: no byte-level shortcut may skip the real check.
    write(ws, {"a.txt": b"\xef\xbb\xbf\xff\n\n", "b.txt": "\u0130MPORT \u017fome\n"})
    ctx = context(ws, engine)
    for multiline in (False, True):
        found = grep(ctx, "import s", multiline=multiline, output_mode="files_with_matches")
        assert found["files"] == [f"{WORKSPACE}/b.txt"]


def test_bom_and_binary(ws: Path, engine: str) -> None:
    write(
        ws,
        {
            "bom.py": b"\xef\xbb\xbfimport os\n",
            "early.bin": b"import\x00\n",
            "late.txt": b"x" * 9000 + b"\nimport\n\x00",
            "utf16.txt": "import\n".encode("utf-16"),
        },
    )
    ctx = context(ws, engine)
    assert lines(ctx, "^import") == [("bom.py", 1, "import os"), ("late.txt", 2, "import")]


def test_oversize_files_are_skipped(ws: Path, engine: str) -> None:
    write(ws, {"big.txt": "needle\n" + "x" * 200, "exact.txt": "needle\n" + "x" * 93})
    ctx = context(ws, engine, grep_max_file_bytes=100)
    assert grep(ctx, "needle", output_mode="files_with_matches")["files"] == [
        f"{WORKSPACE}/exact.txt"
    ]


def test_long_lines_are_cut_around_the_match(ws: Path, engine: str) -> None:
    write(ws, {"f.txt": "x" * 1000 + "needle" + "y" * 1000 + "\nshort needle\n" + "z" * 300})
    ctx = context(ws, engine)
    [long, short] = grep(ctx, "needle", after=1)["matches"]
    assert len(long["text"]) == 200
    assert long["text"].startswith("x" * 99 + "…")
    assert "needle" in long["text"] and long["text"].endswith("y…")
    assert short["text"] == "short needle"
    assert short["after"] == ["z" * 199 + "…"]


def test_context_lines(ws: Path, engine: str) -> None:
    write(ws, {"f.txt": "".join(f"line{i}\n" for i in range(1, 11))})
    ctx = context(ws, engine)
    [match] = grep(ctx, "line5$", before=2, after=3)["matches"]
    assert (match["before"], match["text"], match["after"]) == (
        ["line3", "line4"],
        "line5",
        ["line6", "line7", "line8"],
    )
    first, second = grep(ctx, "line[12]$", before=5, after=1)["matches"]
    assert (first["before"], first["after"]) == ([], ["line2"])
    assert (second["before"], second["after"]) == (["line1"], ["line3"])
    capped = grep(context(ws, engine, grep_max_context=1), "line5$", before=9, after=9)
    assert (capped["matches"][0]["before"], capped["matches"][0]["after"]) == (["line4"], ["line6"])


def test_multiline(ws: Path, engine: str) -> None:
    write(ws, {"f.py": "x = 1\ndef f(\n    a,\n):\n    pass\n", "g.txt": "start\nmiddle\nend\n"})
    ctx = context(ws, engine)
    assert grep(ctx, r"def f\(\n\s+a")["matches"] == []
    [match] = grep(ctx, r"def f\(\n\s+a", multiline=True, after=1)["matches"]
    assert (match["line_number"], match["text"], match["after"]) == (2, "def f(\n    a,", ["):"])
    assert grep(ctx, "start.*end", multiline=True)["matches"] == []
    [dotall] = grep(ctx, "(?s)start.*end", multiline=True)["matches"]
    assert dotall["text"] == "start\nmiddle\nend"
    counted = grep(ctx, r"^\w", multiline=True, output_mode="count")["counts"]
    assert counted == [
        {"path": f"{WORKSPACE}/f.py", "count": 2},
        {"path": f"{WORKSPACE}/g.txt", "count": 3},
    ]


def test_multiline_text_is_capped(ws: Path, engine: str) -> None:
    write(ws, {"f.txt": "".join(f"l{i}\n" for i in range(40))})
    [match] = grep(context(ws, engine), r"(?s)l0.*l39", multiline=True)["matches"]
    shown = match["text"].split("\n")
    assert shown[:2] == ["l0", "l1"] and len(shown) == 21
    assert shown[-1] == "… (+20 more lines)"


# -- which files -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "glob, expected",
    [
        ("*.py", ["app.py", "lib/util.py"]),
        ("**/*.py", ["app.py", "lib/util.py"]),
        ("lib/*", ["lib/notes.md", "lib/util.py"]),
        ("*.{md,txt}", ["README.txt", "lib/notes.md", "é.md"]),
        ("?????.txt", []),
        ("??????.txt", ["README.txt"]),
        ("[al]*", ["app.py"]),
        ("", ["README.txt", "app.py", "lib/notes.md", "lib/util.py", "é.md"]),
        ("*.md", ["lib/notes.md", "é.md"]),
        ("?.md", ["é.md"]),
    ],
)
def test_glob_filter(ws: Path, engine: str, glob: str, expected: list[str]) -> None:
    write(
        ws,
        {
            "app.py": "hello",
            "lib/util.py": "hello",
            "lib/notes.md": "hello",
            "README.txt": "hello",
            "é.md": "hello",
        },
    )
    result = grep(context(ws, engine), "hello", glob=glob, output_mode="files_with_matches")
    assert result["files"] == [f"{WORKSPACE}/{p}" for p in expected]


def test_invalid_glob_filter(ws: Path, engine: str) -> None:
    write(ws, {"f.txt": "x"})
    assert code(context(ws, engine), "x", glob="[a") is ErrorCode.INVALID_PATTERN
    assert code(context(ws, engine), "x", glob="/etc/*") is ErrorCode.INVALID_PATTERN


def test_ignore_set_and_hidden_files(ws: Path, engine: str) -> None:
    write(
        ws,
        {
            "src/a.js": "needle",
            ".github/ci.yml": "needle",
            "node_modules/m/i.js": "needle",
            ".git/config": "needle",
            "dist/bundle.js": "needle",
            "x.pyc": "needle",
            "odd.pyc/inside.txt": "needle",
        },
    )
    ctx = context(ws, engine)
    assert grep(ctx, "needle", output_mode="files_with_matches")["files"] == [
        f"{WORKSPACE}/.github/ci.yml",
        f"{WORKSPACE}/src/a.js",
    ]
    named = grep(ctx, "needle", path=f"{WORKSPACE}/node_modules", output_mode="files_with_matches")
    assert named["files"] == [f"{WORKSPACE}/node_modules/m/i.js"]


def test_symlinks_are_not_followed(ws: Path, tmp_path: Path, engine: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("needle\n")
    write(ws, {"real.txt": "needle\n"})
    (ws / "link.txt").symlink_to(ws / "real.txt")
    (ws / "out").symlink_to(outside)
    (ws / "out.txt").symlink_to(outside / "secret.txt")
    result = grep(context(ws, engine), "needle", output_mode="files_with_matches")
    assert result["files"] == [f"{WORKSPACE}/real.txt"]


def test_single_file_and_special_paths(ws: Path, engine: str) -> None:
    write(ws, {"lib/util.py": "def helper():\n    return 'hello'\n\nHELLO = 1\n"})
    os.mkfifo(ws / "pipe")
    ctx = context(ws, engine)
    assert [n for _, n, _ in lines(ctx, "hello", path=f"{WORKSPACE}/lib/util.py")] == [2, 4]
    assert lines(ctx, "hello", path="lib/util.py", glob="*.md") == []
    assert grep(ctx, "x", path=f"{WORKSPACE}/pipe")["matches"] == []
    assert grep(ctx, "x")["matches"] == []  # the FIFO is never opened
    assert code(ctx, "x", path=f"{WORKSPACE}/missing") is ErrorCode.NOT_FOUND
    assert code(ctx, "x", path="/etc") is ErrorCode.ACCESS_DENIED
    (ws / "escape").symlink_to("/etc")
    assert code(ctx, "x", path=f"{WORKSPACE}/escape") is ErrorCode.ACCESS_DENIED


@pytest.mark.parametrize(
    "kwargs",
    [
        {"output_mode": "lines"},
        {"offset": -1},
        {"offset": "1"},
        {"max_results": "5"},
        {"max_results": 2.5},
        {"literal": "yes"},
        {"case_sensitive": 1},
        {"multiline": None},
        {"glob": 5},
        {"before": -1},
        {"after": "2"},
        {"pattern": ""},
        {"pattern": None},
        {"path": 7},
    ],
    ids=lambda kw: "{}={!r}".format(*next(iter(kw.items()))),
)
def test_bad_arguments(ws: Path, engine: str, kwargs: dict[str, Any]) -> None:
    write(ws, {"f.txt": "hello"})
    arguments: dict[str, Any] = {"pattern": "hello", **kwargs}
    assert code(context(ws, engine), **arguments) is ErrorCode.INVALID_ARGUMENT


# -- hostile input and time bounds -----------------------------------------------------


HOSTILE = [
    "$(touch pwned)",
    "`touch pwned`",
    "--pre=sh",
    "-e",
    "--files",
    "-f/etc/passwd",
    "; rm -rf /",
]


def test_hostile_patterns_are_inert(
    ws: Path, tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "ripgreprc"
    config.write_text(f"--pre={tmp_path / 'pre.sh'}\n")
    (tmp_path / "pre.sh").write_text(f'#!/bin/sh\ntouch {tmp_path}/pwned\ncat "$1"\n')
    (tmp_path / "pre.sh").chmod(0o755)
    monkeypatch.setenv("RIPGREP_CONFIG_PATH", str(config))
    monkeypatch.chdir(ws)
    write(ws, {"f.txt": "\n".join(HOSTILE) + "\n"})
    ctx = context(ws, engine)
    for number, pattern in enumerate(HOSTILE, start=1):
        assert [n for _, n, _ in lines(ctx, pattern, literal=True)] == [number], pattern
        if "/" not in pattern:
            assert grep(ctx, pattern, glob=pattern)["matches"] == []
    assert [n for _, n, _ in lines(ctx, "--pre=sh")] == [3]
    assert [n for _, n, _ in lines(ctx, "-e")] == [4]
    leftovers = [p for p in tmp_path.rglob("pwned")] + [p for p in Path.cwd().rglob("pwned")]
    assert leftovers == []


def test_ripgrep_argv_and_environment(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in ripgrep records how it is called."""
    log = tmp_path / "argv.log"
    fake = tmp_path / "rg"
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps([sys.argv[1:], dict(os.environ)]) + '\\n')\n"
        "sys.exit(1)\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("RIPGREP_CONFIG_PATH", "/nonexistent")
    write(ws, {"f.txt": "x\n"})
    ctx = Context(mapping=PathMapping([Mount(WORKSPACE, str(ws))]), rg_path=str(fake))
    assert grep(ctx, "--pre=sh")["matches"] == []
    import json

    [(argv, env)] = [json.loads(line) for line in log.read_text().splitlines()]
    assert "--no-config" in argv and "--no-ignore" in argv and "--hidden" in argv
    assert not any(a.startswith(("--pre", "--follow", "-L")) for a in argv)
    separator = argv.index("--")
    assert argv[separator + 1 :] == [str(ws)]
    regexps = [a for a in argv if a.startswith("--regexp=")]
    assert len(regexps) == 1 and argv.index(regexps[0]) < separator
    assert "RIPGREP_CONFIG_PATH" not in env


def test_ripgrep_failures(ws: Path, tmp_path: Path) -> None:
    write(ws, {"f.txt": "needle\n"})
    mapping = PathMapping([Mount(WORKSPACE, str(ws))])

    def fake(name: str, body: str) -> str:
        path = tmp_path / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
        return str(path)

    refused = fake("rg-refuses", "echo 'rg: regex parse error:' >&2\nexit 2\n")
    result = grep(Context(mapping=mapping, rg_path=refused), "needle")
    assert [m["line_number"] for m in result["matches"]] == [1]  # answered by Python
    broken = fake("rg-broken", "echo 'rg: something else went wrong' >&2\nexit 2\n")
    with pytest.raises(SandboxError) as info:
        grep(Context(mapping=mapping, rg_path=broken), "needle")
    assert info.value.code is ErrorCode.INTERNAL
    missing = Context(mapping=mapping, rg_path=str(tmp_path / "no-such-rg"))
    assert [m["line_number"] for m in grep(missing, "needle")["matches"]] == [1]


def test_ripgrep_timeout_kills_the_child(ws: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    slow = tmp_path / "rg-slow"
    slow.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    slow.chmod(0o755)
    write(ws, {"f.txt": "needle\n"})
    ctx = Context(
        mapping=PathMapping([Mount(WORKSPACE, str(ws))]),
        limits=Limits(search_timeout_s=1),
        rg_path=str(slow),
    )
    started = time.monotonic()
    with pytest.raises(SandboxError) as info:
        grep(ctx, "needle")
    assert info.value.code is ErrorCode.TIMEOUT
    assert time.monotonic() - started < 10
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


CATASTROPHIC = [r"^(a+)+$", r"(a|aa)+$", r"^(?=(a+)+$)", r"(\w+\s?)+!$"]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_backtracking_times_out_and_the_next_call_works(
    ws: Path, engine: str, pattern: str
) -> None:
    write(ws, {"f.txt": "a" * 5000 + "b\n" + "a" * 60 + "!\nfine\n"})
    ctx = context(ws, engine, search_timeout_s=1)
    started = time.monotonic()
    try:
        result = grep(ctx, pattern)
    except SandboxError as exc:
        assert exc.code is ErrorCode.TIMEOUT
    else:
        # ripgrep answers some of these exactly, in linear time.
        assert engine == "rg"
        assert result["matches"] == [] or result["matches"][0]["line_number"] in (1, 2)
    assert time.monotonic() - started < 8
    assert [m["line_number"] for m in grep(ctx, "fine")["matches"]] == [3]
    assert [m["line_number"] for m in grep(ctx, r"fi\w+")["matches"]] == [3]


def test_timeout_is_never_partial(ws: Path, engine: str) -> None:
    write(ws, {f"d{i}/f{j}.txt": "needle\n" for i in range(30) for j in range(30)})
    ctx = context(ws, engine, search_timeout_s=1e-6)
    assert code(ctx, "needle") is ErrorCode.TIMEOUT


def test_concurrent_searches(ws: Path, engine: str) -> None:
    write(ws, {f"f{i}.txt": f"alpha {i}\nbeta {i}\n" * 5 for i in range(20)})
    ctx = context(ws, engine)
    patterns = ["alpha", r"beta \d+", r"(al|be)\w+ 1\d", "gamma"]
    expected = {p: grep(ctx, p, max_results=500) for p in patterns}
    errors: list[BaseException] = []

    def worker(pattern: str) -> None:
        try:
            for _ in range(5):
                assert grep(ctx, pattern, max_results=500) == expected[pattern]
        except BaseException as exc:  # collected for the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(p,)) for p in patterns * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_worker_survives_its_own_timeout(ws: Path) -> None:
    write(ws, {"f.txt": "a" * 60 + "!\n"})
    ctx = context(ws, "python", search_timeout_s=1)
    assert code(ctx, r"^(a+)+$") is ErrorCode.TIMEOUT
    idle = list(scanworker.POOL._idle)
    assert idle and all(w.proc.poll() is None for w in idle)
    assert [m["line_number"] for m in grep(ctx, r"a+!")["matches"]] == [1]


def test_worker_runs_from_a_zipapp(tmp_path: Path) -> None:
    """Inside a box the runtime is imported from a zip; the worker must still start."""
    import subprocess
    import zipfile

    runtime = Path(scanworker.__file__).parent
    archive = tmp_path / "runtime.pyz"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("sandkit/__init__.py", "")
        for source in runtime.glob("*.py"):
            zf.write(source, f"sandkit/runtime/{source.name}")
    ws = tmp_path / "ws"
    write(ws, {"f.txt": "aaaa!\nfine line\n"})
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from sandkit.runtime import search\n"
        "from sandkit.runtime.context import Context\n"
        "from sandkit.runtime.pathmap import Mount, PathMapping\n"
        "assert search.__file__.startswith(sys.argv[1]), search.__file__\n"
        "ctx = Context(mapping=PathMapping([Mount('/w', sys.argv[2])]))\n"
        "found = search.grep(ctx, r'fi\\w+ line', path='/w')['matches']\n"
        "print([m['line_number'] for m in found])\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", script, str(archive), str(ws)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2]"


def test_icase_partner_table_matches_python() -> None:
    from sandkit.runtime import rxinfo

    for flags in (rxinfo.ICASE, rxinfo.ICASE | rxinfo.A):
        table = rxinfo._ascii_table(flags)
        partnered = {chr(c) for c, ranges in table.items() if any(hi > 127 for _, hi in ranges)}
        assert partnered <= rxinfo.ICASE_PARTNERED


# -- find_rg -------------------------------------------------------------------------------


def test_find_rg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDKIT_RG", "none")
    assert find_rg() is None
    fake = tmp_path / "rg"
    fake.write_text("#!/bin/sh\n")
    monkeypatch.setenv("SANDKIT_RG", str(fake))
    assert find_rg() is None  # not executable
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert find_rg() == str(fake)
    monkeypatch.delenv("SANDKIT_RG")
    found = find_rg()
    assert found is None or os.access(found, os.X_OK)


def test_a_ripgrep_crash_falls_back_to_the_python_engine() -> None:
    """rg 15 can panic when a directory is swapped for a symlink mid-walk (seen 7 in 966
    runs of such a race): that is the Python engine's turn, not an INTERNAL error."""
    from sandkit.runtime import rg

    with pytest.raises(rg.RgUnusable):
        rg._checked(101, b"", b"thread '<unnamed>' panicked at crates/ignore/src/walk.rs:1167")


def test_the_agents_search_warm_up_greps_nothing_of_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An agent's warm-up thread runs one whole grep (ripgrep included) on a sample tree of
    # its own, so a fresh agent's first grep does not pay for the first run of any step;
    # it reads no user file, leaves nothing behind and never fails, whatever ripgrep it
    # is given.
    import subprocess
    import tempfile

    from sandkit.runtime import search

    if RG is None:
        pytest.skip("ripgrep is not installed")
    user = tmp_path / "user"
    user.mkdir()
    (user / "secret.py").write_text("def sample(): pass\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    ran: list[list[str]] = []
    real = subprocess.Popen

    def spy(args: Any, *rest: Any, **kwargs: Any) -> Any:
        ran.append(list(args))
        return real(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", spy)
    for rg_path in (RG, None, str(tmp_path / "no-such-rg")):
        monkeypatch.setattr(search, "_searched", False)  # a fresh agent: no grep yet
        ctx = Context(PathMapping([Mount(WORKSPACE, str(user))]), rg_path=rg_path)
        result = search.warm(ctx)
        assert result is not None
        ((match),) = result["matches"]
        assert match["path"] == WORKSPACE + "/sample.py" and match["before"]
        assert list(scratch.iterdir()) == []
    ((argv),) = [args for args in ran if args[0] == RG]
    assert argv[-1].startswith(str(scratch / "sandkit-warm-"))
    # Once a caller's grep has run, the sample would only share the machine with the next.
    monkeypatch.setattr(search, "_searched", False)
    ctx = Context(PathMapping([Mount(WORKSPACE, str(user))]), rg_path=RG)
    search.grep(ctx, "def sample")
    ran.clear()
    assert search.warm(ctx) is None and ran == []
