"""Tests that need a tool this machine may lack (pgbouncer, libfaketime, Redis, PostgreSQL's server binaries).

Locally such a test is skipped with the reason and how to get the tool. Under CI=true it fails instead:
CI installs every tool (`.ci/run`), so a missing one there is a broken CI machine, never a silent skip.
Mark a test `@pytest.mark.needs(why_not)`, where `why_not` is None when the tool is there, or call
`require(why_not)` from a test or fixture that can only tell at run time (a server that must answer).
"""

import os

import pytest


def on_ci() -> bool:
    return os.environ.get("CI") == "true"


def require(why_not: str | None) -> None:
    """Return when `why_not` is None; otherwise skip the test locally, fail it under CI=true."""
    if why_not is None:
        return
    if on_ci():
        pytest.fail(f"CI=true requires this test, but {why_not}", pytrace=False)
    pytest.skip(f"{why_not}; required when CI=true")
