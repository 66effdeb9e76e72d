"""Subsets of the shared conformance suite, for targets that run it more than once."""

from __future__ import annotations


def carrier_areas_only(cls: type) -> type:
    """Keep in a suite's second carrier only what the carrier carries (commands, streams,
    processes, bytes, async calls, lifecycle). The operations' own semantics run in full
    on the first carrier of the same target: the same runtime code on the same kernel.
    This keeps CI inside its budget (docs/security.md, "gVisor in CI")."""
    from sandkit.testing.conformance import (
        EditFileTests,
        GlobTests,
        GrepTests,
        ListDirTests,
        MaskingTests,
        NameTests,
        ReadFileTests,
        ReadOnlyTests,
        RedactionTests,
        SymlinkTests,
        WriteFileTests,
    )

    for area in (
        ReadFileTests,
        WriteFileTests,
        EditFileTests,
        ListDirTests,
        GlobTests,
        GrepTests,
        RedactionTests,
        ReadOnlyTests,
        SymlinkTests,
        NameTests,
        MaskingTests,
    ):
        for name in vars(area):
            if name.startswith("test_"):
                setattr(cls, name, None)
    return cls
