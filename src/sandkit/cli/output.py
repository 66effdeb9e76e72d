"""Where CLI output goes: data on stdout, commentary and errors on stderr.

Keeping commentary off stdout means `sandkit glob '**/*.py' | xargs ...` and
`sandkit read f > copy` get exactly the data, while a person at a terminal
still sees the hints. In `--json` mode stdout carries one JSON document.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.text import Text

from ..display import printable, printable_text
from ..errors import SandboxError
from ..tools.render import CLI_WORDING, worded

# Exit codes (documented in docs/cli.md).
EXIT_OK = 0
EXIT_NO_MATCH = 1  # grep only, like grep(1)
EXIT_PROBLEMS = 1  # doctor found a failing check
EXIT_ERROR = 2  # SandboxError, bad usage, bad configuration
EXIT_TIMED_OUT = 124  # exec: the command ran past its timeout, like timeout(1)


class Output:
    """The two consoles of one invocation plus the `--json` switch."""

    def __init__(self, json_mode: bool = False) -> None:
        self.json_mode = json_mode
        # soft_wrap: never insert line breaks into data (rich wraps at 80 columns
        # when stdout is a pipe); highlight off: file content is not markup.
        self.out = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)

    def data(self, text: str | Text) -> None:
        """One line of data on stdout: styled on a terminal, byte-faithful in a pipe.

        Rich would expand tabs and replace `:emoji:` codes; file content must
        reach a pipe unchanged.
        """
        plain = text.plain if isinstance(text, Text) else text
        if self.out.is_terminal:
            if printable_text(plain) != plain:  # an undecodable name: shown as \xNN, unstyled
                text = printable_text(plain)
            self.out.print(text if isinstance(text, Text) else Text(text))
            return
        try:  # a file name's raw bytes, as ls(1) would write them
            raw = (plain + "\n").encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raw = (printable_text(plain) + "\n").encode("utf-8")
        sys.stdout.flush()
        sys.stdout.buffer.write(raw)
        sys.stdout.buffer.flush()

    def note(self, text: str) -> None:
        """Commentary for a person (summaries, hints) on stderr; silent in JSON mode."""
        if not self.json_mode:
            sys.stdout.flush()  # keep data and commentary in order on a shared terminal
            self.err.print(Text(text, style="dim"))

    def success(self, text: str) -> None:
        self.out.print(Text(text, style="green"))

    def json(self, value: BaseModel | dict[str, Any] | list[Any]) -> None:
        data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        payload = json.dumps(printable(data), ensure_ascii=False)
        sys.stdout.write(payload + "\n")
        sys.stdout.flush()

    def error(self, exc: SandboxError) -> None:
        """`Error [CODE]: message` in red on stderr, or the JSON error document."""
        if self.json_mode:
            self.json({"error": exc.to_dict()})
            return
        sys.stdout.flush()
        self.err.print(error_text(exc))


def error_text(exc: SandboxError) -> Text:
    return Text.assemble(
        ("Error [", "bold red"),
        (exc.code.value, "bold red"),
        ("]: ", "bold red"),
        (worded(exc.message, CLI_WORDING), "red"),  # --raw, --all, --depth: the CLI's names
    )
