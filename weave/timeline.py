"""A job's story in time order: what `weave_explain` prints and the admin change pages show."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils.html import format_html, format_html_join

from weave.display import shown
from weave.sanitize import escape_controls


@dataclass(frozen=True)
class Entry:
    at: datetime | None  # database time; None sorts last ("now")
    what: str  # claim, send, outcome, receipt, holder ...
    text: str


@dataclass
class Timeline:
    title: str
    entries: list[Entry] = field(default_factory=list)
    summary: str = ""

    def add(self, at: datetime | None, what: str, text: str) -> None:
        # One entry is one line, and never shows a secret, whatever a stored reason holds.
        self.entries.append(Entry(at, what, escape_controls(shown(text))))

    def ordered(self) -> list[Entry]:
        # At the same database instant a claim comes before the work it did, and the work before the
        # attempt's ending; otherwise entries keep the order they were added in (the sort is stable).
        return sorted(self.entries, key=lambda e: (e.at is None, e.at or datetime.min, _RANK.get(e.what, 3)))

    def as_text(self) -> str:
        lines = [self.title, ""]
        for entry in self.ordered():
            lines.append(f"{stamp(entry.at):<30} {entry.what:<10} {entry.text}")
        lines += ["", shown(self.summary)]
        return "\n".join(lines)

    def as_html(self) -> str:
        rows = format_html_join(
            "", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", ((stamp(e.at), e.what, e.text) for e in self.ordered())
        )
        return format_html(
            '<table class="weave-timeline"><thead><tr><th>database time</th><th>event</th><th>detail</th></tr>'
            "</thead><tbody>{}</tbody></table><p>{}</p>",
            rows,
            shown(self.summary),
        )


_RANK = {"created": 0, "claim": 1, "send": 2, "receipt": 2}


def stamp(at: datetime | None) -> str:
    """Database time to the millisecond, with its zone (the database clock speaks UTC here)."""
    if at is None:
        return "now"
    return f"{at.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} {at.tzname() or 'UTC'}"


def clock_time(at: datetime | None) -> str:
    return "?" if at is None else at.strftime("%H:%M:%S.%f")[:-3]


def lateness(sent: datetime | None, due: datetime | None) -> str:
    """Say how a send's database time compares with the due time it was waiting for ("" if none)."""
    if sent is None or due is None:
        return ""
    late = (sent - due).total_seconds()
    if late >= 0:
        return f", {late:.3f} s after its due time {clock_time(due)}"
    return f", {-late:.3f} s before its due time {clock_time(due)} (sent early by a person's retry)"


def holder(job: Any) -> str:
    """Say who holds a leased row now; `job` is annotated by `LeaseQuerySet.with_lease_state()`.

    `Any`: the annotation `lease_live` (and the job's own `status`) are not on the model's static type.
    """
    if job.owner is None:
        return f"nobody holds it (fence {job.fence}); status {job.status}"
    state = "live" if job.lease_live else "expired"
    return f"{job.owner} at fence {job.fence}, lease {state} until {clock_time(job.lease_expires_at)}"
