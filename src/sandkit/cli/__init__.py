"""The `sandkit` command line (console script `sandkit = sandkit.cli:app`)."""

from .app import app

__all__ = ["app"]
