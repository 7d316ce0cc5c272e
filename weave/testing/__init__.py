"""Helpers for end-to-end tests, the chaos run and the benchmarks: real processes, managed safely."""
