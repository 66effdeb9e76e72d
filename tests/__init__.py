"""Tests for sandkit; a package so `tests.conformance` can be imported by providers' tests."""
