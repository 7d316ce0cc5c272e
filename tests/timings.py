"""Timings the real-process tests measure but never assert: they go to the bench (`bench/timings.py`).

A loaded CI machine makes any latency threshold flaky, and a latency target is a performance claim,
so the tests prove what happens (the retry ran, by the watcher, not before its due time) and only
report how long it took. With `WEAVE_TIMINGS_FILE` set, each figure is appended there as one JSON
line; `python bench/timings.py` runs those tests and prints the figures against their targets.
"""

import json
import os


def report_timing(name: str, seconds: float, *, target: float, what: str) -> None:
    """Record one measured figure (seconds) next to its target, for the bench; a test never fails on it."""
    path = os.environ.get("WEAVE_TIMINGS_FILE")
    if not path:
        return
    line = json.dumps({"name": name, "seconds": round(seconds, 4), "target": target, "what": what})
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
