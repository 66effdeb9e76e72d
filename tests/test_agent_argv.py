"""The agent reads its usual command lines by hand (argparse costs a start several ms):
whatever it reads so must be what argparse reads, and everything else goes to argparse."""

from __future__ import annotations

import pytest

from sandkit.agent import __main__ as agent_main

READ_BY_HAND = [
    ["--stdio"],
    ["--stdio", "--workers", "3"],
    ["--stdio", "--workers=12", "--tag", "box-1"],
    ["--tag=x=y", "--stdio"],
    ["--http", "0.0.0.0:8765", "--config", "/tmp/c.json"],
    ["--http=[::1]:80", "--config", "c", "--token-file", "t", "--keep-files", "--workers", "2"],
    ["--procd", "/tmp/dir"],
    ["--stdio", "--config", "c.json"],  # read alike; refused after parsing
    ["--stdio", "--workers", "0"],
]
LEFT_TO_ARGPARSE = [
    [],
    ["--std"],  # an abbreviation
    ["--stdio", "--stdio"],
    ["--stdio", "--http", "h:1"],
    ["--stdio", "--workers"],
    ["--stdio", "--workers", "-1"],
    ["--stdio", "--workers", "many"],
    ["--stdio", "--tag", ""],
    ["--stdio", "--tag", "--x"],
    ["--stdio=1"],
    ["--stdio", "extra"],
    ["--version"],
    ["-h"],
    ["--procd", ""],
]


@pytest.mark.parametrize("argv", READ_BY_HAND)
def test_usual_command_lines_are_read_as_argparse_reads_them(argv: list[str]) -> None:
    quick = agent_main._quick_parse(argv)
    assert quick is not None
    parsed = agent_main._parser().parse_args(argv)
    assert vars(quick) == vars(parsed)


@pytest.mark.parametrize("argv", LEFT_TO_ARGPARSE)
def test_anything_else_goes_to_argparse(argv: list[str]) -> None:
    assert agent_main._quick_parse(argv) is None
