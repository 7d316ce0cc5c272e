"""Playwright's sync API for the browser tests, with the database connections made inside it closed."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections


@contextmanager
def sync_browser() -> Iterator[Any]:
    """`sync_playwright()`, closing on the way out the connections that ORM calls inside it opened.

    Playwright runs the block in a context of its own, and Django keeps one connection per context: a
    query inside the block opens a connection that the test's own teardown never sees. Left open, it
    held the test database until the end of the run, where dropping the database failed ("being
    accessed by other users")."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        try:
            yield playwright
        finally:
            connections.close_all()
