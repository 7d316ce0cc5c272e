"""Every SQL statement of one `/metrics` scrape and one dashboard render, timed, and the plans of the slow ones.

Used by bench/history.py on empty tables and on the filled ones: `capture(client)` records each
statement the page runs (through `connection.execute_wrapper`, so the time is the database round
trip as the page saw it), then `explain(...)` runs EXPLAIN (ANALYZE, BUFFERS) on the SELECTs that
took longer than a threshold. `render(...)` writes both as Markdown.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PAGES = (
    ("metrics", "/metrics"),
    ("dashboard", "/admin/weave/dashboard/"),
)


@dataclass
class Statement:
    sql: str
    params: Any
    ms: float
    plan: str = ""


@dataclass
class Capture:
    page: str
    label: str
    page_ms: float
    statements: list[Statement] = field(default_factory=list)

    @property
    def sql_ms(self) -> float:
        return sum(s.ms for s in self.statements)


def _recorder(into: list[Statement]) -> Callable[..., Any]:
    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            into.append(Statement(sql, params, (time.perf_counter() - started) * 1000))

    return record


def capture(client: Any, label: str, *, fresh_ttl: bool = False) -> list[Capture]:
    """One render of each page (after the ones already made), every statement timed."""
    from django.db import connection
    from django.test.utils import override_settings

    from weave.dashboard import clear_ttl_cache

    captures = []
    with override_settings(ALLOWED_HOSTS=["testserver"]):
        for page, url in PAGES:
            if fresh_ttl and page == "dashboard":
                clear_ttl_cache()  # the TTL advice is computed once a minute; this render computes it
            statements: list[Statement] = []
            with connection.execute_wrapper(_recorder(statements)):
                started = time.perf_counter()
                response = client.get(url, secure=True)
                took = (time.perf_counter() - started) * 1000
            if response.status_code != 200:
                raise RuntimeError(f"{url} answered {response.status_code}")
            name = page + (" (TTL advice computed)" if fresh_ttl and page == "dashboard" else "")
            captures.append(Capture(name, label, took, statements))
    return captures


def explain(captures: list[Capture], *, above_ms: float) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) every SELECT that took longer than `above_ms`."""
    from django.db import connection

    for c in captures:
        for s in c.statements:
            if s.ms < above_ms or not s.sql.lstrip().upper().startswith(("SELECT", "WITH")):
                continue
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + s.sql, s.params)
                s.plan = "\n".join(row[0] for row in cursor.fetchall())


def _one_line(sql: str, width: int = 150) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def render(captures: list[Capture], *, top: int = 12) -> str:
    """A table per page of the slowest statements, then the plans of those explained."""
    lines = []
    for c in captures:
        lines += [
            f"### {c.page}, {c.label}: {len(c.statements)} statements, {c.sql_ms:.1f} ms in SQL, "
            f"{c.page_ms:.1f} ms for the page",
            "",
            "| ms | statement |",
            "| ---: | --- |",
        ]
        for s in sorted(c.statements, key=lambda s: -s.ms)[:top]:
            lines.append(f"| {s.ms:.1f} | `{_one_line(s.sql).replace('|', '¦')}` |")
        lines.append("")
    for c in captures:
        for s in sorted(c.statements, key=lambda s: -s.ms):
            if s.plan:
                lines += [f"#### {c.page}, {c.label}: {s.ms:.1f} ms", "", "```", _one_line(s.sql, 2000), "", s.plan]
                lines += ["```", ""]
    return "\n".join(lines)
