"""Tests for sandkit (a package, so the hardening suite and providers can share helpers)."""
