"""The agent zipapp: reproducible, cached, self-contained, python3.9-compatible source."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sandkit.agent import AGENT_VERSION, build

SRC = Path(build.__file__).resolve().parents[2]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH, no way to find this checkout's sandkit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(extra)
    return env


def test_two_builds_are_byte_identical(tmp_path: Path) -> None:
    first = build.write_zipapp(tmp_path / "a" / "agent.pyz")
    second = build.write_zipapp(tmp_path / "b" / "agent.pyz")
    assert sha256(first) == sha256(second)
    assert sha256(first) == sha256(build.agent_zipapp())


def test_entries_are_sorted_with_fixed_metadata(tmp_path: Path) -> None:
    path = build.write_zipapp(tmp_path / "agent.pyz")
    assert path.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
    names = [info.filename for info in infos]
    assert names == sorted(names)
    assert {
        "__main__.py",
        "sandkit/__init__.py",
        "sandkit/agent/server.py",
        "sandkit/runtime/service.py",
    } <= set(names)
    assert "sandkit/agent/build.py" not in names
    assert not any("__pycache__" in name for name in names)
    # Bytecode for this interpreter beside every module (an agent start compiles nothing).
    sources = {n[:-3] for n in names if n.endswith(".py")}
    assert sources == {n[:-4] for n in names if n.endswith(".pyc")}
    for info in infos:
        assert info.date_time == build.FIXED_TIME
        assert info.external_attr >> 16 == 0o100644
        assert info.compress_type == zipfile.ZIP_STORED


def test_the_cache_honours_xdg_and_builds_once(tmp_path: Path) -> None:
    script = (
        "import os, sys\n"
        "from sandkit.agent.build import agent_zipapp\n"
        "p = agent_zipapp(); print(p); print(os.stat(p).st_mtime_ns)\n"
    )
    env = {**clean_env(XDG_CACHE_HOME=str(tmp_path / "cache")), "PYTHONPATH": str(SRC)}
    runs = [
        subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        ).stdout.split()
        for _ in range(2)
    ]
    assert runs[0] == runs[1]  # same file, not rewritten
    path = Path(runs[0][0])
    assert path.parent == tmp_path / "cache" / "sandkit"
    assert path.name == f"agent-{build.content_hash()[:20]}.pyz"


def test_module_entry_point_writes_the_same_file(tmp_path: Path) -> None:
    out = tmp_path / "deploy" / "agent.pyz"
    env = {**clean_env(), "PYTHONPATH": str(SRC)}
    subprocess.run(
        [sys.executable, "-m", "sandkit.agent.build", str(out)],
        env=env,
        check=True,
        capture_output=True,
    )
    assert sha256(out) == sha256(build.agent_zipapp())


def test_runs_isolated_without_sandkit_installed(tmp_path: Path) -> None:
    pyz = build.agent_zipapp()
    version = subprocess.run(
        [sys.executable, "-I", str(pyz), "--version"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.strip() == AGENT_VERSION
    # Everything imports from the zip alone; the stub package pulls in no pydantic.
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import sandkit, sandkit.agent.server, sandkit.agent.http_carrier, "
        "sandkit.runtime.service\n"
        "assert sandkit.__file__.startswith(sys.argv[1]), sandkit.__file__\n"
        "assert 'pydantic' not in sys.modules\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", probe, str(pyz)],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
    )
    assert result.stdout.strip() == "ok", result.stderr
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    served = subprocess.run(
        [sys.executable, "-I", str(pyz), "--stdio"],
        input=ping,
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        timeout=30,
    )
    assert json.loads(served.stdout) == {"jsonrpc": "2.0", "id": 1, "result": {"pong": True}}
    assert served.returncode == 0


def test_a_missing_stdlib_module_is_named(tmp_path: Path) -> None:
    (tmp_path / "json.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'json'\", name='json')\n"
    )
    result = subprocess.run(
        [sys.executable, str(build.agent_zipapp()), "--stdio"],
        env=clean_env(PYTHONPATH=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 3
    assert "'json'" in result.stderr and "python3-minimal" in result.stderr
    # Also said on the protocol channel, as a JSON-RPC error with id null.
    frame = json.loads(result.stdout)
    assert frame["id"] is None
    assert frame["error"]["data"]["code"] == "UNAVAILABLE"
    assert "'json'" in frame["error"]["data"]["message"]


@pytest.mark.parametrize("name", [n for n, _ in build.zipapp_members() if n.endswith(".py")])
def test_shipped_source_parses_as_python_3_9(name: str) -> None:
    data = dict(build.zipapp_members())[name]
    tree = ast.parse(data, filename=name, feature_version=(3, 9))
    # Runtime-evaluated `X | Y` or builtin-generic subscripts would break 3.9;
    # every shipped module postpones annotations.
    has_annotations = any(
        isinstance(node, (ast.AnnAssign, ast.FunctionDef))
        and (getattr(node, "returns", None) is not None or isinstance(node, ast.AnnAssign))
        for node in ast.walk(tree)
    )
    if has_annotations:
        assert b"from __future__ import annotations" in data, name


def test_a_fresh_agent_needs_no_unicode_scan_for_common_patterns() -> None:
    """The zipapp ships the character sets a first grep would build by scanning all of
    Unicode (~0.25 s): with this interpreter, translating common patterns scans nothing."""
    script = (
        "import sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from sandkit.runtime import rxinfo\n"
        "for p in ('def main', 'TODO', r'\\w+_test', r'\\s+\\d+'):\n"
        "    for cs in (False, True):\n"
        "        rxinfo.pattern_info(p, False, cs, False).translate()\n"
        "print('scanned' if rxinfo._ALL is not None else 'no scan')\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", script, str(build.agent_zipapp())],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "no scan"
