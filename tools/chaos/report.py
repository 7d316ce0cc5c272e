"""Text output: the progress line while the load drains, and the final report table."""

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from tools.chaos.audit import AuditResult
from tools.chaos.faults import FaultRecord


def progress_line(*, elapsed: float, done: int, total: int, created: int, faults: int, width: int = 30) -> str:
    share = done / total if total else 0.0
    filled = int(share * width)
    bar = "#" * filled + "." * (width - filled)
    return f"\r[{bar}] {done}/{total} terminal ({created} created)  faults {faults}  {elapsed:5.0f} s"


class Progress:
    """One line rewritten in place on a terminal; a line every few seconds otherwise (logs, CI)."""

    def __init__(self, stream: TextIO = sys.stdout, enabled: bool = True) -> None:
        self.stream = stream
        self.enabled = enabled
        self.tty = stream.isatty()
        self._last_printed = -1e9

    def update(self, elapsed: float, **figures: Any) -> None:
        if not self.enabled:
            return
        line = progress_line(elapsed=elapsed, **figures)
        if self.tty:
            self.stream.write(line)
        elif elapsed - self._last_printed >= 10:
            self.stream.write(line.lstrip("\r") + "\n")
            self._last_printed = elapsed
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _table(rows: Iterable[tuple[str, ...]], headers: tuple[str, ...]) -> list[str]:
    rows = [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "+-" + "-+-".join("-" * w for w in widths) + "-+"
    out = [line, "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |", line]
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    out.append(line)
    return out


def render(result: AuditResult, *, faults: list[FaultRecord], summary: dict[str, Any]) -> str:
    """The final report: run summary, faults, invariants with figures, violations with examples."""
    lines = ["", "Weave chaos audit", "================="]
    lines += [f"{k}: {v}" for k, v in summary.items()]
    lines += ["", "Faults injected (seeded schedule):"]
    fault_rows = [
        (f"{f.at:6.1f} s", f.kind, f.target, str(len(f.held)), f.note) for f in sorted(faults, key=lambda f: f.at)
    ]
    lines += _table(fault_rows, ("at", "fault", "target", "rows held", "note"))
    lines += ["", "Invariants:"]
    lines += _table(
        [(c.section, c.name, "ok" if c.ok else "VIOLATED", c.figure) for c in result.checks],
        ("area", "invariant", "result", "figures"),
    )
    figures = result.figures
    push = figures.get("push", {})
    rec = figures.get("recovery", {})
    lines += [
        "",
        f"Duplicate sends (the cost of ambiguity): raw requests {push.get('raw_requests')} - unique deliveries "
        f"{push.get('unique_deliveries')} = {push.get('raw_minus_unique')} (failed tries included); "
        f"{push.get('duplicate_sends')} sent again after the key was delivered, "
        f"by cause {push.get('duplicate_causes')}.",
        f"Refusals by guards: {figures.get('refusals')}.",
        f"Recovery after SIGKILL: max {rec.get('max_s')} s against a lease TTL of {rec.get('lease_ttl_s')} s; "
        f"per kill {rec.get('kills')}.",
        *_partition_lines(figures.get("partition_recovery")),
        f"Run attempts by outcome: {figures.get('run_attempts')}.",
    ]
    violations = result.violations
    if violations:
        lines += ["", f"{len(violations)} VIOLATION(S):"]
        for c in violations:
            lines.append(f"- {c.section}: {c.name}")
            lines += [f"    {example}" for example in c.examples]
    else:
        lines += ["", "All invariants hold."]
    return "\n".join(lines) + "\n"


def _partition_lines(cut: dict[str, Any] | None) -> list[str]:
    if not cut:
        return []
    return [
        f"Recovery after a partition (from when the lease could expire): max {cut.get('max_s')} s, "
        f"bound {cut.get('bound_s')} s; per partition {cut.get('partitions')}."
    ]
