"""`sandkit egress/expose/unexpose/gateway` on the local provider: clear refusals.

Docker, where they act, is covered in providers/sandkit-docker/tests/test_docker_network.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandkit.cli import app


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("SANDKIT_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def sandkit(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["--data-root", str(tmp_path / "data"), *args])
    return result.exit_code, result.stdout, result.stderr


def test_local_says_egress_is_not_enforced(tmp_path: Path) -> None:
    code, out, _ = sandkit(tmp_path, "egress")
    assert code == 0 and "not enforced by the local provider" in out
    code, out, _ = sandkit(tmp_path, "egress", "--json")
    assert code == 0 and json.loads(out) == {"mode": None}


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["egress", "allow", "--allow", "pypi.org"], "cannot enforce an egress policy"),
        (["egress", "--allow", "pypi.org"], "--allow/--deny need a mode"),
        (["expose", "8000"], "providers.local.expose.enabled is false"),
        (["gateway"], "needs gateway.secrets"),
    ],
)
def test_refusals_are_one_line_with_a_code(tmp_path: Path, args: list[str], words: str) -> None:
    code, out, err = sandkit(tmp_path, *args)
    assert code == 2, (out, err)  # EXIT_ERROR
    assert err.startswith("Error [INVALID_ARGUMENT]") and words in err
    assert "Traceback" not in out + err


def test_unexpose_of_nothing_is_fine(tmp_path: Path) -> None:
    assert sandkit(tmp_path, "unexpose", "8000")[0] == 0
