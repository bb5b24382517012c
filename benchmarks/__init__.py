"""Benchmark scripts (measured, never asserted in tests)."""
