"""Benchmarks for Weave (issue 6). Plain scripts run by `make bench`, never collected as tests."""
