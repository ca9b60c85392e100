"""Shared test helpers (pip's tests/lib pattern): builders, fakes and readers used by several test folders; no tests."""
