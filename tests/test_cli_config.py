"""Where the CLI's settings come from, and what a broken settings file gives (issue 13)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from sandkit.cli import app
from sandkit.config import Settings, config_source


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("SANDKIT_") or name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project (a .git directory at its root) with a subdirectory as the cwd."""
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (root / "src" / "pkg").mkdir(parents=True)
    monkeypatch.chdir(root / "src" / "pkg")
    return root


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("not: [valid\n", 1, "not valid YAML"),
        ("provider: local\nlimits: {read_max_lines: 10\n", 2, "not valid YAML"),
        ("- a\n- b\n", 1, "must be a mapping of settings (key: value), not a list"),
        ("just text\n", 1, "not a string"),
    ],
)
def test_a_broken_settings_file_is_one_error_line_naming_file_and_line(
    project: Path, text: str, line: int, what: str
) -> None:
    config = project / "sandkit.yaml"
    config.write_text(text)
    result = run("ls")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
    assert result.stderr.startswith(
        f"Error [INVALID_ARGUMENT]: invalid configuration: {config}:{line}: "
    )
    assert what in result.stderr
    # doctor reports it as a failed check (and still answers)
    doctor = run("doctor", "--json")
    assert doctor.exit_code == 1
    report = json.loads(doctor.stdout)
    assert report["ok"] is False
    assert report["config_file"] == str(config)
    [settings] = [c for c in report["checks"] if c["name"] == "settings"]
    assert settings["status"] == "fail" and f"{config}:{line}" in settings["detail"]


def test_the_settings_file_is_found_from_a_subdirectory(project: Path) -> None:
    (project / "sandkit.yaml").write_text("data_root: ./sandkit-data\n")
    assert run("write", "notes.md", "hello\n").exit_code == 0
    # relative to the file, not to the cwd: the files do not "vanish" elsewhere
    written = project / "sandkit-data/users/cli/threads/default/user-data/workspace/notes.md"
    assert written.read_text() == "hello\n"
    os.chdir(project)
    assert run("read", "notes.md").stdout == "     1\thello\n"


def test_the_walk_stops_at_the_project_root(project: Path) -> None:
    outer = project.parent / "sandkit.yaml"
    outer.write_text("data_root: /nowhere\n")  # another project's file, above the root
    assert config_source().path is None
    (project / "src" / "sandkit.yaml").write_text("provider: local\n")
    assert config_source().path == project / "src" / "sandkit.yaml"
    assert config_source().found_by == "project"


def test_the_user_config_under_xdg_config_home_comes_last(project: Path, tmp_path: Path) -> None:
    user = tmp_path / "xdg-config" / "sandkit" / "sandkit.yaml"
    user.parent.mkdir(parents=True)
    user.write_text(f"data_root: {tmp_path / 'user-data'}\n")
    assert config_source().path == user and config_source().found_by == "user"
    assert Settings().data_root == tmp_path / "user-data"
    (project / "sandkit.yaml").write_text("data_root: ./here\n")
    assert Settings().data_root == project / "here"  # the project's file wins


def test_sandkit_config_names_the_file_outright(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "sandkit.yaml").write_text("data_root: ./here\n")
    other = tmp_path / "other.yaml"
    other.write_text("data_root: /srv/x\n")
    monkeypatch.setenv("SANDKIT_CONFIG", str(other))
    assert config_source().path == other and config_source().found_by == "SANDKIT_CONFIG"


def test_verbose_and_doctor_say_which_file_and_data_root(project: Path) -> None:
    (project / "sandkit.yaml").write_text("data_root: ./d\n")
    result = run("-v", "ls")
    assert result.exit_code == 0
    assert (
        f"settings: {project / 'sandkit.yaml'} (found from the current directory); "
        f"data root: {project / 'd'}; provider: local"
    ) in result.stderr
    report = json.loads(run("doctor", "--json").stdout)
    assert report["config_file"] == str(project / "sandkit.yaml")
    assert report["config_found_by"] == "project"
    assert report["data_root"] == str(project / "d")
    table = run("doctor").stdout
    assert "found from the current directory" in table


def test_version_completion_and_help_hygiene() -> None:
    from importlib.metadata import version

    for flag in ("--version", "-V"):
        result = run(flag)
        assert result.exit_code == 0 and result.stdout == f"sandkit {version('sandkit')}\n"
    top = run("--help").stdout
    assert "--install-completion" in top and "--show-completion" in top
    assert "<bool>" not in top  # plain flags take no value
    for env in ("SANDKIT_PROVIDER", "SANDKIT_DATA_ROOT", "SANDKIT_CONFIG", "SANDKIT_USER"):
        assert env in top
    for command in ("read", "grep", "glob", "ls", "exec", "mcp"):
        assert "<bool>" not in run(command, "--help").stdout, command
